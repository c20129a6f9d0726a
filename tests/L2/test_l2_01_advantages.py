"""L2.01 group_advantages：与逐组朴素实现对照、性质、全相等的组、非法输入；写错时点名是哪种典型错误。

典型错误（故意写错的实现）在 tests/L2/mistakes_l2_01.py；失败信息的第一行是一句中文（tests/diagnose.py）。
"""

from __future__ import annotations

import statistics

import pytest
import torch
from diagnose import (
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    crash_first_line,
    expect_value_error,
    guarded,
    hint_sections,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistakes_l2_01 import (
    CRASHES,
    DIAGNOSIS_INPUTS,
    DIAGNOSIS_TOL,
    EPS_IN_SQRT,
    EXAMPLE,
    FLAT_DIM0,
    MISTAKE_IDS,
    MISTAKES,
    NO_FLAT_RULE,
    SPEC,
    TINY_STD,
    WHY,
)


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（是哪种错、最可能的原因）；原地改了 rewards 直接点名。"""
    sections = {"group_advantages": SPEC}
    return guarded(impl("l2_01_advantages"), sections, CRASHES, keep_inputs=sections)


def _naive(rewards: list[float], g: int, eps: float, scale: str) -> list[float]:
    """逐组 Python 循环的参考（statistics.stdev 即无偏 std；全相等的组按规格直接给 0）。"""
    out = []
    std_all = statistics.stdev(rewards)
    for i in range(0, len(rewards), g):
        grp = rewards[i : i + g]
        if len(set(grp)) == 1:
            out += [0.0] * g
            continue
        mean = statistics.fmean(grp)
        std = {"group": statistics.stdev(grp), "batch": std_all, "none": None}[scale]
        out += [(r - mean) if std is None else (r - mean) / (std + eps) for r in grp]
    return out


def _want(rewards, group_size, eps=1e-6, scale="group"):
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    return torch.tensor(_naive(rewards.tolist(), group_size, eps, scale), dtype=dtype)


def _groups(x, group_size):
    return x.double().reshape(-1, group_size)


def _flat_groups_not_zero(got, rewards, group_size, **kw):
    """全相等的组不是精确的 0，而别的组是对的（别的组也错了，就是更大的错误：分组、分母……）。"""
    r = _groups(rewards, group_size)
    flat = (r == r[:, :1]).all(1)
    g, w = _groups(got, group_size), _groups(_want(rewards, group_size, **kw), group_size)
    others_right = torch.allclose(g[~flat], w[~flat], rtol=1e-4, atol=1e-6)
    return bool((g[flat] != 0).any()) and others_right


def _sign_flipped(got, **inputs):
    """got 就是正确结果取负（只是负相关的，是别的错误：分组错了……）。"""
    want = _want(**inputs).double()
    return bool(want.abs().max() > 0) and torch.allclose(got.double(), -want, rtol=1e-4, atol=1e-6)


def _group_sums_not_zero(got, rewards, group_size, **_):
    g = _groups(got, group_size)
    return bool((g.sum(1).abs() > 1e-4 * (1 + g.abs().max())).any())


def _off_by_a_factor_per_group(got, rewards, group_size, **kw):
    """每个不全相等的组里，got 都是正确结果的同一个倍数，而且有的组这个倍数不是 1。"""
    g, w = _groups(got, group_size), _groups(_want(rewards, group_size, **kw), group_size)
    ratios = []
    for gi, wi in zip(g, w):
        big = wi.abs() > 1e-3 * wi.abs().max().clamp(min=1e-30)
        if not big.any():
            continue
        q = gi[big] / wi[big]
        if (q - q[0]).abs().max() > 1e-4 * q[0].abs():
            return False
        ratios.append(float(q[0]))
    return any(abs(q - 1) > 1e-4 for q in ratios)


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = [
    symptom(
        "全相等的组没有得到精确的 0（规格：组内 reward 全相等的组，advantage 是精确的 0）",
        WHY,
        _flat_groups_not_zero,
    ),
    symptom(
        "符号反了：比组均值好的回答要得正的 advantage（r − 均值）",
        "L2.01「2. 公式，以及它从哪来」",
        _sign_flipped,
    ),
    symptom(
        "组内 advantage 之和不为 0：减的不是每道题自己那一组的均值，或者分组错了（同一道题的 G 条是相邻的）",
        WHY,
        _group_sums_not_zero,
    ),
    symptom(
        "减均值是对的，每组却差一个常数倍：分母不对（std 的种类——无偏、每组 / 整批——和 eps 的位置）",
        SPEC,
        _off_by_a_factor_per_group,
    ),
]


def _check(got, inputs, *, section=SPEC, **tol):
    args = ", ".join(f"{k}={v!r}" for k, v in inputs.items() if k != "rewards")
    where = f"group_advantages(rewards, {args}) 的输出"
    mistakes = MISTAKES + SYMPTOMS
    check(
        got, _want(**inputs), inputs=inputs, mistakes=mistakes, where=where, section=section, **tol
    )


# 先跑能点名典型错误的输入：后面的例子只能说出「哪个位置的数不对」


@pytest.mark.parametrize("case", list(DIAGNOSIS_INPUTS))
def test_typical_mistakes_are_caught(mod, case):
    """这些输入让每种典型错误都给出不同的结果：有全相等的 0.1、有 std 恰好为 0 的组、有 std ≈ ε 的组、
    有只差一点点（std 很小但不为 0）的组。"""
    inputs = DIAGNOSIS_INPUTS[case]()
    _check(mod.group_advantages(**inputs), inputs, **DIAGNOSIS_TOL.get(case, {}))


def test_rewards_are_left_unchanged(mod):
    """规格 3.1：返回新张量，不改输入（mod 的代理在任何一次调用里发现原地修改都会点名，这里再明确测一次）。"""
    for scale in ("group", "batch", "none"):
        rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
        before = rewards.clone()
        mod.group_advantages(rewards, 4, scale=scale)
        assert torch.equal(rewards, before), (
            f"scale={scale!r}：group_advantages 改了传进来的 rewards（{before.tolist()} 变成了 "
            f"{rewards.tolist()}）：要返回新张量。回看 {SPEC}"
        )


def test_group_whose_std_is_about_eps(mod):
    """[0.1, 0.1, 0.1, 0.1001]：std = 5e-5，和 ε = 1e-6 只差 50 倍。ε 放进根号时 √ε = 1e-3，结果小 20 倍。"""
    inputs = DIAGNOSIS_INPUTS["tiny_std"]()
    _check(mod.group_advantages(**inputs), inputs, section="L2.01「坑 3：ε 的大小」")


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_naive_loop(mod, scale):
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0, 1.0, 0.2, 0.5, 0.0, 0.4]
    inputs = dict(rewards=torch.tensor(rewards, dtype=torch.float64), group_size=4, scale=scale)
    _check(mod.group_advantages(**inputs), inputs)


def test_worked_example_of_the_lesson(mod):
    # 课文 3.3 节：[1, 0, 0, 0 | 1, 1, 1, 1]，三种 scale
    for scale in ("group", "batch", "none"):
        inputs = dict(rewards=torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), group_size=4, scale=scale)
        _check(mod.group_advantages(**inputs), inputs, section=EXAMPLE)


def test_cs336_reference_example(mod):
    # stanford-cs336/assignment5-alignment 讲义里的例子：组 [0.2, 0.5, 0, 0.4] -> [-0.338, 1.015, -1.240, 0.564]
    inputs = dict(rewards=torch.tensor([0.2, 0.5, 0.0, 0.4]), group_size=4)
    check(
        mod.group_advantages(**inputs),
        torch.tensor([-0.338, 1.015, -1.240, 0.564]),
        inputs=inputs,
        mistakes=MISTAKES,
        where="CS336 讲义的例子 [0.2, 0.5, 0, 0.4]",
        section=SPEC,
        atol=1e-3,
        rtol=0,
    )


rewards_st = st.integers(2, 6).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.integers(1, 5).flatmap(
            lambda p: st.lists(st.floats(-10, 10, allow_nan=False), min_size=p * g, max_size=p * g)
        ),
    )
)


@settings(max_examples=60, deadline=None)
@given(rewards_st, st.floats(-100, 100, allow_nan=False))
# 固定的例子：组大小不同、组均值不同，减整批均值、沿错了维度、行列写反、交错分组的写法在这里组内和都不为 0
@example(gr=(3, [1.0, 0.0, 0.0, 5.0, 2.0, 2.5, -1.0, 4.0, 0.5]), shift=10.0)
@example(gr=(2, [1.0, 0.0, 3.0, 5.0]), shift=-7.5)
@example(
    gr=(2, [1.0, 0.0, 1.0, 3.0]), shift=2.0
)  # 第 0 列整列相等：「全相等」沿错了维度时组内和不为 0
def test_properties(mod, gr, shift):
    g, rewards = gr
    r = torch.tensor(rewards, dtype=torch.float64)
    for scale in ("group", "none"):
        a = mod.group_advantages(r, g, scale=scale)
        # 每组 advantage 之和为 0（组均值是基线）
        check(
            a.reshape(-1, g).sum(1),
            torch.zeros(len(rewards) // g, dtype=torch.float64),
            where=f"scale={scale!r} 时每组 advantage 之和（应为 0：组均值是基线）",
            section="L2.01「2. 公式，以及它从哪来」",
            atol=1e-6,
            rtol=0,
        )
        # 所有 reward 加同一个常数，advantage 不变
        check(
            mod.group_advantages(r + shift, g, scale=scale),
            a,
            where=f"scale={scale!r} 时所有 reward 加上 {shift} 之后的 advantage（应与加之前相同）",
            section="L2.01「2. 公式，以及它从哪来」",
            atol=1e-6,
            rtol=1e-6,
        )


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=4),
    group_size=st.integers(2, 16),
    dtype=st.sampled_from(DTYPES),
    scale=st.sampled_from(["group", "batch", "none"]),
)
@example(values=[1.1], group_size=12, dtype=torch.float32, scale="group")  # 修之前得 −0.106
@example(values=[0.1], group_size=8, dtype=torch.float32, scale="group")  # 修之前得 −0.0074
@example(values=[0.1], group_size=3, dtype=torch.float64, scale="group")  # 修之前得 −1.4e-11
def test_equal_rewards_give_exact_zeros(mod, values, group_size, dtype, scale):
    """每组 G 个 reward 全相等（任意值、任意 G、任意浮点 dtype）：advantage 精确为 0，dtype 不变。"""
    rewards = torch.tensor(values, dtype=torch.float64).repeat_interleave(group_size).to(dtype)
    inputs = dict(rewards=rewards, group_size=group_size, scale=scale)
    check(
        mod.group_advantages(**inputs),
        torch.zeros(len(values) * group_size, dtype=dtype),
        inputs=inputs,
        mistakes=MISTAKES,
        where=f"每组 {group_size} 个 reward 全相等（{values}，{dtype}，scale={scale!r}）时的 advantage",
        section=WHY,
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_zero_std_group_gives_zeros(mod, scale):
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    inputs = dict(rewards=r, group_size=4, scale=scale)
    got = mod.group_advantages(**inputs)
    _check(got, inputs)
    assert (got[8:] != 0).all(), f"scale={scale!r}：有对有错的组不该得到 0，得到 {got[8:].tolist()}"


def test_integer_rewards_are_accepted(mod):
    inputs = dict(rewards=torch.tensor([1, 0, 1, 0]), group_size=2)
    _check(mod.group_advantages(**inputs), inputs)


@pytest.mark.parametrize(
    "rewards, g, scale, what",
    [
        (torch.zeros(6), 1, "group", "group_size=1（组里只有一条回答）"),
        (torch.zeros(7), 2, "group", "7 个 reward、group_size=2（不能整除）"),
        (torch.zeros(2, 4), 4, "group", "rewards 是二维的 (2, 4)"),
        (torch.zeros(8), 4, "std", "scale='std'（不是 group/batch/none 之一）"),
    ],
)
def test_bad_input_raises(mod, rewards, g, scale, what):
    expect_value_error(lambda: mod.group_advantages(rewards, g, scale=scale), what)


def test_non_contiguous_rewards(mod):
    # 从更大的张量里切出来的 reward（步长不为 1）也要能用：reshape 可以，view 会报错
    full = torch.tensor([1.0, 9.0, 0.0, 9.0, 0.0, 9.0, 1.0, 9.0])
    inputs = dict(rewards=full[::2], group_size=2)
    assert not inputs["rewards"].is_contiguous()
    _check(mod.group_advantages(**inputs), inputs)


# ---------------------------------------------------------------- 诊断本身（不依赖 --impl）


def _diagnosis_cases():
    """test_typical_mistakes_are_caught 依次用的输入：(inputs, 正确结果, 容差)。"""
    for case, make in DIAGNOSIS_INPUTS.items():
        inputs = make()
        yield inputs, _want(**inputs), DIAGNOSIS_TOL.get(case, {})


@pytest.mark.parametrize("mistake", MISTAKES, ids=MISTAKE_IDS)
def test_each_typical_mistake_is_named(mistake):
    """把已知错误的实现按测试的顺序送进同一个检查：它第一次和正确结果不同的那组输入上，
    失败信息的第一行必须只点名这个错误（学习者先看到的就是这一行）。"""
    assert_named_first(mistake, _diagnosis_cases(), MISTAKES, where="输出", section=SPEC)


def test_eps_in_sqrt_is_20_times_off_on_the_tiny_std_group():
    """测试数据本身的前提（课文 3.3 的数）：std = 5e-5 的组，最后一条 1.4706；ε 放进根号得 0.0749。"""
    inputs = DIAGNOSIS_INPUTS["tiny_std"]()
    right, wrong = _want(**inputs)[3].item(), EPS_IN_SQRT.fn(**inputs)[3].item()
    assert round(right, 4) == 1.4706 and round(wrong, 4) == 0.0749 and right / wrong > 19
    assert inputs["rewards"].tolist() == TINY_STD


def test_in_place_change_is_named(impl_name):
    """诊断本身：原地改了 rewards 的实现，第一行点名「原地修改了输入的 rewards」（而不是后面某个输出不对）。"""
    import types

    def in_place(rewards, group_size, eps=1e-6, scale="group"):
        rewards -= (
            rewards.reshape(-1, group_size).mean(1, keepdim=True).repeat_interleave(group_size)
        )
        return rewards

    fake = guarded(
        types.SimpleNamespace(group_advantages=in_place),
        {"group_advantages": SPEC},
        keep_inputs={"group_advantages": SPEC},
    )
    with pytest.raises(
        pytest.fail.Exception, match=r"^group_advantages\(\) 原地修改了输入的 rewards"
    ):
        fake.group_advantages(torch.tensor([1.0, 0.0]), 2, scale="none")


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每组诊断输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们）。
    例外一对：没有哪一列整列相等的输入上，「沿 dim=0 判断全相等」就是「没有全相等的规则」；
    第一组输入（第 0 列整列相等）把它们分开，两者都在那里被点名。"""
    pair = [(NO_FLAT_RULE, FLAT_DIM0)]
    assert not (found := collisions(MISTAKES, _diagnosis_cases(), pair)), "\n".join(found)


@pytest.mark.parametrize("spread", ["subtract", "expand"])
def test_missing_dimension_after_a_reduction_is_named(spread):
    """诊断本身：每组的均值少了一维（(P,)，不是 (P, 1)）时，第一行说出这一类错误（P = 2、G = 4）。"""

    def without_keepdim(rewards, group_size, eps=1e-6, scale="group"):
        grouped = rewards.reshape(-1, group_size)
        mean = grouped.mean(1)
        return (grouped - (mean if spread == "subtract" else mean.expand_as(grouped))).reshape(-1)

    line = crash_first_line(
        lambda: without_keepdim(torch.arange(8.0), 4),
        "group_advantages",
        SPEC,
        CRASHES["group_advantages"],
    )
    assert line.startswith("group_advantages() 抛出 RuntimeError：") and "少了一维" in line, line


def test_each_symptom_is_absent_from_the_right_answer():
    """症状只在错的输出上成立：诊断输入的正确结果上一条都不成立。"""
    for make in DIAGNOSIS_INPUTS.values():
        inputs = make()
        want = _want(**inputs)
        assert not [s.what for s in SYMPTOMS if s.fn(want, **inputs)], inputs


def test_diagnoses_point_at_real_sections():
    assert_sections_exist(
        {m.section for m in MISTAKES + SYMPTOMS}
        | {SPEC, WHY, EXAMPLE, "L2.01「坑 3：ε 的大小」"}
        | hint_sections(CRASHES)
    )
