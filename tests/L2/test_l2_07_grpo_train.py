"""L2.07 microbatch_weight：按权重累加 micro-batch 的损失，必须精确等于整个 batch 一次算出的损失。

参考值在这里独立写出（三种 aggregation 的定义见 L2.05），不依赖被测代码。
输出不对时，失败信息的第一行是一句中文：和 `MISTAKES` 里某个典型错误一致时直接说是哪一种。
"""

from __future__ import annotations

import math

import pytest
import torch
from diagnose import (
    Mistake,
    assert_sections_exist,
    check,
    collisions,
    guarded,
    hint_sections,
    named_all,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistake_tools import derived, diagnosis_line, expect_value_error, named

SECTION = "L2.07「2.7 梯度累积」"


HINTS = "L2.07「2.7 梯度累积」"
# microbatch_weight 里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
CRASHES = {
    "microbatch_weight": {
        "dim_range": "维度越界：mask 是二维的 (行数, T)，取行数或求和时用了它没有的那一维",
        "not_tensor": "对 Python 数调用了张量的方法：有个量已经变成了 Python 数，又被当成张量用",
        "bool_ambiguous": "用 Python 的 if 判断了多个元素的张量（「整批有没有有效 token」要看的是一个数）",
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了 mask 直接点名。"""
    sections = {"microbatch_weight": SECTION}
    return guarded(impl("l2_07_grpo_train"), sections, CRASHES, keep_inputs=sections)


class NotApplicable(Exception):
    """这个错误在这组参数下与正确结果没有区别：诊断时跳过。"""


def _variant(mb_mask, batch_mask, aggregation, *, bug):
    """改一处的 microbatch_weight。"""
    rows = mb_mask.shape[0] / batch_mask.shape[0]
    total = float(batch_mask.sum())
    if bug == "token_by_rows" and aggregation == "token_mean":
        return rows
    if bug == "rows_by_tokens" and aggregation != "token_mean" and total > 0:
        return float(mb_mask.sum()) / total
    if bug == "no_guard" and aggregation == "token_mean" and total == 0:
        return float("nan")  # Σmb / Σbatch = 0 / 0
    if bug == "plain_sum":
        return 1.0
    if (
        bug == "shape1" and aggregation != "token_mean"
    ):  # mb_mask.shape[1] / batch_mask.shape[1] = T / T
        return mb_mask.shape[1] / batch_mask.shape[1]
    if bug == "inverted" and aggregation == "token_mean":
        mine = float(mb_mask.sum())
        return total / mine if mine > 0 else 0.0
    if bug == "inverted" and aggregation != "token_mean":
        return 1 / rows
    M, N = mb_mask.shape[0], batch_mask.shape[0]
    if bug == "per_microbatch" and aggregation != "token_mean":
        return 1 / math.ceil(N / M)  # 1 / micro-batch 个数：每份行数相同时才等于 M/N
    if bug == "per_microbatch_floor" and aggregation != "token_mean":
        return 1 / (N // M)  # 份数按 N // M 数：最后一份行数少时数少了
    if bug == "per_microbatch" and total > 0:
        # 每行平均有效 token 数之比，再除以 micro-batch 个数：每份行数相同时才等于 Σmb / Σbatch
        return float(mb_mask.sum()) / M / (total / N) / math.ceil(N / M)
    raise NotApplicable(bug)


def _mistake(what, bug):
    return Mistake(what, SECTION, lambda **kw: _variant(**kw, bug=bug))


_PER_MB = (
    "按 micro-batch 的个数平均分了（1 / 份数，或每行平均 token 数之比再除以份数）：每份行数相同时碰巧对，"
    "最后一份行数少时就错了"
)
MISTAKES = [
    _mistake("让 token_mean 按行数分摊了（用了 M/N，或 1/micro-batch 个数）", "token_by_rows"),
    _mistake("让 sequence_mean / constant 按有效 token 数分摊了", "rows_by_tokens"),
    _mistake("忘了整批 mask 全 0 的情况（token_mean 时 0/0 = NaN，应返回 0.0）", "no_guard"),
    _mistake("把各份 loss 直接相加了（权重全是 1）", "plain_sum"),
    _mistake("份额倒过来了（所有份的 w 加起来不是 1）", "inverted"),
    _mistake("行数用了 .shape[1]（那是 T：两个 mask 的 T 一样，比值恒为 1）", "shape1"),
    _mistake(_PER_MB, "per_microbatch"),
    _mistake(_PER_MB, "per_microbatch_floor"),
]
BUGS = ["token_by_rows", "rows_by_tokens", "no_guard", "plain_sum", "inverted", "shape1"]
BUGS += ["per_microbatch", "per_microbatch_floor"]
ROWS_BY_TOKENS = MISTAKES[1]
NO_GUARD = MISTAKES[2]
PLAIN_SUM = MISTAKES[3]
# 任何输入上都分不开的一对：sequence_mean / constant 时 shape[1] 的比值恒为 1，和「直接相加」一样；
# 诊断把两者都说出来（token_mean 时 shape[1] 的写法不出错，「直接相加」只在那里单独露馅）
SAME_AS = {"shape1": [PLAIN_SUM, MISTAKES[5]]}


def _weight(mod, mb_mask, batch_mask, aggregation):
    """调用被测的 microbatch_weight；整批没有有效 token 时除以 0 抛错：

    token_mean 下是「忘了全 0 的情况」；sequence_mean / constant 的 M/N 永远不会除以 0，
    在那里除以 0 说明它们也按有效 token 数分摊了。
    """
    try:
        w = mod.microbatch_weight(mb_mask, batch_mask, aggregation)
    except ZeroDivisionError as e:
        m = NO_GUARD if aggregation == "token_mean" else ROWS_BY_TOKENS
        pytest.fail(
            f"{named(m)}\n（{aggregation}、整批有效 token 数 = {float(batch_mask.sum()):g} 时 "
            f"ZeroDivisionError：{e}）",
            pytrace=False,
        )
    assert isinstance(w, float), (
        f"microbatch_weight 应返回 Python float（规格），得到 {type(w).__name__}。回看 {SECTION}"
    )
    return w


def _aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, aggregation: str, max_len: int
) -> torch.Tensor:
    """整个 batch 的聚合（参考定义）。mask 全 0 的行在 sequence_mean 里贡献 0。"""
    if aggregation == "sequence_mean":
        rows = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        return rows.mean()
    if aggregation == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
    return (per_token * mask).sum() / (mask.shape[0] * max_len)


def _accumulate(weight, per_token, mask, m, aggregation, max_len):
    """按 m 行一份切开，Σ weight(这一份) · 这一份自己的聚合。"""
    acc = torch.zeros((), dtype=torch.float64)
    for i in range(0, mask.shape[0], m):
        w = weight(mb_mask=mask[i : i + m], batch_mask=mask, aggregation=aggregation)
        acc = acc + w * _aggregate(per_token[i : i + m], mask[i : i + m], aggregation, max_len)
    return acc


def _mask(lengths, T):
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()


CONCRETE_MASK = _mask([3, 1, 0, 4], 4)  # 4 行，共 8 个有效 token
# 5 行的 batch 按每份 2 行切开：2、2、1 行，最后一份行数少（共 10 个有效 token）
UNEVEN_MASK = _mask([3, 1, 0, 4, 2], 4)
CONCRETE = [
    # (batch 的 mask, micro-batch 的行, aggregation, 正确的权重)
    (CONCRETE_MASK, slice(0, 2), "token_mean", 4 / 8),
    (CONCRETE_MASK, slice(2, 4), "token_mean", 4 / 8),
    (CONCRETE_MASK, slice(0, 1), "token_mean", 3 / 8),
    (CONCRETE_MASK, slice(0, 1), "sequence_mean", 1 / 4),
    (CONCRETE_MASK, slice(0, 1), "constant", 1 / 4),
    (CONCRETE_MASK, slice(1, 2), "sequence_mean", 1 / 4),
    (UNEVEN_MASK, slice(0, 2), "sequence_mean", 2 / 5),
    (UNEVEN_MASK, slice(4, 5), "constant", 1 / 5),
    (UNEVEN_MASK, slice(0, 2), "token_mean", 4 / 10),
    (UNEVEN_MASK, slice(4, 5), "token_mean", 2 / 10),
]


CONCRETE_IDS = [
    f"{'uneven' if m is UNEVEN_MASK else 'even'}-rows{r.start}:{r.stop}-{a}"
    for m, r, a, _ in CONCRETE
]


@pytest.mark.parametrize("batch_mask,rows,aggregation,want", CONCRETE, ids=CONCRETE_IDS)
def test_concrete_values(mod, batch_mask, rows, aggregation, want):
    kw = dict(mb_mask=batch_mask[rows], batch_mask=batch_mask, aggregation=aggregation)
    lengths = [int(n) for n in batch_mask.sum(1).tolist()]
    check(
        _weight(mod, **kw),
        want,
        where=f"长度 {lengths} 的 batch 里行 [{rows.start}:{rows.stop}]、{aggregation} 的权重",
        section=SECTION,
        inputs=kw,
        mistakes=MISTAKES,
    )


# token_mean 先跑：「直接相加」在 sequence_mean / constant 上和「行数用了 shape[1]」分不开，在 token_mean 上分得开
AGG_ORDER = ["token_mean", "sequence_mean", "constant"]


@st.composite
def _batches(draw):
    """(每份行数 m, T, 每行的有效长度, 造逐 token 损失的种子)；一共 n_mb 份，最后一份可以少于 m 行。"""
    n_mb, m, T = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 7))
    n = draw(st.integers((n_mb - 1) * m + 1, n_mb * m))
    lengths = draw(st.lists(st.integers(0, T), min_size=n, max_size=n))
    return m, T, lengths, draw(st.integers(0, 10_000))


@pytest.mark.parametrize("aggregation", AGG_ORDER)
@settings(max_examples=30, deadline=None, report_multiple_bugs=False)
@given(batch=_batches())
# 固定的例子先跑：每个典型错误在这里都给出和正确结果、和别的错误都不同的数（test_examples_tell_the_mistakes_apart），
# 不靠随机抽到（hypothesis 缩小后的两行例子上，「直接相加」和「按 token 数分摊」给出同一个数）
@example(batch=(2, 4, [3, 1, 0, 4, 2, 0], 0))
@example(batch=(1, 5, [0, 0, 0], 1))
@example(batch=(2, 4, [3, 1, 0, 4, 2], 0))  # 2、2、1 行：最后一份行数少
def test_weighted_microbatches_equal_full_batch(mod, aggregation, batch):
    m, T, lengths, seed = batch
    g = torch.Generator().manual_seed(seed)
    per_token = torch.randn(len(lengths), T, generator=g, dtype=torch.float64)
    mask = _mask(lengths, T)
    kw = dict(per_token=per_token, mask=mask, m=m, aggregation=aggregation, max_len=T + 2)
    full = _aggregate(per_token, mask, aggregation, max_len=T + 2)
    acc = _accumulate(lambda **w: _weight(mod, **w), **kw)
    check(
        acc,
        full,
        where=f"{aggregation}、每份 {m} 行时按权重累加的 loss（应等于整批一次算的 loss）",
        section=SECTION,
        inputs=kw,
        mistakes=derived(MISTAKES, lambda bad: lambda **k: _accumulate(bad, **k)),
        rtol=1e-7,
        atol=1e-7,
    )


@pytest.mark.parametrize("aggregation,want", [("token_mean", 1.875), ("sequence_mean", 1.75)])
def test_lesson_worked_example(mod, aggregation, want):
    """课文 2.7 节的表：长度 [3, 1, 0, 4]，逐 token 损失 1 / 4 / 空 / 2，每份 1 行。"""
    per_token = torch.tensor(
        [[1.0, 1, 1, 0], [4, 0, 0, 0], [0, 0, 0, 0], [2, 2, 2, 2]], dtype=torch.float64
    )
    kw = dict(per_token=per_token, mask=CONCRETE_MASK, m=1, aggregation=aggregation, max_len=4)
    assert (
        _aggregate(per_token, CONCRETE_MASK, aggregation, 4).item() == want
    )  # 表里「整批一次算」那一列
    check(
        _accumulate(lambda **w: _weight(mod, **w), **kw).item(),
        want,
        where=f"课文 2.7 节的例子、{aggregation} 时的 Σ w·loss(mb)",
        section=SECTION,
        inputs=kw,
        mistakes=derived(MISTAKES, lambda bad: lambda **k: _accumulate(bad, **k).item()),
    )


def test_empty_batch_and_bad_input(mod):
    empty = torch.zeros(4, 5)
    kw = dict(mb_mask=empty[:2], batch_mask=empty, aggregation="token_mean")
    check(
        _weight(mod, **kw),
        0.0,
        where="整批 mask 全 0、token_mean 时的权重",
        section=SECTION,
        inputs=kw,
        mistakes=MISTAKES,
    )
    expect_value_error(
        lambda: mod.microbatch_weight(empty[:2], empty, "grpo"), "未知的 aggregation='grpo'"
    )
    expect_value_error(
        lambda: mod.microbatch_weight(torch.zeros(5), empty, "token_mean"),
        "mb_mask 是一维的 (5,)（应为二维 (M, T)）",
    )


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant"])
def test_batch_without_rows_raises(mod, aggregation):
    # 一行都没有的一批（N = 0）：规格要 ValueError，而不是 ZeroDivisionError 或随便一个数
    no_rows = torch.zeros(0, 5)
    expect_value_error(
        lambda: mod.microbatch_weight(no_rows, no_rows, aggregation),
        f"batch_mask 一行都没有（形状 (0, 5)，aggregation={aggregation!r}）",
    )


PROBES = [
    dict(mb_mask=batch_mask[rows], batch_mask=batch_mask, aggregation=a)
    for batch_mask, rows, a, _ in CONCRETE
]
PROBES.append(
    dict(mb_mask=torch.zeros(2, 5), batch_mask=torch.zeros(4, 5), aggregation="token_mean")
)
WANTS = [w for _, _, _, w in CONCRETE] + [0.0]


# 固定的例子（上面 @example 里的），按测试运行的顺序
EXAMPLES = [(2, 4, [3, 1, 0, 4, 2, 0], 0), (1, 5, [0, 0, 0], 1), (2, 4, [3, 1, 0, 4, 2], 0)]


def _example_cases():
    """(inputs, 正确结果)：test_weighted_microbatches_equal_full_batch 在固定例子上依次看到的。"""
    for aggregation in AGG_ORDER:
        for m, T, lengths, seed in EXAMPLES:
            g = torch.Generator().manual_seed(seed)
            per_token = torch.randn(len(lengths), T, generator=g, dtype=torch.float64)
            mask = _mask(lengths, T)
            kw = dict(per_token=per_token, mask=mask, m=m, aggregation=aggregation, max_len=T + 2)
            yield kw, _aggregate(per_token, mask, aggregation, max_len=T + 2)


ACCUMULATED = derived(MISTAKES, lambda bad: lambda **k: _accumulate(bad, **k))


def _expected_line(i):
    return named_all(SAME_AS[BUGS[i]]) if BUGS[i] in SAME_AS else named(MISTAKES[i])


@pytest.mark.parametrize("i", range(len(MISTAKES)), ids=BUGS)
def test_each_known_mistake_is_named(i):
    """诊断本身，按测试运行的顺序（先 test_concrete_values、整批全 0 的例子，再是累加测试的固定例子）：
    每个典型错误第一次和正确结果不同的地方，第一行只点名它自己（和它分不开的那一个除外，SAME_AS）。"""
    m, lines = MISTAKES[i], []
    for probe, want in zip(PROBES, WANTS):
        try:
            wrong = m.fn(**probe)
        except NotApplicable:
            continue
        line = diagnosis_line(
            wrong, want, where="x", section=SECTION, inputs=probe, mistakes=MISTAKES
        )
        if line is not None:
            lines.append(line)
    assert lines, f"没有任何一个例子能暴露 {BUGS[i]}"
    assert lines[0] == _expected_line(i), lines[0]


@pytest.mark.parametrize("i", range(len(MISTAKES)), ids=BUGS)
def test_examples_tell_the_mistakes_apart(i):
    """累加那条测试的固定例子（@example）上：每个典型错误都露馅，第一次露馅时只点名它自己。"""
    lines = []
    for kw, full in _example_cases():
        try:
            wrong = ACCUMULATED[i].fn(**kw)
        except NotApplicable:
            continue
        line = diagnosis_line(
            wrong,
            full,
            where="x",
            section=SECTION,
            inputs=kw,
            mistakes=ACCUMULATED,
            rtol=1e-7,
            atol=1e-7,
        )
        assert line is None or line.startswith("看起来是"), line
        if line is not None:
            lines.append(line)
    assert lines, f"固定例子上看不出 {BUGS[i]}"
    assert lines[0] == _expected_line(i), lines[0]


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每个例子上，两个不同的典型错误算出的权重（和累加出的 loss）不同。
    例外只有 SAME_AS 那一对：sequence_mean / constant 时任何输入上都分不开，诊断把两者都说出来。"""
    cases = [(p, w, {}) for p, w in zip(PROBES, WANTS)]
    pair = [tuple(SAME_AS["shape1"])]
    found = collisions(MISTAKES, cases, inseparable=pair)
    tol = dict(rtol=1e-7, atol=1e-7)
    examples = [(kw, full, tol) for kw, full in _example_cases()]
    found += collisions(ACCUMULATED, examples, inseparable=pair)
    assert not found, "\n".join(found)


def test_diagnoses_point_at_real_sections():
    assert_sections_exist({m.section for m in MISTAKES} | {SECTION, HINTS} | hint_sections(CRASHES))
