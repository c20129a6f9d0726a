"""Environment check: this machine's GPU, VRAM, bandwidth class and library versions, and which
course presets and fit-table rows (common.vram.fit) it can run.

    python -m common.config.env_check

The README runs it before installing anything: if torch or transformers cannot be imported it
says which, prints the install commands and exits with 1. On a machine without CUDA it says so and
points to the no-GPU route. Only the standard library is imported at module level.
"""

from __future__ import annotations

import importlib
import platform
import sys

from common.options.presets import COURSE_ROOT, preset_names, presets_file
from common.run import provenance

# What the report itself needs; everything else is listed by version (LIBRARIES).
REQUIRED_MODULES = ("torch", "transformers")
# The README's installation, in order. The CPU-only torch wheel comes from PyTorch's own index
# (on Linux, PyPI's torch==2.13.0 is the CUDA build with several GB of CUDA libraries).
INSTALL_STEPS = (
    ("在仓库根目录建一个虚拟环境并激活", "python3 -m venv .venv && source .venv/bin/activate"),
    (
        "只走「没有 GPU」路线的 Linux 机器：先从 PyTorch 的 CPU 索引装 torch（有 NVIDIA GPU 就跳过）",
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    ),
    ("装课程和它锁定的依赖", 'pip install -e ".[dev]"'),
)

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
# The fit table's ❌ for 1.7B full is its fp32 AdamW recipe; the measured exception is L1.04 §7.1.
FULL_1P7B_NOTE = (
    "全参数的 ❌ 都是按 fp32 AdamW 记的账；Qwen3-1.7B 全参数换成 8-bit AdamW、β = 0 在 32 GiB 上限下实测装得下"
    "（L1.04 第 7.1 节，python -m common.vram --lab）"
)
# The one place that lists the course's Qwen3-0.6B memory figures side by side (issue: one VRAM table).
VRAM_TABLE_NOTE = (
    "Qwen3-0.6B 在课程里的几个显存数字（实测的、账本算的、不同布局）对照："
    "L1_concepts/01_what_you_need/README.md 第 2.1 节"
)


def bandwidth_tbs(gpu_name: str) -> float | None:
    """Spec-sheet memory bandwidth for a device name, or None if the card is not in the table."""
    for key, tbs in BANDWIDTH_TBS:
        if key.lower() in gpu_name.lower():
            return tbs
    return None


def bandwidth_class(tbs: float | None) -> str:
    if tbs is None:
        return "未知（不在 common/config/env_check.py 的带宽表里）"
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
    import torch

    from common.vram.ledger import GiB

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    tbs = bandwidth_tbs(name)
    return {
        "name": name,
        "count": torch.cuda.device_count(),
        "total_gib": props.total_memory / GiB,
        "capability": f"{props.major}.{props.minor}",
        "bandwidth_tbs": tbs,
        "bandwidth_class": bandwidth_class(tbs),
        "cuda": torch.version.cuda,
        "arch_list": torch.cuda.get_arch_list(),
    }


# 这张卡不在这个 PyTorch 构建的 arch 列表里时怎么办（5090 = Blackwell，sm_120，要 CUDA ≥ 12.8 的构建）
ARCH_FIX = (
    "重装一个 CUDA 12.8 或更新的 PyTorch 构建（Blackwell 要 CUDA ≥ 12.8）："
    "pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    "（这条命令本课程没有在 5090 上跑过），装好再跑一次 python -m common.config.env_check；"
    "驱动也要够新（nvidia-smi 第一行的 CUDA Version ≥ 12.8）"
)


def arch_problem(gpu: dict) -> str | None:
    """None when this PyTorch build has kernels for the card (its sm_XY, an older minor of the same
    major, or PTX it can JIT), else one Chinese line saying what to do."""
    major, minor = (int(x) for x in gpu["capability"].split("."))
    archs = gpu.get("arch_list") or []
    sass = {f"sm_{major}{m}" for m in range(minor + 1)}
    ptx = [int(a[len("compute_") :]) for a in archs if a.startswith("compute_") and a[8:].isdigit()]
    if sass & set(archs) or any(p <= major * 10 + minor for p in ptx):
        return None
    return (
        f"这个 PyTorch（CUDA {gpu['cuda']}）没有为这张卡（sm_{major}{minor}）编译的 kernel："
        f"torch.cuda.get_arch_list() = {archs}。{ARCH_FIX}"
    )


def library_versions() -> dict[str, str | None]:
    """Installed version of each library the course uses (None: not installed)."""
    return provenance.library_versions(LIBRARIES)


def preset_report(gpu: dict | None) -> list[dict]:
    """For each course preset: can this machine run it, and why (the ledger's usage for GPU presets)."""
    from common.config.config_cli import preset_config
    from common.vram.fit import assess
    from common.vram.ledger import GiB, ledger
    from common.vram.plan import training_settings

    rows = []
    for name in preset_names():
        shape_and_settings = training_settings(preset_config(name))
        if shape_and_settings is None:
            rows.append({"preset": name, "ok": True, "why": "CPU 就能跑（几分钟）"})
            continue
        shape, s = shape_and_settings
        L = ledger(shape, s, gpu["total_gib"] if gpu else 32.0)
        where = f"{L.total / GiB:.1f} GiB / {L.gpu_gb:.0f} GiB = {L.usage:.0%}（{s.short()}）"
        if gpu is None:
            why = f"需要 CUDA GPU；在 32 GiB 卡上账本算出 {where}"
            rows.append({"preset": name, "ok": False, "why": why})
        else:
            verdict = assess(L).verdict
            rows.append({"preset": name, "ok": verdict != "no", "verdict": verdict, "why": where})
    return rows


