"""rollout 速度基准：HF generate 默认 / HF 静态 cache + compile / 我们的 eager 路径 / 我们的快速路径，同一次运行里比。

用法（GPU，随机初始化的 Qwen3-0.6B 精确形状，不用下载）：
    python L2_algorithm/06_sampling/bench_rollout.py                  # B=64，prompt 128，+256 token
    python L2_algorithm/06_sampling/bench_rollout.py --cap-gb 32      # 模拟 32 GB 的 5090
CPU 上没有意义（CUDA graph 只在 GPU 上存在），脚本会直接说明并退出。

计时时长度固定：不设 EOS（各路径都生成满 N 个 token），否则"谁先遇到 EOS"会污染比较。
贪心一致性：快速路径和 HF generate 的贪心输出逐 token 比较（fp32，左 padding，多个 EOS）。
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.fast_decode import ATTENTION, fast_generate, release_fast_decoders  # noqa: E402
from common.models import load_model  # noqa: E402
from solutions.l2_06_sampling import process_logits  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, float]:
    """(第一次调用的秒数, 之后 repeats 次的中位数秒数)。第一次包含编译 / CUDA graph 捕获。"""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def first_divergence(a: torch.Tensor, b: torch.Tensor) -> int:
    """两组 token 第一次不同的位置（所有行里最早的）；完全相同返回长度。"""
    diff = (a != b).any(0).nonzero()
    return int(diff[0]) if len(diff) else a.shape[1]


def greedy_identity(model, tokenizer_vocab: int, steps: int, label: str) -> bool:
    """左 padding、长度不一的 8 条 prompt，两个 EOS id：快速路径与 HF generate 的贪心输出是否逐 token 相同。"""
    g = torch.Generator().manual_seed(0)
    b, tp = 8, 24
    ids = torch.randint(10, tokenizer_vocab - 10, (b, tp), generator=g)
    mask = torch.ones(b, tp, dtype=torch.long)
    for i in range(b):
        mask[i, : 2 * i] = 0
        ids[i, : 2 * i] = 0
    ids, mask = ids.cuda(), mask.cuda()
    eos = [5, 6]
    with torch.no_grad():
        ref = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=steps,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        )[:, tp:]
    ref = torch.nn.functional.pad(ref, (0, steps - ref.shape[1]), value=0)
    got = fast_generate(
        model, ids, mask, max_new_tokens=steps, eos_token_ids=eos, pad_token_id=0, greedy=True
    )
    same = torch.equal(got, ref)
    print(
        f"  贪心一致性 [{label}]：{steps} 步，{'逐 token 相同' if same else f'第 {first_divergence(got, ref)} 步开始不同'}"
    )
    release_fast_decoders(model)
    return same


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--cap-gb", type=float, default=None, help="把可用显存限制到这么多 GB（模拟 5090 用 32）"
    )
    p.add_argument("--check-steps", type=int, default=64, help="贪心一致性检查生成多少步")
    p.add_argument(
        "--skip-hf-static",
        action="store_true",
        help="跳过 HF static cache + compile（它的编译较慢）",
    )
    p.add_argument(
        "--skip-eager", action="store_true", help="跳过我们的 eager 路径（它和 HF 默认一样慢）"
    )
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(
            "这个基准只在 CUDA GPU 上有意义（CUDA graph、显存带宽）。CPU 上请读 README 里记录的 GPU 数字。"
        )
        return 0
    if args.cap_gb:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gb * 2**30 / total))
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0)
    print(f"GPU: {name}，torch {torch.__version__}，显存上限 {args.cap_gb or '不限'} GB")

    ok = True
    # 1) 贪心一致性：tiny 模型 + 精确形状的 0.6B，都用 fp32（bf16 下两种实现的舍入不同，贪心路径迟早会分叉）
    for preset in ("tiny", "qwen3-0.6b"):
        model, tok = load_model(preset, init="random", device="cuda")
        model = model.float().eval()
        ok &= greedy_identity(model, len(tok), args.check_steps, f"{preset} 随机权重 fp32")
        del model
        torch.cuda.empty_cache()

    # 2) 速度：bf16，B × (prompt + N)，长度固定
    model, tok = load_model("qwen3-0.6b", init="random", device="cuda")
    model = model.to(torch.bfloat16).eval()
    B, tp, N = args.batch, args.prompt_len, args.new_tokens
    ids = torch.randint(10, 150000, (B, tp), device="cuda")
    mask = torch.ones_like(ids)
    pad = tok.pad_token_id
    never = [model.config.vocab_size]  # 不存在的 token id 当 EOS：长度固定为 N
    runs = {}

    def hf_default():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=N,
            min_new_tokens=N,
            pad_token_id=pad,
        )

    def hf_static():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=N,
            min_new_tokens=N,
            pad_token_id=pad,
            cache_implementation="static",
        )

    prompt_lists = ids.tolist()

    def ours_eager():
        from common.rollout import generate as eager_generate

        eager_generate(
            model,
            prompt_lists,
            max_new_tokens=N,
            eos_token_ids=never,
            pad_token_id=pad,
            greedy=True,
            backend="eager",
        )

    def fast(**ablation):  # 快速路径：贪心、长度固定；ablation 改一个开关（消融）
        return lambda: fast_generate(
            model,
            ids,
            mask,
            max_new_tokens=N,
            eos_token_ids=never,
            pad_token_id=pad,
            greedy=True,
            **ablation,
        )

    ours_fast = fast()
    ours_fast_no_graph = fast(cuda_graph=False)  # 只有静态 cache + compile，不用 CUDA graph
    ours_fast_no_compile = fast(compile=False)  # CUDA graph，但 layer step 不编译
    # 每次生成完释放 KV cache 和 CUDA graph，下次重新分配、重新捕获
    ours_fast_release = fast(release=True)

    def ours_fast_sample():
        fast_generate(
            model,
            ids,
            mask,
            max_new_tokens=N,
            eos_token_ids=never,
            pad_token_id=pad,
            temperature=1.0,
            top_p=1.0,
            process_logits=process_logits,
        )

    cases = [
        ("HF generate 默认", hf_default),
        ("HF static cache + compile", hf_static),
        ("我们的 eager 路径 (common.rollout)", ours_eager),
        ("快速路径，去掉 CUDA graph", ours_fast_no_graph),
        ("快速路径，去掉 compile", ours_fast_no_compile),
        *[
            (f"快速路径，attention={kind}", fast(attention=kind))
            for kind in ("einsum", "reduce", "sdpa")
            if kind != ATTENTION
        ],
        ("快速路径，每次释放再重建", ours_fast_release),
        (f"我们的快速路径 (贪心，{ATTENTION})", ours_fast),
        ("我们的快速路径 (采样 T=1)", ours_fast_sample),
    ]
    if args.skip_eager:
        cases.pop(2)
    if args.skip_hf_static:
        cases.pop(1)
    with torch.no_grad():
        for label, fn in cases:
            torch.cuda.reset_peak_memory_stats()
            first, med = timed(fn, args.repeats)
            runs[label] = (first, med, torch.cuda.max_memory_allocated() / 2**30)
    base = runs["HF generate 默认"][1]
    print(
        f"\nB={B}，prompt {tp}，+{N} token（bf16，随机初始化的 Qwen3-0.6B 精确形状），中位数 / {args.repeats} 次："
    )
    print(
        f"{'路径':<34}{'ms/step':>9}{'tokens/s':>11}{'vs HF 默认':>11}{'首次调用 s':>11}{'峰值 GB':>9}"
    )
    for label, (first, med, peak) in runs.items():
        print(
            f"{label:<34}{med / N * 1e3:>9.2f}{B * N / med:>11.0f}{base / med:>10.1f}×{first:>11.1f}{peak:>9.1f}"
        )
    print(
        "（ms/step = 整次生成（含 prefill）的时间 / 新 token 数；首次调用包含编译和 CUDA graph 捕获）"
    )
    floor_report(
        model, ids, mask, never, pad, B, tp, N, runs[f"我们的快速路径 (贪心，{ATTENTION})"][1]
    )
    if not ok:
        print("贪心输出与 HF generate 不一致！")
    return 0 if ok else 1


def copy_bandwidth() -> float:
    """设备内拷贝的实测带宽（字节/秒，读 + 写都算）：2 GiB 的 bf16 缓冲区拷 10 次取中位数。"""
    src = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * 2**31 / statistics.median(times[2:])


def floor_report(model, ids, mask, never, pad, B, tp, N, seconds) -> None:
    """带宽下限：每步至少读一遍 bf16 权重（嵌入表只读 B 行）和有效的 KV；实测的每步时间离它多远，时间花在哪。"""
    from torch.profiler import ProfilerActivity, profile

    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    weights = (n_params - cfg.vocab_size * cfg.hidden_size * (not cfg.tie_word_embeddings)) * 2
    kv_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 2
    kv = B * (tp + N / 2) * kv_token  # 平均每步读到的有效 KV（缓存从 tp 长到 tp + N）
    bw = copy_bandwidth()
    per_step = seconds / N
    floor = (weights + kv) / bw
    print(
        f"\n带宽下限（实测拷贝带宽 {bw / 1e12:.2f} TB/s）：权重 {weights / 1e9:.2f} GB + 平均 KV {kv / 1e9:.2f} GB"
        f" = 每步 {floor * 1e3:.2f} ms；快速路径每步 {per_step * 1e3:.2f} ms，达到下限的 {floor / per_step:.0%}"
    )

    def run():
        fast_generate(
            model, ids, mask, max_new_tokens=N, eos_token_ids=never, pad_token_id=pad, greedy=True
        )

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for e in prof.key_averages():
        if e.self_device_time_total > 0:
            kernels[e.key] = kernels.get(e.key, 0.0) + e.self_device_time_total / 1e3  # ms
    busy = sum(kernels.values())
    groups = {
        "矩阵乘（投影、lm_head）": 0.0,
        "attention（打分、softmax、加权和）": 0.0,
        "采样与其它": 0.0,
    }
    for name, ms in kernels.items():
        low = name.lower()
        if (
            "softmax" in low
            or "bmm" in low
            or ("red_fused" in low and "sum" in low and "mean" not in low)
        ):
            groups["attention（打分、softmax、加权和）"] += ms
        elif any(k in low for k in ("nvjet", "gemm", "cutlass", "sm90_xmma", "splitk")):
            groups["矩阵乘（投影、lm_head）"] += ms
        else:
            groups["采样与其它"] += ms
    print(f"一次生成（{N} 步）的 GPU 时间 {busy:.0f} ms，墙钟 {seconds * 1e3:.0f} ms：")
    for label, ms in groups.items():
        print(f"  {label:<28}{ms:8.1f} ms  {ms / (seconds * 1e3):6.1%}")
    gap = seconds * 1e3 - busy
    print(f"  {'GPU 空闲（发射间隙、host 同步）':<28}{gap:8.1f} ms  {gap / (seconds * 1e3):6.1%}")
    print("  最耗时的 kernel：")
    for name, ms in sorted(kernels.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {ms:7.1f} ms  {name[:90]}")


if __name__ == "__main__":
    sys.exit(main())
