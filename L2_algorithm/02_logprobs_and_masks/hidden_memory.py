"""数一数（第 6 节）：从 hidden state 算 log-prob 时，最大的单个张量多大、autograd 为 backward 存了什么。

在 meta 设备上跑（只有形状、不分配内存），Qwen3 的真实尺寸也能瞬间算完：
    python L2_algorithm/02_logprobs_and_masks/hidden_memory.py                 # 8×512 个位置，H=1024，V=151,936
    python L2_algorithm/02_logprobs_and_masks/hidden_memory.py --impl exercises --hidden 2048
数的是张量的元素个数 × 4 字节（算子真实产生的输出、autograd 真实存下的张量），不是 GPU 上测的峰值显存。
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


class _Biggest(TorchDispatchMode):
    """记录执行期间任何算子产出的最大张量（元素个数，任何 dtype）。"""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


def measure(fn, hidden, weight, tokens, **kw) -> tuple[int, int]:
    """forward + backward 一次：返回 (最大的单个张量元素数, autograd 为 backward 存下的元素总数)。
    checkpoint 内部的张量不算（它们在 backward 时才重算），与 logprob_memory.py 的数法相同。"""
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    saved: dict[int, int] = {}  # 同一个张量被两个算子存下，只算一次

    def pack(x):
        saved[x._cdata] = x.numel()
        return x

    tracker = _Biggest()
    with tracker, torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logp, _ = fn(h, w, tokens, **kw)
        logp.sum().backward()
    return tracker.max_numel, sum(saved.values())


def full_logits(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    """普通路径：完整的 float32 logits，错一位，再逐位置 log_softmax（第 6 节的「定义」）。"""
    T, L = tokens.shape[1], hidden.shape[1]
    z = hidden[:, L - T - 1 : L - 1].float() @ lm_head_weight.float().T / temperature
    logp = torch.log_softmax(z, -1)
    picked = logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return picked, -(logp.exp() * logp).sum(-1).detach()


def main() -> None:
    from common.options.cli import CourseParser

    p = CourseParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512, help="回答的 token 数 T")
    p.add_argument("--hidden", type=int, default=1024, help="H（Qwen3-0.6B：1024，1.7B：2048）")
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--chunk-rows", type=int, default=256)
    p.add_argument("--impl", choices=("solutions", "exercises"), default="solutions")
    a = p.parse_args()
    ours = importlib.import_module(f"{a.impl}.l2_02_logprobs_and_masks").hidden_token_logprobs
    B, T, H, V = a.batch, a.seq, a.hidden, a.vocab
    hidden = torch.empty(B, T + 1, H, device="meta")
    weight = torch.empty(V, H, device="meta")
    tokens = torch.zeros(B, T, dtype=torch.long, device="meta")
    gb = lambda n: f"{n * 4 / 1e9:.3f} GB"
    print(f"{B}×{T} 个位置，H = {H}，V = {V:,}（float32 计 4 字节）")
    print(
        f"完整的 (B,T,V)：{gb(B * T * V)}；lm_head 权重 (V,H)：{gb(V * H)}；hidden：{gb(B * (T + 1) * H)}\n"
    )
    print("写法 | 最大的单个张量 | 为 backward 存下的")
    for name, fn, kw in [
        ("完整 logits（普通路径）", full_logits, {}),
        (
            f"{a.impl}.hidden_token_logprobs，{a.chunk_rows} 行一块",
            ours,
            {"chunk_rows": a.chunk_rows},
        ),
    ]:
        try:
            biggest, saved = measure(fn, hidden, weight, tokens, **kw)
        except NotImplementedError:
            print(f"{name} | 还没实现 |")
            continue
        print(f"{name} | {gb(biggest)} | {gb(saved)}")


if __name__ == "__main__":
    main()
