"""tests/diagnose.py 本身：不一致时说清楚哪里不一致，认得出典型错误，章节指向真实存在的标题。"""

from __future__ import annotations

import pytest
import torch
from diagnose import (
    Mistake,
    assert_named,
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    crash_first_line,
    crash_line,
    describe_mismatch,
    diagnosis_line,
    expect_value_error,
    explained,
    guarded,
    hint_sections,
    make_checker,
    named,
    named_all,
    require_grad,
    section_heading,
    symptom,
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
            "输出里有 +inf：共 1 处，第一处在位置 (0, 1)（应为 2）",
        ),
        (
            torch.tensor([[1.0, 2.0], [float("-inf"), float("-inf")]]),
            "输出里有 -inf：共 2 处，第一处在位置 (1, 0)（应为 3）",
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
        "位置 (0,) 上得到 0，应为 +inf（共 1/3 处超出容差 atol=1e-06、rtol=1e-05）"
    )
    assert describe_mismatch(torch.tensor([float("-inf"), float("nan"), 1.0]), want) == (
        "输出里有 -inf：共 1 处，第一处在位置 (0,)（应为 +inf）"
    )
    assert describe_mismatch(torch.tensor([float("inf"), 0.0, 1.0]), want) == (
        "位置 (1,) 上得到 0，应为 nan（共 1/3 处超出容差 atol=1e-06、rtol=1e-05）"
    )


def test_describe_mismatch_containers_and_numbers():
    flags = torch.tensor([True, False])
    assert describe_mismatch((WANT, flags), (WANT, flags)) is None
    # 下标从 0 数，写成「返回值 [1]」；给了名字时再带上名字（「第 1 个返回值」会被读成第一个）
    assert describe_mismatch((WANT, ~flags), (WANT, flags)) == (
        "返回值 [1]：位置 (0,) 上得到 False，应为 True（共 2/2 处不同）"
    )
    assert describe_mismatch((WANT, ~flags), (WANT, flags), names=("loss", "clipped")) == (
        "返回值 [1]（clipped）：位置 (0,) 上得到 False，应为 True（共 2/2 处不同）"
    )
    assert describe_mismatch((WANT,), (WANT, flags)) == (
        "应返回 2 个值（tuple），得到 1 个值的 tuple"
    )
    assert describe_mismatch(WANT, (WANT, flags), names=("loss", "clipped")) == (
        "应返回 2 个值（loss, clipped），得到 Tensor"
    )
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
    assert named(SHIFTED) == "看起来是：多加了 1。回看 L2.01「坑 1」。"
    assert diagnosis_line(x * 3, x, **kwargs) == (
        "f 的输出不对：位置 (0,) 上得到 3，应为 1（共 2/2 处超出容差 atol=1e-06、rtol=1e-05）。"
        "对照 L2.01「2. 公式」。"
    )
    with pytest.raises(pytest.fail.Exception) as info:
        check(x + 1, x, **kwargs)
    second = str(info.value.msg).splitlines()[1]
    assert second.startswith("（f 的输出：位置 (0,) 上得到 2，应为 1"), second


def test_several_matching_mistakes_are_all_named():
    """这组输入分不开两个错误时（x = [2, 2]：x + 2 == 2x），第一行把两个都说出来，而不是只说排在前面的那个。"""
    plus_two = Mistake("多加了 2", "L2.01「坑 1」", lambda x: x + 2)
    x = torch.tensor([2.0, 2.0])
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」", inputs={"x": x})
    line = diagnosis_line(2 * x, x, mistakes=[DOUBLED, plus_two], **kwargs)
    assert line == named_all([DOUBLED, plus_two])
    assert line == (
        "看起来是：多乘了 2；也可能是多加了 2（这组输入上它们的结果相同）。回看 L2.01「2. 公式」、L2.01「坑 1」。"
    )
    # 说法相同的只说一次；分得开的输入上只说那一个
    same = Mistake(DOUBLED.what, DOUBLED.section, lambda x: x * 2.0)
    assert diagnosis_line(2 * x, x, mistakes=[DOUBLED, same], **kwargs) == named(DOUBLED)
    y = torch.tensor([1.0, 3.0])
    kwargs["inputs"] = {"x": y}
    assert diagnosis_line(2 * y, y, mistakes=[DOUBLED, plus_two], **kwargs) == named(DOUBLED)


def test_a_mistake_can_have_its_own_tolerance():
    """精度类的错误：换一种写法舍入不同，只在那种精度的误差以内一致。"""
    x = torch.tensor([1.0, 2.0])
    rounded = Mistake("在低精度里算了", "L2.01「2. 公式」", lambda x: x + 0.01, rtol=0.0, atol=0.05)
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」", inputs={"x": x}, mistakes=[rounded])
    assert diagnosis_line(x + 0.03, x, **kwargs) == named(rounded)
    assert diagnosis_line(x + 0.5, x, **kwargs).startswith("f 的输出不对")


