"""L2.07 手写 GRPO 训练循环里唯一新写的函数：梯度累积时，每个 micro-batch 的损失该乘多少。

grpo_train.py 把 N = P·G 条回答切成若干个 micro-batch 分别 forward/backward，梯度在 .grad 里累加。
要让累加出来的梯度和「整个 batch 一次算完」完全相同，每个 micro-batch 的损失必须乘上一个权重，
而这个权重取决于 L2.05 的 aggregation。算错了不会报错，只会悄悄改变长短回答的相对权重
（2024 年 Hugging Face 修过的梯度累积 bug 就是 token 平均时按 micro-batch 个数平均）。
"""

from __future__ import annotations

import torch

from common.options.choices import AGGREGATIONS

# grpo_train.py 和 train_trl.py 用的、你在前几节写的函数：脚本用 --impl 选 solutions/ 时就从这里取
# （`import solutions.l2_07_grpo_train as solutions_impl`，再 `L.grpo_loss(...)`；L2.07 第 2 节）。
from solutions.l2_01_advantages import group_advantages
from solutions.l2_02_logprobs_and_masks import completion_mask, hidden_token_logprobs, masked_mean
from solutions.l2_04_kl import kl_k3
from solutions.l2_05_grpo_loss import grpo_loss
from solutions.l2_06_sampling import process_logits
from solutions.l2_09_train_inference_mismatch import tis_weights
from solutions.l2_10_dynamic_sampling import select_groups

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

CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ACD", "Q3": "C", "Q4": "BD"}


def microbatch_weight(mb_mask: torch.Tensor, batch_mask: torch.Tensor, aggregation: str) -> float:
    """micro-batch 损失的权重 w，使 Σ_mb w_mb · grpo_loss(mb) == grpo_loss(整个 batch)。

    mb_mask: (M, T) 这个 micro-batch 的回答 mask；batch_mask: (N, T) 整个 batch 的（mb 是它的若干行）。
    aggregation:
      "sequence_mean" / "constant" -> M / N     （这两种都是「每行的量」对 N 行取平均）
      "token_mean"                 -> Σ mb_mask / Σ batch_mask   （按有效 token 数分摊）
    batch_mask 全 0（整个 batch 没有有效 token）时 "token_mean" 返回 0.0，不出 NaN。
    batch_mask 一行都没有（N = 0）时抛 ValueError：没有回答就没有 loss 可分摊。
    返回 Python float。
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"未知的 aggregation={aggregation!r}，可选 {tuple(AGGREGATIONS)}")
    if mb_mask.dim() != 2 or batch_mask.dim() != 2:
        raise ValueError(
            f"mask 必须是二维 (行, T)，得到 {tuple(mb_mask.shape)} 和 {tuple(batch_mask.shape)}"
        )
    if batch_mask.shape[0] == 0:
        raise ValueError(
            f"batch_mask 一行都没有（形状 {tuple(batch_mask.shape)}）：一条回答都没有的一批没有 loss 可分摊，"
            "检查传进来的是不是整批的 mask"
        )
    if aggregation == "token_mean":
        total = float(batch_mask.sum())
        return float(mb_mask.sum()) / total if total > 0 else 0.0
    return mb_mask.shape[0] / batch_mask.shape[0]
