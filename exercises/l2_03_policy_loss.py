"""L2.03 策略损失。读 L2_algorithm/03_policy_loss/README.md 后实现。"""

from __future__ import annotations

import torch

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None}


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """朴素 policy gradient（REINFORCE）的逐 token 损失。

    logp: (B, T) 当前策略对采样 token 的 log 概率（带梯度）。
    advantages: (B,) 每条回答一个 advantage，作用在这条回答的每个 token 上。
    返回 (B, T)：逐 token 的损失，不求和、不求平均。
    logp 不是二维、advantages 不是 (B,)（比如 CS336 作业的 (B, 1)）时抛 ValueError。
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
    logp 不是二维、old_logp 与 logp 不同形、advantages 不是 (B,) 时抛 ValueError。
    """
    raise NotImplementedError(
        "规格和手算例子见 L2_algorithm/03_policy_loss/README.md 3.2、3.3 节，提示在 3.4 节。"
    )
