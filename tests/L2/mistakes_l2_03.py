"""L2.03 两个损失函数的典型错误：故意写错的实现，只给 tests/diagnose.py 比对用。

每个错误版和规格只差它自己那一处；参数与被测函数相同。
`DIAGNOSIS_INPUTS[函数名]` 是一组能把这些错误彼此区分开的输入。
"""

from __future__ import annotations

import math

import torch
from diagnose import Mistake

FORMULA = "L2.03「2. 公式，以及它们从哪来」"
PG_SPEC = "L2.03「3.1 `policy_gradient_loss`」"
CLIP_SPEC = "L2.03「3.2 `clipped_surrogate_loss`」"
EXAMPLE = "L2.03「3.3 手算一个例子」"
TABLE = "L2.03「裁剪：一批样本不许把策略推得太远」"
CLIP_HIGHER = "L2.03「坑 1：对称裁剪压制低概率 token（DAPO 的 clip-higher）」"

# ---------------------------------------------------------------- policy_gradient_loss

PG_MISTAKES = [
    Mistake(
        "少了负号（我们最小化 loss，要最大化的是 A·logp）",
        PG_SPEC,
        lambda logp, advantages: advantages[:, None] * logp,
    ),
    Mistake(
        "advantage 广播到了错误的维度（(B,) 被当成 (1, B)，和 T 那一维对齐了）",
        PG_SPEC,
        lambda logp, advantages: -advantages[None, :] * logp,
    ),
    Mistake(
        "用了概率 exp(logp)，而不是 log 概率",
        FORMULA,
        lambda logp, advantages: -advantages[:, None] * logp.exp(),
    ),
    Mistake(
        "已经把 (B, T) 求了平均：应逐 token 返回 (B, T)，聚合是 L2.05 的事",
        PG_SPEC,
        lambda logp, advantages: (-advantages[:, None] * logp).mean(),
    ),
]

# ---------------------------------------------------------------- clipped_surrogate_loss


def _clipped(
    logp,
    old_logp,
    advantages,
    eps_low=0.2,
    eps_high=None,
    *,
    use_max=False,
    inverted=False,
    ignore_eps_high=False,
    only_clipped_branch=False,
    flag="strict",
    divided=False,
    swapped=False,
    clip_log_ratio=False,
    clamp="both",
    min_of_ratios=False,
    max_of_ratios=False,
    no_clip=False,
):
    """按规格算 (loss, clipped)；每个关键字参数打开一种典型错误。"""
    if eps_high is None or ignore_eps_high:
        eps_high = eps_low
    if swapped:
        eps_low, eps_high = eps_high, eps_low
    adv = advantages[:, None]
    if divided:
        ratio = torch.exp(logp) / torch.exp(old_logp)
    else:
        ratio = torch.exp(old_logp - logp) if inverted else torch.exp(logp - old_logp)
    clipped_ratio = {
        "both": lambda: torch.clamp(ratio, 1 - eps_low, 1 + eps_high),
        "bounds_swapped": lambda: torch.clamp(ratio, 1 + eps_high, 1 - eps_low),  # 恒为 1 − eps_low
        "upper_only": lambda: torch.clamp(ratio, max=1 + eps_high),
        "lower_only": lambda: torch.clamp(ratio, min=1 - eps_low),
    }[clamp]()
    if clip_log_ratio:  # exp(clamp(log r, −eps_low, eps_high))：区间变成 [e^−eps_low, e^eps_high]
        clipped_ratio = torch.exp(torch.clamp(logp - old_logp, -eps_low, eps_high))
    unclipped_obj, clipped_obj = ratio * adv, clipped_ratio * adv
    if no_clip:  # 只有未裁剪的 ratio·A
        loss = -unclipped_obj
    elif only_clipped_branch:
        loss = -clipped_obj
    elif min_of_ratios:  # min 取在两个 ratio 上，再乘 A：A < 0 时取到的是错的那一支
        loss = -adv * torch.minimum(ratio, clipped_ratio)
    elif max_of_ratios:  # max 取在两个 ratio 上：A > 0 时取到的是错的那一支
        loss = -adv * torch.maximum(ratio, clipped_ratio)
    elif use_max:
        loss = -torch.maximum(unclipped_obj, clipped_obj)
    else:
        loss = -torch.minimum(unclipped_obj, clipped_obj)
    if flag == "le":
        clipped = clipped_obj <= unclipped_obj
    elif flag == "reversed":  # 比较方向反了
        clipped = unclipped_obj < clipped_obj
    elif flag == "ratio_only":
        clipped = (ratio > 1 + eps_high) | (ratio < 1 - eps_low)
    else:
        clipped = clipped_obj < unclipped_obj
    return loss, clipped


