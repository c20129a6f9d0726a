"""L2.04 逐 token 的 KL 估计量 k1/k2/k3 的参考实现（John Schulman, "Approximating KL Divergence"）。

三个函数的输入都是采样 token 的 log 概率，样本来自当前策略 π：
    logp     = log π(x)      当前策略
    ref_logp = log π_ref(x)  参考策略（冻结的初始模型）
对 x ~ π 取期望，k1 和 k3 是 KL(π || π_ref) 的无偏估计，k2 有偏（偏差在 π 与 π_ref 接近时是三阶小量）。
"""

from __future__ import annotations

import torch

CHECKPOINT_ANSWERS = {"Q1": "A", "Q2": "ACD", "Q3": "C", "Q4": "D"}


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp = log(π/π_ref)。无偏，但单个样本可以为负，方差大。形状同输入。"""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (logp - ref_logp)**2。恒 >= 0、方差小，但有偏。形状同输入。"""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1 = (r - 1) - log r，r = π_ref/π。

    无偏且恒 >= 0（因为 log r <= r - 1）。GRPO（DeepSeekMath）、TRL、simple_GRPO 用的就是它。形状同输入。
    """
    log_r = ref_logp - logp
    # expm1(x) = exp(x) - 1，x 很小时不会有 "1 + 小数 - 1" 的抵消误差；expm1(x) - x 在浮点下也精确 >= 0
    return torch.expm1(log_r) - log_r
