"""L2.06 采样前的 logits 处理：temperature 与 top-p（nucleus）。读 L2_algorithm/06_sampling/README.md 后实现。"""

from __future__ import annotations

import torch

# 检查点：读 README「检查点」一节，把答案写成大写字母串（多选按字母顺序，如 "AC"）。
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None, "Q6": None}


def process_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0
) -> torch.Tensor:
    """把模型输出的 logits 变成「要从中采样的分布」的 logits。

    logits: (B, V)。
    1. 先除以 temperature。temperature <= 0 抛 ValueError（temperature == 0 是贪心解码，应当直接 argmax，不走这里）。
    2. 再做 top-p：按概率从大到小排，保留「累计概率第一次达到 top_p」的最小集合（至少保留概率最大的那个），
       其余位置置为 -inf。top_p == 1 时什么都不删；top_p 不在 (0, 1] 内抛 ValueError。
    返回 (B, V)，dtype 与 logits 相同。向量化实现（sort + cumsum + scatter），不许对 token 写 Python 循环。
    """
    raise NotImplementedError(
        "规格在 L2_algorithm/06_sampling/README.md 3.1 节；先用 3.2 节的例子在纸上走一遍，"
        "卡住了再展开 3.3 节折叠着的提示。"
    )
