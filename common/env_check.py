"""Environment check: this machine's GPU, VRAM, bandwidth class and library versions, and which
course presets and fit-table rows (common.vram) it can run.

    python -m common.env_check

On a machine without CUDA it says so and points to the no-GPU route.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from common import vram

# Memory bandwidth from the vendors' spec sheets (TB/s). Decoding a rollout reads every weight and
# the whole KV cache once per token, so bandwidth sets the rollout speed more than compute does.
# Matched against torch.cuda.get_device_name(), most specific entry first.
BANDWIDTH_TBS: tuple[tuple[str, float], ...] = (
    ("RTX PRO 6000", 1.79),
    ("RTX 5090", 1.79),
    ("RTX 5080", 0.96),
    ("RTX 4090", 1.01),
    ("RTX 4080", 0.72),
    ("RTX 3090 Ti", 1.01),
    ("RTX 3090", 0.94),
    ("RTX 6000 Ada", 0.96),
    ("RTX A6000", 0.77),
    ("L40S", 0.86),
    ("L4", 0.30),
    ("T4", 0.32),
    ("A100-SXM4-80GB", 2.04),
    ("A100 80GB PCIe", 1.94),
    ("A100", 1.56),
    ("A10G", 0.60),
    ("A10", 0.60),
    ("H100 NVL", 3.90),
    ("H100 PCIe", 2.00),
    ("H100", 3.35),
    ("H200", 4.80),
    ("B200", 8.00),
)
RTX_5090_TBS = 1.79

LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "vllm",
    "bitsandbytes",
    "math-verify",
)
NO_GPU_ROUTE = "python L2_algorithm/07_grpo_train/grpo_train.py"


def bandwidth_tbs(gpu_name: str) -> float | None:
    """Spec-sheet memory bandwidth for a device name, or None if the card is not in the table."""
    for key, tbs in BANDWIDTH_TBS:
        if key.lower() in gpu_name.lower():
            return tbs
    return None


def bandwidth_class(tbs: float | None) -> str:
    if tbs is None:
        return "未知（不在 common/env_check.py 的带宽表里）"
    if tbs >= 3.0:
        kind = "HBM 数据中心卡"
    elif tbs >= 1.5:
        kind = "高带宽（5090 这一档）"
    elif tbs >= 0.8:
        kind = "消费级旗舰（4090/3090 这一档）"
    else:
        kind = "低带宽（推理卡/中端卡）"
    return f"{tbs:.2f} TB/s，{kind}；rollout 速度的量级约为 5090 的 {tbs / RTX_5090_TBS:.1f} 倍"


def gpu_info() -> dict | None:
    """Name, memory (GiB), compute capability and bandwidth of CUDA device 0; None without CUDA."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    tbs = bandwidth_tbs(name)
    return {
        "name": name,
        "count": torch.cuda.device_count(),
        "total_gib": props.total_memory / vram.GiB,
        "capability": f"{props.major}.{props.minor}",
        "bandwidth_tbs": tbs,
        "bandwidth_class": bandwidth_class(tbs),
        "cuda": torch.version.cuda,
    }


def library_versions() -> dict[str, str | None]:
    """Installed version of each library the course uses (None: not installed)."""
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            out[lib] = None
    return out


def preset_settings(preset) -> tuple[vram.ModelShape | None, vram.Settings | None]:
    """The ledger's model and settings for a course preset (common.models), as grpo_train.py runs it on a
    GPU: the policy generates its own rollouts (common.fast_decode, LoRA adapters merged into its decode
    weights), fp32 master weights under bf16 autocast; P/G/answer length/β from the preset's defaults,
    micro-batch and checkpointing from them when given, else the ledger's."""
    if preset.hub_id is None:
        return None, None
    shape = next((m for m in vram.QWEN3.values() if m.hub_id == preset.hub_id), None)
    if shape is None:
        return None, None
    d = preset.defaults
    base = vram.Settings()
    s = vram.Settings(
        method="lora" if preset.lora_rank else "full",
        lora_rank=preset.lora_rank or base.lora_rank,
        prompts=d.get("prompts_per_step", base.prompts),
        group=d.get("group_size", base.group),
        max_new_tokens=d.get("max_new_tokens", base.max_new_tokens),
        beta=d.get("beta", base.beta),
        micro_batch=d.get("micro_batch", base.micro_batch),
        checkpointing=d.get("gradient_checkpointing", base.checkpointing),
        precision="fp32",
        layout="policy",
        rollout_backend="fast",  # LoRA too: common.fast_decode merges the adapters into its decode weights
    )
    return shape, s


