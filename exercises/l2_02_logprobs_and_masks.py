"""L2.02 逐 token 的 log-prob、熵、completion mask 与 masked mean。读 L2_algorithm/02_logprobs_and_masks/README.md 后实现。"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# 每块处理多少行（一行 = 一个 token 位置的整条 V 维 logits）。测试要求你按行分块，别一次算完整个 (B,T,V)。
CHUNK_ROWS = 128

# 检查点：读 README「检查点」一节，把答案写成大写字母串（多选按字母顺序，如 "AC"）。
CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None, "Q5": None}


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """每个位置上「实际采到的那个 token」的 log 概率。

    logits: (B, T, V)，任意浮点类型（训练时通常是 bf16）；logits[b, t] 是预测 tokens[b, t] 的分布。
    tokens: (B, T) 整数 token id。
    返回 (B, T) float32，数值上等于 log_softmax(logits.float(), -1).gather(-1, tokens[..., None])[..., 0]。
    要求：
      - 任何时刻都不能存在完整的 float32 (B, T, V)：展平成 (B*T, V) 后每 CHUNK_ROWS 行算一块，
        每块的 log 概率按 README 第 2 节的公式算；
      - 能反向传播，而且 backward 也不能为所有块攒下 float32 副本（见 README 3.2 节「只分块还不够」）；
      - logits 与 tokens 形状对不上时抛 ValueError；B*T == 0 时返回 (B, T) 的空 float32 张量；
      - 不改传进来的张量；在 meta 设备上也能跑（logprob_memory.py 用它按真实尺寸数字节：不要读数值）。
    """
    raise NotImplementedError(
        "规格、手算例子和分级提示在 L2_algorithm/02_logprobs_and_masks/README.md 3.1、3.6、3.7 节。"
    )


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """每个位置上整个分布的熵（单位 nat），(B, T, V) -> (B, T) float32。

    H = -Σ_v p_v · log p_v，p = softmax(logits.float())。与 token_logprobs 一样按 CHUNK_ROWS 行分块。
    分布很尖时小概率会下溢成 0：结果也必须是有限的数（README 3.3 节）。
    """
    raise NotImplementedError(
        "规格见 L2_algorithm/02_logprobs_and_masks/README.md 3.3 节，提示在 3.7 节。"
    )


def completion_mask(
    completion_ids: torch.Tensor, eos_token_ids: int | Sequence[int]
) -> torch.Tensor:
    """哪些 completion token 参与 loss。

    completion_ids: (B, T)，只含生成部分（不含 prompt）。
    eos_token_ids: 一个 id 或多个 id（Qwen3 有两个：151645 与 151643）；空列表抛 ValueError。
    返回 (B, T) float32：每行第一个 EOS 之前（含这个 EOS）为 1，之后为 0；没有 EOS 的行（被截断）全 1。
    只看 EOS，不要用 pad id 推断（pad == eos 很常见）。不许对 token 写 Python 循环。
    """
    raise NotImplementedError(
        "规格见 L2_algorithm/02_logprobs_and_masks/README.md 3.4 节，提示在 3.7 节。"
    )


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """只对 mask 非 0 的元素求（加权）平均。

    x, mask: 同形状（mask 可以是 bool、0/1 浮点，或非负的小数权重：那时是加权平均）。
    dim=None：对所有被选中的元素求一个 0 维标量；dim=k：沿第 k 维求，返回去掉该维的张量。
    某个切片上 mask 之和为 0 时，那里的结果为 0（不是 NaN，梯度里也不能有 NaN）；
    被遮住的位置即使是 NaN/inf 也不能影响结果。
    """
    raise NotImplementedError(
        "规格见 L2_algorithm/02_logprobs_and_masks/README.md 3.5 节，提示在 3.7 节。"
    )


def hidden_token_logprobs(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """直接从最后一层 hidden state 和 lm_head 权重算逐 token 的 log-prob 和熵（README 第 6 节）。

    hidden: (B, L, H)，模型最后一层（末层 RMSNorm 之后）的输出，L >= T + 1；位置 i 的 hidden 预测第 i+1 个 token。
    lm_head_weight: (V, H)。
    tokens: (B, T) 回答的 token id，是整条序列的最后 T 个 token（哪 T 个位置的 hidden 给它们打分，要你从
      README 6.1 节的规格推，推完用 6.3 节的例子核对）。
    temperature: 与采样时相同；logits 先除以它再求 softmax。
    chunk_rows: 内存的预算：任何时刻存在的 logits 最多这么多行。
    返回 (logp, entropy)，都是 (B, T) float32。logp 能对 hidden 和 lm_head_weight 反向传播；entropy 不带梯度。
    要求（README 6.1 节，每一条为什么在那里见 6.2 节）：
      - 数值和梯度等于普通路径（float32 相乘得到完整的 logits，对齐后交给 token_logprobs / token_entropy）；
      - logits 没有经过 bf16 舍入：输入是 bf16、调用方开着 bf16 autocast 时也一样；
      - forward 和 backward 里都不能出现 (B, T, V) 大小的张量；
      - hidden 的 L < T + 1、权重的 H 与 hidden 不一致、temperature <= 0 时抛 ValueError；
      - 在 meta 设备上也能跑（hidden_memory.py 用它数字节）：不要读数值。
    """
    raise NotImplementedError(
        "规格在 L2_algorithm/02_logprobs_and_masks/README.md 6.1 节，每一部分为什么在那里见 6.2 节，"
        "手算例子在 6.3 节，分级提示在 6.5 节（折叠着，卡住了再展开）。"
    )
