"""L2.06 process_logits：temperature、top-p nucleus 的边界情况，与逐 token 朴素实现对照。

输出不对时，失败信息的第一行是一句中文：和 `MISTAKES` 里某个典型错误的结果一致时直接说是哪一种、回看课文哪一节。
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
    crash_first_line,
    guarded,
    hint_sections,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistake_tools import derived, diagnosis_line, expect_value_error, named

ORDER = "L2.06「2. 公式，以及它从哪来」（先 temperature，再 top-p）"
SPEC = "L2.06「3.1 规格」"
PITFALL = "L2.06「4. 坑，以及出处」坑 {}"


HINTS = "L2.06「3.3 提示」"
# process_logits 里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
CRASHES = {
    "process_logits": {
        "dtype": (
            "dtype 不对：masked_fill 的条件，或 scatter 的目标和写进去的值，有的不是 bool（几个张量的 dtype 不一致）",
            HINTS,
        ),
        "gather": "scatter / gather 的下标和目标形状对不上，或沿错了维度（sort 返回的下标是 (B, V)）",
        "index": "scatter / gather 沿错了维度，下标越界了（sort 返回的下标是 (B, V)，每行 V 个）",
        "bool_ambiguous": (
            "对多个元素的张量用了 Python 的 if / and / or（逐 token 的删除条件不是一个真假值）",
            SPEC,
        ),
        "broadcast": "形状对不上：概率、前缀和、删除标记都是 (B, V)，有一个沿错了维度，"
        "或少了一维（对词表求和之后那一维没了）",
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块；函数里抛出的异常带上一句中文（最可能的原因）。每次调用都检查有没有原地改输入：

    原地改了的话，后面拿同一份 logits 算的参考值和典型错误也都被改掉，失败信息会指向别的错误；
    所以一发现就在第一行说出来，并把输入恢复原样（模块级的例子还要给别的测试用）。
    """
    sections = {"process_logits": SPEC}
    return guarded(impl("l2_06_sampling"), sections, CRASHES, keep_inputs=sections)