def test_one_wrong_return_value_is_named_by_itself():
    """返回 (a, b)：整体对不上任何错误时，只看第一个不对的返回值；part=1 的错误只管 b。"""
    x = torch.tensor([1.0, 2.0])
    want = (x, x + 10)
    a_doubled = Mistake("a 多乘了 2", "L2.01「2. 公式」", lambda x: (2 * x, x + 10))
    b_shifted = Mistake("b 多加了 1", "L2.01「坑 1」", lambda x: x + 11, part=1)
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」", inputs={"x": x})
    kwargs["mistakes"] = [a_doubled, b_shifted]
    # a 错了（b 换了一种也不对的写法）：仍认得出 a 的错
    assert diagnosis_line((2 * x, x), want, **kwargs) == named(a_doubled)
    # a 对、b 错：part=1 的错误
    assert diagnosis_line((x, x + 11), want, **kwargs) == named(b_shifted)
    # a 对、b 错成别的：a_doubled 的 a 就不对，解释不了这个输出
    assert diagnosis_line((x, x + 5), want, **kwargs).startswith("f 的输出不对")


def test_a_symptom_names_the_kind_of_mistake_when_no_written_out_mistake_matches():
    """没有哪个典型错误对得上时，说第一个「学习者的输出有、正确结果没有」的症状；对得上时仍说那个错误。"""
    x = torch.tensor([1.0, -2.0])
    too_big = symptom("有值超过了 3", "L2.01「坑 1」", lambda got, x: bool((got > 3).any()))
    negative = symptom("出现了负数", "L2.01「坑 1」", lambda got, x: bool((got < 0).any()))
    kwargs = dict(where="f 的输出", section="L2.01「2. 公式」", inputs={"x": x})
    kwargs["mistakes"] = [DOUBLED, negative, too_big]
    want = x.abs()
    assert diagnosis_line(torch.tensor([5.0, 2.0]), want, **kwargs) == named(too_big)
    # 正确结果本来就有负数时，「出现了负数」不算症状
    assert diagnosis_line(torch.tensor([4.0, -1.0]), x, **kwargs) == named(too_big)
    assert diagnosis_line(2 * x, want, **kwargs) == named(DOUBLED)
    assert diagnosis_line(torch.tensor([1.0, 1.0]), want, **kwargs).startswith("f 的输出不对")


def test_assert_named_first_follows_the_order_of_the_tests():
    """第一个和正确结果不同的输入上，必须只点名这个错误；之前的输入上它和正确结果一样，不算。"""
    plus_two = Mistake("多加了 2", "L2.01「坑 1」", lambda x: x + 2)
    same_at_zero = Mistake("对 0 不起作用", "L2.01「坑 1」", lambda x: x * 3)
    zero, two, one = torch.zeros(2), torch.full((2,), 2.0), torch.tensor([1.0, 3.0])
    kw = dict(where="x", section="L2.01「2. 公式」")
    cases = [({"x": x}, x, {}) for x in (zero, two, one)]
    assert_named_first(same_at_zero, cases, [DOUBLED, plus_two, same_at_zero], **kw)
    with pytest.raises(AssertionError, match="没有认出「多乘了 2」"):  # 在 x = 2 上和 x + 2 分不开
        assert_named_first(DOUBLED, cases, [DOUBLED, plus_two], **kw)
    with pytest.raises(AssertionError, match="没有任何一个输入能暴露"):
        assert_named_first(DOUBLED, cases[:1], [DOUBLED], **kw)


def test_collisions_lists_two_mistakes_that_agree_where_they_are_wrong():
    """诊断表本身的检查：只比和正确结果不同的错误；说法相同的两条（同一个错误的两种写法）不算撞车。"""
    plus_two = Mistake("多加了 2", "L2.01「坑 1」", lambda x: x + 2)
    same_what = Mistake("多乘了 2", "L2.01「坑 1」", lambda x: x + x)
    zero, two, one = torch.zeros(2), torch.full((2,), 2.0), torch.tensor([1.0, 3.0])
    cases = [({"x": x}, x, {}) for x in (zero, two, one)]
    found = collisions([DOUBLED, plus_two, same_what], cases)
    assert found == ["第 1 组输入：「多乘了 2」/「多加了 2」"]  # x = 2：2x 和 x + 2 都是 4
    assert collisions([DOUBLED, plus_two], [cases[0], cases[2]]) == []
    assert collisions([DOUBLED, plus_two], cases, inseparable=[(plus_two, DOUBLED)]) == []
    assert collisions([DOUBLED, symptom("大了", "L2.01「坑 1」", lambda got, x: True)], cases) == []


