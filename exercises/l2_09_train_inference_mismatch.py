"""L2.09 训练–推理不一致：截断重要性采样（TIS）的权重。读 L2_algorithm/09_train_inference_mismatch/README.md 后实现。"""

from __future__ import annotations

import torch

from common.options.choices import TIS_LEVELS

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}

LEVELS = TIS_LEVELS[1:]  # ("token", "sequence")；"none" = 不校正，用不到 tis_weights


def tis_weights(
    logp_train: torch.Tensor,
    logp_rollout: torch.Tensor,
    mask: torch.Tensor,
    cap: float | None = 2.0,
    level: str = "token",
) -> torch.Tensor:
    """截断重要性采样的权重 -> (B, T)，dtype 同 logp_train，不带梯度。

    logp_train: (B, T) 训练前向给采样 token 的 log 概率；logp_rollout: (B, T) 推理引擎采样时给的；
    mask: (B, T)，1 = 有效 token，0 = padding（padding 处的 logp 可以是 NaN/inf，不能影响结果）。
    cap: 截断上限（> 0）；None = 不截断。level 不在 LEVELS 里、cap <= 0、形状不一致 -> ValueError。
    level="token":    w = min(exp(logp_train - logp_rollout), cap)，逐 token
    level="sequence": w = min(exp(该行有效 token 上 (logp_train - logp_rollout) 之和), cap)，整行同一个值
    padding 处的权重为 0。
    """
    raise NotImplementedError(
        "规格在 L2_algorithm/09_train_inference_mismatch/README.md 第 2 节，手算例子在第 3 节，"
        "分级提示在「练习」一节（折叠着，卡住了再展开）。"
    )