def _kept(out: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(out)


def _naive_nucleus(row: torch.Tensor, top_p: float) -> set[int]:
    """逐个 token 累加（float64）：从概率最大的开始收，累计概率一达到 top_p 就停。"""
    probs = torch.softmax(row.double(), -1)
    order = sorted(range(len(probs)), key=lambda i: -probs[i].item())
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs[i].item()
        if mass >= top_p:
            break
    return kept


# ---------------------------------------------------------------------------------------------
# 典型错误：按「错误开关」改一处的 process_logits（bug=None 时就是题目要求的行为）。
# ---------------------------------------------------------------------------------------------


class NotApplicable(Exception):
    """这个错误在这组参数下与正确结果没有区别（例如 temperature=1 时谈不上顺序）：诊断时跳过。"""


def _variant(logits, temperature=1.0, top_p=1.0, *, bug=None):
    applies = {
        "top_p_first": temperature != 1.0,
        "bf16_softmax": logits.dtype in (torch.bfloat16, torch.float16),
        "temp_mul": temperature != 1.0,
        "top_p1_raw": temperature != 1.0 and top_p >= 1.0,
        "raw_return": temperature != 1.0,
        "temp_twice": temperature != 1.0,
    }
    whole_range = (None, "temp_mul", "top_p1_raw")  # top_p = 1 时还谈得上的错误
    if not applies.get(bug, True) or (top_p >= 1.0 and bug not in whole_range):
        raise NotApplicable(bug)
    if bug == "temp_mul":  # 乘了 temperature（其余照规格）
        return _variant(logits * temperature * temperature, temperature, top_p)
    if top_p >= 1.0:  # top_p1_raw：这一支忘了除以 temperature
        return logits if bug == "top_p1_raw" else logits / temperature
    z = logits if bug == "top_p_first" else logits / temperature
    if bug == "unsorted":  # 在原词表顺序上做前缀和
        p = z.float().softmax(-1)
        remove = p.cumsum(-1) - p >= top_p
    else:
        s, idx = z.sort(dim=-1, descending=True)
        p = (s if bug == "bf16_softmax" else s.float()).softmax(0 if bug == "softmax_dim0" else -1)
        if (
            bug == "exp_by_hand"
        ):  # e^z / Σe^z：z ≈ 125 时 e^z 在 float32 里上溢成 inf，inf / inf = NaN
            p = s.float().exp() / s.float().exp().sum(-1, keepdim=True)
        cum = p.cumsum(0 if bug == "cumsum_dim0" else -1)
        remove_sorted = {
            "keep_le": cum > top_p,  # 只留累计概率 <= top_p 的：漏掉跨过阈值的那一个
            "gt": cum - p > top_p,  # 恰好达到 top_p 时多留一个
        }.get(bug, cum - p >= top_p)
        if bug == "no_scatter":  # 排序后的删除标记直接用在原词表位置上
            remove = remove_sorted
        elif bug == "gather_back":  # 用 gather 放回：方向反了（那是 scatter 的逆）
            remove = remove_sorted.gather(-1, idx)
        else:
            remove = torch.zeros_like(remove_sorted).scatter(-1, idx, remove_sorted)
    if bug == "raw_return":  # nucleus 在除以温度之后选的，返回的却是原来的 logits
        return logits.masked_fill(remove, float("-inf"))
    if bug == "temp_twice":  # top_p < 1 那一支返回前又除了一次 temperature
        return (z / temperature).masked_fill(remove, float("-inf"))
    if bug == "keep_removed":  # masked_fill 的条件取反了：删掉的是 nucleus，留下的是该删的
        remove = ~remove
    out = z.masked_fill(remove, 0.0 if bug == "fill_zero" else float("-inf"))
    return out / temperature if bug == "top_p_first" else out


def _mistake(what, section, bug):
    return Mistake(what, section, lambda **kw: _variant(**kw, bug=bug))


MISTAKES = [
    _mistake(
        "logits 乘了 temperature（应除以它：temperature < 1 让分布更尖，> 1 更平）",
        SPEC,
        "temp_mul",
    ),
    _mistake(
        "先做了 top-p 再除以 temperature（nucleus 应当在除以温度之后的分布上选）",
        ORDER,
        "top_p_first",
    ),
    _mistake(
        "只保留了累计概率 <= top_p 的 token（漏掉了跨过阈值的那一个，nucleus 少一个）",
        PITFALL.format(2),
        "keep_le",
    ),
    _mistake(
        "把判据写成了「排在前面的累计概率 > top_p 才删」（累计概率恰好等于 top_p 时多留一个）",
        PITFALL.format(2),
        "gt",
    ),
    _mistake("在没排序的原词表顺序上做了前缀和", PITFALL.format(7), "unsorted"),
    _mistake(
        "忘了把排序后的删除标记映射回原词表位置（少了 scatter）", PITFALL.format(7), "no_scatter"
    ),
    _mistake("在 bf16 里算了 softmax 和前缀和", PITFALL.format(4), "bf16_softmax"),
    _mistake("把删掉的位置填成了 0 而不是 -inf", PITFALL.format(8), "fill_zero"),
    _mistake(
        "用了 gather 把排序后的删除标记放回原词表位置：方向反了（gather 是按 sorted_idx 取，不是按它放回）",
        PITFALL.format(7),
        "gather_back",
    ),
    _mistake(
        "softmax 沿错了维度（dim=0：在不同行之间归一化了，而每行是一个序列的分布）",
        SPEC,
        "softmax_dim0",
    ),
    _mistake(
        "前缀和沿错了维度（cumsum(dim=0)：在不同行之间累加了，不是沿每行的词表）",
        PITFALL.format(7),
        "cumsum_dim0",
    ),
    _mistake(
        "top_p = 1 那一支直接返回了 logits，忘了除以 temperature（规格：两条路都除以温度）",
        SPEC,
        "top_p1_raw",
    ),
    _mistake(
        "nucleus 是在除以温度之后选的，返回的却是没除以温度的 logits：保留下来的值也要是 logits / temperature",
        SPEC,
        "raw_return",
    ),
    _mistake(
        "top_p < 1 那一支除了两次 temperature（nucleus 对，返回的值却是 logits / temperature²）",
        SPEC,
        "temp_twice",
    ),
    _mistake(
        "masked_fill 的条件反了：nucleus 里的 token 被填成了 -inf，该删的反而留下了",
        SPEC,
        "keep_removed",
    ),
    _mistake(
        "概率是手写的 e^z / Σe^z：logits 很大（≈ 100）时 e^z 在 float32 里上溢成 inf，inf / inf = NaN，"
        "NaN 的前缀和什么也删不掉",
        HINTS,
        "exp_by_hand",
    ),
]
FILL_ZERO = MISTAKES[7]


def _scaled(logits, temperature=1.0, **_):
    return logits.double() / temperature


def _not_a_top_prefix(got, logits, temperature=1.0, **_):
    """某一行留下的不全是概率最大的那几个：留下的里最小的 < 删掉的里最大的。"""
    z, kept = _scaled(logits, temperature), torch.isfinite(got)
    return any(
        kept[b].any() and (~kept[b]).any() and z[b][kept[b]].min() < z[b][~kept[b]].max()
        for b in range(z.shape[0])
    )


def _wrong_count(got, logits, temperature=1.0, top_p=1.0):
    want = _variant(logits, temperature, top_p)
    return bool((torch.isfinite(got).sum(-1) != torch.isfinite(want).sum(-1)).any())


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = [
    symptom(
        "有的行一个 token 都没留下（整行 -inf，softmax 之后是 NaN）：概率最大的那个永远保留",
        PITFALL.format(2),
        lambda got, **kw: bool((~torch.isfinite(got)).all(-1).any()),
    ),
    symptom(
        "输出里一个 -inf 都没有：删掉的位置要填 -inf（填 0 的 token 照样会被采到）",
        PITFALL.format(8),
        lambda got, **kw: (
            not bool(torch.isinf(got).any()) and bool(torch.isinf(_variant(**kw)).any())
        ),
    ),
    symptom(
        "留下来的值不是 logits / temperature：检查温度（除以它，只除一次，两条路都要除）",
        SPEC,
        lambda got, logits, temperature=1.0, **kw: bool(
            (
                (got.double() - _scaled(logits, temperature)).abs()[torch.isfinite(got)]
                > 1e-5 * (1 + _scaled(logits, temperature).abs()[torch.isfinite(got)])
            ).any()
        ),
    ),
    symptom(
        "留下的不是概率最大的那几个：前缀和不是在每行排好序的概率上算的，或删除标记没有放回原词表位置",
        PITFALL.format(7),
        _not_a_top_prefix,
    ),
    symptom(
        "留下的是概率最大的那几个，但个数不对：「排在我前面的累计概率 < top_p」的才留（恰好等于 top_p 时不再多留）",
        PITFALL.format(2),
        _wrong_count,
    ),
]
BUGS = [
    "temp_mul",
    "top_p_first",
    "keep_le",
    "gt",
    "unsorted",
    "no_scatter",
    "bf16_softmax",
    "fill_zero",
    "gather_back",
    "softmax_dim0",
    "cumsum_dim0",
    "top_p1_raw",
    "raw_return",
    "temp_twice",
    "keep_removed",
    "exp_by_hand",
]
COUNT_MISTAKES = derived(MISTAKES, lambda bad: lambda **kw: _kept(bad(**kw)).sum(-1))
KEPT_MISTAKES = derived(MISTAKES, lambda bad: lambda **kw: _kept(bad(**kw)))


def _check_counts(got_out, want_counts, inputs, what):
    # 删掉的位置填了 0 时，「保留个数」永远是 V，会和别的错误在个数上撞车：直接看输出里有没有 -inf
    scaled = inputs["logits"] / inputs["temperature"]
    if (
        (want_counts < got_out.shape[-1]).any()
        and not torch.isinf(got_out).any()
        and (got_out == 0).any()
        and not torch.equal(got_out, scaled)
    ):
        pytest.fail(
            f"{named(FILL_ZERO)}\n（{what}：输出里一个 -inf 都没有，却有被改成 0 的位置）",
            pytrace=False,
        )
    check(
        _kept(got_out).sum(-1),
        want_counts,
        where=f"{what}：每行保留（不是 -inf）的 token 个数",
        section=PITFALL.format(2),
        inputs=inputs,
        mistakes=COUNT_MISTAKES,
    )


# 手算：logits / 0.5 = [2, 8, 4, 6, −2]，softmax ≈ [0.0021, 0.8650, 0.0158, 0.1171, 0.00004]；
# 从大到小累计 0.8650 < 0.9，再加 0.1171 = 0.9821 >= 0.9：只留原位置 1 和 3
REMOVED_PROBE = dict(logits=torch.tensor([[1.0, 4.0, 2.0, 3.0, -1.0]]), temperature=0.5, top_p=0.9)
REMOVED_WANT = torch.tensor([[-math.inf, 8.0, -math.inf, 6.0, -math.inf]])

# 诊断输入，按这个顺序跑（test_each_known_mistake_is_named 照同样的顺序检查）：先是三行的例子（行与行的分布不同，
# 沿错了维度的 softmax / cumsum 分得开），再是 3.2 节的手算例子，最后是 top_p = 1、temperature = 2
DIAGNOSIS_PROBES = {
    "three_rows": dict(
        logits=torch.tensor(
            [
                [2.0, -1.0, 0.5, 3.0, 1.0, -2.0],
                [0.0, 1.5, -0.5, 1.0, 2.5, 0.2],
                [1.0, 0.8, 3.5, -1.5, 0.3, 2.0],
            ]
        ),
        temperature=0.7,
        top_p=0.8,
    ),
    "lesson": REMOVED_PROBE,
    "top_p_one": dict(
        logits=torch.tensor([[1.0, 4.0, 2.0, 3.0, -1.0], [0.5, -0.5, 2.0, 0.0, 1.0]]),
        temperature=2.0,
        top_p=1.0,
    ),
    # logits 很大、差得很远（float32）：除以温度后最大的是 125（e^125 上溢成 inf），最小的比最大的低 250
    "large_logits": dict(
        logits=torch.tensor(
            [[99.0, 100.0, 97.0, 98.5, 50.0, -100.0], [0.0, -150.0, -1.0, 2.0, -120.0, 1.0]]
        ),
        temperature=0.8,
        top_p=0.9,
    ),
}


@pytest.mark.parametrize("case", list(DIAGNOSIS_PROBES))
def test_typical_mistakes_are_caught(mod, case):
    """这几组输入上，每个典型错误都给出和正确结果不同、彼此也不同的输出（没有并列、不压在阈值上）。"""
    probe = DIAGNOSIS_PROBES[case]
    check(
        mod.process_logits(**probe),
        _variant(**probe),
        where=f"诊断输入「{case}」（temperature={probe['temperature']}、top_p={probe['top_p']}）上的输出",
        section=SPEC,
        inputs=probe,
        mistakes=MISTAKES + SYMPTOMS,
    )


def test_top_p_one_keeps_everything(mod):
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0)) * 5
    out = mod.process_logits(logits, temperature=1.0, top_p=1.0)
    check(out, logits, where="top_p=1、temperature=1 时的输出（应原样返回 logits）", section=SPEC)


