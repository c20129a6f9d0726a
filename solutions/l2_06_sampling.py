"""L2.06 采样前的 logits 处理：temperature 与 top-p（nucleus）的参考实现。"""

from __future__ import annotations

import torch

# 检查点答案（README「检查点」一节）。
CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ACD", "Q3": "B", "Q4": "B", "Q5": "B", "Q6": "C"}


def process_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0
) -> torch.Tensor:
    """把模型输出的 logits 变成「要从中采样的分布」的 logits。

    logits: (B, V)，每行是一个序列下一个 token 的 logits。
    1. 先除以 temperature（>0；<1 更尖，>1 更平）。temperature == 0 是贪心解码，走另一条路（argmax），这里报错。
    2. 再做 top-p：按概率从大到小排，保留「累计概率第一次达到 top_p」的最小集合（至少保留概率最大的那个），
       其余位置置为 -inf。top_p == 1 时什么都不删。
    返回 (B, V)，dtype 与 logits 相同；之后 softmax + torch.multinomial 就是采样。
    """
    if temperature <= 0:
        raise ValueError(
            f"temperature 必须 > 0，得到 {temperature}。temperature=0 表示贪心解码：请直接用 logits.argmax(-1)，不要调用 process_logits"
        )
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p 必须在 (0, 1] 内，得到 {top_p}")

    scaled = logits / temperature
    if top_p >= 1.0:
        return scaled

    # 排序后每行从概率最大的 token 开始；概率在 float32 里算（bf16 的 cumsum 误差太大）
    sorted_logits, sorted_idx = scaled.sort(dim=-1, descending=True)
    probs = sorted_logits.float().softmax(dim=-1)
    # 「排在我前面的 token」的累计概率：它已经 >= top_p 说明前面的集合已经够了，我就不需要
    mass_before = probs.cumsum(dim=-1) - probs
    remove_sorted = mass_before >= top_p  # 第 0 个的 mass_before = 0 < top_p，永远保留
    # 把「排序后的位置」映射回原词表位置
    remove = torch.zeros_like(remove_sorted).scatter(-1, sorted_idx, remove_sorted)
    return scaled.masked_fill(remove, float("-inf"))
