"""L2.04 逐 token 的 KL 估计量 k1/k2/k3 的参考实现（John Schulman, "Approximating KL Divergence"）。

三个函数的输入都是采样 token 的 log 概率，样本来自当前策略 π：
    logp     = log π(x)      当前策略
    ref_logp = log π_ref(x)  参考策略（冻结的初始模型）
对 x ~ π 取期望，k1 和 k3 是 KL(π || π_ref) 的无偏估计，k2 有偏（偏差在 π 与 π_ref 接近时是三阶小量）。
"""

from __future__ import annotations

from collections.abc import Callable

import torch

CHECKPOINT_ANSWERS = {"Q1": "A", "Q2": "ACD", "Q3": "C", "Q4": "D", "Q5": "B"}

# kl_estimator_stats 返回的键（README 3.4 节）
STATS_KEYS = ("kl", "mean", "bias", "var", "neg_frac")


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
    log_r = (
        ref_logp - logp
    )  # 在 log 空间里相减：log 概率再低（float32 里 e^-120 下溢成 0）也不出 0/0
    # expm1(x) = exp(x) - 1，x 很小时不会有 "1 + 小数 - 1" 的抵消误差；expm1(x) - x 在浮点下也精确 >= 0：
    # 真值 e^x - 1 > x，而 x 本身是一个浮点数，expm1 舍入到真值两侧最近的浮点数都不会小于 x
    return torch.expm1(log_r) - log_r


def kl_estimator_stats(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    estimator: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> dict[str, float]:
    """在一个玩具 categorical 分布上精确地（不采样）量一个 KL 估计量的偏差和方差。

    logp, ref_logp: (V,) 两个完整分布在 V 个类别上的 log 概率：logp = log π（采样用的当前策略），
      ref_logp = log π_ref。每个类别的概率都 > 0。
    estimator: 逐元素的 (logp, ref_logp) -> k，比如 kl_k1 / kl_k2 / kl_k3。
    返回（Python float）：
      "kl"       精确的 KL(π‖π_ref) = Σ_x π(x)·(logp(x) − ref_logp(x))
      "mean"     一个样本 x ~ π 的估计值的期望 E_π[k] = Σ_x π(x)·k(x)
      "bias"     mean − kl
      "var"      一个样本的方差 Var_π[k] = Σ_x π(x)·(k(x) − mean)²
      "neg_frac" 一个样本为负的概率 P_π(k < 0) = Σ_{x: k(x)<0} π(x)
    全部在 float64 里算。形状不对、有非有限值、不是归一化的 log 概率时抛 ValueError。
    """
    if logp.dim() != 1 or ref_logp.shape != logp.shape:
        raise ValueError(
            f"logp 和 ref_logp 应是同样长的一维 (V,)：得到 {tuple(logp.shape)} 和 {tuple(ref_logp.shape)}"
        )
    for name, lp in (("logp", logp), ("ref_logp", ref_logp)):
        if not torch.isfinite(lp).all():
            raise ValueError(f"{name} 里有 NaN 或 ±inf：每个类别的概率都要 > 0（log 概率有限）")
        total = torch.logsumexp(lp.double(), dim=0).item()
        if abs(total) > 1e-5:
            raise ValueError(
                f"{name} 不是一个分布的 log 概率：logsumexp = {total:.4g}，应为 0（先做 log_softmax）"
            )
    p = logp.double().exp()  # 期望是对采样分布 π 求的
    k = estimator(logp, ref_logp).double()
    kl = (p * (logp.double() - ref_logp.double())).sum()
    mean = (p * k).sum()
    var = (p * (k - mean) ** 2).sum()
    neg_frac = p[k < 0].sum()
    values = (kl, mean, mean - kl, var, neg_frac)
    return {key: v.item() for key, v in zip(STATS_KEYS, values)}
