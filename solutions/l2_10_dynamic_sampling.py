"""L2.10 dynamic sampling（DAPO）：丢掉 reward 全相同的组，凑够 P 个有信号的组再训练。

β = 0 时，组内 reward 全相同的组 advantage 精确为 0，对梯度没有任何贡献。dynamic sampling 每一步
多采几批题，只训练有信号的组（DAPO，arXiv 2503.14476 第 3.2 节「Dynamic Sampling」）。
这里写的是「训练哪些组」这一个决定；采样、拼 batch、记日志在 grpo_train.py（--dynamic-sampling D）。
"""

from __future__ import annotations

import torch

CHECKPOINT_ANSWERS = {"Q1": "C", "Q2": "BD", "Q3": "B", "Q4": "A", "Q5": "AC"}


def select_groups(
    rewards: torch.Tensor, group_size: int, target: int, last: bool = False
) -> torch.Tensor:
    """这一步到目前为止采到的组里，训练哪些组 -> 组的下标，(k,) int64，升序。

    rewards: (n·G,) 浮点，这一步已采到的每条回答的 reward：同一组的 G 条相邻，
      先采的批在前、后补采的批接在后面（第 j 组 = rewards[j·G : (j+1)·G]）。
    group_size: G（>= 2）。target: 要凑够的组数 P（>= 1）。
    last: True = 这是这一步能采的最后一批（不能再补采了）。
    规则（课文第 2 节）：
      - 组内 reward 不全相同的组「有信号」；全相同的组（全对、全错、任何值全相等）丢掉；
      - 按组的先后取有信号的组，最多 target 个；
      - 不够 target 个时有几个返回几个（可以是空的）：还能补采就由调用方再采一批；
      - last=True 且一个有信号的组都没有时，返回前 min(target, n) 个组。
    rewards 不是一维、是空的、长度不是 group_size 的整数倍、含 NaN，group_size < 2，target < 1
    -> ValueError。不修改输入。
    """
    if group_size < 2:
        raise ValueError(
            f"group_size 至少为 2（一组只有一条回答就没有组内比较），得到 {group_size}"
        )
    if target < 1:
        raise ValueError(f"target 至少为 1（要凑够的组数），得到 {target}")
    if rewards.dim() != 1 or rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards 要是长度为 group_size={group_size} 的整数倍的一维张量，得到形状 {tuple(rewards.shape)}"
        )
    if torch.isnan(rewards).any():
        raise ValueError(
            "rewards 里有 NaN：先查 reward 函数，NaN 和谁比都「不相等」，含 NaN 的组会被当成有信号"
        )
    groups = rewards.view(-1, group_size)
    informative = (groups != groups[:, :1]).any(dim=1)
    keep = informative.nonzero().flatten()[:target]
    if last and keep.numel() == 0:
        keep = torch.arange(min(target, groups.shape[0]))
    return keep.to(device=rewards.device, dtype=torch.int64)
