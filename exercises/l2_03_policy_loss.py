"""L2.03 策略损失。读 L2_algorithm/03_policy_loss/README.md 后实现。"""

from __future__ import annotations

import torch

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None}


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """朴素 policy gradient（REINFORCE）的逐 token 损失。

    logp: (B, T) 当前策略对采样 token 的 log 概率（带梯度）。
    advantages: (B,) 每条回答一个 advantage，广播到它的每个 token。
    返回 (B, T)：-A[:, None] * logp。
    """
    raise NotImplementedError(
        "规格见 L2_algorithm/03_policy_loss/README.md 3.1 节，提示在 3.4 节。"
    )


def clipped_surrogate_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO 的 clipped surrogate 逐 token 损失。

    logp, old_logp: (B, T)；advantages: (B,)。old_logp 照原样用，函数里不要 detach（调用方的事，见 README 坑 2）。
    ratio = exp(logp - old_logp)；裁剪区间 [1 - eps_low, 1 + eps_high]，eps_high=None 表示等于 eps_low。
    返回 (loss, clipped)，都是 (B, T)：
      loss    = -min(ratio·A, clip(ratio, 1-eps_low, 1+eps_high)·A)
      clipped = bool，裁剪分支被 min 选中、且它与未裁剪分支不相等的位置。
    """
    raise NotImplementedError(
        "规格和手算例子见 L2_algorithm/03_policy_loss/README.md 3.2、3.3 节，提示在 3.4 节。"
    )
