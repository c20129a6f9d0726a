"""L2.10 dynamic sampling：训练哪些组。读 L2_algorithm/10_dynamic_sampling/README.md 后实现。"""

from __future__ import annotations

import torch

# 检查点作答：把 None 换成大写字母串（多选按字母顺序，如 "AC"）
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}


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
    raise NotImplementedError(
        "规格在 L2_algorithm/10_dynamic_sampling/README.md 第 2 节，手算例子在第 3 节，"
        "分级提示在「练习」一节（折叠着，卡住了再展开）。"
    )
