"""L2.01 `group_advantages` 的典型错误：故意写错的实现，只给 tests/diagnose.py 比对用。

每个错误版和参考实现只差它自己那一处，其余照规格写；参数与被测函数相同。
`SHOWN_BY` 给出每个错误在哪组诊断输入上能被认出来（输出和参考答案、和排在它前面的错误都不同）。
"""

from __future__ import annotations

import torch
from diagnose import Mistake

SPEC = "L2.01「3.1 输入、输出、边界」"
WHY = "L2.01「3.2 每一步为什么在那里」"
EXAMPLE = "L2.01「3.3 手算一个例子」"


def _advantages(
    rewards,
    group_size,
    eps=1e-6,
    scale="group",
    *,
    unbiased=True,
    batch_mean=False,
    eps_where="std",
    flat_rule=True,
    rows_are_groups=True,
    interleaved=False,
    batch_std_of_centered=False,
):
    """按规格算 advantage；每个关键字参数打开一种典型错误。"""
    r = rewards if rewards.is_floating_point() else rewards.float()
    grouped = r.reshape(-1, group_size) if rows_are_groups else r.reshape(group_size, -1)
    if interleaved:  # 第 i 组是 r[i], r[i+P], r[i+2P], …：(G, P) 的第 i 列，转成 (P, G) 的第 i 行
        grouped = r.reshape(group_size, -1).T
    mean = r.mean() if batch_mean else grouped.mean(dim=1, keepdim=True)
    centered = grouped - mean
    if scale == "none":
        adv = centered
    else:
        if scale == "group":
            std = grouped.std(dim=1, keepdim=True, correction=1 if unbiased else 0)
        else:
            std = (centered if batch_std_of_centered else r).std(correction=1 if unbiased else 0)
        if eps_where == "std":
            adv = centered / (std + eps)
        elif eps_where == "after":
            adv = centered / std + eps
        else:  # "numerator"
            adv = (centered + eps) / std
    if flat_rule:
        flat = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
        adv = torch.where(flat, torch.zeros_like(adv), adv)
    if interleaved:  # 放回原来的位置
        adv = adv.T
    return adv.reshape(-1)


def _variant(**wrong):
    return lambda rewards, group_size, eps=1e-6, scale="group": _advantages(
        rewards, group_size, eps, scale, **wrong
    )


BIASED_STD = Mistake(
    "用了有偏 std（除以 G，而不是 G−1）",
    "L2.01「坑 1：std 的 Bessel 校正」",
    _variant(unbiased=False),
)
BATCH_MEAN = Mistake(
    "减的是整批的均值，不是每组自己的均值", "L2.01「1. 直觉」", _variant(batch_mean=True)
)
EPS_AFTER = Mistake(
    "把 eps 加在了除法外面（(r − 均值) / std + eps），全对/全错的组 std = 0，得到 NaN",
    "L2.01「坑 2：ε 放错地方」",
    _variant(eps_where="after", flat_rule=False),
)
EPS_NUMERATOR = Mistake(
    "把 eps 加在了分子上（(r − 均值 + eps) / std），全对/全错的组 std = 0，得到 inf",
    "L2.01「坑 2：ε 放错地方」",
    _variant(eps_where="numerator", flat_rule=False),
)
NO_FLAT_RULE = Mistake(
    "没有把「组内 reward 全相等」的组置为 0（浮点里 r − 均值 不一定恰好是 0，再除以很小的 std + eps 就放大了）",
    WHY,
    _variant(flat_rule=False),
)
ROWS_COLUMNS = Mistake(
    "reshape 的行列写反了（排成了 (G, P)）：同一道题的 G 条回答没有落在同一行",
    "L2.01「坑 6：分组的排列方式」",
    _variant(rows_are_groups=False),
)
INTERLEAVED = Mistake(
    "按相隔 P 的元素分组（把相邻排列 [p0g0, p0g1, …] 当成了交错排列 [p0g0, p1g0, …]）："
    "同一道题的 G 条回答没有分到同一组",
    "L2.01「坑 6：分组的排列方式」",
    _variant(interleaved=True),
)
BATCH_STD_OF_CENTERED = Mistake(
    '"batch" 用的是减完组均值之后的 std；规格要的是整批原始 reward 的 std',
    SPEC,
    _variant(batch_std_of_centered=True),
)

MISTAKES = [
    BIASED_STD,
    BATCH_MEAN,
    EPS_AFTER,
    EPS_NUMERATOR,
    NO_FLAT_RULE,
    ROWS_COLUMNS,
    INTERLEAVED,
    BATCH_STD_OF_CENTERED,
]

# 诊断输入：G = 8，三道题。第 0 组八个 0.1（全相等，但 float32 的均值不是 0.1）；
# 第 1 组 3 对 5 错；第 2 组全错（std 恰好为 0）。
_REWARDS = [0.1] * 8 + [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0] + [0.0] * 8
DIAGNOSIS_INPUTS = {
    "group": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8),
    "batch": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8, scale="batch"),
}
SHOWN_BY = {
    BIASED_STD: "group",
    BATCH_MEAN: "group",
    EPS_AFTER: "group",
    EPS_NUMERATOR: "group",
    NO_FLAT_RULE: "group",
    ROWS_COLUMNS: "group",
    INTERLEAVED: "group",
    BATCH_STD_OF_CENTERED: "batch",
}