def _variant(**wrong):
    return lambda logp, old_logp, advantages, eps_low=0.2, eps_high=None: _clipped(
        logp, old_logp, advantages, eps_low, eps_high, **wrong
    )


CLIP_MISTAKES = [
    Mistake(
        "min 写成了 max：该停的 token 照推，该罚的 token 不罚",
        TABLE,
        _variant(use_max=True),
    ),
    Mistake(
        "ratio 写反了（算成了 exp(old_logp − logp)：旧策略比新策略）",
        CLIP_SPEC,
        _variant(inverted=True),
    ),
    Mistake(
        "忽略了 eps_high：上界应是 1 + eps_high，只有 eps_high=None 时才等于 1 + eps_low",
        CLIP_HIGHER,
        _variant(ignore_eps_high=True),
    ),
    Mistake(
        "loss 只用了裁剪分支，没有和未裁剪的 ratio·A 取 min",
        CLIP_SPEC,
        _variant(only_clipped_branch=True),
    ),
    Mistake(
        "clipped 只看 ratio 是否出界、没看 A 的符号（A>0 只裁上界，A<0 只裁下界）",
        CLIP_SPEC,
        _variant(flag="ratio_only"),
    ),
    Mistake(
        "clipped 用了 <=：A = 0 或 ratio 恰好在边界上时两个分支相等，不算裁剪",
        CLIP_SPEC,
        _variant(flag="le"),
    ),
]
CLIP_MISTAKES += [
    Mistake(
        "eps_low 和 eps_high 用反了（下界应是 1 − eps_low，上界应是 1 + eps_high）",
        CLIP_HIGHER,
        _variant(swapped=True),
    ),
    Mistake(
        "把裁剪用在了 log 比值上（exp(clamp(logp − old_logp, −eps_low, eps_high))）："
        "区间变成了 [e^−eps_low, e^eps_high]，不是规格的 [1 − eps_low, 1 + eps_high]",
        CLIP_SPEC,
        _variant(clip_log_ratio=True),
    ),
]
CLIP_MISTAKES += [
    Mistake(
        "min 取在了两个 ratio 上再乘 A（−A·min(r, clip(r))）：A < 0 时取到的是错的那一支",
        TABLE,
        _variant(min_of_ratios=True),
    ),
    Mistake(
        "max 取在了两个 ratio 上再乘 A（−A·max(r, clip(r))）：A > 0 时取到的是错的那一支",
        TABLE,
        _variant(max_of_ratios=True),
    ),
    Mistake(
        "clipped 的比较方向反了：「被裁剪」是裁剪分支严格更小（clip(r)·A < r·A），不是反过来",
        CLIP_SPEC,
        _variant(flag="reversed"),
    ),
    Mistake(
        "torch.clamp 的下界、上界位置写反了（clamp(ratio, 1 + eps_high, 1 − eps_low)）："
        "下界比上界大时 clamp 把每个 ratio 都变成 1 − eps_low",
        CLIP_SPEC,
        _variant(clamp="bounds_swapped"),
    ),
    Mistake(
        "只裁了上界（clamp(ratio, max=1 + eps_high)）：A < 0 时 ratio < 1 − eps_low 的 token 没被裁剪",
        TABLE,
        _variant(clamp="upper_only"),
    ),
    Mistake(
        "只裁了下界（clamp(ratio, min=1 − eps_low)）：A > 0 时 ratio > 1 + eps_high 的 token 没被裁剪",
        TABLE,
        _variant(clamp="lower_only"),
    ),
]
CLIP_MISTAKES.append(
    Mistake(
        "完全没有裁剪：loss 只有 −ratio·A，没有和 clip(ratio)·A 取 min（ratio 出界的 token 照样被推）",
        TABLE,
        _variant(no_clip=True),
    )
)
DIVIDED = Mistake(
    "ratio 是各自 exp 之后相除得到的：log 概率很低时 exp 下溢成 0，0/0 = NaN",
    CLIP_SPEC,
    _variant(divided=True),
)
CLIP_MISTAKES.append(DIVIDED)

MISTAKES = {"policy_gradient_loss": PG_MISTAKES, "clipped_surrogate_loss": CLIP_MISTAKES}
NAMES = {
    "clipped_surrogate_loss": ("loss", "clipped")
}  # 两个返回值的名字：「返回值 [1]（clipped）」
HINTS = "L2.03「3.4 提示」"

