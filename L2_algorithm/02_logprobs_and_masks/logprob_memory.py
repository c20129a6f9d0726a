"""数一数：算 token log-prob 时，最大的 float32 张量有多大、为 backward 存了多少 float32。

在 meta 设备上跑（只有形状、不分配内存），所以 Qwen3 的真实尺寸也能在笔记本上瞬间算完：
    python L2_algorithm/02_logprobs_and_masks/logprob_memory.py                  # 64×512 个 token，V=151,936
    python L2_algorithm/02_logprobs_and_masks/logprob_memory.py --batch 8 --seq 512 --impl exercises
数的是张量的字节数（算子真实产生的输出、autograd 真实存下的张量），不是 GPU 上测的峰值显存。
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# 让 --impl 导入的是本仓库（这个脚本所在的仓库）里的 exercises/、solutions/，而不是别处装过的同名包
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

QWEN3_VOCAB = (
    151_936  # Qwen3 的 lm_head 行数（embedding 补齐到 151,936；tokenizer 实际 151,669 个 token）
)


class _Float32Tracker(TorchDispatchMode):
    """记录执行期间任何一个算子产出的最大 float32 张量（字节）。"""

    def __init__(self):
        super().__init__()
        self.max_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.max_bytes = max(self.max_bytes, t.numel() * 4)
        return out


def measure(fn, logits: torch.Tensor, tokens: torch.Tensor) -> dict[str, int]:
    """跑一次 fn(logits, tokens).sum().backward()，返回
    max_fp32_bytes：forward+backward 中最大的单个 float32 张量；
    saved_fp32_bytes：autograd 为 backward 存下的 float32 张量总字节（checkpoint 内部的除外——它们会在 backward 时重算）。"""
    logits = logits.detach().requires_grad_()
    saved: dict[int, int] = {}  # 同一个张量被两个算子存下，只算一次

    def pack(x):
        if x.dtype == torch.float32:
            saved[x._cdata] = x.numel() * 4
        return x

    tracker = _Float32Tracker()
    with tracker, torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        fn(logits, tokens).sum().backward()
    return {"max_fp32_bytes": tracker.max_bytes, "saved_fp32_bytes": sum(saved.values())}


def _naive(logits, tokens):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _chunked_without_checkpoint(logits, tokens, rows=128):
    flat, tok = logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)
    outs = []
    for s in range(0, flat.shape[0], rows):
        x = flat[s : s + rows].float()
        outs.append(x.gather(-1, tok[s : s + rows, None])[:, 0] - torch.logsumexp(x, -1))
    return torch.cat(outs).reshape(tokens.shape)


def main() -> None:
    from common.options.cli import CourseParser

    p = CourseParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    p.add_argument("--impl", choices=("solutions", "exercises"), default="solutions")
    args = p.parse_args()

    ours = importlib.import_module(f"{args.impl}.l2_02_logprobs_and_masks").token_logprobs
    logits = torch.empty(args.batch, args.seq, args.vocab, dtype=torch.bfloat16, device="meta")
    tokens = torch.zeros(args.batch, args.seq, dtype=torch.long, device="meta")
    n = args.batch * args.seq
    print(
        f"{args.batch}×{args.seq} = {n} 个 token，V = {args.vocab:,}，logits 为 bf16：{n * args.vocab * 2 / 1e9:.2f} GB"
    )
    print(f"一个完整的 float32 (B,T,V)：{n * args.vocab * 4 / 1e9:.2f} GB\n")
    print("写法 | 最大的单个 float32 张量 | 为 backward 存下的 float32")
    for name, fn in [
        ("朴素 log_softmax + gather", _naive),
        ("分块，不用 checkpoint", _chunked_without_checkpoint),
        (f"{args.impl}.token_logprobs", ours),
    ]:
        try:
            r = measure(fn, logits, tokens)
        except NotImplementedError:
            print(f"{name} | 还没实现 |")
            continue
        print(f"{name} | {r['max_fp32_bytes'] / 1e9:.3f} GB | {r['saved_fp32_bytes'] / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
