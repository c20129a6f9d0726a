"""L2.01 组内优势（group-relative advantage）的参考实现。"""

from __future__ import annotations

import torch

SCALES = ("group", "batch", "none")

# 检查点答案（README「检查点」一节）。
CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ACD", "Q3": "A", "Q4": "B", "Q5": "B"}


def group_advantages(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-6, scale: str = "group"
) -> torch.Tensor:
    """把 N = P·G 个 reward 变成 advantage。

    rewards: (N,)，同一个 prompt 的 G 条回答在内存里相邻：[p0g0, p0g1, ..., p1g0, ...]。
    scale:
      "group" -> (r - mean_g) / (std_g + eps)      原版 GRPO、TRL scale_rewards="group"
      "batch" -> (r - mean_g) / (std_all + eps)    TRL scale_rewards="batch"
      "none"  -> r - mean_g                        Dr. GRPO，TRL scale_rewards="none"
    std 一律是无偏（Bessel，除以 n-1）的 torch.std，与 TRL、slime 一致。
    返回 (N,)，dtype 与 rewards 的浮点类型相同。
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards 必须是一维 (N,)，得到形状 {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size 至少为 2（只有一条回答就没有组内比较），得到 {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"rewards 个数 {rewards.numel()} 不能被 group_size={group_size} 整除")
    if scale not in SCALES:
        raise ValueError(f"未知的 scale={scale!r}，可选 {SCALES}")

    r = rewards if rewards.is_floating_point() else rewards.float()
    grouped = r.reshape(-1, group_size)  # (P, G)：每行是一个 prompt 的一组回答
    centered = grouped - grouped.mean(dim=1, keepdim=True)  # 组内基线：减去组均值
    if scale == "none":
        return centered.reshape(-1)
    if scale == "group":
        std = grouped.std(dim=1, keepdim=True)  # 每组自己的 std，(P, 1)
    else:
        std = r.std()  # 整个 batch 一个 std（标量）
    # eps 加在 std 上（分母外面），全对/全错的组 std=0 -> advantage 精确为 0，不会出 NaN
    return (centered / (std + eps)).reshape(-1)
