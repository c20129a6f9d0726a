"""L2.04 逐 token 的 KL 估计量 k1/k2/k3，以及量它们偏差和方差的工具。读 L2_algorithm/04_kl/README.md 后实现。

输入都是采样 token 的 log 概率（样本来自当前策略 π）：logp = log π(x)，ref_logp = log π_ref(x)。
三个估计量的公式在 README 3.1 节（那里写的是数学，代码要你自己写）。
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}

# kl_estimator_stats 返回的键（README 3.4 节）
STATS_KEYS = ("kl", "mean", "bias", "var", "neg_frac")


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1：KL(π‖π_ref) 最直接的单样本估计（无偏，单个样本可正可负）。形状、dtype 同输入，逐元素。"""
    raise NotImplementedError("提示：公式在 README 3.1 节，先用 3.2 节的表在纸上核对方向。")


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2：KL 在两个分布接近时的二阶近似（每个样本 >= 0，但有偏）。形状、dtype 同输入，逐元素。"""
    raise NotImplementedError("提示：公式在 README 3.1 节，注意那个 ½ 放在哪里。")


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3：加了控制变量的无偏估计，每个样本精确 >= 0。形状、dtype 同输入，逐元素。

    log 概率很低（float32 里 e^-120 会下溢成 0）、log 比值很小（1e-16）时也要算对。
    """
    raise NotImplementedError(
        "提示：r 是「参考 ÷ 当前」。先用 README 3.2 节的表在纸上核对方向；3.1 节「边界」要求 k3 精确 >= 0，"
        "卡住了再展开 3.3 节折叠着的提示。"
    )


def kl_estimator_stats(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    estimator: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> dict[str, float]:
    """在一个玩具 categorical 分布上精确地（不采样）量一个 KL 估计量：期望离真值多远、单个样本有多吵。

    logp, ref_logp: (V,) 两个完整分布在 V 个类别上的 log 概率（logp 是采样用的 π，ref_logp 是 π_ref），
      每个类别的概率都 > 0。
    estimator: 逐元素的函数 (logp, ref_logp) -> k，比如 kl_k1 / kl_k2 / kl_k3。
    返回 dict，键是 STATS_KEYS，值都是 Python float：
      "kl" 精确的 KL(π‖π_ref)；"mean" 一个样本 x ~ π 的估计值的期望；"bias" 期望比精确 KL 多多少；
      "var" 一个样本的方差；"neg_frac" 一个样本为负的概率。
    形状不对（不是一维、两者不一样长）、有 NaN/inf、不是归一化的 log 概率时抛 ValueError。
    """
    raise NotImplementedError("规格、手算例子和分级提示在 L2_algorithm/04_kl/README.md 3.4 节。")