# 函数里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
_ADV_COLUMN = (
    "(B,) 的 advantages 直接和 (B, T) 的 logp 相乘了：广播时 (B,) 对齐的是 T 那一维",
    HINTS,
)
CRASHES = {
    "policy_gradient_loss": {"broadcast": _ADV_COLUMN},
    "clipped_surrogate_loss": {
        "broadcast": _ADV_COLUMN,
        "none": (
            "拿 eps_high=None 直接做了运算（规格：eps_high=None 表示和 eps_low 相同）",
            CLIP_SPEC,
        ),
        "bool_ambiguous": "对多个元素的张量用了 Python 的 if / and / or（clipped 是逐元素的标记，不是一个真假值）",
    },
}


def far_below_zero():
    """3.3 节那张表整体平移到 log 概率 −120 附近（float32）：ratio 不变，exp(−120) 却下溢成 0。"""
    old_logp = torch.full((3, len(RATIOS)), -120.0)
    return dict(
        logp=old_logp + torch.log(torch.tensor(RATIOS)),
        old_logp=old_logp,
        advantages=torch.tensor([1.0, -1.0, 0.0]),
        eps_low=0.2,
        eps_high=0.28,
    )


# 函数名 -> 在 DIAGNOSIS_INPUTS 之后才用 far_below_zero 测（先 exp 再相除的错误只在那里露馅）
SHOWN_BY_LATER = {"clipped_surrogate_loss"}

# 参数化测试的 id（ASCII：pytest 把中文 id 显示成 \uXXXX 转义），和 MISTAKES 里的顺序一一对应
MISTAKE_IDS = {
    "policy_gradient_loss": ["no_minus", "adv_row", "prob", "mean"],
    "clipped_surrogate_loss": [
        "max",
        "inverted",
        "ignore_eps_high",
        "only_clipped",
        "flag_ratio_only",
        "flag_le",
        "eps_swapped",
        "clip_log_ratio",
        "min_of_ratios",
        "max_of_ratios",
        "flag_reversed",
        "clamp_bounds_swapped",
        "upper_only",
        "lower_only",
        "no_clip",
        "divided",
    ],
}
assert all(len(MISTAKE_IDS[n]) == len(ms) for n, ms in MISTAKES.items())

# ---------------------------------------------------------------- 坑 2 的实测（调用方忘了 detach）

PITFALL_DETACH = "L2.03「坑 2：`old_logp` 忘了 detach」"


def grad_when_caller_forgets_detach(fn=None, *, detach_inside=False):
    """课文坑 2 的实测：logp = [[-1, -2]]、A = 1，调用方把 old_logp 写成 logp * 1.0（没 detach）。

    返回对 logp 的梯度。fn 不给时用规格版 `_clipped`；detach_inside=True 是「函数里替调用方 detach」的错误版。
    """
    fn = fn or _clipped
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old_logp = logp * 1.0
    loss, _ = fn(logp, old_logp.detach() if detach_inside else old_logp, torch.tensor([1.0]))
    loss.sum().backward()
    return logp.grad


DETACHED_INSIDE = Mistake(
    "在函数里替调用方 detach 了 old_logp（规格：照原样用传进来的 old_logp；"
    "这条测试复现的正是调用方忘了 detach 时梯度恒为 0）",
    PITFALL_DETACH,
    lambda: grad_when_caller_forgets_detach(detach_inside=True),
)

# 课文 3.3 节那张表的 ratio；三行 advantage 分别是 +1、−1、0
RATIOS = [0.5, 0.79, 0.9, 1.0, 1.1, 1.25, 1.5]

DIAGNOSIS_INPUTS = {
    "policy_gradient_loss": lambda: dict(
        # B = T = 3：广播到错误的维度时不会报错，只会算错，正好能认出来
        logp=torch.tensor(
            [[-1.0, -2.0, -0.5], [-0.1, -3.0, -1.0], [-0.7, -0.2, -4.0]], dtype=torch.float64
        ),
        advantages=torch.tensor([2.0, -0.5, 1.5], dtype=torch.float64),
    ),
    "clipped_surrogate_loss": lambda: dict(
        logp=torch.tensor([[math.log(r) for r in RATIOS]] * 3, dtype=torch.float64),
        old_logp=torch.zeros(3, len(RATIOS), dtype=torch.float64),
        advantages=torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64),
        eps_low=0.2,
        eps_high=0.28,
    ),
}