def test_tiny_top_p_keeps_only_argmax(mod):
    logits = torch.randn(5, 30, generator=torch.Generator().manual_seed(1)) * 2
    kw = dict(logits=logits, temperature=1.0, top_p=1e-6)
    out = mod.process_logits(**kw)
    _check_counts(out, torch.ones(5, dtype=torch.long), kw, "top_p=1e-6 时")
    rows, top = torch.arange(5), logits.argmax(-1)
    check(
        out[rows, top],
        logits[rows, top],
        where="top_p=1e-6 时概率最大的那个 token 的 logit（应保留原值）",
        section=SPEC,
    )


@pytest.mark.parametrize(
    "top_p,n_kept", [(0.25, 1), (0.3, 2), (0.5, 2), (0.75, 3), (0.76, 4), (1.0, 4)]
)
def test_ties_and_exactly_reaching_the_threshold(mod, top_p, n_kept):
    # 4 个 logits 相同 -> 概率精确为 0.25，累计 0.25/0.5/0.75/1.0 在浮点里也是精确的。
    # 「累计概率达到 top_p」包含恰好等于：top_p=0.5 时两个 token 就够了，不能收第三个，也不能只收一个。
    kw = dict(logits=torch.ones(2, 4), temperature=1.0, top_p=top_p)
    out = mod.process_logits(**kw)
    _check_counts(out, torch.full((2,), n_kept), kw, f"4 个并列 token、top_p={top_p} 时")


