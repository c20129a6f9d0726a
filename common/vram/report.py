"""`python -m common.vram`: the VRAM ledger and the fit table, printed in Chinese.

    python -m common.vram                                   # the fit table for a 32 GiB card
    python -m common.vram --gpu-gb 24                       # another card
    python -m common.vram --model Qwen3-4B --method lora    # one configuration, line by line
    python -m common.vram --model ./Qwen2.5-1.5B-Instruct   # a model folder: shapes from its config.json

The arithmetic is in common.vram.ledger (lines and phases of one GRPO step, from the shapes in
common.vram.shapes); the verdicts and the fit table in common.vram.fit. This module only prints them.
L1.01 and L1.04 paste this output verbatim (tests/L1/test_l1_lessons.py checks it).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import unicodedata
from pathlib import Path

from common.options.cli import CourseParser
from common.run.json_files import read_json_object
from common.vram.fit import (
    ANSWER_ROOM_TOKENS,
    FITS_MAX_USAGE,
    TABLE_BASE,
    assess,
    fit_table,
    lab_rows,
)
from common.vram.ledger import (
    ALLOCATOR_SLACK,
    CUDA_CONTEXT_GIB,
    LOGPROB_BYTES,
    METHODS,
    PRECISIONS,
    GiB,
    Ledger,
    Settings,
    ledger,
)
from common.vram.shapes import MODELS, ModelShape, ShapeError, get_model

PHASE_LABELS = {
    "loaded": "加载后",
    "rollout": "rollout 峰值",
    "ref_forward": "参考前向峰值",
    "backward": "反向峰值",
    "optimizer": "优化器 step 峰值",
    "after_step": "step 之后",
}


MARK = {"fits": "✅ fits", "tight": "⚠️ tight", "no": "❌ no"}
# where the output cannot hold the emoji (Chinese Windows: a redirected stdout is GBK)
TEXT_MARK = {"fits": "[v] fits", "tight": "[!] tight", "no": "[x] no"}


def marks_for(stream) -> dict[str, str]:
    """MARK if `stream`'s encoding can write the emoji, else TEXT_MARK (the table survives `> file`)."""
    try:
        "".join(MARK.values()).encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return TEXT_MARK
    return MARK


COLUMNS = (
    ("weights", "权重"),
    ("gradients", "梯度"),
    ("optimizer", "优化器"),
    ("reference", "参考"),
    ("activations", "激活"),
    ("logits", "logits"),
    ("engine", "引擎"),
)


