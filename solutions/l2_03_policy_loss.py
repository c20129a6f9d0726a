"""L2.03 策略损失：朴素 policy gradient 与 PPO/GRPO 的 clipped surrogate 的参考实现。"""

from __future__ import annotations

import torch

CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ABC", "Q3": "D", "Q4": "C"}


def _check_shapes(logp: torch.Tensor, advantages: torch.Tensor, old_logp=None) -> None:
    """logp 是 (B, T)、advantages 是 (B,)、old_logp（给了的话）和 logp 同形状，否则抛 ValueError。"""
    if logp.dim() != 2:
        raise ValueError(f"logp 必须是 (B, T)，得到形状 {tuple(logp.shape)}")
    if old_logp is not None and old_logp.shape != logp.shape:
        raise ValueError(
            f"old_logp 的形状 {tuple(old_logp.shape)} 应与 logp 的 {tuple(logp.shape)} 相同"
        )
    B = logp.shape[0]
    if advantages.shape != (B,):
        raise ValueError(
            f"advantages 必须是 (B,) = ({B},)，每条回答一个数，得到形状 {tuple(advantages.shape)}。"
            "(B, 1) 的 advantage（CS336 作业的写法）在这里会和 (B, T) 广播成 (B, B, T)：先 .reshape(-1)"
        )


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """朴素 policy gradient（REINFORCE）的逐 token 损失。

    logp: (B, T) 当前策略对采样 token 的 log 概率（要带梯度）。
    advantages: (B,) 每条回答一个 advantage，广播到它的每个 token。形状不对（比如 (B, 1)）抛 ValueError。
    返回 (B, T)：-A[:, None] * logp。对它求梯度就是 -A·∇logπ，最小化它 = 提高好回答的概率。
    """
    _check_shapes(logp, advantages)
    return -advantages[:, None] * logp


def clipped_surrogate_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO 的 clipped surrogate 逐 token 损失。

    logp, old_logp: (B, T)。old_logp 是采样时（旧策略）的 log 概率，不带梯度。
    advantages: (B,)。形状不对（logp 不是二维、old_logp 和 logp 不同形、advantages 不是 (B,)）抛 ValueError。
    eps_low / eps_high: ratio 的下/上裁剪幅度，裁剪区间 [1 - eps_low, 1 + eps_high]；
      eps_high=None 表示与 eps_low 相同（对称裁剪）。DAPO 的 "clip-higher" 就是 eps_high > eps_low。
    返回 (loss, clipped)，都是 (B, T)：
      loss    = -min(ratio·A, clip(ratio, 1-eps_low, 1+eps_high)·A)，ratio = exp(logp - old_logp)
      clipped = 取到了裁剪分支、且裁剪分支与未裁剪分支不相等的位置（bool）。这些位置梯度为 0。
    """
    _check_shapes(logp, advantages, old_logp)
    if eps_high is None:
        eps_high = eps_low
    adv = advantages[:, None]  # (B, 1)，广播到每个 token
    # 在 log 空间相减再 exp：比 exp(logp) / exp(old_logp) 数值稳定
    ratio = torch.exp(logp - old_logp)  # (B, T)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    unclipped_obj = ratio * adv
    clipped_obj = clipped_ratio * adv
    # 取两者中更"悲观"（更小）的目标：不让一次更新从 ratio 偏离里占便宜
    loss = -torch.minimum(unclipped_obj, clipped_obj)
    # 裁剪分支严格更小，才算"被裁剪"：A>0 时是 ratio > 1+eps_high，A<0 时是 ratio < 1-eps_low；A=0 从不算
    clipped = clipped_obj < unclipped_obj
    return loss, clipped
