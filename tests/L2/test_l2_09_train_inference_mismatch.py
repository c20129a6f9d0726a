"""L2.09 tis_weights：课文里的手算例子、典型错误的诊断、padding、截断、token/sequence 两级的性质。"""

from __future__ import annotations

import math

import pytest
import torch
from diagnose import (
    Mistake,
    assert_named_first,
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

SECTION = "L2.09「2. 公式」"
# tis_weights 里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
_PER_ROW = (
    "sequence 级每行一个的量和 (B, T) 的张量对不上（按行求和之后少了一维，归约之后那一维没了）",
    "L2.09「4. 坑」坑 3",
)
CRASHES = {
    "tis_weights": {
        "none": "拿 cap=None 做了运算（规格：cap=None 表示不截断）",
        "broadcast": _PER_ROW,
        "expand": _PER_ROW,
        "bool_ambiguous": "对多个元素的张量用了 Python 的 if / and / or（padding 的判断是逐元素的）",
        "dtype": "dtype 不对：mask 可能是 0/1 浮点，也可能是 bool，函数只按其中一种用了它",
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    sections = {"tis_weights": SECTION}
    return guarded(impl("l2_09_train_inference_mismatch"), sections, CRASHES, keep_inputs=sections)


def _where_valid(x, mask, fill=0.0):
    return torch.where(mask != 0, x, fill)


def _seq_sum(log_ratio, mask):
    return _where_valid(log_ratio, mask).sum(1, keepdim=True).expand_as(log_ratio)


def _ok_log_ratio(lt, lr, mask):
    return _where_valid(lt - lr, mask)


def _finish(log_ratio, mask, cap, dtype):
    w = torch.exp(log_ratio)
    w = w if cap is None else w.clamp(max=cap)
    return _where_valid(w, mask).to(dtype)


def _spec_variant(
    invert=False,
    cap_log=False,
    seq_mean=False,
    keep_padding=False,
    pad_one=False,
    seq_dim0=False,
    cap_each=False,
    where_swapped=False,
    floor=None,
    fixed_cap=None,
    fixed_level=None,
    pad_by_multiply=False,
    ratio_where_swapped=False,
    no_cap=False,
    divided=False,
):
    """按规格算一遍，但带上某一个典型错误：诊断靠「学习者的输出和哪个错误版本一致」。"""

    def fn(logp_train, logp_rollout, mask, cap=2.0, level="token"):
        if fixed_cap is not None and cap is not None:  # 没用参数 cap：写死了一个数
            cap = fixed_cap
        if no_cap:
            cap = None
        if divided:  # 比值在概率空间里算：各自 exp 再相除（sequence 级再连乘）
            valid = mask != 0
            w = torch.where(valid, logp_train.detach().exp() / logp_rollout.detach().exp(), 1.0)
            if level == "sequence":
                w = w.prod(1, keepdim=True).expand_as(w)
            w = w if cap is None else w.clamp(max=cap)
            return _where_valid(w, mask).to(logp_train.dtype)
        level = fixed_level or level
        if floor == "cap" and cap is not None:  # 把 cap 当成了下限：clamp(min=cap)
            w = torch.exp(_ok_log_ratio(logp_train.detach(), logp_rollout.detach(), mask))
            if level == "sequence":
                w = torch.exp(_seq_sum(_ok_log_ratio(logp_train, logp_rollout, mask), mask))
            return _where_valid(w.clamp(min=cap), mask).to(logp_train.dtype)
        if floor == "inverse_cap" and cap is not None:  # 上下都截：[1/cap, cap]
            out = _spec_variant()(logp_train, logp_rollout, mask, cap, level)
            return _where_valid(out.clamp(min=1 / cap), mask).to(logp_train.dtype)
        lt, lr = logp_train.detach(), logp_rollout.detach()
        lt, lr = (lr, lt) if invert else (lt, lr)
        log_ratio = (lt - lr) if keep_padding else _ok_log_ratio(lt, lr, mask)
        if pad_by_multiply:  # padding 靠乘 mask 挡：NaN·0 = NaN
            log_ratio = (lt - lr) * mask
        if ratio_where_swapped:  # where(valid, 0, lt − lr)：有效 token 的 log 比值成了 0
            log_ratio = torch.where(mask != 0, 0.0, lt - lr)
        if level == "sequence" and cap_each and cap is not None:  # 先逐 token 截断，再连乘
            capped = torch.where(mask != 0, torch.exp(log_ratio).clamp(max=cap), 1.0)
            return _finish(
                torch.log(capped.prod(1, keepdim=True)).expand_as(log_ratio),
                mask,
                None,
                logp_train.dtype,
            )
        if level == "sequence":
            if seq_dim0:  # 沿 dim=0 求和：不同回答的同一个位置加在了一起
                log_ratio = log_ratio.sum(0, keepdim=True).expand_as(log_ratio)
            elif seq_mean:
                n = mask.sum(1, keepdim=True).clamp(min=1)
                log_ratio = (_seq_sum(log_ratio, mask) / n).expand_as(log_ratio)
            elif keep_padding or pad_by_multiply:
                log_ratio = log_ratio.sum(1, keepdim=True).expand_as(log_ratio)
            else:
                log_ratio = _seq_sum(log_ratio, mask)
        if cap_log and cap is not None:
            log_ratio = log_ratio.clamp(max=cap)
            cap = None
        out = _finish(log_ratio, mask, cap, logp_train.dtype)
        if keep_padding:
            out = torch.exp(log_ratio).clamp(max=cap) if cap is not None else torch.exp(log_ratio)
        if pad_one:
            out = torch.where(mask != 0, out, 1.0).to(logp_train.dtype)
        if where_swapped:  # torch.where(valid, 0, weights)：有效 token 得 0，padding 上反而有权重
            w = torch.exp(log_ratio)
            w = w if cap is None else w.clamp(max=cap)
            out = torch.where(mask != 0, 0.0, w).to(logp_train.dtype)
        return out

    return fn


MISTAKES = [
    Mistake(
        "比值写反了（算成了 exp(logp_rollout − logp_train)：推理 / 训练）",
        "L2.09「2. 公式」",
        _spec_variant(invert=True),
    ),
    Mistake(
        "把 cap 截断用在了 log 比值上（exp 之前截断，上限变成了 e^cap）",
        "L2.09「4. 坑」坑 2",
        _spec_variant(cap_log=True),
    ),
    Mistake(
        "sequence 级用了 log 比值的平均（应是求和：整条回答的概率比 = 逐 token 比值连乘）",
        "L2.09「4. 坑」坑 3",
        _spec_variant(seq_mean=True),
    ),
    Mistake(
        "padding 没有屏蔽：padding 上的 logp 进了比值（sequence 级还进了求和）",
        "L2.09「4. 坑」坑 4",
        _spec_variant(keep_padding=True),
    ),
    Mistake(
        "padding 处的权重写成了 1（规格是 0）",
        "L2.09「2. 公式」",
        _spec_variant(pad_one=True),
    ),
    Mistake(
        "sequence 级沿错了维度求和（dim=0：把不同回答的同一个位置加在了一起，而每条回答是一行）",
        "L2.09「4. 坑」坑 3",
        _spec_variant(seq_dim0=True),
    ),
    Mistake(
        "sequence 级截断的是每个 token 的比值（截断之后才连乘），不是整条回答的比值",
        "L2.09「4. 坑」坑 2",
        _spec_variant(cap_each=True),
    ),
    Mistake(
        "torch.where 的两个分支写反了：有效 token 的权重成了 0，padding 上反而有权重",
        "L2.09「2. 公式」",
        _spec_variant(where_swapped=True),
    ),
    Mistake(
        "把 cap 当成了下限（clamp(min=cap)）：截断是「不超过 cap」",
        "L2.09「4. 坑」坑 2",
        _spec_variant(floor="cap"),
    ),
    Mistake(
        "除了上限 cap，还加了下限 1/cap：规格只截断上面，比值小于 1 的权重原样保留",
        "L2.09「2. 公式」",
        _spec_variant(floor="inverse_cap"),
    ),
    Mistake(
        "没用参数 cap（写死了 2.0）：截断上限要用调用方传进来的 cap",
        "L2.09「2. 公式」",
        _spec_variant(fixed_cap=2.0),
    ),
    Mistake(
        'level 没起作用：level="sequence" 也按 token 级算了（整行应是同一个权重）',
        "L2.09「2. 公式」",
        _spec_variant(fixed_level="token"),
    ),
    Mistake(
        "算 log 比值时 torch.where 的两个分支写反了：有效 token 的 log 比值成了 0（权重全是 1），"
        "padding 上反而留着 logp 的差",
        "L2.09「2. 公式」",
        _spec_variant(ratio_where_swapped=True),
    ),
    Mistake(
        "padding 上的 log 比值是乘 mask 挡掉的：那里的 logp 可以是 NaN，0 × NaN = NaN 进了整行的求和",
        "L2.09「4. 坑」坑 4",
        _spec_variant(pad_by_multiply=True),
    ),
    Mistake(
        "完全没有截断：cap 没起作用，比值超过 cap 的权重原样留着",
        "L2.09「2. 公式」",
        _spec_variant(no_cap=True),
    ),
    Mistake(
        "比值是各自 exp 之后相除得到的：log 概率在 −120 附近时 e^logp 在 float32 里下溢成 0，0/0 = NaN",
        "L2.09「2. 公式」",
        _spec_variant(divided=True),
    ),
]


def _valid_rows(got, mask):
    return [got[b, mask[b] != 0] for b in range(got.shape[0]) if (mask[b] != 0).any()]


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = [
    symptom(
        "有效 token 的权重里有 NaN：padding 上的 NaN（或 inf）漏了进来（乘 0 挡不住 NaN：0 × NaN = NaN）",
        "L2.09「4. 坑」坑 4",
        lambda got, mask, **kw: bool(torch.isnan(got[mask != 0]).any()),
    ),
    symptom(
        "padding 处的权重不是 0（规格：padding 处是 0）",
        "L2.09「2. 公式」",
        lambda got, mask, **kw: bool((got[mask == 0] != 0).any()),
    ),
    symptom(
        "截断漏了：有权重超过了 cap",
        "L2.09「4. 坑」坑 2",
        lambda got, mask, cap=2.0, **kw: cap is not None and bool((got[mask != 0] > cap).any()),
    ),
    symptom(
        "比值小于 1 的权重被抬高了：规格只截断上面（不超过 cap），没有下限",
        "L2.09「2. 公式」",
        lambda got, **kw: bool(
            ((got > (want := _spec_variant()(**kw)) + 1e-9) & (want < 1) & (kw["mask"] != 0)).any()
        ),
    ),
    symptom(
        "sequence 级同一行的权重不一样（规格：整条回答只有一个比值，整行都用它）",
        "L2.09「4. 坑」坑 3",
        lambda got, mask, level="token", **kw: (
            level == "sequence"
            and any(bool((row != row[0]).any()) for row in _valid_rows(got, mask))
        ),
    ),
    symptom(
        "sequence 级每一行的权重都一样：求和的范围不对（别的行也被加了进来）",
        "L2.09「4. 坑」坑 3",
        lambda got, mask, level="token", **kw: (
            level == "sequence"
            and len(rows := _valid_rows(got, mask)) > 1
            and all(torch.equal(r[:1], rows[0][:1]) for r in rows)
        ),
    ),
]

MISTAKE_IDS = [
    "inverted",
    "cap_log",
    "seq_mean",
    "keep_padding",
    "pad_one",
    "seq_dim0",
    "cap_each",
    "where_swapped",
    "cap_as_floor",
    "inverse_cap_floor",
    "cap_fixed",
    "level_ignored",
    "ratio_where_swapped",
    "pad_by_multiply",
    "no_cap",
    "divided",
]


def _case(level, cap=2.0, seed=4, pad_value=-7.0):
    """一组能区分所有典型错误的输入：token 级和 sequence 级都有被截断的（seed=4 时三行的 log 比值之和
    为 3.19、2.95、0.21），有 padding（上面是有限的假值，不是 NaN，便于比对）。最大的 log 比值 3.5
    和第 0 行的和都超过 cap = 3：不截断、在 log 空间截断（上限 e^cap）、在概率空间截断给出三个不同的数。"""
    g = torch.Generator().manual_seed(seed)
    B, T = 3, 6
    logp_rollout = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp_train = logp_rollout + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.6
    logp_train[0, 1] = logp_rollout[0, 1] + 3.5  # 单个 token 的比值 e^3.5 ≈ 33 > cap
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    logp_train = torch.where(mask != 0, logp_train, pad_value)
    logp_rollout = torch.where(mask != 0, logp_rollout, 2 * pad_value)
    return dict(logp_train=logp_train, logp_rollout=logp_rollout, mask=mask, cap=cap, level=level)


# ---------------------------------------------------------------- 典型错误的诊断 -----------------------------------------
# (level, cap, padding 上的值)，按这个顺序跑（test_each_mistake_is_recognised 照同样的顺序检查）；
# 最后一组 padding 上是 NaN（vLLM 打不了分的 token）
DIAGNOSIS_CASES = [
    ("token", 2.0, -7.0),
    ("sequence", 2.0, -7.0),
    ("token", 3.0, -7.0),
    ("sequence", 3.0, -7.0),
    ("sequence", 2.0, math.nan),
]


@pytest.mark.parametrize("level,cap,pad", DIAGNOSIS_CASES)
def test_matches_reference_with_diagnosis(mod, level, cap, pad):
    inputs = _case(level, cap=cap, pad_value=pad)
    want = _spec_variant()(**inputs)
    got = mod.tis_weights(**inputs)
    where = f"{level} 级权重（cap={cap}，padding 上是 {pad}）"
    check(got, want, inputs=inputs, mistakes=MISTAKES + SYMPTOMS, where=where, section=SECTION)


def _far_below(level):
    """float32，log 概率都在 −120 附近（长回答里很常见的一个低概率 token）：e^−120 下溢成 0，比值本身却是普通的数。"""
    g = torch.Generator().manual_seed(5)
    logp_rollout = -120.0 - torch.rand(2, 4, generator=g)
    logp_train = logp_rollout + torch.tensor([[0.3, -0.2, 2.5, 0.0], [-0.5, 0.1, 0.4, 0.7]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    return dict(logp_train=logp_train, logp_rollout=logp_rollout, mask=mask, cap=2.0, level=level)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_log_probs_far_below_zero(mod, level):
    inputs = _far_below(level)
    assert torch.exp(inputs["logp_train"]).eq(0).all()  # 测试数据本身的前提：float32 里确实下溢了
    check(
        mod.tis_weights(**inputs),
        _spec_variant()(**inputs),
        inputs=inputs,
        mistakes=MISTAKES + SYMPTOMS,
        where=f"log 概率都在 −120 附近（float32）时的 {level} 级权重",
        section=SECTION,
        rtol=1e-5,
        atol=1e-6,
    )


# ---------------------------------------------------------------- 课文第 3 节的手算例子 ---------------------------------
def test_worked_example_from_the_lesson(mod):
    """课文的例子：一行 3 个有效 token + 1 个 padding（padding 上是 NaN）。"""
    nan = float("nan")
    lt = torch.tensor([[-1.0, -0.5, -2.0, nan]], dtype=torch.float64)
    lr = torch.tensor([[-1.2, -0.5, -1.0, nan]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    inputs = dict(logp_train=lt, logp_rollout=lr, mask=mask, cap=2.0)
    tok = mod.tis_weights(**inputs, level="token")
    want_tok = torch.tensor([[math.exp(0.2), 1.0, math.exp(-1.0), 0.0]], dtype=torch.float64)
    check(
        tok,
        want_tok,
        where="token 级权重",
        section=SECTION,
        inputs={**inputs, "level": "token"},
        mistakes=MISTAKES + SYMPTOMS,
    )
    seq = mod.tis_weights(**inputs, level="sequence")
    want_seq = torch.tensor([[math.exp(-0.8)] * 3 + [0.0]], dtype=torch.float64)
    check(
        seq,
        want_seq,
        where="sequence 级权重",
        section=SECTION,
        inputs={**inputs, "level": "sequence"},
        mistakes=MISTAKES + SYMPTOMS,
    )
    # 第一个 token 的推理概率被低估得更多：比值 e^2.5 ≈ 12.18 被截到 cap = 2
    # （log 比值 2.5 超过 cap：在 log 空间截断得 e^2 ≈ 7.39，不截断得 12.18，三者不同）
    lr2 = lr.clone()
    lr2[0, 0] = -3.5
    inputs2 = dict(logp_train=lt, logp_rollout=lr2, mask=mask, cap=2.0, level="token")
    want2 = torch.tensor([[2.0, 1.0, math.exp(-1.0), 0.0]], dtype=torch.float64)
    check(
        mod.tis_weights(**inputs2),
        want2,
        where="第 0 个 token 的比值 e^2.5 ≈ 12.18 时的 token 级权重（应被截断到 cap=2）",
        section="L2.09「3. 手算一遍」",
        inputs=inputs2,
        mistakes=MISTAKES + SYMPTOMS,
    )


def _diagnosis_cases():
    """test_matches_reference_with_diagnosis、手算例子依次用的 (inputs, 正确结果, 容差)。"""
    nan = float("nan")
    lt = torch.tensor([[-1.0, -0.5, -2.0, nan]], dtype=torch.float64)
    lr = torch.tensor([[-1.2, -0.5, -1.0, nan]], dtype=torch.float64)
    lr2 = torch.tensor([[-3.5, -0.5, -1.0, nan]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    made = [_case(level, cap=cap, pad_value=pad) for level, cap, pad in DIAGNOSIS_CASES]
    made += [_far_below("token"), _far_below("sequence")]
    made += [
        dict(logp_train=lt, logp_rollout=rollout, mask=mask, cap=2.0, level=level)
        for rollout, level in ((lr, "token"), (lr, "sequence"), (lr2, "token"))
    ]
    return [(inputs, _spec_variant()(**inputs), {}) for inputs in made]


@pytest.mark.parametrize("mistake", MISTAKES, ids=MISTAKE_IDS)
def test_each_mistake_is_recognised(mistake):
    """诊断表本身要灵（与被测实现无关）：按诊断测试的顺序，每个典型错误第一次和正确答案不同的那组输入上，
    第一行只点名它自己。"""
    assert_named_first(mistake, _diagnosis_cases(), MISTAKES, where="x", section=SECTION)


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每组输入上，两个不同的典型错误算出的结果不同（例如最大的 log 比值要超过 cap，
    否则「不截断」和「在 log 空间截断」是同一个数，诊断会点名错的那个）。"""
    # 课文前两个例子只有一行（沿 dim=0 求和就等于没求和），分不开几个错误；它们排在诊断输入之后，
    # 这些错误在前面的诊断输入上已经各自被点名（test_each_mistake_is_recognised）。截断的例子要分得开
    cases = _diagnosis_cases()
    assert not (found := collisions(MISTAKES, cases[:-3] + cases[-1:])), "\n".join(found)


# ---------------------------------------------------------------- 性质 -------------------------------------------------
def test_padding_values_never_matter(mod):
    """padding 上放 NaN、inf、大数，输出都一样，而且 padding 处是 0。"""
    for level in ("token", "sequence"):
        base = _case(level)
        want = mod.tis_weights(**base)
        for pad in (float("nan"), float("inf"), -float("inf"), 1e4):
            inputs = _case(level, pad_value=pad)
            got = mod.tis_weights(**inputs)
            check(got, want, where=f"{level} 级、padding 上放 {pad} 时的权重", section=SECTION)
        assert (want[base["mask"] == 0] == 0).all()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 7),
    st.integers(0, 2**16),
    st.sampled_from([None, 1.5, 2.0, 5.0]),
)
# 固定的例子（种子 1：长度 3、2、3，有 padding；有效 token 的比值有在 1.5 和 2 之间的、也有 2.88 的）：
# 截断、padding、整行同一个值都查得到；cap=None 时 sequence 级要等于 token 级的连乘
@example(B=3, T=5, seed=1, cap=1.5)
@example(B=3, T=5, seed=1, cap=None)
def test_properties(mod, B, T, seed, cap):
    g = torch.Generator().manual_seed(seed)
    lr = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    lt = lr + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.5
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    tok = mod.tis_weights(lt, lr, mask, cap=cap, level="token")
    seq = mod.tis_weights(lt, lr, mask, cap=cap, level="sequence")
    for name, w in (("token", tok), ("sequence", seq)):
        where = f"{name} 级（B={B}, T={T}, cap={cap}）"
        assert w.shape == (B, T) and w.dtype == torch.float64, (
            f"{where}：应返回 (B, T) 的 float64（同 logp_train），得到 {tuple(w.shape)} {w.dtype}"
        )
        assert (w >= 0).all(), f"{where}：权重出现负数"
        assert (w[mask == 0] == 0).all(), f"{where}：padding 处的权重应为 0，回看 L2.09「2. 公式」"
        if cap is not None:
            assert (w <= cap + 1e-12).all(), f"{where}：有权重超过了 cap，回看 L2.09「4. 坑」坑 2"
    # sequence 级：整行一个值；不截断时它等于逐 token 比值的连乘
    untruncated = mod.tis_weights(lt, lr, mask, cap=None, level="token")
    for b in range(B):
        row = seq[b, mask[b] != 0]
        if row.numel() == 0:
            continue
        assert torch.all(row == row[0]), (
            f"sequence 级行 [{b}]（下标从 0 数）的有效 token 权重不全相同：整行应是同一个值。回看 {SECTION}"
        )
        if cap is None:
            prod = untruncated[b, mask[b] != 0].prod().item()
            assert row[0].item() == pytest.approx(prod, rel=1e-9), (
                f"不截断时 sequence 级权重应等于 token 级权重的连乘（{prod:.6g}），得到 {row[0].item():.6g}："
                "回看 L2.09「4. 坑」坑 3"
            )
    # 两边一样（on-policy）：权重恰好是 1（padding 处 0）
    same = mod.tis_weights(lt, lt.clone(), mask, cap=cap, level="sequence")
    assert torch.equal(same, mask), "两边 logp 相同时权重应恰好是 1（padding 处 0）"


def test_no_gradient_flows_through_the_weights(mod):
    """权重是常数：μ=1 时 logp_train 就是带梯度的当前 logp，权重不能把梯度带进 loss。"""
    lt = torch.tensor([[-1.0, -0.3]], requires_grad=True)
    lr = torch.tensor([[-1.1, -0.2]])
    mask = torch.ones(1, 2)
    for level in ("token", "sequence"):
        w = mod.tis_weights(lt, lr, mask, cap=2.0, level=level)
        assert not w.requires_grad, (
            f"{level} 级：权重带着梯度（忘了 detach），回看 L2.09「4. 坑」坑 1"
        )


def test_float32_dtype_kept(mod):
    lt, lr = torch.full((2, 3), -1.0), torch.full((2, 3), -1.1)
    w = mod.tis_weights(lt, lr, torch.ones(2, 3), cap=2.0)
    assert w.dtype == torch.float32, (
        f"logp_train 是 float32，权重却是 {w.dtype}：dtype 要和 logp_train 相同。回看 {SECTION}"
    )


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(level="seq"), "level"),
        (dict(cap=0.0), "cap"),
        (dict(cap=-1.0), "cap"),
    ],
)
def test_bad_arguments(mod, kwargs, needle):
    lt = torch.zeros(2, 3)
    _expect_value_error(lambda: mod.tis_weights(lt, lt, torch.ones(2, 3), **kwargs), kwargs, needle)


def test_shape_mismatch_is_an_error(mod):
    bad = dict(logp_rollout="(2, 4)")
    args = torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3)
    _expect_value_error(lambda: mod.tis_weights(*args), bad, "形状")


def _expect_value_error(call, what, needle):
    try:
        call()
    except ValueError as err:
        assert needle in str(err), f"{what} 的 ValueError 里应提到「{needle}」，得到：{err}"
    else:
        pytest.fail(
            f"{what} 是非法参数，应抛 ValueError（中文说明要改什么）：回看 L2.09「2. 公式」",
            pytrace=False,
        )


@pytest.mark.parametrize("spread", ["where", "expand"])
def test_missing_dimension_after_a_reduction_is_named(spread):
    """诊断本身：sequence 级按行求和之后少了一维（(B,)，不是 (B, 1)）时，第一行说出这一类错误。"""

    def without_keepdim(logp_train, logp_rollout, mask, cap=2.0, level="sequence"):
        log_ratio = torch.where(mask != 0, logp_train - logp_rollout, 0.0)
        per_row = log_ratio.sum(1)
        if spread == "expand":
            return per_row.expand_as(log_ratio).exp().clamp(max=cap)
        return torch.where(mask != 0, per_row.exp().clamp(max=cap), 0.0)

    g = torch.Generator().manual_seed(0)
    lp, lr = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    line = crash_first_line(
        lambda: without_keepdim(lp, lr, torch.ones(3, 5)),
        "tis_weights",
        SECTION,
        CRASHES["tis_weights"],
    )
    assert line.startswith("tis_weights() 抛出 RuntimeError：") and "少了一维" in line, line


def test_each_symptom_is_absent_from_the_right_answer():
    """症状只在错的输出上成立：在诊断输入的正确结果上一条都不成立。"""
    for level, cap, pad in DIAGNOSIS_CASES:
        inputs = _case(level, cap=cap, pad_value=pad)
        want = _spec_variant()(**inputs)
        held = [s.what for s in SYMPTOMS if s.fn(want, **inputs)]
        assert not held, (level, cap, pad, held)


def test_diagnoses_point_at_real_sections():
    sections = {m.section for m in MISTAKES + SYMPTOMS} | {SECTION, "L2.09「3. 手算一遍」"}
    assert_sections_exist(sections | hint_sections(CRASHES))