def width(text: str) -> int:
    """Terminal columns: CJK and emoji take two (the emoji variation selector after ⚠ adds one)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def cell(text: str, columns: int, right: bool = False) -> str:
    """Pad to a display width (for tables with Chinese labels)."""
    pad = " " * max(columns - width(text), 0)
    return pad + text if right else text + pad


def format_table(
    rows: list[dict], gpu_gb: float, base: Settings = TABLE_BASE, marks: dict = MARK
) -> str:
    name_w = max([width("模型"), *(width(r["model"]) for r in rows)]) + 2  # 最长的名字后面留两格
    head = (
        cell("模型", name_w)
        + cell("方式", 7)
        + cell("结论", 10)
        + cell("合计", 7, True)
        + cell("占比", 6, True)
        + "".join(cell(label, 8 if key == "optimizer" else 7, True) for key, label in COLUMNS)
        + cell("回答上限", 10, True)
        + cell("P 上限", 8, True)
        + "  说明"
    )
    out = [f"单卡 {gpu_gb:g} GiB 跑 GRPO：训推同卡（策略训练 + vLLM colocate），单位 GiB", head]
    for r in rows:
        b = r["breakdown"]
        line = (
            cell(r["model"], name_w)
            + cell(r["method"], 7)
            + cell(marks[r["verdict"]], 10)
            + cell(f"{r['total_gb']:.1f}", 7, True)
            + cell(f"{r['usage']:.0%}", 6, True)
            + "".join(
                cell(f"{b.get(key, 0):.1f}", 8 if key == "optimizer" else 7, True)
                for key, _ in COLUMNS
            )
            + cell(str(r["max_new_tokens_fit"] or "-"), 10, True)
            + cell(str(r["max_prompts_fit"] or "-"), 8, True)
            + "  "
            + r["note"]
        )
        out.append(line)
    out += [
        f"配方（每行相同）：{base.short()}。",
        f"合计 = 峰值阶段的 PyTorch 显存 + 分配器余量 {ALLOCATOR_SLACK:.0%} + CUDA 上下文 {CUDA_CONTEXT_GIB:g} GiB；"
        f"「回答上限」= 其余不变时 max_new_tokens 最多多少仍装得下；「P 上限」= G={base.group} 时每步最多几个 prompt。",
        f"结论：no = 超过 100%；tight = 装得下，但余量不足 {1 - FITS_MAX_USAGE:.0%} 或回答上限不到 {ANSWER_ROOM_TOKENS}；"
        "fits = 两条都满足。",
        "逐行拆开看：python -m common.vram --model Qwen3-4B --method lora",
    ]
    return "\n".join(out)


def explain(L: Ledger, marks: dict = MARK) -> str:
    m, s = L.model, L.settings
    out = [
        f"{m.name}（{m.hub_id}，{m.n_params() / 1e9:.3f}B 参数"
        + (f"，每 token 激活 {m.n_params(active_only=True) / 1e9:.2f}B" if m.is_moe else "")
        + f"）· {s.method}",
        f"设定：{s.short()}",
        "",
    ]
    for line in L.lines.values():
        out.append(f"  {cell(line.label, 34)}{line.nbytes / GiB:>7.2f} GiB   {line.formula}")
    out.append("")
    out.append("各阶段（PyTorch allocated，稳态：上一步的 AdamW 状态已在显存里）：")
    for ph, b in L.phases.items():
        mark = "  ← 峰值" if ph == L.peak_phase else ""
        out.append(f"  {cell(PHASE_LABELS[ph], 18)}{b / GiB:>7.2f} GiB{mark}")
    out.append(
        f"  + 分配器余量 {L.slack / GiB:.2f} GiB（{ALLOCATOR_SLACK:.0%}）+ CUDA 上下文 {L.context / GiB:.2f} GiB"
    )
    a = assess(L)
    out.append(
        f"合计 {L.total / GiB:.2f} GiB / {L.gpu_gb:g} GiB = {L.usage:.0%}；"
        f"回答上限 {a.answer_limit or '-'} token → {marks[a.verdict]}（{a.note}）"
    )
    return "\n".join(out)


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """Flags for the fields of Settings. Unset flags stay None."""
    p.add_argument("--method", choices=METHODS)
    p.add_argument("--prompts", type=int, help="每步 prompt 数 P")
    p.add_argument("--group", type=int, help="每个 prompt 采样条数 G")
    p.add_argument("--prompt-len", type=int, help="prompt 的 token 数（补齐后）")
    p.add_argument("--max-new-tokens", type=int, help="回答最多多少 token")
    p.add_argument("--rollout-batch", type=int, help="同时生成的条数（默认 P×G 全部一起）")
    p.add_argument("--micro-batch", type=int, help="每次前向/反向的序列数")
    p.add_argument("--beta", type=float, help="KL 系数；>0 需要参考模型")
    p.add_argument("--lora-rank", type=int)
    p.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        help="mixed / fp32 / bf16，见 common/vram/ledger.py",
    )
    p.add_argument(
        "--checkpointing", action=argparse.BooleanOptionalAction, help="gradient checkpointing"
    )
    p.add_argument(
        "--logprobs",
        choices=tuple(LOGPROB_BYTES),
        help="log-prob 的算法（显存差别见 LOGPROB_BYTES）",
    )
    p.add_argument(
        "--logits-over", choices=("completion", "all"), help="只算回答位置的 logits，还是全部位置"
    )
    p.add_argument(
        "--optimizer",
        choices=("foreach", "fused", "adamw8bit"),
        help="foreach / fused：torch AdamW 的两种实现；adamw8bit：torchao 的 8-bit 状态",
    )
    p.add_argument(
        "--host-grads",
        action=argparse.BooleanOptionalAction,
        help="快速 rollout 时梯度借住解码器的 KV cache 和权重副本（grpo_train.py 的做法）",
    )
    p.add_argument(
        "--layout",
        choices=("policy", "colocate"),
        help="policy：策略模型自己生成；colocate：同卡 vLLM",
    )
    p.add_argument("--engine-gb", type=float, help="colocate 时给推理引擎预留多少 GiB")
    p.add_argument(
        "--rollout-backend",
        choices=("eager", "fast"),
        help="policy 布局的生成方式（common.decode.rollout 的 backend）",
    )
    p.add_argument(
        "--ref-bytes",
        type=int,
        choices=(2, 4),
        help="参考模型每参数字节：2 = bf16（grpo_train.py），4 = fp32（TRL）",
    )


def model_shape(name_or_folder: str) -> ModelShape:
    """A named shape, or the shape a model folder's config.json describes (no weights, no torch)."""
    folder = Path(name_or_folder).expanduser()
    if not folder.is_dir():
        return get_model(name_or_folder)
    path = folder / "config.json"
    cfg = read_json_object(path, "--model 要一个模型目录或上面的名字之一")
    try:
        return ModelShape.from_config_json(cfg, name=folder.name, hub_id=str(folder))
    except ShapeError as err:
        raise ValueError(f"{path}：{err}") from None