def preset_report(gpu: dict | None) -> list[dict]:
    """For each course preset: can this machine run it, and why (the ledger's usage for GPU presets)."""
    from common.models import PRESETS

    rows = []
    for preset in PRESETS.values():
        shape, s = preset_settings(preset)
        if not preset.needs_cuda:
            rows.append({"preset": preset.name, "ok": True, "why": "CPU 就能跑（几分钟）"})
            continue
        if shape is None:
            rows.append(
                {"preset": preset.name, "ok": gpu is not None, "why": "账本里没有这个模型的形状"}
            )
            continue
        L = vram.ledger(shape, s, gpu["total_gib"] if gpu else 32.0)
        where = f"{L.total / vram.GiB:.1f} GiB / {L.gpu_gb:.0f} GiB = {L.usage:.0%}（{s.short()}）"
        if gpu is None:
            rows.append(
                {
                    "preset": preset.name,
                    "ok": False,
                    "why": f"需要 CUDA GPU；在 32 GiB 卡上账本算出 {where}",
                }
            )
        else:
            rows.append(
                {"preset": preset.name, "ok": L.verdict != "no", "verdict": L.verdict, "why": where}
            )
    return rows


def runnable_rows(gpu_gib: float) -> dict[str, list[str]]:
    """The fit table for a card of gpu_gib GiB, grouped by verdict: {"fits": ["Qwen3-0.6B full", ...], ...}."""
    out: dict[str, list[str]] = {"fits": [], "tight": [], "no": []}
    for r in vram.fit_table(gpu_gib):
        out[r["verdict"]].append(f"{r['model']} {r['method']}")
    return out


def report() -> str:
    gpu = gpu_info()
    lines = [f"Python {platform.python_version()}，{platform.system()} {platform.machine()}"]
    if gpu is None:
        lines.append("GPU：没有可用的 CUDA GPU（torch.cuda.is_available() 为 False）")
    else:
        lines.append(
            f"GPU：{gpu['name']} ×{gpu['count']}，{gpu['total_gib']:.1f} GiB，"
            f"compute capability {gpu['capability']}，CUDA {gpu['cuda']}"
        )
        lines.append(f"带宽：{gpu['bandwidth_class']}")
    lines.append(
        "库版本：" + "，".join(f"{k} {v or '未安装'}" for k, v in library_versions().items())
    )

    lines.append("")
    lines.append("课程预设（common/models.py；L2 的手写脚本：策略模型自己生成 rollout）：")
    for r in preset_report(gpu):
        mark = "可以跑" if r["ok"] else "跑不了"
        if r.get("verdict") == "tight":
            mark = "能跑但很紧"
        lines.append(f"  {r['preset']:<18}{mark}：{r['why']}")

    lines.append("")
    gib = gpu["total_gib"] if gpu else 32.0
    rows = runnable_rows(gib)
    head = f"这张卡（{gib:.1f} GiB）" if gpu else "参考：一张 32 GiB 的卡（RTX 5090）"
    lines.append(
        f"{head}上的装箱表（训推同卡，vLLM colocate 布局；python -m common.vram --gpu-gb {gib:.0f} 看细节）："
    )
    for verdict, label in (("fits", "✅ 装得下"), ("tight", "⚠️ 很紧"), ("no", "❌ 装不下")):
        lines.append(f"  {label}：{'、'.join(rows[verdict]) or '（无）'}")

    if gpu is None:
        lines += [
            "",
            "这台机器没有 GPU，走「无 GPU 路线」：",
            "  1. 读 L1 的概念课，做 L2 的练习（pytest --impl exercises tests/L2），全部在 CPU 上几秒钟验证；",
            f"  2. 在 CPU 上跑完整的 GRPO：{NO_GPU_ROUTE}（tiny 预设，几分钟，held-out 正确率会明显上升）；",
            "  3. 要跑 Qwen3-0.6B 时再租一张 4090/5090，先在那台机器上重跑 python -m common.env_check。",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv:
        print("用法：python -m common.env_check（不接受参数）", file=sys.stderr)
        return 2
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
