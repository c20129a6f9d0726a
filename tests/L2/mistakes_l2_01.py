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
    mean_dim=1,
    std_dim=1,
):
    """按规格算 advantage；每个关键字参数打开一种典型错误。"""
    r = rewards if rewards.is_floating_point() else rewards.float()
    grouped = r.reshape(-1, group_size) if rows_are_groups else r.reshape(group_size, -1)
    if interleaved:  # 第 i 组是 r[i], r[i+P], r[i+2P], …：(G, P) 的第 i 列，转成 (P, G) 的第 i 行
        grouped = r.reshape(group_size, -1).T
    mean = r.mean() if batch_mean else grouped.mean(dim=mean_dim, keepdim=True)
    centered = grouped - mean
    correction = 1 if unbiased else 0
    if scale == "none":
        adv = centered
    else:
        if scale == "group" and std_dim is None:  # 没给 dim：整张表一个 std
            std = grouped.std(correction=correction)
        elif scale == "group":
            std = grouped.std(dim=std_dim, keepdim=True, correction=correction)
        else:
            std = (centered if batch_std_of_centered else r).std(correction=correction)
        if eps_where == "std":
            adv = centered / (std + eps)
        elif eps_where == "after":
            adv = centered / std + eps
        elif eps_where == "sqrt":  # √(var + eps)
            adv = centered / torch.sqrt(std**2 + eps)
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
STD_DIM0 = Mistake(
    "std 沿错了维度（dim=0：在不同题的第 j 条回答之间求 std）；每道题一行，应沿 dim=1",
    WHY,
    _variant(std_dim=0),
)
STD_WHOLE_TABLE = Mistake(
    'scale="group" 时 std 没给 dim（整批只求了一个 std，那是 "batch"）；应每行（每道题）一个',
    SPEC,
    _variant(std_dim=None),
)
MEAN_DIM0 = Mistake(
    "均值沿错了维度（dim=0：在不同题的第 j 条回答之间求平均）；每道题一行，应沿 dim=1",
    WHY,
    _variant(mean_dim=0),
)
EPS_IN_SQRT = Mistake(
    "把 eps 放进了根号里（(r − 均值) / √(var + eps)）：std 很小的组被压扁了——"
    "ε = 1e-6 时 √ε = 1e-3，比这种组的 std 还大；规格是 std + eps",
    "L2.01「坑 2：ε 放错地方」",
    _variant(eps_where="sqrt"),
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
    STD_DIM0,
    STD_WHOLE_TABLE,
    MEAN_DIM0,
    EPS_IN_SQRT,
]

# 诊断输入：G = 8，三道题。第 0 组八个 0.1（全相等，但 float32 的均值不是 0.1）；
# 第 1 组 3 对 5 错；第 2 组全错（std 恰好为 0）。
_REWARDS = [0.1] * 8 + [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0] + [0.0] * 8
# std 和 eps 差不多大的一组（std = 5e-5，ε = 1e-6），再加一组 1 对 3 错；float64
TINY_STD = [0.1, 0.1, 0.1, 0.1001, 1.0, 0.0, 0.0, 0.0]
DIAGNOSIS_INPUTS = {
    "group": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8),
    "batch": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8, scale="batch"),
    "tiny_std": lambda: dict(rewards=torch.tensor(TINY_STD, dtype=torch.float64), group_size=4),
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
    STD_DIM0: "group",
    STD_WHOLE_TABLE: "group",
    MEAN_DIM0: "group",
    EPS_IN_SQRT: "tiny_std",
}

# group_advantages 里抛出异常时，按异常的种类（common/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
CRASHES = {
    "group_advantages": {
        "int_dtype": (
            "整数 reward（int64）不能直接求 mean / std：先转成 float32（规格：整数 reward 先转成 float32）",
            SPEC,
        ),
        "broadcast": (
            "每组的均值、std 要 keepdim=True：(P, 1) 才能和 (P, G) 相减、相除",
            "L2.01「3.4 提示」",
        ),
        "reshape": "N 个 reward 排不成 (P, G)：用 reshape(-1, group_size)，并先检查 N 能被 G 整除",
        "view": "切片出来的 rewards 在内存里不连续，view 不行：用 reshape",
        "dim_range": "rewards 是一维的 (N,)：先 reshape 成 (P, G)，再沿 dim=1 求均值和 std",
        "bool_ambiguous": "「整行相等」要用张量运算（== 再沿 dim=1 的 all），不能用 Python 的 if 判断张量",
    }
}
