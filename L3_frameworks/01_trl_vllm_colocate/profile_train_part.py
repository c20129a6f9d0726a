"""训练部分的 profile：grpo_train.py 每步的「训练部分」时间花在哪，几种改法各省多少，和 TRL 的同一部分比。

    python L3_frameworks/01_trl_vllm_colocate/profile_train_part.py --cap-gb 32 --out DIR     # GPU：变体 + TRL
    python L3_frameworks/01_trl_vllm_colocate/profile_train_part.py --no-trl --out DIR        # 只测我们这一侧
    python L3_frameworks/01_trl_vllm_colocate/profile_train_part.py --dry-run --out DIR       # CPU tiny，只检查脚本

「训练部分」= grpo_train.py 的 train_s：参考模型的 log-prob（β > 0）+ 所有 micro-batch 的前向反向 + 梯度裁剪 + AdamW，
这里直接调用 grpo_train.py 的 grpo_update（第 5–8 段，同一个函数），在一份固定的批次上跑：Qwen3-0.6B 形状、随机权重、fp32 主权重 +
bf16 autocast、激活重算、P 题 × G 条、回答由快速路径真的生成出来（随机权重几乎不出 EOS，回答基本是满长度）。

变体（名字用 + 连起来，不写的保持 grpo_train.py 今天的写法）：
    base      今天的写法：lm_head 分块 256 行、fp32 输入 + TF32 矩阵乘；loss 留在 GPU 上，
              grpo_loss 里 clip 比例和 KL 各一次 .item()，梯度范数一次 .item()
    nosync    grpo_loss 的指标不算：同样的 clipped surrogate + β·k3 + sequence_mean，损失里没有 .item()
（2026-12 的版本每个 micro-batch 还取回一次 loss.item()，当时的 noitem 变体就是今天的 base。）
    cN        lm_head 每块 N 行
    bf16      lm_head 的矩阵乘用 bf16、输出 bf16 logits 再升 fp32（TRL 的做法）
    bf16out   bf16 输入、fp32 输出的矩阵乘（torch.mm(..., out_dtype=torch.float32)，只在有它的 torch 和 GPU 上）
    zN        N% 的组 reward 全相同（advantage 精确为 0），其余的组照旧随机 0/1；不跳过时算力和 base 一样
    skip      grpo_train.py --skip-zero-adv 1：advantage 为 0 的行不进 forward/backward（β 要是 0）。
              z44 对 skip+z44 就是「跳过」省下的训练时间（真模型运行平均 43%–45% 的组全相同，L2.10）
每个变体：预热 2 步，计时 --iters 步取中位数（每步结束同步一次），CUDA event 记各阶段，再 profile 一步
（同步次数、kernel 数、GPU 忙的比例、最耗时的 kernel），另外单独计时 lm_head 这一段的前向 + 反向。
TRL（--impl trl，不用 vLLM）在子进程里跑 --trl-steps 步，「训练部分」= step_s - score_s，并 profile 倒数第 2 步
打分之后到这一步结束的那一段（就是它的训练部分）。TRL 的计时取「干净的步」的中位数：前 2 步（预热，和我们这一侧
一样）和 profile 的那一步（profile 会把它拉长一倍多）都不算；干净的步不到 2 步时表里不给比值。结果写进 --out：train_part.md、train_part_profile.md、train_part.json。
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402
from torch.profiler import record_function  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from common.config.config_cli import preset_config  # noqa: E402
from common.decode.profiler_kernels import kernel_launches, op_chain  # noqa: E402
from common.decode.rollout import generate  # noqa: E402
from common.gsm8k import data as D  # noqa: E402
from common.model.models import compute_dtype, load_model, model_spec  # noqa: E402
from common.model.optim import make_optimizer  # noqa: E402
from common.options.cli import CourseParser  # noqa: E402
from common.run.run_folder import RunFolder  # noqa: E402
from solutions.l2_01_advantages import group_advantages  # noqa: E402
from solutions.l2_02_logprobs_and_masks import (  # noqa: E402
    completion_mask,
    hidden_token_logprobs,
    masked_mean,
)
from solutions.l2_03_policy_loss import clipped_surrogate_loss  # noqa: E402
from solutions.l2_04_kl import kl_k3  # noqa: E402
from solutions.l2_05_grpo_loss import grpo_loss  # noqa: E402
from solutions.l2_06_sampling import process_logits  # noqa: E402
from solutions.l2_07_grpo_train import microbatch_weight  # noqa: E402


def _load_grpo_train():
    """L2.07 的 grpo_train.py 是一个普通文件（不是包）：按路径把它当模块加载，用它的 grpo_update。"""
    path = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
    spec = importlib.util.spec_from_file_location("grpo_train", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


G = _load_grpo_train()  # G.grpo_update：训练部分（第 5–8 段），和 grpo_train.py 用的是同一个函数
# grpo_update 调用的这两个函数（和运行目录的 NaN 检查），计时时包一层记下阶段的分界，用完放回
G_PARTS = {n: getattr(G, n) for n in ("lend_rollout_memory_to_gradients", "clip_grad_norm_")}


def nometrics_loss(logp, old_logp, advantages, mask, ref_logp=None, beta=0.0, eps_low=0.2, **_):
    """nosync 变体：grpo_loss 的同一个损失（sequence_mean、μ = 1），不算任何指标，没有 .item()。"""
    per_token, _ = clipped_surrogate_loss(logp, old_logp, advantages, eps_low=eps_low)
    if ref_logp is not None:
        ref_logp = torch.where(mask != 0, ref_logp, logp.detach())
        per_token = per_token + beta * kl_k3(logp, ref_logp)
    return masked_mean(per_token, mask, dim=1).mean(), {}


DEFAULT_VARIANTS = "base,nosync,c1024,c2048,bf16+c2048,bf16out+c2048,nosync+bf16out+c2048"
DRY_VARIANTS = "base,nosync+bf16+c64"
BASE = dict(head="tf32", chunk=G.HIDDEN_CHUNK_ROWS, sync="metrics", zero=0, skip=0)  # 今天的写法
WARMUP_STEPS = (
    2  # 两侧都不计时的预热步数：第 1 步含 cuBLAS 初始化、分配器扩张，TRL 的第 2 步也还慢好几倍
)
MIN_CLEAN_TRL_STEPS = 2  # TRL 的训练部分至少要这么多干净的步，表里才给「vs TRL」的比值
PHASES = ("ref", "host", "fwd", "bwd", "clip", "opt")
PHASE_NAMES = dict(
    ref="ref log-prob", host="梯度借位", fwd="前向+loss", bwd="反向", clip="裁剪", opt="AdamW"
)


# ---------------------------------------------------------------------------------- 变体 ----
def parse_variant(name: str) -> dict:
    v = dict(BASE)
    for part in name.split("+"):
        if part == "base":
            continue
        if part == "nosync":
            v["sync"] = "none"
        elif part in ("tf32", "bf16", "bf16out"):
            v["head"] = part
        elif part.startswith("c") and part[1:].isdigit() and int(part[1:]) > 0:
            v["chunk"] = int(part[1:])
        elif part.startswith("z") and part[1:].isdigit() and int(part[1:]) <= 100:
            v["zero"] = int(part[1:])
        elif part == "skip":
            v["skip"] = 1
        else:
            raise ValueError(
                f"变体 {name!r} 里的 {part!r} 不认识：可用 base、nosync、tf32、bf16、bf16out、cN（N>0）、"
                "zN（0–100）、skip"
            )
    return v


class _MatmulF32Out(torch.autograd.Function):
    """h (n, H) bf16 @ W.T，W (V, H) 是 fp32 主权重：在块内转成 bf16，矩阵乘的输出直接是 fp32（没有 bf16 舍入）。
    反向：对 h 的梯度是 bf16（h 的 dtype），对 W 的梯度直接以 fp32 输出，累加进 fp32 的 .grad。"""

    @staticmethod
    def forward(ctx, h, w):
        w16 = w.to(torch.bfloat16)
        ctx.save_for_backward(h, w16)
        return torch.mm(h, w16.t(), out_dtype=torch.float32)

    @staticmethod
    def backward(ctx, g):
        h, w16 = ctx.saved_tensors
        g16 = g.to(torch.bfloat16)
        return g16 @ w16, torch.mm(g16.t(), h, out_dtype=torch.float32)


def _chunk_lowp(h, w, tok, temperature, out_f32: bool):
    """`_chunk_hidden`（L2.02）的低精度版本：只换 logits 的矩阵乘，log-softmax、gather、熵照旧在 fp32 里。"""
    with torch.autocast(h.device.type, enabled=False):
        h16 = h.to(torch.bfloat16)
        if out_f32:
            z = _MatmulF32Out.apply(h16, w) / temperature
        else:  # TRL 的做法：bf16 logits 的块，再升到 fp32
            z = (h16 @ w.to(torch.bfloat16).t()).float() / temperature
        lse = torch.logsumexp(z, dim=-1)
        logp = z.gather(-1, tok.unsqueeze(-1)).squeeze(-1) - lse
        with torch.no_grad():
            logp_all = z - lse.unsqueeze(-1)
            ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def lowp_token_logprobs(hidden, w, tokens, temperature, chunk_rows, out_f32):
    """与 hidden_token_logprobs 相同的契约（(B, T) logp 与熵，分块 + checkpoint），只是块内的矩阵乘是 bf16。"""
    B, T = tokens.shape
    L = hidden.shape[1]
    flat = hidden[:, L - T - 1 : L - 1].reshape(B * T, -1)
    tok = tokens.reshape(-1).long()
    logps, ents = [], []
    for s in range(0, B * T, chunk_rows):
        args = (flat[s : s + chunk_rows], w, tok[s : s + chunk_rows], temperature, out_f32)
        lp, ent = checkpoint(_chunk_lowp, *args, use_reentrant=False)
        logps.append(lp)
        ents.append(ent.detach())
    return torch.cat(logps).reshape(B, T), torch.cat(ents).reshape(B, T)


def head_fn(v: dict):
    if v["head"] == "tf32":
        return lambda h, w, t, temp: hidden_token_logprobs(h, w, t, temp, chunk_rows=v["chunk"])
    out_f32 = v["head"] == "bf16out"
    return lambda h, w, t, temp: lowp_token_logprobs(h, w, t, temp, v["chunk"], out_f32)


def bf16out_available(dev) -> bool:
    try:
        a = torch.ones(2, 2, device=dev, dtype=torch.bfloat16)
        return torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError):
        return False


# ---------------------------------------------------------------------------------- 计时 ----
class Phases:
    """CUDA event 按阶段计时：mark(name) 记一个事件，name 的时间 = 它与上一个事件之间。不同步 GPU。"""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
        else:
            e = time.perf_counter()
        self.marks.append((name, e))

    def seconds(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
        out = dict.fromkeys(PHASES, 0.0)
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] += a.elapsed_time(b) / 1e3 if self.cuda else b - a
        return out


def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------- 我们的训练部分 ----
class Setup:
    """grpo_train.py main() 里训练开始前的那一段：模型、参考模型、fp32 主权重、优化器、一次真实的 rollout。"""

    def __init__(self, a, dev):
        self.a, self.dev = a, dev
        name = "tiny" if a.dry_run else "qwen3-0.6b"
        recipe = preset_config(name)
        preset = model_spec(recipe.model)
        torch.manual_seed(0)
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # 与 grpo_train.py 相同
        if dev.type == "cpu":
            torch.set_num_threads(1)
        model, tok = load_model(preset, "random", dev)  # GPU 上开激活重算
        self.ref = copy.deepcopy(model).eval().requires_grad_(False) if a.beta > 0 else None
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:
            p.data = p.data.float()
        dtype = compute_dtype(preset, dev)
        half = dtype != torch.float32
        self.amp = lambda: torch.autocast(dev.type, dtype=dtype) if half else nullcontext()
        lr = recipe.lr
        self.opt = make_optimizer(self.params, "adamw", lr=lr, weight_decay=0.0)
        self.model, self.tok, self.preset = model, tok, preset
        eos = list(preset.eos_token_ids)
        problems = D.synthetic_problems(a.prompts, seed=1, difficulty=2)
        prompts = [
            tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
            for p in problems
            for _ in range(a.group)
        ]
        with (
            torch.no_grad(),
            self.amp(),
        ):  # 与 grpo_train.py 的 rollout 相同：快速路径（GPU）、采样 T=1
            self.ro = generate(
                model, prompts, max_new_tokens=a.max_new_tokens, eos_token_ids=eos,
                pad_token_id=preset.pad_token_id, temperature=1.0, process_logits=process_logits,
            )  # fmt: skip
        g = torch.Generator().manual_seed(0)
        rewards = torch.randint(0, 2, (len(prompts),), generator=g).float()
        self.adv = group_advantages(rewards, a.group).to(dev)
        self.mask = completion_mask(self.ro.completion_ids, eos)
        texts = tok.batch_decode(self.ro.completion_ids, skip_special_tokens=True)
        self.batch = dict(prompt_ids=torch.arange(a.prompts), rollout=self.ro, rewards=rewards,
                          advantages=self.adv, texts=texts)  # fmt: skip
        # grpo_update 读的那几个 knob：qwen3-0.6b 的配方，换成这里的批次和损失（sequence_mean、ε=0.2、全参数）
        self.cfg = dataclasses.replace(
            recipe, prompts_per_step=a.prompts, group_size=a.group, micro_batch=a.prompts * a.group,
            max_new_tokens=a.max_new_tokens, beta=a.beta, aggregation="sequence_mean", eps_low=0.2,
            eps_high=None, num_iterations=1, tis="none", lora_rank=0, grad_clip=1.0,
        )  # fmt: skip
        lens = self.ro.lengths.float()
        self.batch_info = dict(
            rows=len(prompts),
            prompt_width=int(self.ro.prompt_ids.shape[1]),
            completion_width=int(self.ro.completion_ids.shape[1]),
            completion_len_mean=float(lens.mean()),
            truncated_frac=float(self.ro.truncated.float().mean()),
        )

    def logprobs(self, net, rows, head):
        """grpo_train.py 的 logprobs()：模型主体到最后一层 hidden，lm_head 从 hidden 分块算。"""
        ro = self.ro
        with self.amp(), record_function("body_forward"):
            h = net.model(
                input_ids=ro.sequences[rows],
                attention_mask=ro.attention_mask[rows],
                position_ids=ro.position_ids[rows],
            ).last_hidden_state
        with record_function("logprob_head"):
            return head(h, net.lm_head.weight, ro.completion_ids[rows], 1.0)

    def step(self, v: dict, mb_size: int) -> tuple[float, dict[str, float]]:
        """一次训练部分 -> (墙钟秒数（结束时同步一次）, 各阶段秒数)：调用 grpo_train.py 的 grpo_update。

        变体只换 grpo_update 的参数：logprobs（lm_head 的写法、分块行数）和 L（nosync：不算指标的损失）。
        各阶段的分界由包在它调用的函数外面的计时点记下（不改 grpo_update 本身）。"""
        a, dev = self.a, self.dev
        cfg = dataclasses.replace(self.cfg, micro_batch=mb_size, skip_zero_adv=v["skip"])
        batch = dict(self.batch, advantages=self.advantages(v["zero"]))
        head = head_fn(v)
        ph = Phases(dev)

        def logprobs(net, ro, rows):
            if torch.is_grad_enabled():  # 训练端的前向：参考模型那一段（和梯度借位）已经结束
                if ph.marks[-1][0] == "start":
                    ph.mark("ref")
                elif ph.marks[-1][0] == "fwd":  # 上一个 micro-batch 的反向结束了
                    ph.mark("bwd")
                return self.logprobs(net, rows, head)
            with record_function("ref_logprobs"):
                return self.logprobs(net, rows, head)

        def timed_loss(*args, **kw):
            out = (nometrics_loss if v["sync"] == "none" else grpo_loss)(*args, **kw)
            ph.mark("fwd")
            return out

        def host(model, params):
            ph.mark("ref")
            G_PARTS["lend_rollout_memory_to_gradients"](model, params)
            ph.mark("host")

        def clip(params, max_norm):
            ph.mark("bwd")
            with record_function("clip_grad"):
                out = G_PARTS["clip_grad_norm_"](params, max_norm)
            ph.mark("clip")
            return out

        class Run(RunFolder):  # grpo_update 的运行目录：NaN 检查之后记下 AdamW 段的结束
            def check_finite(self, *args, **kw):
                super().check_finite(*args, **kw)
                ph.mark("opt")

        learner = SimpleNamespace(grpo_loss=timed_loss, microbatch_weight=microbatch_weight)
        G.lend_rollout_memory_to_gradients, G.clip_grad_norm_ = host, clip
        try:
            sync(dev)
            t0 = time.perf_counter()
            ph.mark("start")
            args = (learner, cfg, self.model, self.ref, self.params, self.opt, batch)
            G.grpo_update(*args, self.mask, logprobs, Run(a.out), 1)
            sync(dev)
            wall = time.perf_counter() - t0
        finally:
            for name, fn in G_PARTS.items():
                setattr(G, name, fn)
        return wall, ph.seconds()

    def advantages(self, zero_pct: int) -> torch.Tensor:
        """(P·G,) 组内 advantage；前 round(P·zero_pct/100) 组的 reward 改成全 0（advantage 精确为 0）。"""
        rewards = self.batch["rewards"].clone().view(-1, self.a.group)
        rewards[: round(self.a.prompts * zero_pct / 100)] = 0.0
        return group_advantages(rewards.flatten(), self.a.group).to(self.dev)

    def zero_frac(self, zero_pct: int) -> float:
        """advantage 全为 0 的组的比例（随机的组偶尔也全相同，所以按实际算）。"""
        adv = self.advantages(zero_pct).view(-1, self.a.group)
        return float((adv == 0).all(1).float().mean())

    def head_alone(self, v: dict, mb_size: int, reps: int = 3) -> float:
        """只有 lm_head 这一段（一个 micro-batch 的 hidden -> logp，前向 + 反向）乘以 micro-batch 数：每步的秒数。"""
        ro, rows = self.ro, slice(0, mb_size)
        with torch.no_grad(), self.amp():
            h = self.model.model(
                input_ids=ro.sequences[rows],
                attention_mask=ro.attention_mask[rows],
                position_ids=ro.position_ids[rows],
            ).last_hidden_state
        h = h.detach().requires_grad_(True)
        head, w = head_fn(v), self.model.lm_head.weight
        times = []
        for _ in range(reps + 1):
            sync(self.dev)
            t0 = time.perf_counter()
            logp, _ = head(h, w, ro.completion_ids[rows], 1.0)
            logp.sum().backward()
            sync(self.dev)
            times.append(time.perf_counter() - t0)
        h.grad = None
        w.grad = None
        return statistics.median(times[1:]) * (self.mask.shape[0] // mb_size)


# ---------------------------------------------------------------------------------- profile 分析 ----
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def analyze(prof, wall_s: float, dry: bool, skip_range: str | None = None) -> dict:
    """一次 profile -> 同步次数、.item() 次数、kernel 数、GPU 忙的时间（kernel 区间的并集）、最耗时的 kernel。

    skip_range：名字里含它的 record_function 之内发射的 kernel 不算（TRL 的打分阶段）。"""
    from torch.autograd import DeviceType

    events = prof.events()
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    counts = {n: 0 for n in (*SYNC_EVENTS, "aten::_local_scalar_dense")}
    for e in cpu:
        if e.name in counts:
            counts[e.name] += 1
    if dry:  # CPU：没有 kernel，用最内层 aten 算子的 CPU 时间代替，只为把流程走一遍
        dev_events = [
            (e.name, op_chain(e), e.time_range.start, e.time_range.end)
            for e in cpu
            if e.name.startswith("aten::") and not e.cpu_children
        ]
    else:  # 发射每个 kernel 的算子：common.decode.profiler_kernels（torch 2.11 和 2.13 的事件字段不同）
        dev_events = [
            (k.name, op_chain(k.op), k.start_us, k.end_us) for k in kernel_launches(events)
        ]
    if skip_range:
        dev_events = [d for d in dev_events if not any(skip_range in n for n in d[1])]
    spans = sorted((s, t) for _, _, s, t in dev_events)
    busy, cur_s, cur_t = 0.0, None, None
    for s, t in spans:  # 区间并集（µs）
        if cur_t is None or s > cur_t:
            busy += 0.0 if cur_t is None else cur_t - cur_s
            cur_s, cur_t = s, t
        else:
            cur_t = max(cur_t, t)
    busy += 0.0 if cur_t is None else cur_t - cur_s
    per: dict[tuple[str, str], list] = {}
    for name, ch, s, t in dev_events:
        where = (
            "反向" if any("autograd::engine" in n for n in ch)
            else "AdamW" if any("optimizer_step" in n or "Optimizer.step" in n for n in ch)
            else "ref" if any("ref_logprobs" in n for n in ch)
            else "前向"
        )  # fmt: skip
        entry = per.setdefault((name, where), [0, 0.0])
        entry[0] += 1
        entry[1] += (t - s) / 1e3
    top = sorted(per.items(), key=lambda kv: -kv[1][1])[:15]
    return dict(
        wall_ms=wall_s * 1e3,
        busy_ms=busy / 1e3,
        kernels=len(dev_events),
        syncs=sum(counts[n] for n in SYNC_EVENTS),
        items=counts["aten::_local_scalar_dense"],
        top=[{"name": n, "where": w, "calls": c, "ms": ms} for (n, w), (c, ms) in top],
    )


def profile_step(S: Setup, v: dict, mb: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if S.dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        wall, _ = S.step(v, mb)
    return analyze(prof, wall, S.a.dry_run)


# ---------------------------------------------------------------------------------- TRL（子进程） ----
def trl_argv(a, mb: int, data: Path, out: Path) -> list[str]:
    preset = "tiny" if a.dry_run else "qwen3-0.6b"
    argv = ["--preset", preset, "--data", str(data), "--prompts-per-step", str(a.prompts)]
    argv += ["--group-size", str(a.group), "--max-new-tokens", str(a.max_new_tokens)]
    argv += [
        "--micro-batch",
        str(mb),
        "--beta",
        str(a.beta),
        "--loss-type",
        "grpo",
        "--impl",
        "trl",
    ]
    argv += ["--no-vllm", "--steps", str(a.trl_steps), "--out", str(out)]
    if not a.dry_run:
        argv += ["--init", "random"]
    if a.cap_gb and not a.dry_run:
        argv += ["--cap-gb", str(a.cap_gb)]
    return argv


def trl_profile_target(trl_steps: int) -> int:
    """TRL 子进程要 profile 的那一步（1 起）：倒数第 2 步，至少第 2 步。"""
    return max(2, trl_steps - 1)


def trl_worker(a) -> int:
    """子进程：用 train_trl.py 自己的 build_trainer 建 TRL 的 trainer，profile 倒数第 2 步的训练部分。"""
    sys.path.insert(0, str(HERE))
    import train_trl
    from torch.profiler import ProfilerActivity, profile
    from transformers import TrainerCallback

    out = Path(a.trl_out)
    targs = train_trl.parse_args(trl_argv(a, a.trl_mb, Path(a.trl_data), out))
    trainer = train_trl.build_trainer(*targs)
    cuda = torch.cuda.is_available() and not a.dry_run
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof = profile(activities=acts)
    target = trl_profile_target(a.trl_steps)  # 要 profile 的那一步（1 起）
    state = dict(on=False, t0=0.0, wall=0.0, in_score=False, score_logp_s=[], cur=0.0, done=None)
    score, logps = (
        trainer._generate_and_score_completions,
        trainer._get_per_token_logps_and_entropies,
    )

    def timed_logps(*args, **kw):  # 打分阶段里的 ref / old log-prob 前向（训练部分之外）
        if not state["in_score"]:
            return logps(*args, **kw)
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        res = logps(*args, **kw)
        if cuda:
            torch.cuda.synchronize()
        state["cur"] += time.perf_counter() - t
        return res

    def wrapped_score(*args, **kw):
        state["in_score"], state["cur"] = True, 0.0
        try:
            res = score(*args, **kw)
        finally:
            state["in_score"] = False
        state["score_logp_s"].append(state["cur"])
        if trainer.state.global_step == target - 1 and not state["on"]:  # 打分刚结束：训练部分开始
            if cuda:
                torch.cuda.synchronize()
            prof.start()
            state["on"], state["t0"] = True, time.perf_counter()
        return res

    class StopAtStepEnd(TrainerCallback):
        def on_step_end(self, args, st, control, **kwargs):
            if state["on"] and st.global_step == target:
                if cuda:
                    torch.cuda.synchronize()
                state["wall"] = time.perf_counter() - state["t0"]
                prof.stop()
                state["on"], state["done"] = False, st.global_step

    trainer._generate_and_score_completions = wrapped_score
    trainer._get_per_token_logps_and_entropies = timed_logps
    trainer.add_callback(StopAtStepEnd())
    trainer.train()
    try:  # 分析失败（比如 torch 版本的事件字段不同）不能让已经跑完的 TRL 计时丢掉
        profile_res = analyze(prof, state["wall"], a.dry_run)
    except Exception:
        profile_res = {"error": traceback.format_exc()[-3000:]}
    res = dict(
        micro_batch=a.trl_mb,
        steps=_read_steps(out),
        score_logp_s=state["score_logp_s"],
        # 真的 profile 了的那一步；开了却没等到这一步结束（训练提前停了）也照样记下，计时不算它
        profiled_step=state["done"] or (target if state["on"] else None),
        profile=profile_res,
    )
    (out / "trl_result.json").write_text(
        json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    return 0


def _read_steps(out: Path) -> list[dict]:
    """train_trl.py 每步写一行的 steps.jsonl（没有就是空列表）。"""
    path = out / "steps.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def step_numbers(steps: list[dict]) -> list[int]:
    """steps.jsonl 每行的步号（1 起；老的记录没有 step 字段就按行号）。"""
    return [s.get("step", i + 1) for i, s in enumerate(steps)]


def trl_times(res: dict) -> dict:
    """TRL 的训练部分 = step_s - score_s，取「干净的步」的中位数；打分阶段的 ref/old log-prob 前向同样。

    不干净的步：前 WARMUP_STEPS 步（预热；2026-12-02 的 H200 上 TRL 第 2 步还要 3.659 s）和
    res["profiled_step"] 那一步（profile 把它拉长：同一次 1.735 s，对不 profile 的 0.708 s）。没有 clean_steps 时 train_s 为 None。
    steps: [{step (1 起), step_s, score_s, ...}]；score_logp_s: 每次打分一个数，和 steps 一一对应。
    """
    prof = res.get("profiled_step")
    steps = list(zip(step_numbers(res["steps"]), res["steps"], strict=True))
    clean = [(n, s) for n, s in steps if n > WARMUP_STEPS and n != prof]
    logp = res.get("score_logp_s") or []
    clean_logp = [logp[n - 1] for n, _ in clean if n - 1 < len(logp)]
    return dict(
        clean_steps=[n for n, _ in clean],
        step_train_s=[round(s["step_s"] - s["score_s"], 4) for _, s in steps],
        train_s=statistics.median(s["step_s"] - s["score_s"] for _, s in clean) if clean else None,
        step_s=statistics.median(s["step_s"] for _, s in clean) if clean else None,
        score_logp_median_s=statistics.median(clean_logp) if clean_logp else None,
    )


def run_trl(a, mb: int, work: Path, data: Path) -> dict:
    out = work / f"trl-mb{mb}"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--trl-worker", "--out", str(work)]
    cmd += ["--trl-mb", str(mb), "--trl-data", str(data), "--trl-out", str(out)]
    cmd += [f"--{k.replace('_', '-')}={getattr(a, k)}" for k in ("prompts", "group", "max_new_tokens", "beta", "trl_steps")]  # fmt: skip
    cmd += ["--dry-run"] if a.dry_run else []
    cmd += [f"--cap-gb={a.cap_gb}"] if a.cap_gb else []
    log = work / f"trl-mb{mb}.log"
    t0 = time.time()
    with log.open("w", encoding="utf-8") as f:
        r = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    print(f"  TRL mb{mb}：{time.time() - t0:.0f} s（exit {r.returncode}）", flush=True)
    result = out / "trl_result.json"
    if r.returncode == 0 and result.is_file():
        res = json.loads(result.read_text(encoding="utf-8"))
    else:  # 子进程失败：它写下的步数（如果训练已经跑完）照样算进表里，错误另记
        res = {"micro_batch": mb, "steps": _read_steps(out), "score_logp_s": []}
        res["profiled_step"] = trl_profile_target(a.trl_steps)  # 不知道 profile 到没有：照样不算它
        res["error"] = f"exit {r.returncode}：\n" + log.read_text(encoding="utf-8")[-4000:]
    if res["steps"]:
        res.update(trl_times(res))
    elif "error" not in res:
        res["error"] = f"TRL 子进程没有记下任何一步（{out / 'steps.jsonl'}）：见 {log}"
    return res


# ---------------------------------------------------------------------------------- 输出 ----
def trl_steps_line(t: dict) -> str:
    """TRL 每一步的训练部分，标出哪几步不算；干净的步太少时明说不给比值。"""
    clean, prof = t.get("clean_steps") or [], t.get("profiled_step")
    marks = []
    for n, x in zip(step_numbers(t["steps"]), t.get("step_train_s") or [], strict=False):
        why = (
            "（预热，不算）"
            if n <= WARMUP_STEPS
            else "（profile 的那一步，不算）"
            if n == prof
            else ""
        )
        marks.append(f"第 {n} 步 {x:.3f}{why}")
    line = "TRL 每步的训练部分（s）：" + "、".join(marks) + "。"
    if len(clean) < MIN_CLEAN_TRL_STEPS:
        line += (
            f"**干净的步只有 {len(clean)} 个（至少要 {MIN_CLEAN_TRL_STEPS} 个），「vs TRL」一栏不给比值**："
            "加大 --trl-steps 重跑。"
        )
    return line


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def write_outputs(out: Path, env: dict, ours: list[dict], trl: list[dict], a) -> None:
    (out / "train_part.json").write_text(
        json.dumps({"env": env, "ours": ours, "trl": trl}, ensure_ascii=False, indent=1),
        encoding="utf-8",
    )
    b = env.get("batch", {})
    L = [
        f"# 训练部分：{env['model']}，P{a.prompts}×G{a.group}，最多 {a.max_new_tokens} 个新 token，β={a.beta}",
        "",
        f"{env['date']}；{env['device']}；torch {env['torch']}，transformers {env['transformers']}；显存上限 "
        f"{a.cap_gb or '不限'} GiB。批次：{b.get('rows')} 行，prompt 宽 {b.get('prompt_width')}，回答宽 "
        f"{b.get('completion_width')}（平均 {b.get('completion_len_mean', 0):.0f}，截断 "
        f"{b.get('truncated_frac', 0):.0%}）。我们：预热 {WARMUP_STEPS} 步后 {a.iters} 步的中位数，每步结束同步一次。",
        "",
    ]
    for mb in a.micro_batch:
        rows = [r for r in ours if r["micro_batch"] == mb]
        t = next((x for x in trl if x.get("micro_batch") == mb), None)
        timed = [r for r in rows if "train_s" in r]  # 比值的分母：base，没有 base 时第一个变体
        base = next((r for r in timed if r["name"] == "base"), timed[0] if timed else None)
        L += [
            f"## micro-batch {mb}",
            "",
            f"| 变体 | 组全相同 | 训练部分 s | vs {base['name'] if base else 'base'} | vs TRL | "
            + " | ".join(PHASE_NAMES[p] for p in PHASES)
            + " | lm_head 前向+反向 s | 同步 | .item() | kernel 数 | GPU 忙 |",
            "|---|---:|---:|---:|---:|" + "---:|" * (len(PHASES) + 5),
        ]
        n_clean = len(t.get("clean_steps") or []) if t else 0
        trl_s = t.get("train_s") if t and n_clean >= MIN_CLEAN_TRL_STEPS else None
        for r in rows:
            if "train_s" not in r:
                L.append(f"| {r['name']} | 失败：{r.get('error', '')[-120:]!r} |")
                continue
            p = r.get("profile") or {}
            rel = f"{r['train_s'] / base['train_s']:.2f}" if base else "—"
            vs_trl = f"{r['train_s'] / trl_s:.2f}" if trl_s else "—"
            busy = f"{p['busy_ms'] / p['wall_ms']:.0%}" if p.get("wall_ms") else "—"
            L.append(
                f"| {r['name']} | {_pct(r.get('zero_std_frac'))} | {r['train_s']:.3f} | {rel} | {vs_trl} | "
                + " | ".join(f"{r['phases'][k]:.3f}" for k in PHASES)
                + f" | {r.get('head_s', float('nan')):.3f} | {p.get('syncs', '—')} | {p.get('items', '—')}"
                f" | {p.get('kernels', '—')} | {busy} |"
            )
        if t and t.get("train_s") is not None:
            p = t.get("profile") or {}
            busy = f"{p['busy_ms'] / p['wall_ms']:.0%}" if p.get("wall_ms") else "—"
            label = f"TRL（step_s - score_s，{n_clean} 个干净步的中位数）"
            cells = [label, "—", f"{t['train_s']:.3f}", "—", "1.00" if trl_s else "—"]
            cells += [""] * (len(PHASES) + 1)  # 阶段和 lm_head 两栏：TRL 那一侧没有分开计
            cells += [str(p.get(k, "—")) for k in ("syncs", "items", "kernels")] + [busy]
            L.append("| " + " | ".join(cells) + " |")
            logp = t.get("score_logp_median_s")
            L += [
                "",
                f"TRL 整步 {t['step_s']:.2f} s；它的 ref log-prob 前向在打分阶段里（不算进它的训练部分）："
                + (f"每步 {logp:.3f} s。" if logp is not None else "这次没有测到。")
                + "我们的「ref log-prob」一列算在训练部分里（grpo_train.py 的 train_s 如此）。",
                "",
                trl_steps_line(t),
            ]
            if "error" in p:
                L += ["", "TRL 这一步的 profile 分析失败（计时照常）：见 train_part_profile.md。"]
        elif t and t.get("steps"):
            L += ["", trl_steps_line(t)]
        if t and "error" in t:
            L += ["", "TRL 子进程失败：", "```", t["error"][-2000:], "```"]
        L.append("")
    L += [
        "各阶段来自 CUDA event（不额外同步）；「同步」= cudaStreamSynchronize 等的次数，「.item()」= "
        "aten::_local_scalar_dense 的次数，都来自 profile 的那一步（TRL：打分之后到这一步结束）；"
        "「GPU 忙」= kernel 区间的并集 / profile 下的墙钟（profile 本身会拉长墙钟）。"
        "「lm_head 前向+反向」是单独计的：一个 micro-batch 的 hidden -> logp 的前向和反向，乘以 micro-batch 数。",
    ]
    (out / "train_part.md").write_text("\n".join(L) + "\n", encoding="utf-8")
    P = ["# 训练部分的 profile：每个变体最耗时的 kernel", ""]
    for r in ours + [dict(x, name=f"TRL mb{x['micro_batch']}") for x in trl if "profile" in x]:
        p = r.get("profile")
        if not p:
            continue
        mb = r["micro_batch"]
        P += [f"## {r['name']}（micro-batch {mb}）", ""]
        if "error" in p:
            P += ["```", p["error"], "```", ""]
            continue
        P += ["| ms | 次数 | 在哪 | kernel |", "|---:|---:|---|---|"]
        P += [
            f"| {k['ms']:.1f} | {k['calls']} | {k['where']} | `{k['name'][:100]}` |"
            for k in p["top"]
        ]
        P.append("")
    (out / "train_part_profile.md").write_text("\n".join(P) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------- 主程序 ----
def parse_args(argv=None):
    p = CourseParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, help="结果目录（train_part.md 等；不存在就新建）")
    p.add_argument("--variants", default=None, help=f"逗号分隔（默认 {DEFAULT_VARIANTS}）")
    p.add_argument(
        "--micro-batch", type=int, nargs="+", default=None, help="默认 16 64（--dry-run：4 8）"
    )
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument(
        "--iters", type=int, default=3, help=f"每个变体计时几步（之前先预热 {WARMUP_STEPS} 步）"
    )
    p.add_argument(
        "--trl-steps",
        type=int,
        default=WARMUP_STEPS + 1 + 3,
        help=f"TRL 跑几步（profile 倒数第 2 步；前 {WARMUP_STEPS} 步和 profile 的那一步不计时，默认剩 3 个干净步）",
    )
    p.add_argument("--no-trl", action="store_true", help="不跑 TRL（不需要 trl、datasets）")
    p.add_argument("--no-profile", action="store_true", help="不做 torch.profiler（只计时）")
    p.add_argument(
        "--cap-gb", type=float, default=None, help="把 PyTorch 限制到这么多 GiB（5090：32）"
    )
    p.add_argument("--work", default=None, help="TRL 子进程的工作目录（默认临时目录，结束后删掉）")
    p.add_argument("--dry-run", action="store_true", help="CPU：tiny 模型、短回答，只检查脚本本身")
    for hidden in ("--trl-worker",):
        p.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--trl-mb", "--trl-data", "--trl-out"):
        p.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.trl_mb is not None:
        a.trl_mb = int(a.trl_mb)
    a.variants = a.variants or (DRY_VARIANTS if a.dry_run else DEFAULT_VARIANTS)
    try:
        a.variant_opts = {v: parse_variant(v) for v in a.variants.split(",") if v}
    except ValueError as err:
        p.error(str(err))
    if a.beta > 0 and any(v["skip"] for v in a.variant_opts.values()):
        p.error(
            "skip 变体只在 --beta 0 时成立（β > 0 时 advantage 为 0 的行还有 KL 的梯度）：加 --beta 0"
        )
    if a.dry_run:  # tiny、短回答、小批次：几十秒走完
        a.prompts, a.group = 2, 4
        a.trl_steps = WARMUP_STEPS + 1 + MIN_CLEAN_TRL_STEPS  # 5 步：剩第 3、5 两个干净步
        a.max_new_tokens, a.iters = min(a.max_new_tokens, 16), 1
    a.micro_batch = a.micro_batch or ([4, 8] if a.dry_run else [16, 64])
    n = a.prompts * a.group
    bad = [m for m in a.micro_batch if m < 1 or n % m]
    if bad or min(a.prompts, a.group, a.max_new_tokens, a.iters) < 1 or a.beta < 0:
        p.error(
            f"--micro-batch 必须整除 P×G = {n}（不行的：{bad}）；--prompts/--group/--max-new-tokens/--iters >= 1；--beta >= 0"
        )
    min_trl = WARMUP_STEPS + 1 + MIN_CLEAN_TRL_STEPS  # 预热的步和 profile 的那一步都不计时
    if a.group < 2 or (not a.no_trl and a.trl_steps < min_trl):
        p.error(
            f"--group 至少 2（组内 advantage）；--trl-steps 至少 {min_trl}："
            f"前 {WARMUP_STEPS} 步是预热、profile 的那一步被拉长，都不计时，剩下至少 {MIN_CLEAN_TRL_STEPS} 步才取中位数"
        )
    if not a.no_trl and not a.trl_worker:
        import importlib.util

        missing = [m for m in ("trl", "datasets") if importlib.util.find_spec(m) is None]
        if missing:
            p.error(
                f"TRL 那一侧要 {' 和 '.join(missing)}：pip install trl==1.16.0 datasets；或者加 --no-trl 只测我们这一侧"
            )
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if not a.dry_run and not torch.cuda.is_available():
        print("这个 profile 只在 CUDA GPU 上有意义；只想检查脚本本身请加 --dry-run。")
        return 2
    if a.cap_gb and not a.dry_run:
        from common.vram.measure import cap_to_gpu_gb

        cap_to_gpu_gb(a.cap_gb)
    if a.trl_worker:
        return trl_worker(a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cpu" if a.dry_run else "cuda")
    import transformers

    env = dict(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        device=torch.cuda.get_device_name(0)
        if dev.type == "cuda"
        else "CPU（--dry-run，数字没有意义）",
        torch=torch.__version__,
        transformers=transformers.__version__,
        model="tiny 随机权重" if a.dry_run else "Qwen3-0.6B 精确形状、随机权重",
    )
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="profile_train_part-"))
    work.mkdir(parents=True, exist_ok=True)
    ours, trl = [], []
    try:
        S = Setup(a, dev)
        env["batch"] = S.batch_info
        print(f"{env['device']}；批次 {S.batch_info}", flush=True)
        has_bf16out = bf16out_available(dev)
        for mb in a.micro_batch:
            for name, v in a.variant_opts.items():
                row = {"name": name, "micro_batch": mb, "options": v}
                row["zero_std_frac"] = S.zero_frac(v["zero"])
                ours.append(row)
                if v["head"] == "bf16out" and not has_bf16out:
                    row["error"] = "这个 torch / 设备没有 torch.mm(..., out_dtype=torch.float32)"
                    continue
                try:
                    for _ in range(WARMUP_STEPS):  # 预热：第一步含 cuBLAS 初始化、分配器扩张
                        S.step(v, mb)
                    runs = [S.step(v, mb) for _ in range(a.iters)]
                    i = sorted(range(len(runs)), key=lambda k: runs[k][0])[len(runs) // 2]
                    row["train_s"], row["phases"] = runs[i]
                    row["all_s"] = [r[0] for r in runs]
                    row["head_s"] = S.head_alone(v, mb)
                    if not a.no_profile:
                        try:
                            row["profile"] = profile_step(S, v, mb)
                        except Exception:
                            row["profile"] = {"error": traceback.format_exc()[-3000:]}
                    print(f"  mb{mb} {name}：{row['train_s']:.3f} s", flush=True)
                except Exception:
                    row["error"] = traceback.format_exc()[-3000:]
                    print(f"  mb{mb} {name}：失败\n{row['error']}", flush=True)
                write_outputs(out, env, ours, trl, a)
        del S
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if not a.no_trl:
            data = work / "syn.jsonl"
            data.write_text(
                "".join(
                    json.dumps({"question": q.question, "answer": q.answer}) + "\n"
                    for q in D.synthetic_problems(2000, seed=1, difficulty=2)
                ),
                encoding="utf-8",
            )
            for mb in a.micro_batch:
                trl.append(run_trl(a, mb, work, data))
                write_outputs(out, env, ours, trl, a)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    write_outputs(out, env, ours, trl, a)
    print()
    print((out / "train_part.md").read_text(encoding="utf-8"))
    failed = [
        f"{r['name']} mb{r['micro_batch']}"
        for r in ours
        if "error" in r and r["options"]["head"] != "bf16out"
    ]
    failed += [f"TRL mb{t['micro_batch']}" for t in trl if "error" in t]
    if failed:
        print(f"失败的：{', '.join(failed)}（traceback 在 train_part.json）")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
