"""L1.04 显存账本的实测：跑几步 GRPO（与 grpo_train.py 同一条代码路径），逐阶段打印「实测 vs 账本预测」。

    python L1_concepts/04_vram_ledger/measure_vram.py                       # tiny 预设，CPU：跑通，不测显存
    python L1_concepts/04_vram_ledger/measure_vram.py --preset qwen3-0.6b --init random --cap-gb 32 \\
        --prompts 8 --group 8 --max-new-tokens 512 --beta 0.04 --micro-batch 4
    python L1_concepts/04_vram_ledger/measure_vram.py --preset qwen3-0.6b --model ./Qwen3-0.6B --cap-gb 32   # 真权重

一步 GRPO 分成五个阶段，每个阶段用 torch.cuda.max_memory_allocated 量峰值：
  加载后 → rollout → 旧/参考 log-prob 前向（no_grad）→ 反向（逐个 micro-batch）→ 优化器 step。
账本（common/vram/ledger.py）按同样的形状预测每个阶段。默认跑 2 步、报告最后一步：第一步里 AdamW 的 m、v
才被创建、快速解码器才被编译，第二步才是「稳态」，账本算的也是稳态。
--init random（默认）：随机权重几乎不会采到 EOS，每条回答都写满 max_new_tokens——正好是账本假设的最坏情况。
--model 目录（真权重）：回答可能在 EOS 处提前停下、不写满 max_new_tokens，而账本按写满算。
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import json
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

# 没 pip install -e 也能从仓库根目录运行
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import common  # noqa: E402, F401  先于 torch：import 的几秒里按 Ctrl-C 也只打一行，不打 traceback

# isort: split
import torch  # noqa: E402

from common.config.config_cli import base_config  # noqa: E402
from common.config.model_plan import plan_model  # noqa: E402
from common.decode.fast_decode import free_rollout_memory, host_gradients, rollout_buffers  # noqa: E402
from common.decode.rollout import generate  # noqa: E402
from common.gsm8k import data as D  # noqa: E402
from common.gsm8k.reward import correctness_reward  # noqa: E402
from common.model.models import (  # noqa: E402
    PresetError,
    compute_dtype,
    load_model,
    resolve_device,
)
from common.model.optim import OPTIMIZERS, OptimizerError, make_optimizer  # noqa: E402
from common.options.cli import CourseParser  # noqa: E402
from common.options.presets import gpu_recipe  # noqa: E402
from common.run.atomic_io import WriteError, atomic_write  # noqa: E402
from common.run.out_dir import out_file_problem  # noqa: E402
from common.run.random_streams import random_streams  # noqa: E402
from common.vram.ledger import (  # noqa: E402
    ALLOCATOR_SLACK,
    CUDA_CONTEXT_GIB,
    HIDDEN_CHUNK_ROWS,
    GiB,
    Settings,
    ledger,
)
from common.vram.measure import cap_to_gpu_gb, peak_memory  # noqa: E402
from common.vram.report import cell  # noqa: E402

PHASES = ("loaded", "rollout", "ref_forward", "backward", "optimizer", "after_step")
LABELS = {
    "loaded": "加载后",
    "rollout": "rollout",
    "ref_forward": "旧/参考 log-prob 前向",
    "backward": "反向",
    "optimizer": "优化器 step",
    "after_step": "step 之后",
}
# 「加载后」「step 之后」比的是阶段末还占着的显存；其余阶段比阶段内的峰值
END_OF_PHASE = ("loaded", "after_step")


def parse_args(argv=None):
    ap = CourseParser(  # 报错只有一行中文，不先打印二十多个参数的 usage（issue 44）
        usage_on_error=False,
        description="跑几步 GRPO，逐阶段对照实测显存与 common.vram.ledger 的预测",
    )
    ap.add_argument(
        "--preset",
        help="presets.toml 里的预设：tiny（CPU）| qwen3-0.6b | …；不给：有 --model 就按目录定，否则 tiny",
    )
    ap.add_argument(
        "--init",
        choices=["pretrained", "random"],
        default=None,
        help="random（默认）：同形状随机权重，不下载；回答会写满 max_new_tokens。给了 --model 时默认 pretrained",
    )
    ap.add_argument(
        "--model",
        metavar="PATH",
        help="本地模型目录（Qwen3 / Qwen2.5，见 README「权重从哪来」）；只给它不给 --preset 时，"
        "配方是 presets.toml 的 GPU 配方，全参数还是 LoRA 由显存账本定",
    )
    ap.add_argument("--prompts", type=int, help="每步 prompt 数 P（默认取预设的推荐值）")
    ap.add_argument("--group", type=int, help="每个 prompt 采样 G 条（默认取预设的推荐值）")
    ap.add_argument("--max-new-tokens", type=int, help="回答最多多少 token（默认取预设的推荐值）")
    ap.add_argument(
        "--beta", type=float, help="KL 系数；>0 时全参微调要一份参考模型（默认取预设的推荐值）"
    )
    ap.add_argument(
        "--micro-batch",
        type=int,
        help="每次前向/反向的回答条数（默认取预设的推荐值，presets.toml 的 GPU 配方是 "
        f"{gpu_recipe()['micro_batch']}；比 P·G 大时取 P·G）",
    )
    ap.add_argument(
        "--checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gradient checkpointing（默认开）",
    )
    ap.add_argument(
        "--backend", choices=["auto", "eager", "fast"], default="auto", help="rollout 的实现"
    )
    ap.add_argument(
        "--cap-gb",
        type=float,
        help="把 PyTorch 能用的显存限制在这么多 GiB（在大卡上模拟 32 GB 的 5090）",
    )
    ap.add_argument("--steps", type=int, default=2, help="跑几步，报告最后一步（默认 2）")
    ap.add_argument(
        "--logprobs",
        choices=["hidden", "logits"],
        default="hidden",
        help="hidden（默认，同 grpo_train.py）：从 hidden state 分块算，不出现 logits；"
        "logits：先算出 (B,T,V) logits 再 token_logprobs（L2.02 第 3 节的写法）",
    )
    ap.add_argument(
        "--rollout-memory",
        choices=["host", "keep", "release"],
        default="host",
        help="快速解码器的 KV cache 和权重副本在训练时：host（默认，同 grpo_train.py）= 借给梯度；"
        "keep = 闲置；release = 每次生成完释放、下次重新分配并重新捕获 CUDA graph",
    )
    ap.add_argument("--optimizer", choices=OPTIMIZERS, help="默认取预设的推荐值（没有就是 adamw）")
    ap.add_argument(
        "--full",
        action="store_true",
        help="LoRA 预设改成全参数微调（同一个基座，不加 adapter）：L1.04 的 1.7B 全参实验",
    )
    ap.add_argument(
        "--questions",
        choices=["synthetic", "training"],
        default="synthetic",
        help="synthetic（默认）：合成的短题；training：grpo_train.py 同一个 --seed 在第 1..--steps 步"
        "抽到的那些题（同样的数据和选题随机数），prompt 长度和训练时一样（L1.04 第 7.2 节）",
    )
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--impl", choices=["solutions", "exercises"], default="solutions", help="L2 函数用谁的实现"
    )
    ap.add_argument("--json", metavar="PATH", help="把实测和预测写进这个 JSON 文件")
    a = ap.parse_args(argv)
    if a.model is not None and a.init == "random":
        ap.error("--model 与 --init random 不能同时用：从目录加载就是用那份权重")
    a.init = a.init or ("pretrained" if a.model else "random")
    try:  # 和 grpo_train.py 同样的默认值（预设，或 --model 目录的 GPU 配方），再叠上这里给的
        d = base_config(a.preset, a.model)
    except PresetError as err:
        ap.error(str(err))
    a.prompts = d.prompts_per_step if a.prompts is None else a.prompts  # 给了 0 就是 0：下面拒绝
    a.group = d.group_size if a.group is None else a.group
    a.max_new_tokens = d.max_new_tokens if a.max_new_tokens is None else a.max_new_tokens
    if a.micro_batch is None:  # 比整批还大的 micro-batch 就是一次算完整批
        a.micro_batch = min(d.micro_batch, a.prompts * a.group)
    a.beta = d.beta if a.beta is None else a.beta
    a.optimizer = a.optimizer or d.optimizer
    plan = dataclasses.replace(
        d, prompts_per_step=a.prompts, group_size=a.group, max_new_tokens=a.max_new_tokens,
        beta=a.beta, micro_batch=a.micro_batch, optimizer=a.optimizer, cap_gb=a.cap_gb,
        lora_rank=0 if a.full else d.lora_rank,
    )  # fmt: skip
    try:  # 先查目录（只读 config.json 和文件头），必要时问显存账本全参数还是 LoRA，再做任何重活
        plan, a.spec, notes = plan_model(plan)
    except ValueError as err:
        ap.error(str(err))
    for line in notes:
        print(line)
    a.lora_rank = plan.lora_rank
    a.plan = plan  # --questions training 要和 grpo_train.py 一样地切出训练集
    a.name = plan.preset or a.spec.name
    json_problem = out_file_problem(a.json, "--json") if a.json else None
    bad = [
        msg
        for cond, msg in [
            (a.group < 2, f"--group 至少为 2（得到 {a.group}）"),
            (
                a.prompts < 1 or a.max_new_tokens < 1 or a.steps < 1,
                "--prompts、--max-new-tokens、--steps 都必须 >= 1",
            ),
            (
                a.micro_batch < 1 or (a.prompts * a.group) % a.micro_batch,
                f"P·G = {a.prompts * a.group} 必须能被 --micro-batch={a.micro_batch} 整除",
            ),
            (a.beta < 0, "--beta 不能为负"),
            (not 0 < a.lr < math.inf, f"--lr 必须是正数（得到 {a.lr}）"),
            (json_problem is not None, json_problem),  # 跑之前就查：别跑完才发现写不了
            (
                a.cap_gb is not None and not 0 < a.cap_gb < math.inf,
                f"--cap-gb 必须为正数（得到 {a.cap_gb}）",
            ),
        ]
        if cond
    ]
    if bad:
        ap.error("；".join(bad))
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    spec, lora_rank = a.spec, a.lora_rank
    try:
        device = resolve_device(spec)
    except PresetError as err:
        print(f"错误：{err}", file=sys.stderr)
        return 2
    dtype = compute_dtype(spec, device)
    cuda = device.type == "cuda"
    if not cuda:
        print(
            "这台机器没有 CUDA：照样跑完整的 GRPO 步（同一条代码路径），但不测显存，只打印账本的预测。"
        )
    if a.cap_gb:
        frac = cap_to_gpu_gb(a.cap_gb)
        if frac is not None:
            print(f"显存上限：{a.cap_gb:g} GiB（set_per_process_memory_fraction({frac:.3f})）")
    torch.manual_seed(a.seed)
    L2 = {
        m: importlib.import_module(f"{a.impl}.l2_0{i}_{m}")
        for i, m in [
            (1, "advantages"),
            (2, "logprobs_and_masks"),
            (5, "grpo_loss"),
            (6, "sampling"),
            (7, "grpo_train"),
        ]
    }
    A, LM, LOSS, S, TR = (
        L2[m] for m in ("advantages", "logprobs_and_masks", "grpo_loss", "sampling", "grpo_train")
    )

    measured: dict[str, dict] = {}
    timings: dict[str, float] = {}

    def phase(name):  # 每个阶段：量峰值（CUDA）+ 计时
        class _Phase:
            def __enter__(self):
                self.t0 = time.time()
                self.cm = peak_memory(name)
                self.result = self.cm.__enter__()
                return self

            def __exit__(self, *exc):
                self.cm.__exit__(*exc)
                measured[name] = self.result
                timings[name] = time.time() - self.t0
                return False

        return _Phase()

    # ---- 加载：与 grpo_train.py 相同（参考模型 = 起点的 bf16 冻结副本；可训练参数转 fp32；bf16 autocast）----
    with phase("loaded"):
        model, tok = load_model(
            spec,
            init=a.init,
            device=device,
            lora_rank=lora_rank,
            gradient_checkpointing=a.checkpointing,
        )
        ref = (
            None if a.beta == 0 or lora_rank else copy.deepcopy(model).eval().requires_grad_(False)
        )
        for p in model.parameters():
            p.data = p.data.float() if p.requires_grad else p.data
        if cuda:  # 与 grpo_train.py 相同：log-prob 块的 fp32 矩阵乘走 TF32 tensor core
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        params = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(params, a.optimizer, lr=a.lr, weight_decay=0.0)
    amp = (
        (lambda: torch.autocast(device.type, dtype=dtype))
        if dtype != torch.float32
        else nullcontext
    )
    gen = torch.Generator(device=device).manual_seed(a.seed)
    if a.questions == "training":  # 选题的随机数流在 CPU 上：和 grpo_train.py 每一步抽到的题相同
        c = a.plan  # held-out 取多少（n_final）会改变合成题的切法
        kw = dict(n_train=c.n_train, difficulty=c.difficulty, per_step=a.prompts)
        train, _ = D.load_splits(c.data, c.n_final, **kw)
        order = random_streams(a.seed)["prompts"]
        a.picks = [
            torch.randperm(len(train), generator=order)[: a.prompts].tolist()
            for _ in range(a.steps)
        ]
        problems = [train[i] for pick in a.picks for i in pick]
    else:
        problems = D.synthetic_problems(a.prompts * a.steps, seed=a.seed)
    encode = lambda p: tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
    eos, pad, G, N, M = (
        list(spec.eos_token_ids),
        spec.pad_token_id,
        a.group,
        a.prompts * a.group,
        a.micro_batch,
    )
    mbs = [slice(i, i + M) for i in range(0, N, M)]

    def logprobs(net, ro, rows, entropy=False):
        T = ro.completion_ids.shape[1]
        inputs = dict(
            input_ids=ro.sequences[rows],
            attention_mask=ro.attention_mask[rows],
            position_ids=ro.position_ids[rows],
        )
        if a.logprobs == "hidden":  # 与 grpo_train.py 相同的路径（L2.02 第 6 节）
            base = net.get_base_model() if lora_rank else net
            with amp():
                h = base.model(**inputs).last_hidden_state[:, -(T + 1) :]
            rows_per_chunk = HIDDEN_CHUNK_ROWS if cuda else LM.CHUNK_ROWS
            logp, ent = LM.hidden_token_logprobs(
                h, base.lm_head.weight, ro.completion_ids[rows], 1.0, rows_per_chunk
            )
            return logp, ent if entropy else None
        with amp():
            logits = net(**inputs, logits_to_keep=T + 1).logits[:, :-1]
        return LM.token_logprobs(logits, ro.completion_ids[rows]), LM.token_entropy(
            logits
        ) if entropy else None

    hosted = 0  # 梯度借住 rollout 显存的字节数（--rollout-memory host）
    for step in range(a.steps):
        batch = problems[step * a.prompts : (step + 1) * a.prompts]
        model.eval()  # 生成时关掉训练模式：开了 gradient checkpointing 的训练模式下 HF 不建 KV cache
        with phase("rollout"), torch.no_grad(), amp():
            ro = generate(
                model,
                [encode(p) for p in batch for _ in range(G)],
                max_new_tokens=a.max_new_tokens,
                eos_token_ids=eos,
                pad_token_id=pad,
                process_logits=S.process_logits,
                generator=gen,
                backend=a.backend,
            )
            if a.rollout_memory == "release":
                free_rollout_memory(model)
        model.train()
        texts = [
            tok.decode(ids[:n], skip_special_tokens=True)
            for ids, n in zip(ro.completion_ids, ro.lengths)
        ]
        rewards = torch.tensor(
            [
                correctness_reward(t, p.gold)
                for t, p in zip(texts, [p for p in batch for _ in range(G)])
            ]
        )
        adv = A.group_advantages(rewards, G).to(device)
        mask = LM.completion_mask(ro.completion_ids, eos)
        with phase("ref_forward"), torch.no_grad():
            old = torch.cat([logprobs(model, ro, mb, entropy=True)[0] for mb in mbs])
            ref_logp = None
            if a.beta > 0:
                with model.disable_adapter() if lora_rank else nullcontext():
                    ref_logp = torch.cat(
                        [logprobs(model if ref is None else ref, ro, mb)[0] for mb in mbs]
                    )
        with phase("backward"):
            if cuda and a.rollout_memory == "host":  # 梯度借住 KV cache 和权重副本的显存
                hosted = host_gradients(params, rollout_buffers(model))
            for mb in mbs:
                logp, _ = logprobs(model, ro, mb)
                loss, _ = LOSS.grpo_loss(
                    logp,
                    old[mb],
                    adv[mb],
                    mask[mb],
                    ref_logp=None if ref_logp is None else ref_logp[mb],
                    beta=a.beta,
                    max_completion_length=a.max_new_tokens,
                )
                (loss * TR.microbatch_weight(mask[mb], mask, "sequence_mean")).backward()
                del logp, loss
        with phase("optimizer"):
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)  # 梯度在 rollout 期间不占显存
        # 计时只供参考，CPU 上没有意义
        print(
            f"第 {step + 1}/{a.steps} 步：prompt {ro.prompt_ids.shape[1]} token，回答最长 {ro.completion_ids.shape[1]} token，"
            f"截断率 {ro.truncated.float().mean().item():.2f}；用时 "
            + "，".join(f"{LABELS[k]} {timings[k]:.1f}s" for k in PHASES[1:5])
        )

    # ---- 账本：同样的形状 ----
    from common.decode.fast_decode import supports_fast_decode

    backend = (
        a.backend
        if a.backend != "auto"
        else ("fast" if cuda and supports_fast_decode(model) else "eager")
    )
    shape = spec.shape
    settings = Settings(
        method="lora" if lora_rank else "full",
        lora_rank=lora_rank or 16,
        prompts=a.prompts,
        group=G,
        prompt_len=ro.prompt_ids.shape[1],
        max_new_tokens=ro.completion_ids.shape[1],
        micro_batch=M,
        beta=a.beta,
        precision="fp32",
        checkpointing=a.checkpointing,
        logprobs="hidden" if a.logprobs == "hidden" else "chunked_ckpt",
        optimizer="adamw8bit" if a.optimizer == "adamw8bit" else ("fused" if cuda else "foreach"),
        host_grads=cuda and backend == "fast" and a.rollout_memory == "host",
        logits_over="completion",
        layout="policy",
        rollout_backend=backend,
    )
    gpu_gb = a.cap_gb or (torch.cuda.get_device_properties(0).total_memory / GiB if cuda else 32.0)
    led = ledger(shape, settings, gpu_gb)
    pred = dict(led.phases)

    print(
        f"\n账本设定：{settings.short()}，rollout={backend}，log-prob={a.logprobs}，"
        f"优化器 {a.optimizer}，rollout 显存 {a.rollout_memory}"
        + (f"（梯度借住 {hosted / GiB:.2f} GiB）" if hosted else "")
    )
    if dtype == torch.float32:
        print(
            "注意：这个预设全程 fp32 计算（没有 bf16 autocast），账本按 bf16 记的激活、logits、KV 会偏小约一半。"
        )
    unit, scale = ("GiB", GiB) if max(pred.values()) >= GiB else ("MiB", 2**20)
    cols = [
        ("阶段", 24, False),
        (f"实测({unit})", 12, True),
        (f"账本({unit})", 12, True),
        ("偏差", 8, True),
    ]
    if not cuda:
        cols = [cols[0], cols[2]]
    print(
        "".join(cell(name, w, right) for name, w, right in cols)
        + ("  实测 = 阶段内峰值；加载后、step 之后 = 阶段末" if cuda else "")
    )
    rows = []
    for ph in PHASES:
        row = {"phase": ph, "predicted_gib": pred[ph] / GiB}
        cells = [cell(LABELS[ph], 24)]
        if cuda:
            m = measured["optimizer" if ph == "after_step" else ph]
            meas = m["allocated"] if ph in END_OF_PHASE else m["peak"]
            row.update(
                measured_gib=meas / GiB,
                peak_reserved_gib=m["peak_reserved"] / GiB,
                error=(pred[ph] - meas) / meas,
            )
            cells.append(cell(f"{meas / scale:.2f}", 12, True))
        cells.append(cell(f"{pred[ph] / scale:.2f}", 12, True))
        if cuda:
            cells.append(cell(f"{row['error']:+.0%}", 8, True))
        print("".join(cells))
        rows.append(row)
    summary = {
        "preset": a.name,
        "init": a.init,
        "model": None if a.model is None else str(a.model),
        "settings": dataclasses.asdict(settings),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "cap_gb": a.cap_gb,
        "phases": rows,
        "torch": torch.__version__,
        "rollout_memory": a.rollout_memory,
        "logprobs": a.logprobs,
        "optimizer": a.optimizer,
        "hosted_grad_gib": hosted / GiB,
        "last_step_s": {k: timings[k] for k in PHASES[1:5]},
        "questions": a.questions,
    }
    if a.questions == "training":  # 每步的题在训练集里的下标：和 grpo_train.py 的 prompt_ids 对得上
        summary["prompt_ids"] = a.picks
    if cuda:
        peak = max(r["measured_gib"] for r in rows if r["phase"] not in END_OF_PHASE)
        reserved = max(r["peak_reserved_gib"] for r in rows)
        free, total = torch.cuda.mem_get_info()
        used = (total - free) / GiB
        summary.update(
            peak_gib=peak,
            predicted_peak_gib=led.peak_allocated / GiB,
            max_reserved_gib=reserved,
            device_used_gib=used,
        )
        print(
            f"\n整步峰值（allocated）：实测 {peak:.2f} GiB，账本 {led.peak_allocated / GiB:.2f} GiB"
            f"（{(led.peak_allocated / GiB - peak) / peak:+.0%}）"
        )
        print(
            f"分配器：reserved 最高 {reserved:.2f} GiB，比峰值 allocated 多 {reserved - peak:.2f} GiB"
            f"（账本按 {ALLOCATOR_SLACK:.0%} = {ALLOCATOR_SLACK * peak:.2f} GiB 记）"
        )
        print(
            f"整张卡已用（mem_get_info，含 CUDA 上下文，也含别的进程）：{used:.2f} GiB；减去此刻的 reserved "
            f"{torch.cuda.memory_reserved() / GiB:.2f} GiB 约等于上下文（账本按 {CUDA_CONTEXT_GIB:g} GiB 记）"
        )
        print(
            f"账本合计（含余量和上下文）：{led.total / GiB:.2f} GiB / {gpu_gb:g} GiB = {led.usage:.0%}"
        )
    else:
        print(
            "（没有 CUDA，上面只有账本预测；到有 GPU 的机器上加 --cap-gb 32 再跑一次，就能看到实测列。）"
        )
    if a.json:
        atomic_write(a.json, json.dumps(summary, ensure_ascii=False, indent=1))
        print(f"结果写到 {a.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NotImplementedError as err:  # --impl exercises 而练习还没写完
        sys.exit(f"还没实现：{err} 先让 pytest --impl exercises tests/L2 通过再来测显存。")
    except (D.DataError, PresetError, OptimizerError, WriteError) as err:
        sys.exit(f"错误：{err}")