def runnable_rows(gpu_gib: float) -> dict[str, list[str]]:
    """The fit table for a card of gpu_gib GiB, grouped by verdict: {"fits": ["Qwen3-0.6B full", ...], ...}."""
    from common.vram.fit import fit_table

    out: dict[str, list[str]] = {"fits": [], "tight": [], "no": []}
    for r in fit_table(gpu_gib):
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
        problem = arch_problem(gpu)
        lines.append(
            f"❌ {problem}"
            if problem
            else f"架构：sm_{gpu['capability'].replace('.', '')} 在这个 PyTorch 的 arch 列表里 ✅"
        )
    lines.append(
        "库版本：" + "，".join(f"{k} {v or '未安装'}" for k, v in library_versions().items())
    )

    lines.append("")
    lines.append(
        f"课程预设（{presets_file().relative_to(COURSE_ROOT)}；L2 的手写脚本：策略模型自己生成 rollout）："
    )
    report_rows = preset_report(gpu)
    name_width = max(len(r["preset"]) for r in report_rows) + 2
    for r in report_rows:
        mark = "可以跑" if r["ok"] else "跑不了"
        if r.get("verdict") == "tight":
            mark = "能跑但很紧"
        lines.append(f"  {r['preset']:<{name_width}}{mark}：{r['why']}")

    lines.append("")
    gib = gpu["total_gib"] if gpu else 32.0
    rows = runnable_rows(gib)
    head = f"这张卡（{gib:.1f} GiB）" if gpu else "参考：一张 32 GiB 的卡（RTX 5090）"
    lines.append(
        f"{head}上的装箱表（训推同卡，vLLM colocate 布局，fp32 AdamW；"
        f"python -m common.vram --gpu-gb {gib:.0f} 看细节）："
    )
    for verdict, label in (("fits", "✅ 装得下"), ("tight", "⚠️ 很紧"), ("no", "❌ 装不下")):
        lines.append(f"  {label}：{'、'.join(rows[verdict]) or '（无）'}")
    lines.append(f"  {FULL_1P7B_NOTE}")
    lines.append(f"  {VRAM_TABLE_NOTE}")

    if gpu is None:
        lines += [
            "",
            "这台机器没有 GPU，走「无 GPU 路线」：",
            "  1. 读 L1 的概念课，做 L2 的练习（pytest --impl exercises tests/L2），全部在 CPU 上验证（写完后整个 tests/L2 约 10 CPU 秒）；",
            f"  2. 在 CPU 上跑完整的 GRPO：{NO_GPU_ROUTE}（tiny 预设，几分钟，held-out 正确率会明显上升）；",
            "  3. 要跑 Qwen3-0.6B 时再租一张 4090/5090，先在那台机器上重跑 python -m common.config.env_check。",
        ]
    return "\n".join(lines)


def missing_modules(names: tuple[str, ...] = REQUIRED_MODULES) -> dict[str, str]:
    """{module: why it cannot be imported} for each of `names` that fails to import."""
    missing = {}
    for name in names:
        try:
            importlib.import_module(name)
        except (ImportError, OSError) as err:  # OSError: a wheel whose shared libraries do not load
            missing[name] = f"{type(err).__name__}: {err}"
    return missing


def install_hint(missing: dict[str, str]) -> str:
    """What is missing, and the README's installation commands."""
    lines = [f"还不能检查这台机器：缺少 {'、'.join(missing)}（课程的依赖还没装好）。"]
    lines += [f"  import {name} 失败：{why}" for name, why in missing.items()]
    lines.append("按 README「安装与测试」安装（需要 Python ≥ 3.11）：")
    for i, (what, command) in enumerate(INSTALL_STEPS, 1):
        lines += [f"  {i}. {what}：", f"       {command}"]
    lines.append("装好后在虚拟环境里重新运行：python -m common.config.env_check")
    return "\n".join(lines)


def folder_report(folder: str, gpu: dict | None) -> str:
    """What the course sees in a model folder, and what grpo_train.py --model would do on this card."""
    from common.model.model_dir import describe, inspect_model_dir
    from common.vram.report import training_choice

    found = inspect_model_dir(folder)
    gib = gpu["total_gib"] if gpu else 32.0
    where = "这张卡" if gpu else "一张 32 GiB 的卡（这台机器没有 GPU）"
    return describe(found) + f"\n在{where}上：\n  " + training_choice(found.shape, gib)


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and (argv[0] != "--model" or len(argv) != 2):
        print("用法：python -m common.config.env_check [--model 模型目录]", file=sys.stderr)
        return 2
    missing = missing_modules()
    if missing:
        print(install_hint(missing), file=sys.stderr)
        return 1
    print(report())
    gpu = gpu_info()
    if gpu is not None and arch_problem(gpu):
        print(f"错误：{arch_problem(gpu)}", file=sys.stderr)
        return 1
    if argv:
        from common.model.model_dir import ModelDirError

        try:
            print("\n" + folder_report(argv[1], gpu_info()))
        except ModelDirError as err:
            print(f"错误：{err}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