@pytest.mark.parametrize("top_p,n_kept", [(0.49, 1), (0.51, 2), (0.79, 2), (0.81, 3)])
def test_threshold_just_below_and_above(mod, top_p, n_kept):
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))  # 排序后 0.5, 0.3, 0.2
    kw = dict(logits=logits, temperature=1.0, top_p=top_p)
    out = mod.process_logits(**kw)
    _check_counts(out, torch.tensor([n_kept]), kw, f"概率 [0.2, 0.5, 0.3]、top_p={top_p} 时")
    assert _kept(out)[0, 1], f"概率最大的 token 永远保留。回看 {SPEC}"


def test_removed_positions_are_minus_inf_and_kept_are_untouched(mod):
    out = mod.process_logits(**REMOVED_PROBE)
    check(
        out,
        REMOVED_WANT,
        where="logits=[1, 4, 2, 3, −1]、temperature=0.5、top_p=0.9 的输出",
        section=SPEC,
        inputs=REMOVED_PROBE,
        mistakes=MISTAKES + SYMPTOMS,
    )


@settings(max_examples=60, deadline=None, report_multiple_bugs=False)
@given(st.integers(0, 10_000), st.floats(0.05, 0.99), st.floats(0.3, 3.0))
# 固定的例子：温度 ≠ 1（先 top-p 后温度、乘了温度看得出），nucleus 有好几个 token
@example(seed=0, top_p=0.8, temperature=0.7)
@example(seed=1, top_p=0.6, temperature=2.0)
def test_matches_naive_nucleus(mod, seed, top_p, temperature):
    logits = (
        torch.randn(
            3, 12, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        ).float()
        * 2
    )
    kw = dict(logits=logits, temperature=temperature, top_p=top_p)
    out = mod.process_logits(**kw)
    rows = []
    want = torch.zeros(3, 12, dtype=torch.bool)
    for b in range(3):
        scaled = logits[b].double() / temperature
        probs = torch.softmax(scaled, -1).sort(descending=True).values.cumsum(-1)
        if (probs - top_p).abs().min() < 1e-5:
            continue  # 正好压在阈值上：float32 的舍入说了算，不比较
        rows.append(b)
        want[b, sorted(_naive_nucleus(scaled, top_p))] = True
    check(
        _kept(out)[rows],
        want[rows],
        where=f"temperature={temperature:.3g}、top_p={top_p:.3g} 时保留下来的 token（True = 保留）",
        section=SPEC,
        inputs=kw,
        mistakes=derived(KEPT_MISTAKES, lambda bad: lambda **k: bad(**k)[rows]),
    )


