"""L2.02 逐 token 的 log-prob、熵、completion mask 与 masked mean 的参考实现。"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch.utils.checkpoint import checkpoint

# 每块处理多少行（一行 = 一个 token 位置的整条 V 维 logits）。
# Qwen3 的 V = 151,936：一块 128 行的 float32 副本是 128 × 151,936 × 4 B ≈ 78 MB，
# 而 64×512 个 token 的完整 float32 (B,T,V) 张量要 19.9 GB。128 行在 GPU 上也足够让一个 kernel 吃满，
# TRL 的 entropy_from_logits 默认也是 chunk_size=128（trl/trainer/utils.py）。
CHUNK_ROWS = 128

# 检查点答案（README「检查点」一节）。
CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ABD", "Q3": "B", "Q4": "B", "Q5": "C"}


def _chunk_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(n, V) 任意浮点 + (n,) -> (n,) float32：log_softmax(x)[y] = x[y] - logsumexp(x)。"""
    x = logits.float()  # 只有这一块被升到 float32
    picked = x.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(x, dim=-1)


def _chunk_entropy(logits: torch.Tensor) -> torch.Tensor:
    """(n, V) -> (n,) float32：H = -Σ p·log p。"""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _rowwise_in_chunks(fn, logits: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
    """把 (..., V) 展平成 (n, V)，每 CHUNK_ROWS 行调用一次 fn，拼回 (...) 形状。

    只分块还不够：autograd 会为 backward 把每一块的 float32 中间结果都存下来，
    所有块加起来又是一整个 (B,T,V) float32。所以需要梯度时用 activation checkpointing：
    forward 只留下输入（原 logits 的视图，不占新内存），backward 时逐块重算。
    """
    lead = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    flat_extra = [e.reshape(-1) for e in extra]
    need_grad = torch.is_grad_enabled() and logits.requires_grad
    outs = []
    for start in range(0, flat.shape[0], CHUNK_ROWS):  # 循环的是「块」，块内全部向量化
        args = [flat[start : start + CHUNK_ROWS]] + [
            e[start : start + CHUNK_ROWS] for e in flat_extra
        ]
        outs.append(checkpoint(fn, *args, use_reentrant=False) if need_grad else fn(*args))
    if not outs:  # B*T == 0 的空输入
        return torch.zeros(lead, dtype=torch.float32, device=logits.device)
    return torch.cat(outs).reshape(lead)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """每个位置上「实际采到的那个 token」的 log 概率。

    logits: (B, T, V)，任意浮点类型（训练时通常是 bf16）；logits[b, t] 是预测 tokens[b, t] 的分布。
    tokens: (B, T) 整数 token id。
    返回 (B, T) float32，数值上等于 log_softmax(logits.float(), -1).gather(-1, tokens[..., None])[..., 0]，
    但任何时刻都不会存在完整的 float32 (B, T, V)（forward 和 backward 都不会）。可以反向传播。
    """
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(
            f"logits 形状 {tuple(logits.shape)} 与 tokens 形状 {tuple(tokens.shape)} 不匹配：应为 (B,T,V) 与 (B,T)"
        )
    return _rowwise_in_chunks(_chunk_logprobs, logits, tokens.long())


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """每个位置上整个分布的熵（单位 nat），(B, T, V) -> (B, T) float32。

    同样分块计算；训练脚本通常只用它记日志，会在 torch.no_grad() 下调用。
    """
    return _rowwise_in_chunks(_chunk_entropy, logits)


def completion_mask(
    completion_ids: torch.Tensor, eos_token_ids: int | Sequence[int]
) -> torch.Tensor:
    """哪些 completion token 参与 loss。

    completion_ids: (B, T)，只含生成部分（不含 prompt）。
    eos_token_ids: 一个 id 或多个 id（Qwen3 有两个：151645 <|im_end|> 与 151643 <|endoftext|>）。
    返回 (B, T) float32：每行第一个 EOS 之前（含这个 EOS）为 1，之后为 0；没有 EOS 的行（被截断）全 1。
    只看 EOS，不看 pad id：很多 tokenizer 的 pad == eos，按 pad 推断会把真正的 EOS 也遮掉。
    """
    ids = [eos_token_ids] if isinstance(eos_token_ids, int) else list(eos_token_ids)
    if not ids:
        raise ValueError("eos_token_ids 不能为空")
    is_eos = torch.isin(completion_ids, torch.tensor(ids, device=completion_ids.device))
    # 在位置 t 之前（不含 t）出现过几个 EOS；>0 说明 t 在第一个 EOS 之后
    eos_before = is_eos.long().cumsum(dim=1) - is_eos.long()
    return (eos_before == 0).float()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """只对 mask 非 0 的元素求（加权）平均。

    x, mask: 同形状（mask 可以是 bool、0/1 浮点，或非负的小数权重：那时是加权平均）。
    dim=None：对所有被选中的元素求一个标量；dim=k：沿第 k 维求，返回去掉该维的张量。
    某个切片上 mask 之和为 0 时，结果为 0（而不是 0/0 = NaN）；被遮住的位置即使是 NaN/inf 也不影响结果。
    """
    m = mask.to(x.dtype)
    # 先把被遮住的位置置 0：0 * NaN 仍是 NaN，不能只靠乘法
    num = torch.where(mask != 0, x * m, torch.zeros_like(x))
    num = num.sum() if dim is None else num.sum(dim)
    den = m.sum() if dim is None else m.sum(dim)
    has = den != 0
    # 分母为 0 的地方先换成 1 再除，再用 where 置 0：这样连梯度里都不会出现 inf * 0 = NaN
    return torch.where(
        has, num / torch.where(has, den, torch.ones_like(den)), torch.zeros_like(num)
    )


# ---------------------------------------------------------------- 再进一步：连 logits 都不要（README 第 6 节）


def _chunk_hidden(h: torch.Tensor, w: torch.Tensor, tok: torch.Tensor, temperature: float):
    """(n, H) + (V, H) + (n,) -> ((n,) log-prob, (n,) 熵)，都是 float32。

    先把两个操作数升到 float32 再做矩阵乘：这一块的 logits 从一开始就是 float32，
    不经过一次 bf16 舍入（GPU 上打开 TF32 时，bf16 的输入在 TF32 里是精确的，结果等于
    「bf16 相乘、float32 累加」）。
    """
    # 外层若开着 autocast，它会把这次矩阵乘改回 bf16：这里关掉（meta 设备没有 autocast，数字节时用）
    dev = h.device.type
    no_autocast = torch.autocast(dev, enabled=False) if dev != "meta" else nullcontext()
    with no_autocast:
        z = (h.float() @ w.float().T) / temperature  # (n, V) float32：只有这一块
        lse = torch.logsumexp(z, dim=-1)
        logp = z.gather(-1, tok.unsqueeze(-1)).squeeze(-1) - lse
        # 熵只用来看曲线，不求导；backward 重算这一块时 checkpoint 会提前停下，不会再算它
        with torch.no_grad():
            logp_all = z - lse.unsqueeze(-1)  # 写成 -Σ p·log p：logits 很大时比 lse - Σ p·z 少抵消
            ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def hidden_token_logprobs(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_rows: int = CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """直接从最后一层 hidden state 和 lm_head 权重算逐 token 的 log-prob 和熵，完整的 logits 从不存在。

    hidden: (B, L, H)，模型最后一层（末层 RMSNorm 之后）的输出，L >= T + 1；位置 i 的 hidden 预测第 i+1 个 token。
    lm_head_weight: (V, H)，lm_head 的权重（Qwen3 小模型里与 embedding 共享）。
    tokens: (B, T) 回答的 token id，是序列的最后 T 个 token，所以给它们打分的是 hidden[:, L-T-1 : L-1]。
    temperature: 与采样时相同；logits 先除以它再求 softmax。
    chunk_rows: 每块多少行（B·T 个位置展平后）；每块的 logits 是 (chunk_rows, V) float32。
    返回 (logp, entropy)，都是 (B, T) float32。logp 可以对 hidden 和 lm_head_weight 反向传播；entropy 不带梯度。
    数值上等于 token_logprobs(hidden[:, L-T-1:L-1].float() @ W.float().T / temperature, tokens)，
    但 forward 和 backward 里都不会出现 (B, T, V) 大小的张量：每块在 checkpoint 下算，backward 时逐块重算。
    """
    B, T = tokens.shape
    if hidden.dim() != 3 or hidden.shape[0] != B or hidden.shape[1] < T + 1:
        raise ValueError(
            f"hidden 形状 {tuple(hidden.shape)} 与 tokens 形状 {tuple(tokens.shape)} 对不上："
            "hidden 应为 (B, L, H) 且 L >= T + 1（最后一个位置的 hidden 不预测回答里的任何 token）"
        )
    if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != hidden.shape[2]:
        raise ValueError(
            f"lm_head_weight 形状 {tuple(lm_head_weight.shape)} 应为 (V, H={hidden.shape[2]})"
        )
    if not temperature > 0 or chunk_rows < 1:
        raise ValueError(
            f"temperature 必须 > 0、chunk_rows 必须 >= 1（得到 {temperature}、{chunk_rows}）"
        )
    L = hidden.shape[1]
    flat = hidden[:, L - T - 1 : L - 1].reshape(B * T, -1)  # (B·T, H)：错一位，再展平
    tok = tokens.reshape(-1).long()
    need_grad = torch.is_grad_enabled() and (hidden.requires_grad or lm_head_weight.requires_grad)
    logps, ents = [], []
    for s in range(0, B * T, chunk_rows):
        args = (flat[s : s + chunk_rows], lm_head_weight, tok[s : s + chunk_rows], temperature)
        lp, ent = (
            checkpoint(_chunk_hidden, *args, use_reentrant=False)
            if need_grad
            else _chunk_hidden(*args)
        )
        logps.append(lp)
        ents.append(ent.detach())
    if not logps:  # T == 0 或 B == 0
        empty = torch.zeros(B, T, dtype=torch.float32, device=hidden.device)
        return empty, empty.clone()
    return torch.cat(logps).reshape(B, T), torch.cat(ents).reshape(B, T)
