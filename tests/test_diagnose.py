"""tests/diagnose.py 本身：不一致时说清楚哪里不一致，认得出典型错误，章节指向真实存在的标题。"""

from __future__ import annotations

import pytest
import torch
from diagnose import (
    Mistake,
    assert_named,
    assert_sections_exist,
    check,
    describe_mismatch,
    diagnosis_line,
    expect_value_error,
    make_checker,
    named,
    section_heading,
    which_mistake,
)

WANT = torch.tensor([[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize(
    "got, message",
    [
        (WANT.clone(), None),
        (WANT + 1e-7, None),  # 在默认容差内
        (WANT.reshape(4), "形状是 (4,)，应为 (2, 2)"),
        (WANT.double(), "dtype 是 torch.float64，应为 torch.float32"),
        (
            torch.tensor([[1.0, 2.0], [float("nan"), 4.0]]),
            "输出里有 NaN：共 1 处，第一处在位置 (1, 0)（应为 3）",
        ),
        (
            torch.tensor([[1.0, float("inf")], [3.0, 4.0]]),
            "输出里有 inf：共 1 处，第一处在位置 (0, 1)（应为 2）",
        ),
        (
            torch.tensor([[1.0, 2.0], [3.0, 5.0]]),
            "位置 (1, 1) 上得到 5，应为 4（共 1/4 处超出容差 atol=1e-06、rtol=1e-05）",
        ),
        ([1.0], "应返回张量，得到 list"),
    ],
)
def test_describe_mismatch_tensors(got, message):
    assert describe_mismatch(got, WANT) == message


def test_infinite_or_nan_expectations_must_match_exactly():
    """期望值里的 inf / NaN 要一模一样，不能被 rtol·|inf| 当成「接近」。"""
    want = torch.tensor([float("inf"), float("nan"), 1.0])
    assert describe_mismatch(want.clone(), want) is None
    assert describe_mismatch(torch.tensor([0.0, float("nan"), 1.0]), want) == (
        "位置 (0,) 上得到 0，应为 inf（共 1/3 处超出容差 atol=1e-06、rtol=1e-05）"
    )
    assert describe_mismatch(torch.tensor([float("inf"), 0.0, 1.0]), want) == (
        "位置 (1,) 上得到 0，应为 nan（共 1/3 处超出容差 atol=1e-06、rtol=1e-05）"
    )
    assert describe_mismatch(torch.tensor([-float("inf"), float("nan"), 1.0]), want) is not None


def test_describe_mismatch_containers_and_numbers():
    flags = torch.tensor([True, False])
    assert describe_mismatch((WANT, flags), (WANT, flags)) is None
    assert describe_mismatch((WANT, ~flags), (WANT, flags)) == (
        "第 1 个返回值：位置 (0,) 上得到 False，应为 True（共 2/2 处不同）"
    )
    assert describe_mismatch((WANT,), (WANT, flags)) == "应返回 2 个值（tuple），得到 tuple"
    assert describe_mismatch({"a": 1.0}, {"a": 1.0, "b": 2.0}) == "缺少键 ['b']"
    assert describe_mismatch({"a": 1.5}, {"a": 1.0}) == "键 'a'：得到 1.5，应为 1"
    assert describe_mismatch(float("nan"), 1.0) == "得到 NaN，应为 1"
    assert describe_mismatch(torch.tensor(2.0), 2.0) is None
    assert describe_mismatch(torch.ones(3), 2.0) == "应为一个数，得到形状 (3,) 的张量"
    assert describe_mismatch(torch.tensor(3), 3) is None
    assert describe_mismatch(torch.ones(2), 3) == "应为 3，得到形状 (2,) 的张量"
    assert describe_mismatch("batch", "group") == "得到 'batch'，应为 'group'"


def test_numbers_that_look_equal_at_six_digits_get_more_digits():
    # 只差 float32 的舍入时，6 位有效数字印出来一模一样：「得到 x，应为 x」没法读，要多印几位
    got, want = 0.0080403989, 0.0080403991
    assert (
        describe_mismatch(got, want, rtol=1e-10, atol=0) == "得到 0.0080403989，应为 0.0080403991"
    )
    assert describe_mismatch(
        torch.tensor([got], dtype=torch.float64),
        torch.tensor([want], dtype=torch.float64),
        rtol=1e-10,
        atol=0,
    ) == (
        "位置 (0,) 上得到 0.0080403989，应为 0.0080403991（共 1/1 处超出容差 atol=0、rtol=1e-10）"
    )


def _double(x):
    return 2 * x


def _plus_one(x):
    return x + 1


def _broken(x):
    raise RuntimeError("这个错误在这组输入上算不出来")


DOUBLED = Mistake("多乘了 2", "L2.01「2. 公式」", _double)
SHIFTED = Mistake("多加了 1", "L2.01「坑 1」", _plus_one)
BROKEN = Mistake("算不出来的错误", "L2.01「2. 公式」", _broken)


def test_which_mistake_picks_the_matching_one_and_skips_errors():
    x = torch.tensor([1.0, 2.0])
    mistakes = [BROKEN, DOUBLED, SHIFTED]
    assert which_mistake(x + 1, {"x": x}, mistakes) is SHIFTED
    assert which_mistake(2 * x, {"x": x}, mistakes) is DOUBLED
    assert which_mistake(x * 3, {"x": x}, mistakes) is None


def test_check_first_line_names_the_mistake_or_says_what_is_wrong():
    x = torch.tensor([1.0, 2.0])
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」", inputs={"x": x})
    kwargs["mistakes"] = [DOUBLED, SHIFTED]
    assert diagnosis_line(x, x, **kwargs) is None
    assert diagnosis_line(x + 1, x, **kwargs) == named(SHIFTED)
    assert named(SHIFTED) == "看起来是多加了 1：回看 L2.01「坑 1」。"
    assert diagnosis_line(x * 3, x, **kwargs) == (
        "f 的输出不对：位置 (0,) 上得到 3，应为 1（共 2/2 处超出容差 atol=1e-06、rtol=1e-05）。"
        "对照 L2.01「2. 公式」。"
    )
    with pytest.raises(pytest.fail.Exception) as info:
        check(x + 1, x, **kwargs)
    second = str(info.value.msg).splitlines()[1]
    assert second.startswith("（f 的输出：位置 (0,) 上得到 2，应为 1"), second


def test_expect_value_error():
    def raises_value_error():
        raise ValueError("group_size 至少为 2")

    def raises_type_error():
        raise TypeError("unsupported operand")

    expect_value_error(raises_value_error, "group_size=1")
    with pytest.raises(
        pytest.fail.Exception,
        match="group_size=1：应当抛 ValueError（并说明要改什么），但什么也没抛",
    ):
        expect_value_error(lambda: None, "group_size=1")
    with pytest.raises(pytest.fail.Exception, match="实际抛了 TypeError：unsupported operand"):
        expect_value_error(raises_type_error, "scale='std'")
    with pytest.raises(NotImplementedError):
        expect_value_error(lambda: (_ for _ in ()).throw(NotImplementedError()), "空桩")


def test_section_heading_finds_real_headings_only():
    assert section_heading("L2.01「2. 公式」").startswith("2. 公式")
    assert section_heading("L2.01「检查点」") == "检查点"
    assert section_heading("L2.01「没有这一节」") is None
    assert section_heading("L2.99「2. 公式」") is None
    assert section_heading("随便写的") is None


def test_assert_named_and_assert_sections_exist():
    x = torch.tensor([1.0, 2.0])
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」")
    assert_named(SHIFTED, {"x": x}, x, [DOUBLED, SHIFTED], **kwargs)
    with pytest.raises(AssertionError, match="没有认出「多加了 1」"):
        assert_named(SHIFTED, {"x": x}, x, [DOUBLED], **kwargs)  # 列表里没有它：认不出来
    assert_sections_exist(["L2.01「2. 公式」", "L2.01「检查点」"])
    with pytest.raises(AssertionError, match="没有这一节"):
        assert_sections_exist(["L2.01「2. 公式」", "L2.01「没有这一节」"])


def test_make_checker_uses_the_per_function_reference_and_tolerance():
    check_fn = make_checker(
        want={"f": lambda x: 2 * x},
        mistakes={"f": [SHIFTED]},
        spec={"f": "L2.01「2. 公式」"},
        tol={"f": {"atol": 0.5, "rtol": 0}},
    )
    x = torch.tensor([1.0, 2.0])
    check_fn("f", 2 * x + 0.4, {"x": x})  # 在 atol=0.5 之内
    with pytest.raises(pytest.fail.Exception, match="^f 的输出不对"):
        check_fn("f", 3 * x, {"x": x})