def test_temperature_scales_logits(mod):
    logits = torch.randn(2, 10, generator=torch.Generator().manual_seed(3))
    for t in (2.0, 0.5):
        inputs = dict(logits=logits, temperature=t, top_p=1.0)
        check(
            mod.process_logits(**inputs),
            logits / t,
            where=f"temperature={t}、top_p=1 时的输出（应为 logits / {t}）",
            section=SPEC,
            inputs=inputs,
            mistakes=MISTAKES,
        )


def test_temperature_is_applied_before_top_p(mod):
    # 温度越高分布越平，同样的 top_p 要收更多 token；温度越低越少
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(4)) * 2
    n = {
        t: _kept(mod.process_logits(logits, temperature=t, top_p=0.9)).sum(-1)
        for t in (0.5, 1.0, 2.0)
    }
    ok = (n[0.5] <= n[1.0]).all() and (n[1.0] <= n[2.0]).all() and (n[0.5] < n[2.0]).any()
    assert (n[1.0] < 50).any(), (
        f"top_p=0.9 时一个 -inf 都没有：删掉的位置要填 -inf。回看 {PITFALL.format(8)}"
    )
    assert ok, (
        f"top_p=0.9 时，温度 0.5 / 1 / 2 下每行保留的 token 数是 {n[0.5].tolist()} / {n[1.0].tolist()} / "
        f"{n[2.0].tolist()}：温度越高应留得越多。看起来 top-p 没有在除以温度之后的分布上做。回看 {ORDER}"
    )


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_raises(mod, temperature):
    expect_value_error(
        lambda: mod.process_logits(torch.zeros(1, 5), temperature=temperature),
        f"temperature={temperature}（贪心解码走 argmax，不走 process_logits）",
    )


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5])
def test_bad_top_p_raises(mod, top_p):
    expect_value_error(
        lambda: mod.process_logits(torch.zeros(1, 5), top_p=top_p), f"top_p={top_p} 不在 (0, 1] 内"
    )


