"""L2.05 grpo_loss：三种聚合对照逐元素 Python 循环、解析梯度、空行、非法参数、指标、token_weights。

期望值都由下面的 `_naive_*` 用纯 Python 浮点逐 token 计算，不依赖被测实现，也不抄输出。
输出不对时，失败信息的第一行是一句中文：和 `LOSS_MISTAKES` / `METRIC_MISTAKES` 里某个典型错误的结果一致时，
直接说是哪一种、回看课文哪一节；都不一致时说清楚哪里不对（形状、dtype、NaN、第一个不一致的位置）。
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
    describe_mismatch,
    guarded,
    hint_sections,
    require_grad,
    symptom,
)
from mistake_tools import derived, diagnosis_line, expect_value_error, named

AGGS = ["sequence_mean", "token_mean", "constant"]
MAX_LEN = 6  # 传给 max_completion_length；比 T=4 大，constant 的分母才能和「用 T」区分开

FORMULA = "L2.05「2. 公式，以及它们从哪来」"
SPEC = "L2.05「3.2 一步一步，以及为什么」"
WEIGHTS = "L2.05「3.5 token_weights」"
PITFALL = "L2.05「4. 坑，以及出处」坑 {}"


HINTS = "L2.05「3.4 提示」"
# grpo_loss 里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
CRASHES = {
    "grpo_loss": {
        "none": (
            "有个值是 None 却被拿来做了运算：ref_logp（beta = 0 时可以不给）、eps_high、"
            "max_completion_length 都可以是 None，规格写了各自是什么意思",
            "L2.05「3.1 输入和输出」",
        ),
        "broadcast": "(B,) 的 advantages 直接和 (B, T) 的逐 token 量运算了，或按行求和、平均之后少了一维"
        "（归约之后那一维没了），或 mask 和 logp 的形状不同",
        "expand": "按行求和、平均之后少了一维（归约之后那一维没了）：每行一个的量扩不回 (B, T)",
        "not_tensor": (
            "对 Python 数调用了张量的方法（比如已经是 float 的指标又 .item() 了一次）",
            SPEC,
        ),
        "dtype": "dtype 不对：mask 可能是 0/1 浮点，也可能是 bool（规格两种都允许），函数只按其中一种用了它",
        "bool_ambiguous": "对多个元素的张量用了 Python 的 if / and / or（逐 token 的条件不是一个真假值）",
        "value_error": (
            "这组参数是合法的：检查你加的参数检查条件（以及你调用的 clipped_surrogate_loss 对形状的要求）",
            "L2.05「3.1 输入和输出」",
        ),
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    sections = {"grpo_loss": SPEC}
    return guarded(
        impl("l2_05_grpo_loss"),
        sections,
        CRASHES,
        keep_inputs={"grpo_loss": "L2.05「3.1 输入和输出」"},
    )


def _case():
    """B=3, T=4。第 3 行是空回答（mask 全 0）；ratio 有落在裁剪区间外的，advantage 有正有负。"""
    logp = [[-1.0, -0.5, -2.0, -0.3], [-0.2, -1.5, -0.7, -1.0], [-0.4, -0.4, -0.4, -0.4]]
    old = [[-1.3, -0.5, -1.6, -0.3], [-0.5, -1.2, -0.7, -1.9], [-0.1, -0.9, -0.4, -0.4]]
    ref = [[-1.1, -0.7, -1.8, -0.2], [-0.3, -1.5, -0.9, -1.2], [-0.4, -0.5, -0.6, -0.4]]
    adv = [1.5, -0.8, 0.6]
    mask = [[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    return logp, old, ref, adv, mask


# token_weights 的例子：有 0（去掉这个 token 的策略项）、有 >1 的；padding 上放了 NaN 和离谱的值（都不该有影响：
# 规格只要求有效 token 上的权重非负，padding 上的值不参与）
TOKEN_WEIGHTS = [[0.5, 0.0, 2.0, math.nan], [1.0, 0.3, 1.5, 0.0], [7.0, 7.0, 7.0, 7.0]]


def _naive_token(lp, olp, rlp, a, beta, el, eh, w=1.0):
    """一个 token 的损失和 d损失/dlogp（纯 Python）。w 只乘策略项。"""
    r = math.exp(lp - olp)
    rc = min(max(r, 1 - el), 1 + eh)
    clipped = rc * a < r * a
    loss = -(rc if clipped else r) * a * w
    grad = 0.0 if clipped else -r * a * w  # d(-r·A)/dlogp = -r·A；被裁剪处为常数，梯度 0
    k3 = math.exp(rlp - lp) - (rlp - lp) - 1
    loss += beta * k3
    grad += beta * (1 - math.exp(rlp - lp))  # d k3 / dlogp = -e^{ref-logp} + 1
    return loss, grad, clipped, k3


def _naive(case, beta, el, eh, agg, max_len, weights=None):
    """逐 token 循环：返回 (loss, grad[B][T], clip_fraction, kl)。"""
    logp, old, ref, adv, mask = case
    B, T = len(logp), len(logp[0])
    w = weights or [[1.0] * T for _ in range(B)]
    per = [
        [
            _naive_token(logp[i][j], old[i][j], ref[i][j], adv[i], beta, el, eh, w[i][j])
            for j in range(T)
        ]
        for i in range(B)
    ]
    n_tok = sum(sum(row) for row in mask)
    weight = [[0.0] * T for _ in range(B)]  # d(总 loss)/d(逐 token loss)
    for i in range(B):
        n_i = sum(mask[i])
        for j in range(T):
            if mask[i][j]:
                weight[i][j] = {
                    "sequence_mean": 1 / (n_i * B),
                    "token_mean": 1 / n_tok,
                    "constant": 1 / (B * max_len),
                }[agg]
    loss = sum(per[i][j][0] * weight[i][j] for i in range(B) for j in range(T) if mask[i][j])
    grad = [
        [per[i][j][1] * weight[i][j] if mask[i][j] else 0.0 for j in range(T)] for i in range(B)
    ]
    clip_frac = sum(per[i][j][2] for i in range(B) for j in range(T) if mask[i][j]) / n_tok
    kl = sum(per[i][j][3] for i in range(B) for j in range(T) if mask[i][j]) / n_tok
    return loss, grad, clip_frac, kl


def _tensors(case):
    logp, old, ref, adv, mask = case
    f = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return f(logp).requires_grad_(), f(old), f(ref), f(adv), f(mask)


# ---------------------------------------------------------------------------------------------
# 典型错误：一个按「错误开关」改一处的 torch 版 grpo_loss（bug=None 时与上面的逐 token 循环一致，
# test_variant_without_bug_is_the_naive_loop 把两者绑在一起）。
# ---------------------------------------------------------------------------------------------


class NotApplicable(Exception):
    """这个错误在这组参数下不存在（例如 beta=0 时谈不上 KL 的符号）：诊断时跳过它。"""


def _variant(
    logp,
    old_logp,
    advantages,
    mask,
    ref_logp=None,
    beta=0.0,
    eps_low=0.2,
    eps_high=None,
    aggregation="sequence_mean",
    max_completion_length=None,
    token_weights=None,
    *,
    bug=None,
):
    needs = {
        "token_bt": aggregation == "token_mean",
        "token_as_seq": aggregation == "token_mean",
        "seq_as_token": aggregation == "sequence_mean",
        "seq_over_T": aggregation == "sequence_mean",
        "seq_drop_empty": aggregation == "sequence_mean",
        "const_T": aggregation == "constant" and max_completion_length not in (None, logp.shape[1]),
        "kl_minus": beta > 0,
        "kl_k1": beta > 0,
        "kl_unmasked": beta > 0,
        "kl_missing": beta > 0,
        "weights_ignored": token_weights is not None,
        "weights_on_kl": token_weights is not None and beta > 0,
        "weights_in_den": token_weights is not None and aggregation != "constant",
        "eps_swapped": eps_high is not None and eps_high != eps_low,
        "kl_args_swapped": beta > 0,
        "ratio_args_swapped": True,
        "seq_no_row_mean": aggregation == "sequence_mean",
        "mm_args_swapped": aggregation != "constant",
        "old_where_swapped": True,
        "seq_dim0": aggregation == "sequence_mean",
        "eps_high_dropped": eps_high is not None and eps_high != eps_low,
        "eps_low_dropped": eps_low != 0.2,
        # eps_low = 0.2 时「两个都没传」就是「没传 eps_high」（同一个计算）：只在 eps_low ≠ 0.2 时单独认它
        "eps_dropped": eps_low != 0.2,
        "kl_after_agg": beta > 0 and aggregation != "token_mean",
        "kl_after_agg_rows": beta > 0 and aggregation != "sequence_mean",
        "weights_on_padding": token_weights is not None,
        "kl_unmasked_clean": beta > 0,
        "weights_capped": token_weights is not None and bool((token_weights[mask != 0] > 1).any()),
        "seq_sum_rows": aggregation == "sequence_mean",
        "const_no_B": aggregation == "constant",
        "no_clip": True,
        "pg_instead": True,
    }
    if bug is not None and not needs[bug]:
        raise NotApplicable(bug)
    B, T = logp.shape
    valid = mask != 0
    m = mask.to(logp.dtype)
    old = torch.where(valid, old_logp, logp.detach())
    if bug == "old_where_swapped":  # 有效 token 上换成了 logp（ratio ≡ 1），padding 上留着 old_logp
        old = torch.where(valid, logp.detach(), old_logp)
    # logp 和 old_logp 在调用 clipped_surrogate_loss 时位置反了：ratio = exp(old − logp)，梯度经过分母
    ratio = torch.exp(old - logp) if bug == "ratio_args_swapped" else torch.exp(logp - old)
    adv = advantages[:, None]
    hi = eps_low if eps_high is None else eps_high
    lo = eps_low
    if bug == "eps_swapped":  # 按位置把 eps_high 传到了 eps_low 的位置上
        lo, hi = hi, eps_low
    # 没把 eps_high / eps_low 传给 clipped_surrogate_loss：那边用它自己的默认值（eps_low=0.2、eps_high=None）
    if bug == "eps_high_dropped":
        hi = eps_low
    if bug == "eps_low_dropped":
        lo, hi = 0.2, 0.2 if eps_high is None else eps_high
    if bug == "eps_dropped":
        lo, hi = 0.2, 0.2
    per = -torch.minimum(ratio * adv, ratio.clamp(1 - lo, 1 + hi) * adv)
    if bug == "no_clip":  # 只有未裁剪的 ratio·A
        per = -ratio * adv
    if bug == "pg_instead":  # L2.03 的 policy_gradient_loss：−A·logp
        per = -adv * logp
    w = torch.ones_like(m)
    if token_weights is not None and bug != "weights_ignored":
        w = torch.where(valid, token_weights, torch.ones_like(token_weights))
    if bug == "weights_on_padding":  # padding 上的权重也乘了进去（NaN 乘进来，0 × NaN 还是 NaN）
        w = token_weights
    if bug == "weights_capped":
        w = w.clamp(max=1.0)
    per = per * w
    k3 = None
    if beta > 0:
        ref = torch.where(valid, ref_logp, logp.detach())
        k3 = torch.exp(ref - logp) - (ref - logp) - 1
        swapped = torch.exp(logp - ref) - (logp - ref) - 1  # kl_k3(ref_logp, logp)
        kl = {"kl_k1": logp - ref, "kl_minus": -k3, "kl_missing": 0.0 * k3}.get(bug, k3)
        kl = swapped if bug == "kl_args_swapped" else kl
        if bug == "weights_on_kl":
            kl = kl * w
        if bug not in ("kl_unmasked", "kl_unmasked_clean", "kl_after_agg", "kl_after_agg_rows"):
            per = per + beta * kl
    num = per * m
    if (
        aggregation != "constant"
    ):  # masked_mean 用 where 挡住 padding（这里只对 padding 上的 NaN 有区别）
        num = torch.where(valid, num, torch.zeros_like(num))
    if (
        bug == "mm_args_swapped"
    ):  # masked_mean(mask, per_token)：per_token 成了权重，mask 成了被平均的值
        loss = _mm(m, per, dim=1).mean() if aggregation == "sequence_mean" else _mm(m, per)
    elif bug == "seq_dim0":
        loss = _mm(per, m, dim=0).mean()
    elif aggregation == "sequence_mean" and bug != "seq_as_token" or bug == "token_as_seq":
        den = torch.full((B,), float(T), dtype=m.dtype) if bug == "seq_over_T" else m.sum(1)
        if bug == "weights_in_den":
            den = (w * m).sum(1)
        rows = num.sum(1) / den.clamp(min=1e-300) * (den > 0)
        loss = rows[m.sum(1) > 0].mean() if bug == "seq_drop_empty" else rows.mean()
        loss = rows.sum() if bug == "seq_sum_rows" else loss
        loss = rows if bug == "seq_no_row_mean" else loss
    elif aggregation in ("token_mean", "sequence_mean"):
        den = {"token_bt": float(B * T), "weights_in_den": (w * m).sum()}.get(bug, m.sum())
        loss = num.sum() / den if float(den) > 0 else num.sum() * 0.0
    else:
        L = T if max_completion_length is None or bug == "const_T" else max_completion_length
        loss = num.sum() / (L if bug == "const_no_B" else B * L)
    if bug == "kl_unmasked":  # KL 在全部 B·T 个位置（含 padding，原样的 ref_logp）上平均后再加
        loss = loss + beta * (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1).mean()
    if bug == "kl_unmasked_clean":  # padding 上的 k3 已经是 0，但分母是全部 B·T 个位置
        loss = loss + beta * k3.mean()
    if bug == "kl_after_agg":  # 策略项聚合完，再加 β × (k3 在全部有效 token 上的平均)
        loss = loss + beta * _mm(k3, m)
    if bug == "kl_after_agg_rows":  # 策略项聚合完，再加 β × (k3 每行平均、再对行平均)
        loss = loss + beta * _mm(k3, m, dim=1).mean()
    return loss


def _mm(x, mask, dim=None):
    """规格里的 masked_mean（L2.02）：被遮住的位置用 where 挡掉，和为 0 的切片得 0。"""
    num = torch.where(mask != 0, x * mask, torch.zeros_like(x))
    num, den = (num.sum(), mask.sum()) if dim is None else (num.sum(dim), mask.sum(dim))
    return torch.where(den != 0, num / torch.where(den != 0, den, torch.ones_like(den)), 0.0)


BUG_OF = {}  # Mistake -> 错误开关的名字（只用来给参数化的测试起 id）


def _mistake(what, section, bug):
    m = Mistake(what, section, lambda **kw: _variant(**kw, bug=bug))
    BUG_OF[id(m)] = bug
    return m


LOSS_MISTAKES = [
    _mistake(
        "把 token_mean 的分母写成了 B·T（padding 也算进了分母）", PITFALL.format(6), "token_bt"
    ),
    _mistake(
        "把 token_mean 写成了先在每行内平均、再对行平均（那是 sequence_mean）",
        FORMULA,
        "token_as_seq",
    ),
    _mistake(
        "把 sequence_mean 写成了所有有效 token 一起平均（那是 token_mean）", FORMULA, "seq_as_token"
    ),
    _mistake(
        "让 sequence_mean 的每一行都除以了 T（padding 也算进了这一行的长度）",
        PITFALL.format(6),
        "seq_over_T",
    ),
    _mistake(
        "把空回答（mask 全 0 的行）从 sequence_mean 的 B 里去掉了",
        PITFALL.format(5),
        "seq_drop_empty",
    ),
    _mistake(
        "把 constant 的分母写成了 B·T，而不是 B·max_completion_length", PITFALL.format(3), "const_T"
    ),
    _mistake("把 KL 项的符号弄反了（减去了 β·k3）", PITFALL.format(7), "kl_minus"),
    _mistake("在 KL 项里用了 k1（logp − ref_logp）而不是 k3", PITFALL.format(7), "kl_k1"),
    _mistake(
        "让 KL 项绕过了 mask（在全部 B·T 个位置上平均后才加上）", PITFALL.format(7), "kl_unmasked"
    ),
    _mistake("漏掉了 KL 项（beta > 0 时没有把 β·k3 加进逐 token 损失）", SPEC, "kl_missing"),
    _mistake("没有乘 token_weights", WEIGHTS, "weights_ignored"),
    _mistake("把 token_weights 也乘在了 KL 项上（它只乘策略项）", WEIGHTS, "weights_on_kl"),
    _mistake("把聚合的分母也按 token_weights 加权了（权重不改变分母）", WEIGHTS, "weights_in_den"),
    _mistake(
        "eps_low 和 eps_high 传反了（按位置传参时顺序错了）",
        "L2.03「坑 1：对称裁剪压制低概率 token（DAPO 的 clip-higher）」",
        "eps_swapped",
    ),
    _mistake(
        "调用 kl_k3 时两个参数的位置反了（kl_k3(ref_logp, logp)）：k3 的方向跟着反了",
        "L2.04「4. 坑，以及出处」坑 1",
        "kl_args_swapped",
    ),
    _mistake(
        "调用 clipped_surrogate_loss 时 logp 和 old_logp 的位置反了：ratio 变成了 old/new",
        SPEC,
        "ratio_args_swapped",
    ),
    _mistake(
        "sequence_mean 少了最后一步：返回的是每行的平均 (B,)，不是 0 维的 loss",
        FORMULA,
        "seq_no_row_mean",
    ),
    _mistake(
        "调用 masked_mean 时两个参数的位置反了（masked_mean(mask, per_token)）：它的签名是 (x, mask)",
        SPEC,
        "mm_args_swapped",
    ),
    _mistake(
        "替换 padding 上的 old_logp 时 torch.where 的两个分支写反了：有效 token 上用了 logp（ratio ≡ 1，"
        "从不裁剪），padding 上反而留着 old_logp",
        SPEC,
        "old_where_swapped",
    ),
    _mistake(
        "sequence_mean 沿错了维度（masked_mean(…, dim=0)：对每个位置 t 在各行之间平均了，而每条回答是一行）",
        FORMULA,
        "seq_dim0",
    ),
    _mistake(
        "没有把 eps_high 传给 clipped_surrogate_loss（那边按默认的 eps_high=None，即对称裁剪）",
        "L2.03「坑 1：对称裁剪压制低概率 token（DAPO 的 clip-higher）」",
        "eps_high_dropped",
    ),
    _mistake(
        "没有把 eps_low 传给 clipped_surrogate_loss（那边用了它自己的默认值 0.2）",
        SPEC,
        "eps_low_dropped",
    ),
    _mistake(
        "没有把 eps_low、eps_high 传给 clipped_surrogate_loss（那边用了默认的对称 0.2）",
        SPEC,
        "eps_dropped",
    ),
    _mistake(
        "KL 项是在聚合之后才加的（loss + β·平均 k3），不是逐 token 加进损失、和策略项一起按 aggregation 聚合",
        PITFALL.format(7),
        "kl_after_agg",
    ),
    _mistake(
        "KL 项是在聚合之后才加的（loss + β·平均 k3），不是逐 token 加进损失、和策略项一起按 aggregation 聚合",
        PITFALL.format(7),
        "kl_after_agg_rows",
    ),
    _mistake(
        "让 KL 项绕过了 mask（在全部 B·T 个位置上平均后才加上）",
        PITFALL.format(7),
        "kl_unmasked_clean",
    ),
    _mistake(
        "把 token_weights 截到了 1 以下（clamp(max=1)）：截断是 L2.09 的 tis_weights 做的，这里原样乘上",
        WEIGHTS,
        "weights_capped",
    ),
    _mistake(
        "padding 上的 token_weights 也乘进了逐 token 损失：那里的值可以是 NaN，0 × NaN = NaN 会进梯度",
        WEIGHTS,
        "weights_on_padding",
    ),
    _mistake(
        "sequence_mean 最后对 B 行求了和，不是平均：loss 恰好大了 B 倍",
        FORMULA,
        "seq_sum_rows",
    ),
    _mistake(
        "constant 的分母漏了 B（只除以了 max_completion_length）：loss 恰好大了 B 倍",
        PITFALL.format(3),
        "const_no_B",
    ),
    _mistake(
        "没有裁剪：逐 token 损失只有 −ratio·A，没有和 clip(ratio)·A 取 min（调用 clipped_surrogate_loss 之外"
        "自己算了一遍，或丢掉了裁剪分支）",
        SPEC,
        "no_clip",
    ),
    _mistake(
        "用了 L2.03 的 policy_gradient_loss（−A·logp）：GRPO 的策略项是 clipped surrogate，ratio 里有 old_logp",
        SPEC,
        "pg_instead",
    ),
]


def _grad_of(bad):
    """典型错误的「梯度」版：对 logp 求导。"""

    def fn(**kw):
        lp = kw["logp"].detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(bad(**{**kw, "logp": lp}), lp)
        return g

    return fn


# 返回 (B,) 的 loss 在「loss 的值」那一步就被点名了，谈不上对它求梯度
_HAS_GRAD = [m for m in LOSS_MISTAKES if BUG_OF[id(m)] != "seq_no_row_mean"]
GRAD_MISTAKES = derived(_HAS_GRAD, _grad_of)
BUG_OF.update({id(g): f"grad-{BUG_OF[id(m)]}" for g, m in zip(GRAD_MISTAKES, _HAS_GRAD)})


def _metrics_variant(
    logp,
    old_logp,
    advantages,
    mask,
    ref_logp=None,
    eps_low=0.2,
    eps_high=None,
    *,
    key,
    raw,
    k1=False,
    swapped=False,
    row_mean=False,
    ref_where_swapped=False,
    **_,
):
    """指标 `key` 没用 mask、直接对全部 B·T 个位置取平均（raw=True：padding 上用原样的输入）；另一个指标是对的。"""
    valid = mask != 0
    m = mask.to(logp.dtype)
    out = {}
    for name in ("clip_fraction", "kl"):
        wrong = name == key
        old = old_logp if wrong and raw else torch.where(valid, old_logp, logp.detach())
        ref = ref_logp if wrong and raw else torch.where(valid, ref_logp, logp.detach())
        if wrong and ref_where_swapped:  # 有效 token 上换成了 logp：k3 ≡ 0
            ref = torch.where(valid, logp.detach(), ref_logp)
        lp = logp.detach()
        if name == "clip_fraction":
            ratio, adv = torch.exp(lp - old), advantages[:, None]
            hi = eps_low if eps_high is None else eps_high
            x = (ratio.clamp(1 - eps_low, 1 + hi) * adv < ratio * adv).to(m.dtype)
        else:
            x = lp - ref if k1 else torch.exp(ref - lp) - (ref - lp) - 1
            x = torch.exp(lp - ref) - (lp - ref) - 1 if swapped else x
        exact = k1 or swapped or ref_where_swapped  # 只改了 kl 的公式，平均照样只在有效 token 上
        if wrong and row_mean:  # 先每行在有效 token 上平均，再对行平均（空行算 0）
            out[name] = _mm(x, m, dim=1).mean().item()
            continue
        out[name] = (x.mean() if wrong and not exact else (x * m).sum() / m.sum()).item()
    return out


METRIC_MISTAKES = [
    Mistake(
        f"算 {key} 时没用 mask（在全部 B·T 个位置上平均，padding 也算进了分母）",
        SPEC,
        lambda key=key, raw=raw, **kw: _metrics_variant(**kw, key=key, raw=raw),
    )
    for key in ("clip_fraction", "kl")
    for raw in (False, True)
] + [
    Mistake(
        "在 kl 指标里用了 k1（logp − ref_logp）而不是 k3",
        PITFALL.format(7),
        lambda **kw: _metrics_variant(**kw, key="kl", raw=False, k1=True),
    ),
    Mistake(
        "调用 kl_k3 时两个参数的位置反了（kl_k3(ref_logp, logp)）：kl 指标的方向跟着反了",
        "L2.04「4. 坑，以及出处」坑 1",
        lambda **kw: _metrics_variant(**kw, key="kl", raw=False, swapped=True),
    ),
    Mistake(
        "clip_fraction 算成了每行比例的平均（规格：被裁剪的 token 在全部有效 token 里的比例，整批一起算）",
        SPEC,
        lambda **kw: _metrics_variant(**kw, key="clip_fraction", raw=False, row_mean=True),
    ),
    Mistake(
        "替换 padding 上的 ref_logp 时 torch.where 的两个分支写反了：有效 token 上用了 logp（k3 ≡ 0），"
        "padding 上反而留着 ref_logp",
        SPEC,
        lambda **kw: _metrics_variant(**kw, key="kl", raw=False, ref_where_swapped=True),
    ),
]


def _inputs(case, beta, eps_high, agg, max_len=MAX_LEN, weights=None, eps_low=0.2):
    logp, old, ref, adv, mask = _tensors(case)
    kw = dict(
        logp=logp,
        old_logp=old,
        advantages=adv,
        mask=mask,
        ref_logp=ref,
        beta=beta,
        eps_low=eps_low,
        eps_high=eps_high,
        aggregation=agg,
        max_completion_length=max_len,
    )
    if weights is not None:
        kw["token_weights"] = torch.tensor(weights, dtype=torch.float64)
    return kw


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
LOSS_SYMPTOMS = [
    symptom(
        "loss 的符号反了：逐 token 损失是 −min(r·A, clip(r)·A)（+ β·k3），最小化它",
        FORMULA,
        lambda got, **kw: float(got.detach().sum()) * float(_variant(**kw).detach().sum()) < 0,
    ),
]
GRAD_SYMPTOMS = [
    symptom(
        "loss 对 logp 的梯度里有 NaN：padding 上的 NaN（old_logp、ref_logp、token_weights 的）漏进了计算图，"
        "乘 0 救不了 NaN（0 × NaN = NaN）",
        SPEC,
        lambda got, **kw: bool(torch.isnan(got).any()),
    ),
    symptom(
        "padding（mask = 0）位置上 loss 对 logp 的梯度不是 0：padding 上的 token 不能参与 loss",
        SPEC,
        lambda got, mask, **kw: bool((got[mask == 0] != 0).any()),
    ),
    symptom(
        "loss 对 logp 的梯度在有效 token 上全是 0：计算图在哪里被切断了（logp 被 detach，"
        "或 old_logp 换成了 logp 本身、ratio 恒为 1 的梯度互相抵消）",
        SPEC,
        lambda got, mask, **kw: bool((got[mask != 0] == 0).all()),
    ),
]


def _check_all(mod, kw, want, section=SPEC):
    """loss 值 -> 对 logp 的梯度 -> 指标，依次对照；每一处不对都只用一句中文失败。"""
    want_loss, want_grad, want_clip, want_kl = want
    loss, metrics = mod.grpo_loss(**kw)

    def close(got, want, where, mistakes):  # loss 与梯度都在 float64 下比，容差相同
        check(
            got,
            torch.tensor(want, dtype=torch.float64),
            where=where,
            section=section,
            inputs=kw,
            mistakes=mistakes,
            rtol=1e-10,
            atol=1e-12,
        )

    close(loss, want_loss, "grpo_loss 返回的 loss", LOSS_MISTAKES + LOSS_SYMPTOMS)
    require_grad(loss, "grpo_loss 返回的 loss", SPEC)
    loss.backward()
    close(kw["logp"].grad, want_grad, "loss 对 logp 的梯度", GRAD_MISTAKES + GRAD_SYMPTOMS)
    assert isinstance(metrics.get("clip_fraction"), float), (
        f"metrics['clip_fraction'] 应是 Python float（规格），得到 {type(metrics.get('clip_fraction')).__name__}。"
        f"回看 {SPEC}"
    )
    check(
        {k: metrics.get(k) for k in ("clip_fraction", "kl")},
        {"clip_fraction": want_clip, "kl": want_kl},
        where="grpo_loss 返回的 metrics 字典",
        section=SPEC,
        inputs=kw,
        mistakes=METRIC_MISTAKES,
    )


# (beta, eps_low, eps_high, aggregation)，按这个顺序跑（test_each_loss_mistake_is_named 照同样的顺序检查诊断）。
# eps_low=0.1 那组排在 eps_low=0.2 那组前面：只有它分得开「没传 eps_high」和「两个都没传」
MAIN_CASES = [
    (beta, eps_low, eps_high, agg)
    for beta, eps_low, eps_high in [
        (0.0, 0.2, None),
        (0.1, 0.2, None),
        (0.1, 0.1, 0.28),
        (0.1, 0.2, 0.28),
    ]
    for agg in AGGS
]


@pytest.mark.parametrize("beta,eps_low,eps_high,agg", MAIN_CASES)
def test_matches_naive_loop_value_and_grad(mod, beta, eps_low, eps_high, agg):
    case = _case()
    want = _naive(case, beta, eps_low, eps_high or eps_low, agg, MAX_LEN)
    assert 0 < want[2] < 1  # 这个例子确实有被裁剪和没被裁剪的 token
    _check_all(mod, _inputs(case, beta, eps_high, agg, eps_low=eps_low), want)


def _lesson_case():
    """课文 3.3 节的例子：B=2、T=3，on-policy，第 1 行第 0 个 token 的 log r = ln 2。"""
    lp = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    ref = [[-1.0, -1.0, -1.0], [-1.0 + math.log(2), -1.0, -1.0]]
    return lp, lp, ref, [2.0, -1.0], [[1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize(
    "agg,lesson_value",
    [("sequence_mean", -0.49489), ("token_mean", -0.19386), ("constant", -0.12116)],
)
def test_lesson_worked_example(mod, agg, lesson_value):
    case = _lesson_case()
    want = _naive(case, 0.1, 0.2, 0.2, agg, 4)
    # 课文里写的数（保留 5 位）就是逐 token 循环算出来的
    assert round(want[0], 5) == lesson_value and round(want[3], 5) == 0.06137
    _check_all(
        mod, _inputs(case, 0.1, None, agg, max_len=4), want, section="L2.05「3.3 手算一个例子」"
    )


def test_aggregations_differ_on_unequal_lengths(mod):
    """长度不等时三种聚合给出不同的数：这正是 Dr. GRPO / DAPO 讨论的长度偏差。"""
    logp, old, ref, adv, mask = _tensors(_case())
    vals = {
        a: mod.grpo_loss(logp, old, adv, mask, aggregation=a, max_completion_length=6)[0].item()
        for a in AGGS
    }
    assert len({round(v, 9) for v in vals.values()}) == 3, (
        f"回答长短不一时三种聚合应给出三个不同的 loss，得到 {vals}：检查 aggregation 的三个分支。回看 {FORMULA}"
    )


def test_constant_defaults_to_T(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    a, _ = mod.grpo_loss(logp, old, adv, mask, aggregation="constant")
    b, _ = mod.grpo_loss(
        logp, old, adv, mask, aggregation="constant", max_completion_length=logp.shape[1]
    )
    check(
        a,
        b.detach(),
        where="aggregation='constant'、max_completion_length=None 时的 loss（应等于传 T 时的）",
        section="L2.05「3.1 输入和输出」",
        rtol=0,
        atol=0,
    )


def test_beta_zero_ignores_ref(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    a, ma = mod.grpo_loss(logp, old, adv, mask)
    b, mb = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.0)
    where = "beta=0 但给了 ref_logp 时的 {}（应与不给 ref_logp 时相同：β=0 时 KL 不进 loss）"
    check(b, a.detach(), where=where.format("loss"), section=SPEC, rtol=0, atol=0)
    check(
        mb["clip_fraction"], ma["clip_fraction"], where=where.format("clip_fraction"), section=SPEC
    )


@pytest.mark.parametrize("agg", AGGS)
def test_empty_rows_no_nan(mod, agg):
    logp, old, ref, adv, mask = _tensors(_case())
    loss, metrics = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation=agg)
    loss.backward()
    empty = PITFALL.format(5)
    assert torch.isfinite(loss), (
        f"第 3 行 mask 全 0 时 loss = {loss.item()}，不能是 NaN/inf。回看 {empty}"
    )
    assert torch.isfinite(logp.grad).all(), f"有一行 mask 全 0 时梯度里出现了 NaN/inf。回看 {empty}"
    assert (logp.grad[mask == 0] == 0).all(), (
        f"padding（mask=0）位置收到了非 0 的梯度 {logp.grad[mask == 0].tolist()}：它们不能参与 loss。回看 {SPEC}"
    )
    # 全部为空：loss 为 0，不是 NaN
    logp2 = logp.detach().clone().requires_grad_()
    loss0, m0 = mod.grpo_loss(
        logp2, old, adv, torch.zeros_like(mask), ref_logp=ref, beta=0.1, aggregation=agg
    )
    loss0.backward()
    assert loss0.item() == 0.0 and torch.isfinite(logp2.grad).all(), (
        f"整个 batch 的 mask 全 0 时 loss 应为 0、梯度有限，得到 loss = {loss0.item()}。回看 {empty}"
    )
    assert m0["clip_fraction"] == 0.0 and m0["kl"] == 0.0, (
        f"mask 全 0 时指标应为 0（不是 NaN），得到 clip_fraction = {m0['clip_fraction']}、kl = {m0['kl']}。"
        f"回看 {empty}"
    )


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("junk", ["large", "nan"])
def test_padding_values_do_not_matter(mod, agg, junk):
    """mask=0 的位置上放什么（离谱的大数；或 NaN，vLLM 打不了分的 token）都不影响 loss、梯度和指标。"""
    logp, old, ref, adv, mask = _tensors(_case())
    want, want_m = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation=agg)
    want.backward()
    pad = mask == 0
    old_pad, ref_pad = (5.0, -60.0) if junk == "large" else (math.nan, math.nan)
    logp_j = torch.where(pad, torch.full_like(logp, -30.0), logp.detach()).requires_grad_()
    old_j = torch.where(pad, torch.full_like(old, old_pad), old)
    ref_j = torch.where(pad, torch.full_like(ref, ref_pad), ref)
    got, got_m = mod.grpo_loss(logp_j, old_j, adv, mask, ref_logp=ref_j, beta=0.1, aggregation=agg)
    got.backward()
    if junk == "large":
        where = "padding 上换成离谱的值之后的 {}（应与换之前相同：padding 上的值不能漏进结果）"
    else:
        where = (
            "padding 上的 old_logp、ref_logp 换成 NaN 之后的 {}（应与换之前相同：padding 上的 NaN 漏进了结果，"
            "乘 mask 挡不住它，0 × NaN = NaN）"
        )
    check(got, want.detach(), where=where.format("loss"), section=SPEC, rtol=1e-12, atol=0)
    check(
        logp_j.grad,
        logp.grad,
        where=where.format("loss 对 logp 的梯度"),
        section=SPEC,
        rtol=1e-12,
        atol=0,
    )
    for key in ("clip_fraction", "kl"):
        check(got_m[key], want_m[key], where=where.format(key), section=SPEC)


def test_old_and_ref_logp_are_detached(mod):
    """old_logp、ref_logp 当常数用：调用方传进来的张量带着梯度，也不能改变结果（L2.03 坑 2）。"""
    logp, old, ref, adv, mask = _tensors(_case())
    want, _ = mod.grpo_loss(logp, logp.detach(), adv, mask, aggregation="token_mean")
    (want_grad,) = torch.autograd.grad(want, logp)
    # μ = 1 时 old_logp 就是 logp 本身；这里故意不 detach，像调用方忘了 no_grad 那样传进来
    got, _ = mod.grpo_loss(logp, logp, adv, mask, aggregation="token_mean")
    (got_grad,) = torch.autograd.grad(got, logp)
    check(
        got_grad,
        want_grad,
        where="old_logp 传入带梯度的 logp 本身时 loss 对 logp 的梯度（应与传入不带梯度的副本时相同）",
        section=SPEC,
        inputs={},
        mistakes=[
            Mistake(
                "没有对 old_logp 做 detach（ratio = exp(logp − old_logp) 的梯度互相抵消成 0，"
                "策略项不再有梯度）",
                SPEC,
                lambda: torch.zeros_like(want_grad),
            )
        ],
    )
    ref_leaf = ref.clone().requires_grad_()
    loss, _ = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref_leaf, beta=0.1)
    loss.backward()
    assert ref_leaf.grad is None or not ref_leaf.grad.any(), (
        f"ref_logp 收到了梯度：grpo_loss 里没有对 ref_logp 做 detach（参考模型是冻结的常数）。回看 {SPEC}"
    )


def test_sequence_mean_counts_empty_rows_in_B(mod):
    """空回答在 sequence_mean 里贡献 0，但仍算进 B（与 TRL loss_type="grpo" 相同）。"""
    logp, old, ref, adv, mask = _tensors(_case())
    full, _ = mod.grpo_loss(logp, old, adv, mask, aggregation="sequence_mean")
    two, _ = mod.grpo_loss(logp[:2], old[:2], adv[:2], mask[:2], aggregation="sequence_mean")
    check(
        full,
        two.detach() * 2 / 3,
        where="含一条空回答的 3 行 batch 的 loss（应为去掉空行后 2 行 loss 的 2/3）",
        section=PITFALL.format(5),
        inputs=dict(two=two.detach()),
        mistakes=[
            Mistake(
                "把空回答（mask 全 0 的行）从 sequence_mean 的 B 里去掉了",
                PITFALL.format(5),
                lambda two: two,
            )
        ],
        rtol=1e-12,
        atol=0,
    )


def test_bad_arguments(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    bad = {
        "beta > 0 却没给 ref_logp": dict(beta=0.04),
        "未知的 aggregation='mean'": dict(aggregation="mean"),
        "aggregation='constant' 而 max_completion_length=2 比 T=4 还小": dict(
            aggregation="constant", max_completion_length=2
        ),
        "token_weights 的形状 (3, 3) 与 logp 的 (3, 4) 不同": dict(
            token_weights=torch.ones(3, 3, dtype=torch.float64)
        ),
        "token_weights 在有效 token 上有负数": dict(
            token_weights=torch.tensor(TOKEN_WEIGHTS, dtype=torch.float64) - 1.0
        ),
    }
    for what, kw in bad.items():
        expect_value_error(lambda kw=kw: mod.grpo_loss(logp, old, adv, mask, **kw), what)


def test_metrics_keys(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    _, m = mod.grpo_loss(logp, old, adv, mask)
    assert "clip_fraction" in m and "kl" not in m, (
        f"不给 ref_logp 时 metrics 应有 'clip_fraction'、没有 'kl'，得到键 {sorted(m)}。回看 {SPEC}"
    )
    _, m = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.04)
    assert isinstance(m.get("kl"), float) and m["kl"] > 0, (
        f"给了 ref_logp 时 metrics['kl'] 应是正的 Python float，得到 {m.get('kl')!r}。回看 {SPEC}"
    )


@pytest.mark.parametrize("agg", AGGS)
def test_on_policy_never_clips(mod, agg):
    """μ = 1（old_logp 就是 logp 本身）时 ratio ≡ 1，不会有 token 被裁剪：L2.07 的 clip_fraction 恒为 0。"""
    g = torch.Generator().manual_seed(3)
    logp = (torch.randn(6, 9, generator=g, dtype=torch.float64) - 1).requires_grad_()
    adv = torch.randn(6, generator=g, dtype=torch.float64) * 3
    mask = (torch.rand(6, 9, generator=g) < 0.8).double()
    _, m = mod.grpo_loss(logp, logp.detach(), adv, mask, eps_low=0.01, aggregation=agg)
    assert m["clip_fraction"] == m["clip_low_fraction"] == m["clip_high_fraction"] == 0.0, (
        f"old_logp = logp 时 ratio 恒为 1，clip 指标应全是 0，得到 {m}。回看 L2.03 的 clipped_surrogate_loss"
    )


def _clip_sides_case():
    """B=3, T=5（第 2 行是空回答）。A > 0 的行：1 个 token 越过上界（被裁剪）、1 个低于下界（不算）；
    A < 0 的行：3 个低于下界（被裁剪）、1 个越过上界（不算），最后一个是 padding。两侧被裁剪的数不同（3 和 1），
    两侧的有效 token 数不同（4 和 5），只看 ratio 出界的数又不同（4 和 2）：每种错误的每个指标都是不同的数。"""
    logp = [[0.5, 0.1, -0.5, 0.0, 0.0], [-0.5, -0.4, -0.3, 0.5, 0.0], [0.0] * 5]
    zeros = [[0.0] * 5 for _ in range(3)]
    mask = [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [0] * 5]
    return logp, zeros, zeros, [1.0, -1.0, 0.5], mask


def _naive_clip_sides(case, el, eh):
    """clip_low / clip_high 的正确值，以及几种典型错误的值（纯 Python，逐 token）。"""
    logp, old, ref, adv, mask = case
    cells = [
        (adv[i], _naive_token(logp[i][j], old[i][j], ref[i][j], adv[i], 0.0, el, eh)[2],
         math.exp(logp[i][j] - old[i][j]))
        for i in range(len(logp))
        for j in range(len(logp[0]))
        if mask[i][j]
    ]  # fmt: skip
    n = len(cells)
    low = sum(c for a, c, _ in cells if a < 0)
    high = sum(c for a, c, _ in cells if a > 0)
    right = {"clip_low_fraction": low / n, "clip_high_fraction": high / n}
    wrong = {
        "per_side": {
            "clip_low_fraction": low / sum(a < 0 for a, _, _ in cells),
            "clip_high_fraction": high / sum(a > 0 for a, _, _ in cells),
        },
        "swapped": {"clip_low_fraction": high / n, "clip_high_fraction": low / n},
        "ratio_only": {
            "clip_low_fraction": sum(r < 1 - el for _, _, r in cells) / n,
            "clip_high_fraction": sum(r > 1 + eh for _, _, r in cells) / n,
        },
    }
    return right, wrong


CLIP_SIDE_MISTAKES = {
    "per_side": "把 clip_low_fraction / clip_high_fraction 的分母写成了那一侧（A<0 / A>0）的有效 token 数"
    "（分母应是全部有效 token，两者之和 = clip_fraction）",
    "swapped": "clip_low_fraction 和 clip_high_fraction 两侧弄反了：low 是 A < 0、ratio 低于下界被裁剪的，"
    "high 是 A > 0、ratio 越过上界被裁剪的",
    "ratio_only": "clip_low_fraction / clip_high_fraction 只看了 ratio 出没出界，没看 A 的符号"
    "（A > 0 时 ratio 低于下界不算被裁剪，A < 0 时越过上界也不算）",
}


@pytest.mark.parametrize("eps_high", [None, 0.28])
def test_clip_side_fractions(mod, eps_high):
    """clip_low/high_fraction 的分母是全部有效 token（与 TRL 的 clip_ratio/low_mean、high_mean 相同），
    low 只数 A < 0 的、high 只数 A > 0 的被裁剪 token。"""
    case = _clip_sides_case()
    right, wrong = _naive_clip_sides(case, 0.2, eps_high or 0.2)
    # 测试数据本身的前提：两侧被裁剪的数不同，每种错误给出和正确值、和彼此都不同的数
    assert right["clip_low_fraction"] != right["clip_high_fraction"] > 0
    for key in right:
        values = [right[key]] + [w[key] for w in wrong.values()]
        assert len(set(values)) == len(values), (key, values)
    _, m = mod.grpo_loss(**_inputs(case, 0.0, eps_high, "token_mean"))
    section = "L2.05「3.1 输入和输出」"
    check(
        {k: m.get(k) for k in right},
        right,
        where="grpo_loss 返回的 clip_low_fraction、clip_high_fraction 两个指标",
        section=section,
        inputs={},
        mistakes=[  # 两个指标都写错了，或只错了其中一个（另一个是对的）
            Mistake(what, section, lambda v={**right, **{key: wrong[k][key] for key in keys}}: v)
            for k, what in CLIP_SIDE_MISTAKES.items()
            for keys in (right, ["clip_low_fraction"], ["clip_high_fraction"])
        ],
    )


def test_missing_dimension_after_a_reduction_is_named():
    """诊断本身：每行的有效 token 数少了一维（(B,)，不是 (B, 1)）时，第一行说出这一类错误（B = 3、T = 4）。"""

    def without_keepdim(logp, old_logp, advantages, mask, **kw):
        per_token = -advantages[:, None] * torch.exp(logp - old_logp)
        return (per_token * mask / mask.sum(1)).sum(1).mean(), {}

    kw = _inputs(_case(), 0.0, None, "sequence_mean")
    line = crash_first_line(lambda: without_keepdim(**kw), "grpo_loss", SPEC, CRASHES["grpo_loss"])
    assert line.startswith("grpo_loss() 抛出 RuntimeError：") and "少了一维" in line, line


def test_token_weights_that_require_grad_are_constants(mod):
    """token_weights 是常数：调用方传进来的权重由 logp 算出、带着梯度（像没 detach 的 tis_weights），
    loss 对 logp 的梯度也只有策略项乘权重那一条路，不会顺着权重流回 logp。"""
    case = _case()
    logp, old, ref, adv, mask = _tensors(case)
    weights = torch.exp(logp - old).clamp(max=1.2)  # 带梯度（grad_fn 不为空）
    assert weights.requires_grad  # 测试数据本身的前提
    w_list = weights.detach().tolist()
    kw = dict(logp=logp, old_logp=old, advantages=adv, mask=mask, aggregation="token_mean")
    loss, _ = mod.grpo_loss(**kw, token_weights=weights)
    require_grad(loss, "grpo_loss 返回的 loss", WEIGHTS)
    (got,) = torch.autograd.grad(loss, logp)
    want = _naive(case, 0.0, 0.2, 0.2, "token_mean", MAX_LEN, weights=w_list)[1]
    lp = logp.detach().clone().requires_grad_()
    wrong_w = torch.exp(lp - old).clamp(max=1.2)
    (wrong,) = torch.autograd.grad(_variant(**{**kw, "logp": lp}, token_weights=wrong_w), lp)
    check(
        got,
        torch.tensor(want, dtype=torch.float64),
        where="token_weights 带着梯度时 loss 对 logp 的梯度（应与权重是常数时相同）",
        section=WEIGHTS,
        inputs={},
        mistakes=[
            Mistake(
                "token_weights 没当常数用：它带着梯度（由 logp 算出），梯度顺着权重流进了 loss"
                "（规格：权重是常数，不求导）",
                WEIGHTS,
                lambda: wrong,
            )
        ],
        rtol=1e-10,
        atol=1e-12,
    )


def _shifted(case, by):
    """logp、old_logp、ref_logp 一起平移 by：ratio、k3 只看差，结果不变。"""
    logp, old, ref, adv, mask = case
    move = lambda rows: [[v + by for v in row] for row in rows]  # noqa: E731
    return move(logp), move(old), move(ref), adv, mask


def _far_below_variant(logp, old_logp, ref_logp, *, bug, **kw):
    """在概率空间里算 ratio 或 k3 的错误版（各自 exp 之后相除）；float32 里 e^−120 下溢成 0。"""
    if bug == "ratio":
        ratio = torch.exp(logp) / torch.exp(old_logp)
        old_logp = logp.detach() - torch.log(ratio.detach())
    out = _variant(logp, old_logp, ref_logp=ref_logp, **kw)
    if bug == "k3":
        r = torch.exp(ref_logp) / torch.exp(logp)
        k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        out = out + kw["beta"] * _mm((r - torch.log(r) - 1) - k3, kw["mask"])
    return out


FAR_BELOW_MISTAKES = {  # beta -> 这组参数上要认的错误（beta = 0 时 k3 不进 loss，先只看 ratio）
    0.0: Mistake(
        "ratio 是各自 exp 之后相除得到的：log 概率很低时 e^logp 下溢成 0，0/0 = NaN",
        "L2.03「3.2 `clipped_surrogate_loss`」",
        lambda **k: _far_below_variant(**k, bug="ratio"),
    ),
    0.1: Mistake(
        "k3 的 r 是在概率空间里算的（各自 exp 之后相除）：log 概率很低时 e^logp 下溢成 0，0/0 = NaN",
        "L2.04「3.1 三个函数的规格」",
        lambda **k: _far_below_variant(**k, bug="k3"),
    ),
}


@pytest.mark.parametrize("agg", AGGS)
def test_log_probs_far_below_zero(mod, agg):
    """logp、old_logp、ref_logp 都在 −120 附近（float32，长回答里的低概率 token）：ratio 和 k3 只看差，
    loss 照样是平移前的数；在概率空间里算（各自 exp 之后相除）是 0/0 = NaN。先 beta = 0（只有策略项），再 beta = 0.1。"""
    case = _shifted(_case(), -120.0)
    for beta, mistake in FAR_BELOW_MISTAKES.items():
        kw = _inputs(case, beta, None, agg)
        kw = {k: v.float() if torch.is_tensor(v) else v for k, v in kw.items()}
        kw["logp"] = kw["logp"].detach().requires_grad_()
        assert torch.exp(kw["logp"]).eq(0).all()  # 测试数据本身的前提：float32 里确实下溢了
        loss, _ = mod.grpo_loss(**kw)
        want = _naive(_case(), beta, 0.2, 0.2, agg, MAX_LEN)[0]
        check(
            loss,
            torch.tensor(want, dtype=torch.float32),
            where=f"log 概率都在 −120 附近（float32）、beta={beta} 时的 loss",
            section=SPEC,
            inputs=kw,
            mistakes=[mistake],
            rtol=1e-4,
            atol=1e-5,
        )


WEIGHT_CASES = [(beta, agg) for beta in (0.0, 0.1) for agg in AGGS]


@pytest.mark.parametrize("beta,agg", WEIGHT_CASES)
def test_token_weights_scale_the_policy_term(mod, beta, agg):
    """token_weights 只乘逐 token 的策略项（加 KL 之前），分母和指标都不变；padding 上的权重（这里有 NaN）不参与。"""
    case = _case()
    want = _naive(case, beta, 0.2, 0.2, agg, MAX_LEN, weights=TOKEN_WEIGHTS)
    _check_all(mod, _inputs(case, beta, None, agg, weights=TOKEN_WEIGHTS), want, section=WEIGHTS)


@pytest.mark.parametrize("agg", AGGS)
def test_token_weights_none_is_all_ones(mod, agg):
    logp, old, ref, adv, mask = _tensors(_case())
    a, _ = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation=agg)
    b, _ = mod.grpo_loss(
        logp,
        old,
        adv,
        mask,
        ref_logp=ref,
        beta=0.1,
        aggregation=agg,
        token_weights=torch.ones_like(old),
    )
    check(
        b,
        a.detach(),
        where="token_weights 全 1 时的 loss（应与不传时相同）",
        section=WEIGHTS,
        rtol=1e-12,
        atol=0,
    )


def test_zero_weight_keeps_only_the_kl_gradient(mod):
    """权重为 0 的 token：策略项的梯度没了，KL 项的梯度原样保留。"""
    logp, old, ref, adv, mask = _tensors(_case())
    w = torch.ones_like(old)
    w[0, 1] = 0.0
    loss, _ = mod.grpo_loss(
        logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation="token_mean", token_weights=w
    )
    loss.backward()
    # 只剩 β·k3 的导数 β·(1 − e^{ref − logp})，再乘 token_mean 的权重 1/7（7 个有效 token）
    want = 0.1 * (1 - math.exp(-0.7 - (-0.5))) / 7
    check(
        logp.grad[0, 1].item(),
        want,
        where="权重为 0 的 token（第 0 行第 1 个）上 loss 对 logp 的梯度（应只剩 KL 项的）",
        section=WEIGHTS,
        rtol=1e-10,
        atol=1e-14,
    )


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_variant_without_bug_is_the_naive_loop(agg, beta):
    """测试自己的前提：用来造典型错误的 torch 版（bug=None）与逐 token 循环一致。"""
    case = _case()
    for weights in (None, TOKEN_WEIGHTS):
        kw = _inputs(case, beta, 0.28, agg, weights=weights)
        want = _naive(case, beta, 0.2, 0.28, agg, MAX_LEN, weights=weights)
        assert _variant(**kw).item() == pytest.approx(want[0], rel=1e-12, abs=1e-14)


def _cases_in_test_order():
    """_check_all 依次看到的 (inputs, 正确的 loss, 正确的梯度)：先是主测试，再是 token_weights 的测试。"""
    case = _case()
    for beta, eps_low, eps_high, agg in MAIN_CASES:
        loss, grad, _, _ = _naive(case, beta, eps_low, eps_high or eps_low, agg, MAX_LEN)
        yield _inputs(case, beta, eps_high, agg, eps_low=eps_low), loss, grad
    for beta, agg in WEIGHT_CASES:
        loss, grad, _, _ = _naive(case, beta, 0.2, 0.2, agg, MAX_LEN, weights=TOKEN_WEIGHTS)
        yield _inputs(case, beta, None, agg, weights=TOKEN_WEIGHTS), loss, grad


@pytest.mark.parametrize("m", LOSS_MISTAKES, ids=lambda m: BUG_OF[id(m)])
def test_each_loss_mistake_is_named(m):
    """诊断本身，按学习者看到的顺序：在第一组和正确结果不同的参数上（先比 loss，loss 对了再比梯度），
    第一行只点名这个错误；之后每组参数上也都被点名，不会只得到一句「不对」（CI 用 solutions 跑）。"""
    grad_m = GRAD_MISTAKES[_HAS_GRAD.index(m)] if m in _HAS_GRAD else None
    lines = []
    for kw, loss, grad in _cases_in_test_order():
        try:
            wrong_loss = m.fn(**kw)
        except NotApplicable:
            continue
        tol = dict(where="x", section=SPEC, inputs=kw, rtol=1e-10, atol=1e-12)
        want_loss = torch.tensor(loss, dtype=torch.float64)
        line = diagnosis_line(wrong_loss, want_loss, mistakes=LOSS_MISTAKES, **tol)
        if line is None and grad_m is not None:
            want_grad = torch.tensor(grad, dtype=torch.float64)
            line = diagnosis_line(grad_m.fn(**kw), want_grad, mistakes=GRAD_MISTAKES, **tol)
        if line is not None:
            assert line.startswith("看起来是"), f"{kw['aggregation']}, beta={kw['beta']}: {line}"
            lines.append(line)
    assert lines, f"没有任何一组参数能暴露「{m.what}」"
    assert lines[0] == named(m), f"第一次暴露「{m.what}」时，第一行是：{lines[0]}"


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_loss_mistakes_give_the_same_output():
    """诊断表本身：每组参数上，两个不同的典型错误算出的 loss 不同（否则诊断分不开它们，会点名错的那个）。"""
    tol = dict(rtol=1e-10, atol=1e-12)
    cases = [
        (kw, torch.tensor(loss, dtype=torch.float64), tol) for kw, loss, _ in _cases_in_test_order()
    ]
    assert not (found := collisions(LOSS_MISTAKES, cases)), "\n".join(found)


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_grad_mistakes_give_the_same_gradient():
    """loss 对了才比梯度：每组参数上，loss 和正确的一样的那些错误里，两个不同的错误算出的梯度不同。"""
    tol = dict(rtol=1e-10, atol=1e-12)
    found = []
    for kw, loss, grad in _cases_in_test_order():
        right_loss = torch.tensor(loss, dtype=torch.float64)
        hidden = []  # loss 在这组参数上是对的：学习者看到的第一处不对是梯度
        for m, g in zip(_HAS_GRAD, GRAD_MISTAKES):
            try:
                if describe_mismatch(m.fn(**kw), right_loss, **tol) is None:
                    hidden.append(g)
            except NotApplicable:
                continue
        case = [(kw, torch.tensor(grad, dtype=torch.float64), tol)]
        found += [f"{kw['aggregation']}, beta={kw['beta']}: {f}" for f in collisions(hidden, case)]
    assert not found, "\n".join(found)


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_metric_mistakes_give_the_same_output():
    beta, eps_low, eps_high, agg = MAIN_CASES[0]
    case = _case()
    kw = _inputs(case, beta, eps_high, agg, eps_low=eps_low)
    _, _, clip, kl = _naive(case, beta, eps_low, eps_high or eps_low, agg, MAX_LEN)
    cases = [(kw, {"clip_fraction": clip, "kl": kl}, {})]
    assert not (found := collisions(METRIC_MISTAKES, cases)), "\n".join(found)


@pytest.mark.parametrize(
    "m",
    METRIC_MISTAKES,
    ids=["clip", "clip-raw", "kl", "kl-raw", "kl-k1", "kl-swapped", "clip-rows", "kl-ref-where"],
)
def test_each_metric_mistake_is_named(m):
    """第一组参数（学习者最先看到的）上，指标的每个典型错误只点名它自己。"""
    beta, eps_low, eps_high, agg = MAIN_CASES[0]
    case = _case()
    kw = _inputs(case, beta, eps_high, agg, eps_low=eps_low)
    _, _, clip, kl = _naive(case, beta, eps_low, eps_high or eps_low, agg, MAX_LEN)
    line = diagnosis_line(
        m.fn(**kw),
        {"clip_fraction": clip, "kl": kl},
        where="grpo_loss 返回的 metrics 字典",
        section=SPEC,
        inputs=kw,
        mistakes=METRIC_MISTAKES,
    )
    assert line == named(m), line


def test_each_symptom_is_absent_from_the_right_answer():
    for kw, loss, grad in _cases_in_test_order():
        want_loss = torch.tensor(loss, dtype=torch.float64)
        want_grad = torch.tensor(grad, dtype=torch.float64)
        assert not [s.what for s in LOSS_SYMPTOMS if s.fn(want_loss, **kw)]
        assert not [s.what for s in GRAD_SYMPTOMS if s.fn(want_grad, **kw)]


def test_diagnoses_point_at_real_sections():
    sections = {m.section for m in LOSS_MISTAKES + METRIC_MISTAKES + LOSS_SYMPTOMS + GRAD_SYMPTOMS}
    sections |= {FORMULA, SPEC, WEIGHTS, HINTS} | {PITFALL.format(i) for i in (3, 5, 6, 7)}
    assert_sections_exist(sections | hint_sections(CRASHES))
