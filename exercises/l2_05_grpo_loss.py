"""L2.05 完整的 GRPO 损失。读 L2_algorithm/05_grpo_loss/README.md 后实现。

这里 import 的是你自己在前几节写的函数：你的 grpo_loss 从头到尾用的都是你的代码。
"""

from __future__ import annotations

import torch

from common.options.choices import AGGREGATIONS  # noqa: F401  合法的聚合方式（说明见 README）
from exercises.l2_02_logprobs_and_masks import masked_mean  # noqa: F401  你在 L2.02 写的
from exercises.l2_03_policy_loss import clipped_surrogate_loss  # noqa: F401  你在 L2.03 写的
from exercises.l2_04_kl import kl_k3  # noqa: F401  你在 L2.04 写的

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    aggregation: str = "sequence_mean",
    max_completion_length: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO 损失。

    logp: (B, T) 当前策略的逐 token log 概率（带梯度）；old_logp: (B, T) 采样时的，不带梯度。
    advantages: (B,)；mask: (B, T)，1 = 有效 token，0 = padding。
    ref_logp: (B, T) 参考模型的 log 概率；beta > 0 时必须给，否则 ValueError。
    逐 token 损失 = clipped_surrogate_loss(...) 的 loss + beta * kl_k3(logp, ref_logp)。
    aggregation（未知的值 -> ValueError）：
      "sequence_mean" 每行在自己的有效 token 上平均，再对 B 行平均
      "token_mean"    Σ(loss·mask) / Σmask
      "constant"      Σ(loss·mask) / (B · max_completion_length)；max_completion_length=None 时用 T，
                      比 T 还小 -> ValueError
    mask 全 0 的行不能产生 NaN。
    token_weights: (B, T) 非负权重（L2.09 会用到），None = 全 1。它只乘逐 token 的 clipped surrogate 项，
      乘完再加 beta*k3（KL 项不乘）；不求导、不改变分母、不影响 clip 指标；形状不对或有效 token 上有负数/NaN -> ValueError。
    返回 (loss 0 维张量, metrics)：metrics 至少有 "clip_fraction"（clipped 在有效 token 上的平均，float），
    "clip_low_fraction"（clipped 且 A<0）、"clip_high_fraction"（clipped 且 A>0），分母同样是全部有效 token（两者之和 = clip_fraction）；
    给了 ref_logp 时还有 "kl"（k3 在有效 token 上的平均）。
    """
    raise NotImplementedError(
        "规格在 L2_algorithm/05_grpo_loss/README.md 3.1 节，每一步为什么在那里见 3.2 节，"
        "手算例子在 3.3 节，分级提示在 3.4 节（折叠着，卡住了再展开）。"
    )