def test_crash_first_line_names_a_missing_dimension_after_a_reduction():
    """归约之后少了一维：广播、扩展、拼接失败都说出这一类错误，而不是原样的英文。"""
    x = torch.zeros(3, 5)
    calls = [
        lambda: x - x.sum(1),
        lambda: x.sum(1).expand_as(x),
        lambda: torch.cat([x, x.sum(1)], 1),
        lambda: torch.stack([x, x.sum(1)]),
    ]
    for call in calls:
        line = crash_first_line(call, "f", "L2.01「2. 公式」", {})
        assert line.startswith("f() 抛出 RuntimeError：") and "少了一维" in line, line
    with pytest.raises(AssertionError, match="没有抛异常"):
        crash_first_line(lambda: x.sum(1, keepdim=True).expand_as(x), "f", "L2.01「2. 公式」", {})


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

    def stub():
        raise NotImplementedError("提示")

    with pytest.raises(NotImplementedError):
        expect_value_error(stub, "空桩")
    # PyTorch 自己抛的 NotImplementedError（整数张量做 softmax）不是空桩：说清楚实际抛了什么
    with pytest.raises(pytest.fail.Exception, match="实际抛了 NotImplementedError"):
        expect_value_error(lambda: torch.softmax(torch.tensor([1, 2]), -1), "整数输入")


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


class _Module:
    """一个假的「学习者模块」。"""

    @staticmethod
    def halve(x, n=2):
        return x / n

    @staticmethod
    def broken(x):
        return x + torch.zeros(3)  # (2,) + (3,)：广播失败

    @staticmethod
    def stub(x):
        raise NotImplementedError("提示：先写这个")

    @staticmethod
    def in_place(x):
        x -= 1
        return x

    CONSTANT = 7


SECTIONS = {n: "L2.01「3.1 输入、输出、边界」" for n in ("halve", "broken", "stub", "in_place")}


def test_crash_line_names_function_exception_and_likely_cause():
    try:
        torch.zeros(2) + torch.zeros(3)
    except RuntimeError as e:
        error = e
    generic = crash_line("f", error, "L2.01「2. 公式」", {})
    assert generic.startswith(
        "f() 抛出 RuntimeError：两个张量的形状对不上、广播失败（第 0 维一边是 2、一边是 3）"
    )
    assert generic.endswith("回看 L2.01「2. 公式」。")
    specific = crash_line("f", error, "L2.01「2. 公式」", {"broadcast": "均值要 keepdim=True"})
    assert specific == "f() 抛出 RuntimeError：均值要 keepdim=True。回看 L2.01「2. 公式」。"
    elsewhere = crash_line("f", error, "L2.01「2. 公式」", {"broadcast": ("原因", "L2.01「坑 6」")})
    assert elsewhere == "f() 抛出 RuntimeError：原因。回看 L2.01「坑 6」。"


def test_guarded_attaches_the_line_keeps_the_exception_and_passes_everything_else():
    mod = guarded(_Module, SECTIONS, {"broken": {"broadcast": "均值要 keepdim=True"}})
    assert mod.CONSTANT == 7 and mod.halve(torch.tensor(4.0)).item() == 2.0
    with pytest.raises(
        RuntimeError
    ) as info:  # 异常的类型不变：pytest.raises、expect_value_error 照常工作
        mod.broken(torch.zeros(2))
    assert info.value.course_hint == (
        "broken() 抛出 RuntimeError：均值要 keepdim=True。回看 L2.01「3.1 输入、输出、边界」。"
    )
    with pytest.raises(NotImplementedError) as info:  # 空桩不挂：交给「还没实现」的提示
        mod.stub(torch.zeros(2))
    assert not hasattr(info.value, "course_hint")


def test_guarded_names_in_place_changes_of_inputs():
    keep = {
        "in_place": "L2.01「3.2 每一步为什么在那里」",
        "halve": "L2.01「3.2 每一步为什么在那里」",
    }
    mod = guarded(_Module, SECTIONS, keep_inputs=keep)
    x = torch.ones(2)
    mod.halve(x, n=4)  # 不改输入：通过
    with pytest.raises(pytest.fail.Exception, match=r"^in_place\(\) 原地修改了输入的 x"):
        mod.in_place(x)


def test_require_grad():
    x = torch.ones(2, requires_grad=True)
    require_grad(x * 2, "f", "L2.02「3.2」")
    with pytest.raises(pytest.fail.Exception, match="^f 的输出不带梯度（requires_grad=False）"):
        require_grad((x * 2).detach(), "f", "L2.02「3.2」")


def test_explained_attaches_the_line_to_exceptions_raised_inside():
    with pytest.raises(RuntimeError) as info, explained("f", "L2.01「2. 公式」"):
        torch.zeros(2).reshape(3, -1)
    assert info.value.course_hint.startswith(
        "f() 抛出 RuntimeError：reshape 成 [3, -1] 装不下 2 个元素"
    )


def test_hint_sections_lists_the_sections_hints_point_to():
    crashes = {"f": {"broadcast": "只有原因", "view": ("原因", "L2.01「3.4 提示」")}}
    assert hint_sections(crashes) == {"L2.01「3.4 提示」"}
