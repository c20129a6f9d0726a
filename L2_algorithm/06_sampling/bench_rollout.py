"""rollout 速度基准：HF generate 默认路径 vs 快速路径（common.decode.fast_decode）的几种写法，同一次运行里比。

用法（GPU；随机初始化的 Qwen3-0.6B 精确形状，不用下载）：
    python L2_algorithm/06_sampling/bench_rollout.py --cap-gb 32 --out runs/bench_rollout
    python L2_algorithm/06_sampling/bench_rollout.py --variants base,fused+win128 --out DIR
    python L2_algorithm/06_sampling/bench_rollout.py --model ./某个模型目录 --check-dtypes fp32,bf16 --out DIR
CPU 上没有 CUDA graph，速度没有意义；--dry-run 用 tiny 形状、不编译、不录图把整个脚本走一遍（只检查脚本本身）。

变体的名字用 + 连起来，每一段改一个开关（不写的保持今天的默认）：
    base        今天的写法：attention=einsum，q/k/v、gate/up 各自一次矩阵乘，读整个 cache，每张图 16 步
    fused       q/k/v 并成一次矩阵乘，gate/up 并成一次（每层 7 次矩阵乘变 4 次）
    win128      attention 只读 cache 里已经填了的前缀（按 128 个槽取整；每个窗口一张 CUDA graph）
    sdpa / reduce / einsum   attention 的三种写法（见 common/decode/fast_decode.py 的 _layer_step）
    k32         每张 CUDA graph 录 32 步
    autotune    torch.compile(mode="max-autotune-no-cudagraphs")：inductor 给矩阵乘挑 Triton 模板（编译慢得多）

每个变体：先在 fp32 下和 HF generate 比贪心输出（左 padding、长短不一的 prompt、两个 EOS id），再在 bf16 下
计时（B × prompt + N 个新 token，长度固定：EOS 设成不存在的 id），最后用 torch.profiler 按 kernel 类别分解一次生成。
结果写进 --out 目录：rollout_table.md（主表）、rollout_profile.md（分解）、rollout_kernels.csv、rollout_results.json。

--eval-schedule ROWS：不计时，按 grpo_train.py held-out 评估的顺序跑每个变体（L2.06 里崩过的那一串，见
eval_schedule）：贪心两批、再采样一批，每行跑满 512 个新 token；结果写进 eval_schedule.json。
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.decode import fast_decode as fd  # noqa: E402
from common.decode.profiler_kernels import kernel_launches, op_chain  # noqa: E402
from common.model.models import load_model  # noqa: E402
from common.options.cli import CourseParser  # noqa: E402
from solutions.l2_06_sampling import process_logits  # noqa: E402

DEFAULT_VARIANTS = (
    "base,sdpa,fused,win128,fused+win128,fused+win64,fused+win128+sdpa,fused+win128+k32"
)
DRY_VARIANTS = "base,fused+win64+sdpa+k32"  # --dry-run：一个今天的写法 + 一个把开关都打开的
BASE = dict(attention="einsum", fused=False, window=0, steps_per_graph=16, compile_mode=None)
CATEGORIES = (
    "矩阵乘（投影、lm_head）",
    "attention",
    "采样与记账",
    "其它（norm、RoPE、SiLU、拷贝）",
)
PREFILL = "prefill（HF 前向）"


# ---------------------------------------------------------------------------------- 变体 ----
def parse_variant(name: str) -> dict:
    """'fused+win128+sdpa' -> fast_generate 的开关；不认识的段报中文错误。"""
    opts = dict(BASE)
    for part in name.split("+"):
        if part == "base":
            continue
        if part == "fused":
            opts["fused"] = True
        elif part in ("einsum", "reduce", "sdpa"):
            opts["attention"] = part
        elif part.startswith("win") and part[3:].isdigit() and int(part[3:]) > 0:
            opts["window"] = int(part[3:])
        elif part == "autotune":
            opts["compile_mode"] = "max-autotune-no-cudagraphs"
        elif part.startswith("k") and part[1:].isdigit() and int(part[1:]) > 0:
            opts["steps_per_graph"] = int(part[1:])
        else:
            raise ValueError(
                f"变体 {name!r} 里的 {part!r} 不认识：可用 base、fused、winN（N>0）、einsum、reduce、sdpa、kN、autotune"
            )
    return opts


def is_module_default(opts: dict) -> bool:
    """这个变体是不是 common.decode.fast_decode 现在的默认设置。"""
    return opts == dict(
        attention=fd.ATTENTION,
        fused=fd.FUSED,
        window=fd.WINDOW,
        steps_per_graph=fd.STEPS_PER_GRAPH,
        compile_mode=None,
    )


def run_fast(model, ids, mask, n, opts, eos, pad, dry, greedy=True, **extra):
    """一次快速路径生成 -> (b, n)。GPU：fast_generate；--dry-run：同一份解码代码，不编译、不录图。"""
    sampling = dict(greedy=greedy, process_logits=None if greedy else process_logits)
    if not dry:
        return fd.fast_generate(
            model, ids, mask, max_new_tokens=n, eos_token_ids=eos, pad_token_id=pad,
            **opts, **sampling, **extra,
        )  # fmt: skip
    rows, slots = fd.static_shape(ids.shape[0], ids.shape[1], n, opts["steps_per_graph"])
    # --dry-run 不编译，compile_mode 用不上
    dec = fd.StaticDecoder(
        model, rows, slots, eos, pad, opts["steps_per_graph"], compile=False,
        attention=opts["attention"], fused=opts["fused"], window=opts["window"],
    )  # fmt: skip
    how = fd.Sampling(greedy, 1.0, 1.0, sampling["process_logits"])
    return dec.generate(ids, mask, n, how, cuda_graph=False)


# ------------------------------------------------------------------- held-out 评估的顺序 ----
EVAL_PROMPTS = (
    179,
    186,
    156,
)  # 贪心两批、采样一批的最长 prompt（Qwen2.5 的模板下 GSM8K 前 500 道 test 题）
EVAL_NEW_TOKENS = 512
DRY_EVAL = ((9, 12, 8), 16)  # --dry-run：同样的顺序，小形状


def eval_schedule(model, vocab, pad, opts, rows, dev, dry, prompts=EVAL_PROMPTS, n=EVAL_NEW_TOKENS):
    """grpo_train.py 的 held-out 评估在 GPU 上崩过（`vectorized gather index out of bounds`）的那一串生成。

    同一个 (rows, 768 槽) 的桶：贪心两批（最长 prompt 179、186），再采样一批（最长 156），EOS 是不存在的 id，
    每行都跑满 512 步。贪心的第二批停在位置 186 + 512 = 698；采样要为 window=128 的 5 个窗口各录一张新 graph，
    每张先预热 16 步：预热若从 698 接着走，就超出 768 行的 cos/sin 表。每一批贪心都和同一个解码器不录 graph
    （逐步执行）的输出比，第二批再用 graph 重跑一次、和第一次比（同一个解码器跑两次该逐 token 相同）。
    返回 greedy_identical、rows_differing（与不录 graph 不同的行数）、first_difference（最早不同的那一步）、
    repeat_identical、sampled_in_vocab、captures；出错时由调用方记下 traceback。
    """
    never = [vocab]  # 不存在的 token id 当 EOS：每行都跑满
    g = torch.Generator().manual_seed(0)
    differing, firsts, repeat, in_vocab = 0, [], None, None
    for i, longest in enumerate(prompts):
        ids = torch.randint(3, vocab, (rows, longest), generator=g)
        mask = torch.ones_like(ids)
        for r in range(rows):  # 长短不一：第 r 行左边 (7r mod 一半) 个 pad
            mask[r, : (7 * r) % (longest // 2)] = 0
        ids, mask = ids.masked_fill(mask == 0, pad).to(dev), mask.to(dev)
        greedy = i < 2
        got = run_fast(model, ids, mask, n, opts, never, pad, dry, greedy=greedy)
        if greedy:
            kw = {} if dry else dict(cuda_graph=False)
            ref = run_fast(model, ids, mask, n, opts, never, pad, dry, **kw)
            rows_diff = (got != ref).any(dim=1)
            differing += int(rows_diff.sum())
            firsts += [int((got[r] != ref[r]).nonzero()[0]) for r in rows_diff.nonzero()[:, 0]]
            if i == 1:
                again = run_fast(model, ids, mask, n, opts, never, pad, dry, greedy=True)
                repeat = bool(torch.equal(got, again))
        else:
            in_vocab = bool(((got >= 0) & (got < vocab)).all())
    decoders = [] if dry else list(fd._DECODERS.get(model, {}).values())
    return dict(
        greedy_identical=differing == 0,
        rows_differing=differing,
        first_difference=min(firsts, default=None),
        repeat_identical=repeat,
        sampled_in_vocab=in_vocab,
        captures=sum(d.captures for d in decoders),
        slots=fd.static_shape(rows, max(prompts), n, opts["steps_per_graph"])[1],
    )


def run_eval_schedule(a, model, vocab: int, pad: int, dev, out: Path, env: dict) -> int:
    results = {}
    shape = DRY_EVAL if a.dry_run else (EVAL_PROMPTS, EVAL_NEW_TOKENS)
    for name, opts in a.variant_opts.items():
        try:
            with torch.no_grad():
                results[name] = eval_schedule(
                    model, vocab, pad, opts, a.eval_schedule, dev, a.dry_run, *shape
                )
        except Exception:
            results[name] = {"error": traceback.format_exc()[-3000:]}
        finally:
            if not a.dry_run:
                torch.cuda.synchronize()
                fd.release_fast_decoders(model)
        r = results[name]
        if "error" in r:
            print(f"  {name}：失败\n{r['error']}", flush=True)
        else:
            same = (
                "逐 token 相同"
                if r["greedy_identical"]
                else (f"{r['rows_differing']} 行不同（最早在第 {r['first_difference']} 步）")
            )
            print(
                f"  {name}：{a.eval_schedule} 行 × {r['slots']} 槽，录了 {r['captures']} 张 graph；"
                f"贪心与不录 graph {same}；同一个解码器再跑一次 {'相同' if r['repeat_identical'] else '不同'}；"
                f"采样的 token {'都在词表里' if r['sampled_in_vocab'] else '有越界'}",
                flush=True,
            )
    path = out / "eval_schedule.json"
    path.write_text(json.dumps(dict(env=env, rows=a.eval_schedule, results=results), indent=2))
    print(f"（结果在 {path}）")
    ok = all(
        "error" not in r
        and r["greedy_identical"]
        and r["repeat_identical"]
        and r["sampled_in_vocab"]
        for r in results.values()
    )
    return 0 if ok else 1


# ---------------------------------------------------------------------------------- 计时 ----
def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, dev) -> tuple[float, float]:
    """(第一次调用的秒数, 之后 repeats 次的中位数秒数)。第一次包含编译 / CUDA graph 捕获。"""
    sync(dev)
    t0 = time.perf_counter()
    fn()
    sync(dev)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def hf_generate(model, ids, mask, n, pad, eos=None, scores=False):
    """HF generate 的贪心默认路径（动态 KV cache）。eos=None：长度固定为 n。模型的 generation_config 已在
    `load` 里换成空白的：模型目录里的设置（如 Qwen2.5 的 repetition_penalty=1.1、采样参数）不参与。"""
    return model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=n, pad_token_id=pad,
        eos_token_id=eos, output_logits=scores, return_dict_in_generate=scores,
    )  # fmt: skip


# ---------------------------------------------------------------------------------- 贪心一致性 ----
def identity_case(model, vocab: int, pad: int, b: int, tp: int, n: int, dev):
    """左 padding（第 i 行左边 2i 个 pad）的随机 prompt，和两个「会在中途出现」的 EOS id。

    EOS 从 HF 自己不带 EOS 的贪心输出里挑（第 0 行第 n/4 步、第 1 行第 n/2 步的 token），
    于是逐行停止、停止后补 pad 都真的会被检查到。返回 (ids, mask, eos, HF 参照 (b, n), HF 的逐步 logits)。"""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab - 10, (b, tp), generator=g)
    mask = torch.ones(b, tp, dtype=torch.long)
    for i in range(b):
        mask[i, : min(2 * i, tp - 1)] = 0
        ids[i, : min(2 * i, tp - 1)] = pad
    ids, mask = ids.to(dev), mask.to(dev)
    with torch.no_grad():
        free = hf_generate(model, ids, mask, n, pad)[:, tp:]
        eos = sorted({int(free[0, n // 4]), int(free[min(1, b - 1), n // 2])})
        out = hf_generate(model, ids, mask, n, pad, eos=eos, scores=True)
    ref = out.sequences[:, tp:]
    ref = torch.nn.functional.pad(ref, (0, n - ref.shape[1]), value=pad)
    return ids, mask, eos, ref, out.logits


def compare(got: torch.Tensor, ref: torch.Tensor, logits) -> dict:
    """逐 token 比较；不同时给出第一次不同的位置，以及 HF 在那一步的 top-1 与 top-2 logit 之差：
    差在 1e-5 量级是两种实现的舍入在近乎并列的 token 上分了叉，差很大才像 bug。"""
    if torch.equal(got, ref):
        return {"identical": True, "text": f"{ref.shape[1]} 步逐 token 相同"}
    cols = (got != ref).any(0).nonzero()
    t = int(cols[0])
    r = int((got[:, t] != ref[:, t]).nonzero()[0])
    res = {"identical": False, "first_diff_step": t, "row": r}
    if logits is not None and t < len(logits):
        row = logits[t][r].float()
        top = row.topk(2).values
        res["hf_top2_gap"] = float(top[0] - top[1])
        res["ours_rank_in_hf"] = int((row > row[got[r, t]]).sum()) + 1
        res["text"] = (
            f"第 {t} 步第 {r} 行开始不同；HF 在那一步 top-1 与 top-2 的 logit 差 {res['hf_top2_gap']:.2e}，"
            f"我们选的是 HF 的第 {res['ours_rank_in_hf']} 名"
        )
    else:
        res["text"] = f"第 {t} 步第 {r} 行开始不同"
    return res


# ---------------------------------------------------------------------------------- profile ----
def _category_of_op(names: list[str], kernel: str) -> str | None:
    """由发射 kernel 的算子（和它的上层）判断类别；判断不了返回 None。names：从里到外。"""
    low = [x.lower() for x in names]
    k = kernel.lower()
    if any(x in n for n in low for x in ("scaled_dot_product", "flash", "efficient_attention")):
        return "attention"
    if low and low[0] in ("aten::bmm", "aten::baddbmm"):  # 快速路径里只有 einsum attention 用 bmm
        return "attention"
    if "softmax" in k:
        return "attention"
    if low and low[0] in ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul"):
        return CATEGORIES[0]
    if any(x in n for n in low for x in ("argmax", "exponential", "isin", "aten::where", "gumbel")):
        return CATEGORIES[2]
    return None


def _category_of_name(kernel: str) -> str:
    """只看 kernel 名字的后备规则（graph 里的 kernel 没有对应的算子时用）。"""
    k = kernel.lower()
    if "softmax" in k or "attention" in k or "fmha" in k or "flash" in k:
        return "attention"
    if any(x in k for x in ("gemm", "nvjet", "cutlass", "xmma", "splitk", "gemv", "cublas")):
        return CATEGORIES[0]
    if any(x in k for x in ("argmax", "exponential", "distribution", "isin", "arg_max")):
        return CATEGORIES[2]
    return CATEGORIES[3]


def kernel_records(prof, dry: bool) -> list[tuple[str, list[str], float]]:
    """profile 里的每个 GPU kernel（含 memcpy/memset）：(名字, 发射它的算子及其上层（从里到外）, 毫秒)。

    发射 kernel 的算子由 common.decode.profiler_kernels 找（torch 2.11 和 2.13 的事件字段不同，它两种都认）；
    CUDA graph 里的 kernel 对应的是 graph.replay() 外面那层 record_function（fast_decode.decode）。
    --dry-run（CPU）没有 kernel：用没有子算子的 aten 算子的 CPU 自身时间代替，只为把流程走一遍。"""
    from torch.autograd import DeviceType

    events = prof.events()
    if dry:
        return [
            (e.name, op_chain(e), e.self_cpu_time_total / 1e3)
            for e in events
            if e.device_type == DeviceType.CPU
            and e.name.startswith("aten::")
            and not e.cpu_children
        ]
    return [
        (k.name, op_chain(k.op), (k.end_us - k.start_us) / 1e3) for k in kernel_launches(events)
    ]


def name_map(records) -> dict[str, str]:
    """kernel 名字 -> 类别（按时间多数票），来自不经 CUDA graph 的一次运行：那里每个 kernel 都对得上算子。"""
    votes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, chain, ms in records:
        cat = _category_of_op(chain, name)
        if cat is not None:
            votes[name][cat] += ms
    return {name: max(v, key=v.get) for name, v in votes.items()}


def breakdown(records, mapping: dict[str, str], steps: int, wall_ms: float) -> dict:
    """一次生成的 GPU 时间按类别分解 + 最耗时的 kernel。prefill 的 kernel 单独记一类。"""
    cats = dict.fromkeys((PREFILL, *CATEGORIES), 0.0)
    per_kernel: dict[tuple[str, str], list] = {}
    for name, chain, ms in records:
        cat = PREFILL if "fast_decode.prefill" in chain else None  # HF 的 prefill，每次生成一次
        cat = cat or mapping.get(name) or _category_of_name(name)
        cats[cat] += ms
        entry = per_kernel.setdefault((name, cat), [0, 0.0])
        entry[0] += 1
        entry[1] += ms
    busy = sum(cats.values())
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])
    return {
        "wall_ms": wall_ms,
        "busy_ms": busy,
        "idle_ms": wall_ms - busy,
        "categories_ms": cats,
        "kernels": [
            {"name": n, "category": c, "calls": calls, "calls_per_step": calls / steps, "ms": ms}
            for (n, c), (calls, ms) in top
        ],
    }


def profile_variant(model, ids, mask, n, opts, eos, pad, dev, dry) -> dict:
    """(1) 在计时用过的同一个解码器上不用 CUDA graph 跑 16 步（编译好的代码，不重新编译）：每个 kernel 都对得上
    发射它的算子，得到「kernel 名字 -> 类别」；(2) 正常（CUDA graph）跑一次完整生成并 profile：按 (1) 的
    对照表把 kernel 时间分到各类别。"""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if not dry else [])
    with profile(activities=acts) as p1:
        if dry:
            run_fast(model, ids, mask, 16, opts, eos, pad, dry)
        else:
            (dec,) = fd.decoders_of(model)  # 计时那几次生成留下的唯一一个解码器
            dec.generate(ids, mask, 16, fd.Sampling(greedy=True), cuda_graph=False)
        sync(dev)
    mapping = name_map(kernel_records(p1, dry))
    run_fast(model, ids, mask, n, opts, eos, pad, dry)  # 已经捕获过；再热一次
    sync(dev)
    with profile(activities=acts) as p2:
        t0 = time.perf_counter()
        run_fast(model, ids, mask, n, opts, eos, pad, dry)
        sync(dev)
        wall = (time.perf_counter() - t0) * 1e3
    return breakdown(kernel_records(p2, dry), mapping, n, wall)


def copy_bandwidth() -> float:
    """设备内拷贝的实测带宽（字节/秒，读 + 写都算）：1 GiB 的 bf16 缓冲区拷 12 次，去掉前 2 次取中位数。"""
    src = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() * src.element_size() / statistics.median(times[2:])


def bandwidth_floor(model, B: int, tp: int, N: int, bw: float) -> dict:
    """每步至少读一遍 bf16 权重（独立的 embedding 表只读 B 行，不算）和平均一半长度的有效 KV。"""
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    weights = (n_params - (0 if tied else cfg.vocab_size * cfg.hidden_size)) * 2
    kv_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * fd._head_dim(cfg) * 2
    kv = B * (tp + N / 2) * kv_token
    return dict(bandwidth=bw, weights_bytes=weights, kv_bytes=kv, floor_s=(weights + kv) / bw)


# ---------------------------------------------------------------------------------- 输出 ----
def write_outputs(out: Path, env: dict, rows: list[dict], extra: list[dict], a) -> None:
    (out / "rollout_results.json").write_text(
        json.dumps({"env": env, "variants": rows, "extra": extra}, ensure_ascii=False, indent=1),
        encoding="utf-8",
    )
    B, tp, N = a.batch, a.prompt_len, a.new_tokens
    lines = [
        f"# rollout 基准：{env['model']}，B={B}，prompt {tp}，+{N} token（bf16）",
        "",
        f"{env['date']}；{env['device']}；torch {env['torch']}，transformers {env['transformers']}；"
        f"显存上限 {env['cap_gb'] or '不限'} GiB；中位数 / {a.repeats} 次。",
        "",
        "| 路径 | ms/step | tokens/s | vs HF 默认 | 首次调用 s | 峰值 GiB | 贪心一致性 |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    base = next((r for r in extra if r["name"] == "hf_default"), None)
    for r in [base, *rows, *(r for r in extra if r is not base)] if base else rows + extra:
        if "median_s" not in r:
            lines.append(f"| {r['label']} | 失败：{r.get('error', '')[:80]} | | | | | |")
            continue
        speedup = base["median_s"] / r["median_s"] if base else float("nan")
        ident = "；".join(f"{k}: {v['text']}" for k, v in r.get("identity", {}).items()) or "—"
        lines.append(
            f"| {r['label']} | {r['median_s'] / N * 1e3:.2f} | {B * N / r['median_s']:,.0f} | "
            f"{speedup:.1f}× | {r['first_s']:.1f} | {r['peak_gib']:.1f} | {ident} |"
        )
    lines += [
        "",
        "ms/step = 整次生成（含 prefill）的时间 / 新 token 数；首次调用含编译和 CUDA graph 捕获（同一次运行里"
        "前面的变体编译过的形状会被复用，所以只能粗看）；峰值 = torch.cuda.max_memory_allocated。",
    ]
    fl = env.get("floor")
    if fl:
        lines += [
            "",
            f"带宽下限（实测拷贝带宽 {fl['bandwidth'] / 1e12:.2f} TB/s）：bf16 权重 {fl['weights_bytes'] / 1e9:.2f} GB"
            f" + 平均有效 KV {fl['kv_bytes'] / 1e9:.2f} GB = 每步 {fl['floor_s'] * 1e3:.2f} ms。",
        ]
    best = choose_default(rows, base)
    if best:
        lines += ["", best["text"]]
    (out / "rollout_table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")

    prof_lines = [
        "# 一次生成的 GPU 时间分解（torch.profiler）",
        "",
        "kernel 的类别：先不用 CUDA graph 跑 16 步，记下每个 kernel 是哪个算子发射的（aten::mm/addmm = 矩阵乘，"
        "aten::bmm 和 SDPA = attention，argmax/exponential/isin = 采样与记账），再用这张对照表给 CUDA graph 里"
        "的 kernel 分类；对不上的按名字猜。「空闲」= profile 下的墙钟 - 所有 kernel 时间之和。",
        "",
        "| 变体 | 墙钟 ms | " + " | ".join(("prefill", *CATEGORIES)) + " | 空闲 |",
        "|---|---:|" + "---:|" * (len(CATEGORIES) + 2),
    ]
    for r in rows:
        pr = r.get("profile")
        if not pr or "error" in pr:
            continue
        w = pr["wall_ms"]
        cells = [f"{ms:.0f} ({ms / w:.0%})" for ms in pr["categories_ms"].values()]
        prof_lines.append(
            f"| {r['label']} | {w:.0f} | "
            + " | ".join(cells)
            + f" | {pr['idle_ms']:.0f} ({pr['idle_ms'] / w:.0%}) |"
        )
    for r in rows:
        pr = r.get("profile")
        if not pr:
            continue
        prof_lines += ["", f"## {r['label']}", ""]
        if "error" in pr:
            prof_lines += ["profile 失败：", "```", pr["error"], "```"]
            continue
        prof_lines += ["| ms | 次/步 | 类别 | kernel |", "|---:|---:|---|---|"]
        for k in pr["kernels"][:10]:
            prof_lines.append(
                f"| {k['ms']:.1f} | {k['calls_per_step']:.1f} | {k['category']} | `{k['name'][:100]}` |"
            )
    (out / "rollout_profile.md").write_text("\n".join(prof_lines) + "\n", encoding="utf-8")
    with (out / "rollout_kernels.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "category", "calls", "calls_per_step", "ms", "kernel"])
        for r in rows:
            for k in (r.get("profile") or {}).get("kernels", []):
                w.writerow(
                    [r["name"], k["category"], k["calls"], f"{k['calls_per_step']:.2f}"]
                    + [f"{k['ms']:.3f}", k["name"]]
                )


def identical(row: dict) -> bool:
    """贪心一致：看 fp32（没查 fp32 时看查过的全部）。bf16 下两种实现的舍入顺序不同，近乎并列的 token
    迟早会分叉，bf16 的结果只作参考（表里照样列出，分叉时给出 HF 的 top-2 差）。"""
    checks = row.get("identity") or {}
    checks = {"fp32": checks["fp32"]} if "fp32" in checks else checks
    return bool(checks) and all(v["identical"] for v in checks.values())


def choose_default(rows: list[dict], base: dict | None) -> dict | None:
    """在贪心一致（fp32）的变体里挑最快的，给出该写进 common/decode/fast_decode.py 的默认值。"""
    ok = [r for r in rows if "median_s" in r and identical(r)]
    if not ok:
        return None
    best = min(ok, key=lambda r: r["median_s"])
    o = best["options"]
    speedup = base["median_s"] / best["median_s"] if base else float("nan")
    text = (
        f"贪心一致的变体里最快的是 **{best['name']}**：{speedup:.1f}× HF 默认（目标 12×："
        f"{'达到' if speedup >= 12 else '没有达到'}）。要把它设为默认，在 common/decode/fast_decode.py 里设 "
        f"ATTENTION = {o['attention']!r}，FUSED = {o['fused']}，WINDOW = {o['window']}，"
        f"STEPS_PER_GRAPH = {o['steps_per_graph']}"
        + (
            f"，并让 fast_generate 用 compile_mode={o['compile_mode']!r}"
            if o["compile_mode"]
            else ""
        )
        + ("（它已经是默认）。" if is_module_default(o) else "。")
    )
    return {"name": best["name"], "speedup": speedup, "text": text}


# ---------------------------------------------------------------------------------- 主程序 ----
def parse_args(argv=None):
    p = CourseParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--out", default="runs/bench_rollout", help="结果目录（表格、profile、json；不存在就新建）"
    )
    p.add_argument(
        "--variants",
        default=None,
        help=f"逗号分隔（默认 {DEFAULT_VARIANTS}；--dry-run 时默认 {DRY_VARIANTS}）",
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--cap-gb", type=float, default=None, help="把 PyTorch 限制到这么多 GiB（5090：32）"
    )
    p.add_argument(
        "--model",
        default=None,
        help="本地 HF 模型目录（Qwen2/Qwen2.5/Qwen3）；默认随机权重的 Qwen3-0.6B 形状",
    )
    p.add_argument(
        "--check-dtypes",
        default="fp32",
        help="贪心一致性在哪些精度下查：fp32、bf16 或 fp32,bf16（挑默认值只看 fp32；bf16 只作参考）",
    )
    p.add_argument("--check-batch", type=int, default=8)
    p.add_argument("--check-prompt-len", type=int, default=60)
    p.add_argument("--check-steps", type=int, default=128, help="贪心一致性检查生成多少步")
    p.add_argument("--no-profile", action="store_true", help="不做 torch.profiler 分解")
    p.add_argument(
        "--ablations",
        action="store_true",
        help="再测：去掉 CUDA graph、去掉 compile、每次释放再重建",
    )
    p.add_argument(
        "--eager", action="store_true", help="再测我们的 eager 路径（common.decode.rollout）"
    )
    for old in ("--skip-hf-static", "--skip-eager"):  # 旧版本的参数：现在这两条默认就不测
        p.add_argument(
            old, action="store_true", help="旧参数，现在默认就跳过（保留它，旧命令照样能跑）"
        )
    p.add_argument(
        "--hf-static", action="store_true", help="再测 HF static cache + compile（它的编译较慢）"
    )
    p.add_argument(
        "--eval-schedule",
        type=int,
        default=0,
        metavar="ROWS",
        help="不计时：按 grpo_train.py held-out 评估的顺序（贪心两批、采样一批，+512 token）跑每个变体",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="CPU：tiny 形状，不编译、不录图，只检查脚本本身"
    )
    a = p.parse_args(argv)
    a.variants = a.variants or (DRY_VARIANTS if a.dry_run else DEFAULT_VARIANTS)
    try:
        a.variant_opts = {v: parse_variant(v) for v in a.variants.split(",") if v}
    except ValueError as err:
        p.error(str(err))
    a.dtypes = [d for d in a.check_dtypes.split(",") if d]
    if not a.variant_opts or any(d not in ("fp32", "bf16") for d in a.dtypes):
        p.error("--variants 至少一个；--check-dtypes 只能是 fp32、bf16")
    if a.eval_schedule < 0:
        p.error("--eval-schedule 是行数，必须 >= 1（不给就是普通的速度基准）")
    if min(a.batch, a.prompt_len, a.new_tokens, a.repeats, a.check_batch, a.check_steps) < 1:
        p.error("--batch、--prompt-len、--new-tokens、--repeats、--check-* 都必须 >= 1")
    if a.check_prompt_len <= 2 * (a.check_batch - 1):
        p.error(
            f"--check-prompt-len 要大于 2×(--check-batch - 1) = {2 * (a.check_batch - 1)}：第 i 行左边有 2i 个 pad"
        )
    if a.model and not (Path(a.model) / "config.json").is_file():
        p.error(f"--model {a.model}：不是模型目录（没有 config.json）")
    if a.dry_run:  # tiny 形状：几秒钟走完
        a.batch, a.prompt_len, a.new_tokens, a.repeats = 4, 12, 12, 1
        a.check_batch, a.check_prompt_len, a.check_steps = 3, 9, 16
    return a


def load(a, dev):
    """(fp32 模型, bf16 模型, 词表大小, pad id, 名字)。"""
    if a.model:
        from transformers import AutoModelForCausalLM

        f32 = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(dev).eval()
        name = f"{Path(a.model).name}（{f32.config.model_type}，{a.model}）"
    else:
        f32, _ = load_model("tiny" if a.dry_run else "qwen3-0.6b", init="random", device=dev)
        f32 = f32.float().eval()
        name = "tiny 随机权重" if a.dry_run else "Qwen3-0.6B 精确形状、随机权重"
    reason = fd.unsupported_reason(f32)
    if reason:
        sys.exit(f"错误：{reason}")
    from transformers import GenerationConfig

    f32.generation_config = GenerationConfig()  # 空白的生成配置，见 hf_generate
    cfg = f32.config
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else (cfg.eos_token_id or [0])[0]
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else eos
    b16 = None if a.dry_run else _bf16_copy(f32)
    return f32, b16, cfg.vocab_size, pad, name


def _bf16_copy(model):
    import copy

    return copy.deepcopy(model).to(torch.bfloat16).eval()


def main(argv=None) -> int:
    a = parse_args(argv)
    if not a.dry_run and not torch.cuda.is_available():
        print(
            "这个基准只在 CUDA GPU 上有意义（CUDA graph、显存带宽）；只想检查脚本本身请加 --dry-run。"
        )
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cpu" if a.dry_run else "cuda")
    if a.cap_gb and not a.dry_run:
        from common.vram.measure import cap_to_gpu_gb

        cap_to_gpu_gb(a.cap_gb)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    torch.manual_seed(0)
    import transformers

    env = dict(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        device=torch.cuda.get_device_name(0)
        if dev.type == "cuda"
        else "CPU（--dry-run，数字没有意义）",
        torch=torch.__version__,
        transformers=transformers.__version__,
        cap_gb=a.cap_gb,
        dry_run=a.dry_run,
    )
    f32, b16, vocab, pad, env["model"] = load(a, dev)
    print(
        f"{env['device']}，torch {env['torch']}，{env['model']}，显存上限 {a.cap_gb or '不限'} GiB",
        flush=True,
    )
    speed_model = f32 if a.dry_run else b16
    if a.eval_schedule:
        return run_eval_schedule(a, speed_model, vocab, pad, dev, out, env)
    if not a.dry_run:
        env["floor"] = bandwidth_floor(
            speed_model, a.batch, a.prompt_len, a.new_tokens, copy_bandwidth()
        )
    never = [vocab]  # 不存在的 token id 当 EOS：长度固定为 N
    B, tp, N = a.batch, a.prompt_len, a.new_tokens
    ids = torch.randint(10, vocab - 10, (B, tp), device=dev)
    mask = torch.ones_like(ids)

    # 1) 贪心一致性的参照：每种精度只算一次 HF generate
    checks = {}
    for dt in a.dtypes:
        m = f32 if dt == "fp32" or a.dry_run else b16
        checks[dt] = (
            m,
            *identity_case(m, vocab, pad, a.check_batch, a.check_prompt_len, a.check_steps, dev),
        )
        print(f"  贪心一致性参照 [{dt}]：EOS = {checks[dt][3]}", flush=True)

    rows, extra = [], []
    # 2) HF generate 默认路径：分母
    hf = {"name": "hf_default", "label": "HF generate 默认"}
    with torch.no_grad():
        torch.cuda.reset_peak_memory_stats() if dev.type == "cuda" else None
        hf["first_s"], hf["median_s"] = timed(
            lambda: hf_generate(speed_model, ids, mask, N, pad), a.repeats, dev
        )
    hf["peak_gib"] = _peak(dev)
    extra.append(hf)
    print(f"  HF generate 默认：{hf['median_s'] / N * 1e3:.2f} ms/step", flush=True)

    # 3) 每个变体：一致性（fp32 / bf16）、速度、profile
    for name, opts in a.variant_opts.items():
        label = name + ("（当前默认）" if is_module_default(opts) else "")
        row = {"name": name, "label": label, "options": opts, "identity": {}}
        rows.append(row)
        try:
            with torch.no_grad():
                for dt, (m, cids, cmask, eos, ref, logits) in checks.items():
                    got = run_fast(m, cids, cmask, a.check_steps, opts, eos, pad, a.dry_run)
                    row["identity"][dt] = compare(got, ref, logits)
                    fd.release_fast_decoders(m) if not a.dry_run else None
                if dev.type == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                fn = lambda o=opts: run_fast(speed_model, ids, mask, N, o, never, pad, a.dry_run)  # noqa: E731
                row["first_s"], row["median_s"] = timed(fn, a.repeats, dev)
                row["peak_gib"] = _peak(dev)
                if not a.no_profile:
                    try:
                        row["profile"] = profile_variant(
                            speed_model, ids, mask, N, opts, never, pad, dev, a.dry_run
                        )
                    except Exception:  # 分解失败不影响计时结果
                        row["profile"] = {"error": traceback.format_exc()[-3000:]}
        except Exception:
            row["error"] = traceback.format_exc()[-3000:]
            print(f"  {label}：失败\n{row['error']}", flush=True)
            continue
        finally:
            if not a.dry_run:
                fd.release_fast_decoders(speed_model)
        ident = "；".join(f"{k} {v['text']}" for k, v in row["identity"].items())
        print(
            f"  {label}：{row['median_s'] / N * 1e3:.2f} ms/step，{hf['median_s'] / row['median_s']:.1f}×；{ident}",
            flush=True,
        )
        write_outputs(out, env, rows, extra, a)  # 每个变体之后都写一次：中途超时也留下已测的

    # 4) 最快的一致变体：采样（训练时 rollout 用的就是它）和可选的消融
    best = choose_default(rows, hf)
    if best:
        opts = a.variant_opts[best["name"]]
        more = [(f"{best['name']}，采样 T=1", dict(greedy=False))]
        if a.ablations and not a.dry_run:
            more += [
                (f"{best['name']}，去掉 CUDA graph", dict(cuda_graph=False)),
                (f"{best['name']}，去掉 compile", dict(compile=False)),
                (f"{best['name']}，每次释放再重建", dict(release=True)),
            ]
        for label, kw in more:
            extra.append(_extra_run(label, speed_model, ids, mask, N, opts, never, pad, dev, a, kw))
    if a.eager:
        from common.decode.rollout import generate as eager_generate

        lists = ids.tolist()

        def eager():
            eager_generate(speed_model, lists, max_new_tokens=N, eos_token_ids=never,
                           pad_token_id=pad, greedy=True, backend="eager")  # fmt: skip

        extra.append(
            _timed_row("eager", "我们的 eager 路径（common.decode.rollout）", eager, dev, a)
        )
    if a.hf_static and not a.dry_run:
        from transformers import GenerationConfig

        def hf_static():
            cfg = GenerationConfig(do_sample=False, max_new_tokens=N, pad_token_id=pad,
                                   cache_implementation="static")  # fmt: skip
            speed_model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)

        extra.append(_timed_row("hf_static", "HF static cache + compile", hf_static, dev, a))
    write_outputs(out, env, rows, extra, a)
    print()
    print((out / "rollout_table.md").read_text(encoding="utf-8"))
    print(f"（profile 分解在 {out / 'rollout_profile.md'}，逐 kernel 在 rollout_kernels.csv）")
    ok = all(identical(r) for r in rows)
    failed = [r["name"] for r in rows if "error" in r]
    if failed:
        print(f"这些变体运行失败：{', '.join(failed)}（traceback 在 rollout_results.json）")
    if not ok:
        print("有变体的贪心输出与 HF generate 不一致：见表里的「贪心一致性」一列。")
    return 0 if ok and not failed else 1


def _peak(dev) -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0


def _timed_row(name, label, fn, dev, a) -> dict:
    row = {"name": name, "label": label}
    try:
        with torch.no_grad():
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            row["first_s"], row["median_s"] = timed(fn, a.repeats, dev)
            row["peak_gib"] = _peak(dev)
    except Exception:
        row["error"] = traceback.format_exc()[-3000:]
    return row


def _extra_run(label, model, ids, mask, N, opts, never, pad, dev, a, kw) -> dict:
    greedy = kw.pop("greedy", True)
    fn = lambda: run_fast(model, ids, mask, N, opts, never, pad, a.dry_run, greedy=greedy, **kw)  # noqa: E731
    row = _timed_row(label, label, fn, dev, a)
    if not a.dry_run:
        fd.release_fast_decoders(model)
    return row


if __name__ == "__main__":
    sys.exit(main())
