"""L2.01 `group_advantages` 的典型错误：故意写错的实现，只给 tests/diagnose.py 比对用。

每个错误版和参考实现只差它自己那一处，其余照规格写；参数与被测函数相同。
`DIAGNOSIS_INPUTS` 按测试运行的顺序排：每个错误在它第一次和正确结果不同的那组输入上，只和它自己一致。
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
    interleaved_kept=False,
    batch_std_of_centered=False,
    mean_dim=1,
    std_dim=1,
    where_swapped=False,
    flat_dim0=False,
    flat_tol=False,
    fixed_eps=None,
    fixed_scale=None,
    sign=1,
    batch_std_dim0=False,
):
    """按规格算 advantage；每个关键字参数打开一种典型错误。"""
    eps = eps if fixed_eps is None else fixed_eps
    scale = scale if fixed_scale is None else fixed_scale
    r = rewards if rewards.is_floating_point() else rewards.float()
    grouped = r.reshape(-1, group_size) if rows_are_groups else r.reshape(group_size, -1)
    if interleaved or interleaved_kept:  # 第 i 组是 r[i], r[i+P], …：(G, P) 的第 i 列转成第 i 行
        grouped = r.reshape(group_size, -1).T
    mean = r.mean() if batch_mean else grouped.mean(dim=mean_dim, keepdim=True)
    centered = sign * (grouped - mean)
    correction = 1 if unbiased else 0
    if scale == "none":
        adv = centered
    else:
        if scale == "group" and std_dim is None:  # 没给 dim：整张表一个 std
            std = grouped.std(correction=correction)
        elif scale == "group":
            std = grouped.std(dim=std_dim, keepdim=True, correction=correction)
        elif batch_std_dim0:  # 对 (P, G) 的表沿 dim=0 求 std：每列一个，不是整批一个
            std = grouped.std(dim=0, keepdim=True, correction=correction)
        else:
            std = (centered if batch_std_of_centered else r).std(correction=correction)
        if eps_where == "std":
            adv = centered / (std + eps)
        elif eps_where == "after":
            adv = centered / std + eps
        elif eps_where == "sqrt":  # √(var + eps)
            adv = centered / torch.sqrt(std**2 + eps)
        elif eps_where == "clamp":  # std 小于 eps 时换成 eps，否则不加
            adv = centered / std.clamp(min=eps)
        else:  # "numerator"
            adv = (centered + eps) / std
    if flat_rule:
        flat = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
        if flat_dim0:  # 「整列相等」：(1, G)，按列置 0
            flat = (grouped == grouped[:1, :]).all(dim=0, keepdim=True)
        if flat_tol:  # 用容差判断：std 很小（这里取 < 1e-3）但不为 0 的组也被置 0
            flat = flat | (grouped.std(dim=1, keepdim=True) < 1e-3)
        zeros = torch.zeros_like(adv)
        adv = torch.where(flat, adv, zeros) if where_swapped else torch.where(flat, zeros, adv)
    if interleaved:  # 放回原来的位置（interleaved_kept：按分组后的顺序直接摊平，没放回去）
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
    "没有把「组内 reward 全相等」的组置为 0（浮点里 r − 均值 不一定恰好是 0，再除以很小的 std + eps 就放大了）；"
    "如果你用了「std 小于某个阈值」来判断：全相等的组在浮点里算出的 std 也不一定小于它（规格用 == 判断）",
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
INTERLEAVED_KEPT = Mistake(
    "按相隔 P 的元素分组（view(G, -1).T：把相邻排列 [p0g0, p0g1, …] 当成了交错排列 [p0g0, p1g0, …]），"
    "算完也没有放回每条回答原来的位置：同一道题的 G 条回答没有分到同一组",
    "L2.01「坑 6：分组的排列方式」",
    _variant(interleaved_kept=True),
)
BATCH_STD_OF_CENTERED = Mistake(
    '"batch" 用的是减完组均值之后的 std；规格要的是整批原始 reward 的 std',
    SPEC,
    _variant(batch_std_of_centered=True),
)
STD_DIM0 = Mistake(
    "std 沿错了维度（dim=0：在不同题的第 j 条回答之间求了 std，而每道题是一行）",
    WHY,
    _variant(std_dim=0),
)
STD_WHOLE_TABLE = Mistake(
    'scale="group" 时 std 没给 dim（整批只求了一个 std，那是 "batch"）；应每行（每道题）一个',
    SPEC,
    _variant(std_dim=None),
)
MEAN_DIM0 = Mistake(
    "均值沿错了维度（dim=0：在不同题的第 j 条回答之间求了平均，而每道题是一行）",
    WHY,
    _variant(mean_dim=0),
)
EPS_IN_SQRT = Mistake(
    "把 eps 放进了根号里（(r − 均值) / √(var + eps)）：std 很小的组被压扁了——"
    "ε = 1e-6 时 √ε = 1e-3，比这种组的 std 还大；规格是 std + eps",
    "L2.01「坑 2：ε 放错地方」",
    _variant(eps_where="sqrt"),
)

WHERE_SWAPPED = Mistake(
    "torch.where 的两个分支写反了：全相等的组保留了算出来的值，其余的组反而被置成了 0",
    WHY,
    _variant(where_swapped=True),
)
FLAT_DIM0 = Mistake(
    "「全相等」沿错了维度（dim=0：判断的是每一列，即不同题的第 j 条回答是否相等，而每道题是一行）",
    WHY,
    _variant(flat_dim0=True),
)
FLAT_TOLERANCE = Mistake(
    "用了容差判断「组内全相等」（std < 阈值、isclose 之类）：reward 只差一点点、std 很小但不为 0 的组也被置成了 0；"
    "规格用 == 判断，这种组照常除以 std + eps",
    SPEC,
    _variant(flat_tol=True),
)
STD_CLAMP = Mistake(
    "用 std.clamp(min=eps) 代替了 std + eps：std 小于 eps 的组分母成了 eps，其余的组分母里没有 eps；规格是 std + eps",
    "L2.01「坑 2：ε 放错地方」",
    _variant(eps_where="clamp"),
)
EPS_IGNORED = Mistake(
    "没用参数 eps（分母里写死了 1e-6）：调用方传的 eps 要原样加在 std 上",
    SPEC,
    _variant(fixed_eps=1e-6),
)
SCALE_IGNORED = Mistake(
    'scale 参数没起作用：不管传什么都按 "group" 算了（"batch" 用整批 reward 的 std，"none" 不除）',
    SPEC,
    _variant(fixed_scale="group"),
)
SIGN_FLIPPED = Mistake(
    "符号反了：算成了 均值 − r（比组均值好的回答应得正的 advantage）",
    "L2.01「2. 公式，以及它从哪来」",
    _variant(sign=-1),
)
BATCH_STD_DIM0 = Mistake(
    '"batch" 的 std 是沿 dim=0 对 (P, G) 的表求的（每列一个）：规格要整批 N 个原始 reward 一个 std',
    SPEC,
    _variant(batch_std_dim0=True),
)

MISTAKES = [
    BIASED_STD,
    BATCH_MEAN,
    EPS_AFTER,
    EPS_NUMERATOR,
    NO_FLAT_RULE,
    ROWS_COLUMNS,
    INTERLEAVED,
    INTERLEAVED_KEPT,
    BATCH_STD_OF_CENTERED,
    STD_DIM0,
    STD_WHOLE_TABLE,
    MEAN_DIM0,
    EPS_IN_SQRT,
    WHERE_SWAPPED,
    FLAT_DIM0,
    FLAT_TOLERANCE,
    STD_CLAMP,
    EPS_IGNORED,
    SCALE_IGNORED,
    SIGN_FLIPPED,
    BATCH_STD_DIM0,
]

# 诊断输入：G = 8，三道题。第 0 组八个 0.1（全相等，但 float32 的均值不是 0.1）；
# 第 1 组 3 对 5 错；第 2 组全错（std 恰好为 0）。
_REWARDS = [0.1] * 8 + [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0] + [0.0] * 8
# std 和 eps 差不多大的一组（std = 5e-5，ε = 1e-6），再加一组 1 对 3 错；float64
TINY_STD = [0.1, 0.1, 0.1, 0.1001, 1.0, 0.0, 0.0, 0.0]
# 只差一点点的组（float64，差值是 2 的幂，减法和均值都是精确的）：std ≈ 4.8e-7、4.7e-10、4.5e-13，
# 都不为 0，规格照常除以 std + eps。每组输入里只有这一个「几乎相等」的组：用容差判断的写法，不管阈值取多少，
# 要么在这里把它置 0（和 FLAT_TOLERANCE 一致），要么在这里是对的
_D = (2.0**-20, 2.0**-30, 2.0**-40)
_NEAR = [[1.0, 1.0, 1.0, 1.0 + d, 1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0] for d in _D]


def _f64(values, **kw):
    return lambda: dict(rewards=torch.tensor(values, dtype=torch.float64), group_size=4, **kw)


# 第 0 组八个 0.1（全相等，float32 的均值不是 0.1）；第 1 组第 0 条也是 0.1：第 0 列整列相等，
# 「全相等」沿错了维度（dim=0）时只有这一列被置 0，和「没有全相等的规则」分得开
_FLAT_COLUMN = [0.1] * 8 + [0.1, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]

# 按这个顺序跑：第一个失败的输入决定学习者先看到的那一行。排在前面的输入上，每个典型错误要么和正确结果一样，
# 要么只和它自己一致（test_each_mistake_is_named_where_it_first_shows 检查）
DIAGNOSIS_INPUTS = {
    "flat_column": lambda: dict(rewards=torch.tensor(_FLAT_COLUMN), group_size=8),
    "group": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8),
    "batch": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8, scale="batch"),
    "near_equal_1": _f64(_NEAR[0]),
    "near_equal_2": _f64(_NEAR[1]),
    "near_equal_3": _f64(_NEAR[2]),
    "tiny_std": _f64(TINY_STD),
    "eps_1e-4": _f64(TINY_STD, eps=1e-4),
    "none": lambda: dict(rewards=torch.tensor(_REWARDS), group_size=8, scale="none"),
}
# 每个输入上比较用的容差：float64 的输入比到 1e-9（第 3 组「几乎相等」的正确结果只有 6.8e-7）
# tiny_std、eps_1e-4 也是 float64：eps 加在除法外面（多出一个 1e-6）和 clamp(min=eps) 只差 1e-6，默认容差分不开
DIAGNOSIS_TOL = {
    name: dict(rtol=1e-9, atol=1e-15)
    for name in DIAGNOSIS_INPUTS
    if name.startswith("near") or name in ("tiny_std", "eps_1e-4")
}
# 参数化测试的 id（ASCII：pytest 把中文 id 显示成 \uXXXX 转义）
MISTAKE_IDS = [
    "biased_std",
    "batch_mean",
    "eps_after",
    "eps_numerator",
    "no_flat_rule",
    "rows_columns",
    "interleaved",
    "interleaved_kept",
    "batch_std_of_centered",
    "std_dim0",
    "std_whole_table",
    "mean_dim0",
    "eps_in_sqrt",
    "where_swapped",
    "flat_dim0",
    "flat_tolerance",
    "std_clamp",
    "eps_ignored",
    "scale_ignored",
    "sign_flipped",
    "batch_std_dim0",
]
assert len(MISTAKE_IDS) == len(MISTAKES)

# group_advantages 里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
_PER_GROUP = (
    "每组的均值或 std 少了一维（归约之后那一维没了）：(P,) 和 (P, G) 的表相减、相除或扩展时对不上",
    "L2.01「3.4 提示」",
)
CRASHES = {
    "group_advantages": {
        "int_dtype": (
            "整数 reward（int64）直接求了 mean / std（规格：整数 reward 先转成 float32）",
            SPEC,
        ),
        "broadcast": _PER_GROUP,
        "expand": _PER_GROUP,
        "reshape": "N 个 reward 排不成要的形状：目标形状写错了，或 N 不能被 G 整除却没有先抛 ValueError",
        "view": "对内存里不连续的 rewards（比如切片出来的）用了 view",
        "dim_range": "在一维的 rewards (N,) 上沿 dim=1 求了均值或 std：它还不是 (P, G) 的表",
        "bool_ambiguous": "用 Python 的 if / and / or 判断了多个元素的张量（多半是在判断「整行相等」）",
    }
}
