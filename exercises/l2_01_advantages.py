"""L2.01 组内优势（group-relative advantage）。读 L2_algorithm/01_advantages/README.md 后实现。"""

from __future__ import annotations

import torch

SCALES = ("group", "batch", "none")

# 检查点：读 README「检查点」一节，把答案写成大写字母串（多选按字母顺序，如 "AC"）。
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}


def group_advantages(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-6, scale: str = "group"
) -> torch.Tensor:
    """把 N = P·G 个 reward 变成 advantage。

    rewards: (N,)，同一个 prompt 的 G 条回答相邻：[p0g0, p0g1, ..., p1g0, ...]。
    scale:
      "group" -> (r - mean_g) / (std_g + eps)
      "batch" -> (r - mean_g) / (std_all + eps)
      "none"  -> r - mean_g
    均值永远按组求；std 用无偏的 torch.std（除以 n-1）："group" 每组一个，"batch" 是整批原始 reward 的一个。
    组内 G 个 reward 全相等（==）的组，advantage 规定为精确的 0（三种 scale、任何浮点 dtype）。
    非法输入（rewards 不是一维、group_size < 2、N 不能被 group_size 整除、未知 scale）抛 ValueError。
    返回 (N,) 浮点张量：浮点 rewards 保持原 dtype，整数 rewards 先转成 float32。
    """
    raise NotImplementedError(
        "规格、手算例子和分级提示在 L2_algorithm/01_advantages/README.md 第 3 节。"
    )