def training_choice(shape: ModelShape, gpu_gb: float) -> str:
    """What grpo_train.py --model decides on this card with the GPU recipe (presets.toml)."""
    from common.options.presets import gpu_recipe
    from common.vram.plan import choose_method, run_settings

    r = gpu_recipe()
    s = run_settings(
        prompts=r["prompts_per_step"], group=r["group_size"], max_new_tokens=r["max_new_tokens"],
        beta=r["beta"], micro_batch=r["micro_batch"],
    )  # fmt: skip
    head = f"grpo_train.py --model 用 GPU 配方（{s.short()}）在 {gpu_gb:g} GiB 的卡上："
    return head + "\n  " + choose_method(shape, s, gpu_gb).explain()


def settings_from_args(a: argparse.Namespace, base: Settings | None = None) -> Settings:
    """`base` (default: Settings()) with every flag the user gave applied on top."""
    names = [f.name for f in dataclasses.fields(Settings)]
    given = {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}
    return dataclasses.replace(base or Settings(), **given)


def main(argv: list[str] | None = None) -> int:
    p = CourseParser(
        prog="python -m common.vram",
        description="GRPO 显存账本。不带 --model：打印装箱表；带 --model：逐行拆开一个配置"
        "（默认就是表里那一行的设定，其余参数在它上面改）。",
    )
    p.add_argument(
        "--model",
        help=f"模型：{', '.join(MODELS)}；或一个模型目录（读它的 config.json，不读权重）",
    )
    p.add_argument(
        "--lab",
        action="store_true",
        help="装箱表末尾加上 L1.04 的实验行（1.7B 全参 + 8-bit AdamW）",
    )
    p.add_argument(
        "--gpu-gb", type=float, default=32.0, help="显卡显存（GiB），默认 32（RTX 5090）"
    )
    add_settings_args(p)
    a = p.parse_args(argv)
    if not math.isfinite(a.gpu_gb) or a.gpu_gb <= 0:  # nan 曾打印 nan%，inf 曾说「装得下」
        p.error(f"--gpu-gb 要是正的有限数（显卡的 GiB，如 24、32、80），得到 {a.gpu_gb}")
    marks = marks_for(sys.stdout)
    if marks is TEXT_MARK and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")  # 目录名里别的写不出的字也不让整张表丢掉
    try:
        base = settings_from_args(a, TABLE_BASE)
        if a.model is None:
            rows = fit_table(a.gpu_gb, base) + (lab_rows(a.gpu_gb) if a.lab else [])
            print(format_table(rows, a.gpu_gb, base, marks))
        else:
            shape = model_shape(a.model)
            print(explain(ledger(shape, base, a.gpu_gb), marks))
            print("\n" + training_choice(shape, a.gpu_gb))
    except ValueError as e:
        print(f"错误：{e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