def test_rows_are_independent_and_input_untouched(mod):
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(5)) * 3
    before = logits.clone()
    batch = mod.process_logits(logits, temperature=0.8, top_p=0.7)
    assert torch.equal(logits, before), (
        f"process_logits 原地修改了输入的 logits（masked_fill_、/= 之类）。回看 {SPEC}"
    )
    for b in range(3):
        check(
            batch[b],
            mod.process_logits(logits[b : b + 1], temperature=0.8, top_p=0.7)[0],
            where=f"整批处理时行 [{b}]（下标从 0 数）的输出（应与单独处理这一行相同：每行只看自己的 logits）",
            section=SPEC,
        )


# bf16 的例子：8 行 × 100 个 token，temperature=0.7、top_p=0.9
BF16_PROBE = dict(
    logits=(torch.randn(8, 100, generator=torch.Generator().manual_seed(6)) * 1.5).bfloat16(),
    temperature=0.7,
    top_p=0.9,
)


def _bf16_want():
    """在同样的 bf16 scaled logits 上用 float64 逐个累加；离阈值太近的行不比较。"""
    scaled = BF16_PROBE["logits"] / BF16_PROBE["temperature"]
    rows, want = [], torch.zeros(scaled.shape, dtype=torch.bool)
    for b in range(scaled.shape[0]):
        cum = torch.softmax(scaled[b].double(), -1).sort(descending=True).values.cumsum(-1)
        if (cum - BF16_PROBE["top_p"]).abs().min() < 1e-5:
            continue
        rows.append(b)
        want[b, sorted(_naive_nucleus(scaled[b], BF16_PROBE["top_p"]))] = True
    return rows, want


def test_bf16_dtype_is_kept_and_samples_stay_in_nucleus(mod):
    out = mod.process_logits(**BF16_PROBE)
    assert out.dtype == torch.bfloat16, (
        f"输入是 bf16，输出的 dtype 却是 {out.dtype}：概率在 float32 里算，但返回的 logits 要保持输入的 dtype。"
        f"回看 {PITFALL.format(4)}"
    )
    rows, want = _bf16_want()
    check(
        _kept(out)[rows],
        want[rows],
        where="bf16 输入时保留下来的 token（True = 保留）",
        section=PITFALL.format(4),
        inputs=BF16_PROBE,
        mistakes=derived(KEPT_MISTAKES, lambda bad: lambda **k: bad(**k)[rows]),
    )
    samples = torch.multinomial(
        out.float().softmax(-1), 200, replacement=True, generator=torch.Generator().manual_seed(7)
    )
    assert _kept(out).gather(-1, samples).all(), f"采样结果落在了 nucleus 之外。回看 {SPEC}"


