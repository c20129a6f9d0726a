"""L2.07 手写 GRPO 训练循环：梯度累积时每个 micro-batch 的损失权重。读 L2_algorithm/07_grpo_train/README.md 后实现。"""

from __future__ import annotations

import torch

from common.options.choices import AGGREGATIONS  # L2.05 的三种聚合方式

# grpo_train.py 和 train_trl.py 用的、你在前几节写的函数：脚本用 --impl 选 exercises/ 时就从这里取
# （`import exercises.l2_07_grpo_train as exercises_impl`，再 `L.grpo_loss(...)`；L2.07 第 2 节）。
from exercises.l2_01_advantages import group_advantages
from exercises.l2_02_logprobs_and_masks import completion_mask, hidden_token_logprobs, masked_mean
from exercises.l2_04_kl import kl_k3
from exercises.l2_05_grpo_loss import grpo_loss
from exercises.l2_06_sampling import process_logits
from exercises.l2_09_train_inference_mismatch import tis_weights
from exercises.l2_10_dynamic_sampling import select_groups

__all__ = [
    "AGGREGATIONS",
    "CHECKPOINT_ANSWERS",
    "completion_mask",
    "group_advantages",
    "grpo_loss",
    "hidden_token_logprobs",
    "kl_k3",
    "masked_mean",
    "microbatch_weight",
    "process_logits",
    "select_groups",
    "tis_weights",
]

CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None}


def microbatch_weight(mb_mask: torch.Tensor, batch_mask: torch.Tensor, aggregation: str) -> float:
    """micro-batch 损失的权重 w，使 Σ_mb w_mb · grpo_loss(mb) == grpo_loss(整个 batch)。

    mb_mask: (M, T) 这个 micro-batch 的回答 mask；batch_mask: (N, T) 整个 batch 的（mb 是它的若干行）。
    aggregation: L2.05 的三种聚合之一（AGGREGATIONS）；w 怎么由它决定，要你自己推（README 2.7 节）。
    batch_mask 全 0 时 "token_mean" 返回 0.0（不出 NaN，也不抛 ZeroDivisionError）。
    未知 aggregation、mask 不是二维、batch_mask 一行都没有（N = 0）时抛 ValueError。返回 Python float。
    """
    raise NotImplementedError(
        "规格在 L2_algorithm/07_grpo_train/README.md 2.7 节：w 要你自己推，推完先用那里的手算例子核对；"
        "卡住了再展开那一节折叠着的提示。"
    )
