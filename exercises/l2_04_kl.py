"""L2.04 逐 token 的 KL 估计量 k1/k2/k3。读 L2_algorithm/04_kl/README.md 后实现。

输入都是采样 token 的 log 概率（样本来自当前策略 π）：logp = log π(x)，ref_logp = log π_ref(x)。
"""

from __future__ import annotations

import torch

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None}


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp。形状同输入。"""
    raise NotImplementedError("提示：就是两个 log 概率相减，一行。")


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (logp - ref_logp)**2。形状同输入。"""
    raise NotImplementedError("提示：k1 的平方再乘 0.5。")


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1。形状同输入，恒 >= 0。"""
    raise NotImplementedError(
        "提示：r 是「参考 ÷ 当前」。先用 README 3.2 节的表在纸上核对方向，再看 3.3 节的提示（为什么用 expm1）。"
    )