def test_variant_without_bug_is_the_naive_nucleus():
    """测试自己的前提：造典型错误用的 _variant（bug=None）给出的就是题目要求的结果。"""
    check(
        _variant(**REMOVED_PROBE),
        REMOVED_WANT,
        where="测试自己的 _variant(bug=None)",
        section="本文件的 _naive_nucleus",
    )
    rows, want = _bf16_want()
    assert torch.equal(_kept(_variant(**BF16_PROBE))[rows], want[rows])


# 诊断本身：每个典型错误按测试的顺序，第一次和正确结果不同的那个例子上被同一个 check 只点名它自己（CI 用 solutions 跑）
PROBES = [
    # (例子, 正确结果, 看输出的哪一部分)
    *((probe, _variant(**probe), MISTAKES, None) for probe in DIAGNOSIS_PROBES.values()),
    (
        dict(logits=torch.ones(2, 4), temperature=1.0, top_p=0.5),
        torch.full((2,), 2),
        COUNT_MISTAKES,
        None,
    ),
    (BF16_PROBE, _bf16_want()[1], KEPT_MISTAKES, _bf16_want()[0]),
]


@pytest.mark.parametrize("i", range(len(MISTAKES)), ids=BUGS)
def test_each_known_mistake_is_named(i):
    lines = []
    for probe, want, mistakes, rows in PROBES:
        m = mistakes[i]
        try:
            wrong = m.fn(**probe)
        except NotApplicable:
            continue
        if rows is not None:
            wrong, want = wrong[rows], want[rows]
            mistakes = derived(mistakes, lambda bad, rows=rows: lambda **k: bad(**k)[rows])
        if torch.equal(wrong, want):
            continue  # 这个例子上看不出这个错误
        line = diagnosis_line(wrong, want, where="x", section=SPEC, inputs=probe, mistakes=mistakes)
        assert line is not None and line.startswith("看起来是"), line
        lines.append(line)
    assert lines, f"没有任何一个例子能暴露 {BUGS[i]}"
    assert lines[0] == named(MISTAKES[i]), f"第一次暴露 {BUGS[i]} 时，第一行是：{lines[0]}"


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每组诊断输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们）。"""
    # 课文的手算例子只有一行：沿 dim=0 的 softmax、前缀和在一行上分不开别的错误，它们在前面的三行例子上已被点名
    probes = [p for name, p in DIAGNOSIS_PROBES.items() if name != "lesson"]
    cases = [(probe, _variant(**probe), {}) for probe in probes]
    assert not (found := collisions(MISTAKES, cases)), "\n".join(found)


def test_each_symptom_is_absent_from_the_right_answer():
    """症状只在错的输出上成立：诊断输入和手算例子的正确结果上一条都不成立。"""
    for probe in DIAGNOSIS_PROBES.values():
        want = _variant(**probe)
        assert not [s.what for s in SYMPTOMS if s.fn(want, **probe)], probe


def test_missing_dimension_after_a_reduction_is_named():
    """诊断本身：对词表求和之后少了一维（(B,)，不是 (B, 1)）、和 (B, V) 广播失败时，第一行说出这一类错误。"""

    def without_keepdim(logits, temperature=1.0, top_p=1.0):
        e = (logits / temperature).exp()
        probs = e / e.sum(-1)
        return logits.masked_fill(probs.cumsum(-1) - probs >= top_p, float("-inf"))

    logits = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    line = crash_first_line(
        lambda: without_keepdim(logits, top_p=0.9),
        "process_logits",
        SPEC,
        CRASHES["process_logits"],
    )
    assert line.startswith("process_logits() 抛出 RuntimeError：") and "少了一维" in line, line


def test_diagnoses_point_at_real_sections():
    sections = (
        {m.section for m in MISTAKES + SYMPTOMS}
        | {SPEC, HINTS}
        | {PITFALL.format(i) for i in (2, 4, 7, 8)}
    )
    assert_sections_exist(sections | {ORDER.split("（")[0]} | hint_sections(CRASHES))
