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
    组内 G 个 reward 全相等（==）的组，advantage 精确为 0（三种 scale、任何浮点 dtype 都是）。
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
        adv = centered
    else:
        # "group"：每组自己的 std，(P, 1)；"batch"：整个 batch 一个 std（标量）
        std = grouped.std(dim=1, keepdim=True) if scale == "group" else r.std()
        # eps 加在 std 上（分母外面）：std 很小的组不会被放大到无穷
        adv = centered / (std + eps)
    # 组内 reward 全相等 -> advantage 规定为精确的 0。不能指望 r - mean 自己等于 0：
    # 12 个 fp32 的 1.1 求出的均值不是 1.1，残差 ~1e-7 除以 (std + eps) 会变成 -0.106。
    flat = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    return torch.where(flat, torch.zeros_like(adv), adv).reshape(-1)
