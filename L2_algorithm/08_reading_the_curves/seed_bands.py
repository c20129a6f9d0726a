"""L2.08 seed 带：同一个设置换几个 seed 各跑一次，画出均值和范围（最小–最大），并打印前后对比表。

    python L2_algorithm/08_reading_the_curves/seed_bands.py              # 默认运行和对照各 3 个 seed
    python L2_algorithm/08_reading_the_curves/seed_bands.py --plot-only  # 不跑，只用已有的运行目录

一次运行只是一个样本：seed 换了，选到的题、采到的回答都不同，曲线也跟着变。只有几个 seed 的范围
都在对照之外，才能说「训练起了作用」。缺的运行（没有 eval_after.json 的目录）会先用 grpo_train.py 跑出来：
有 checkpoint 就续跑，没有就新开；每次默认运行在 2 核 CPU 上几分钟，6 次要半小时左右（单线程，机器空闲时）。

--group 换成别的对比，例如两个起点（每组的参数原样传给 grpo_train.py）：

    python L2_algorithm/08_reading_the_curves/seed_bands.py --runs runs/starts --png runs/starts.png \\
        --group "shipped start" "" --group "honest start" "--model runs/ws-worked"
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # 没 pip install -e 也能 import common
from common.options.cli import CourseParser
from common.run.json_files import read_json_object
from common.run.metrics import MetricsError, figure_problem, read_whole_rows, save_figure

TRAIN = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
GROUPS = [("default run", ""), ("control: --reward shuffled", "--reward shuffled")]
SMOOTH = 10  # 训练 reward 每一步只有 16 道题，噪声很大：先对每次运行做 10 步滑动平均，再取范围


def run_dir(runs: Path, label: str, seed: int) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return runs / f"{slug}-s{seed}"


def ensure_run(folder: Path, seed: int, args: str) -> None:
    """把这次运行补齐：已经跑完就什么都不做；有 checkpoint 就续跑；否则新开一次。"""
    if (folder / "eval_after.json").is_file():
        return
    if (folder / "checkpoint.pt").is_file():
        cmd = ["--resume", str(folder)]
    else:
        cmd = ["--out", str(folder), "--seed", str(seed), *shlex.split(args)]
    print("运行：python", TRAIN.relative_to(ROOT), *cmd, flush=True)
    if subprocess.run([sys.executable, str(TRAIN), *cmd], cwd=ROOT).returncode != 0:
        sys.exit(
            f"错误：{folder} 这次运行失败了（上面是 grpo_train.py 的报错）；修好后重跑本脚本会接着补齐"
        )


def load_run(folder: Path) -> dict:
    """一次运行的曲线：held-out 评估点（第 0 步 = eval_before.json）和每步的训练 reward。"""
    hint = "这次运行的文件坏了：删掉这个目录，让脚本重跑它"
    rows = read_whole_rows(folder / "metrics.jsonl", hint)
    before = read_json_object(folder / "eval_before.json", hint, MetricsError)
    after = read_json_object(folder / "eval_after.json", hint, MetricsError)
    evals = {0: {"greedy": before["accuracy"], **before.get("pass_at", {})}}
    for r in rows:
        if r.get("eval_accuracy") is not None:
            extra = {k.removeprefix("eval_pass_at_"): v for k, v in r.items() if "pass_at" in k}
            evals[r["step"]] = {"greedy": r["eval_accuracy"], **extra}
    reward = [r["reward_mean"] for r in rows]
    smooth = [
        sum(reward[max(0, i - SMOOTH + 1) : i + 1]) / min(i + 1, SMOOTH) for i in range(len(reward))
    ]
    return dict(
        evals=evals,
        reward=smooth,
        before=before,
        after=after,
        wall_s=rows[-1].get("elapsed_s") if rows else None,
    )


def band(runs: list[dict], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, mean, min, max) of a held-out metric at the steps every run evaluated it."""
    steps = sorted(
        set.intersection(*({s for s, e in r["evals"].items() if key in e} for r in runs))
    )
    values = [[r["evals"][s][key] for r in runs] for s in steps]
    return (
        steps,
        [sum(v) / len(v) for v in values],
        [min(v) for v in values],
        [max(v) for v in values],
    )


def summary(label: str, runs: list[dict]) -> str:
    """Markdown 表格的一行：训练前 → 训练后（几个 seed 的均值，括号里是最小–最大）。"""

    def cell(get) -> str:
        v0, v1 = [get(r["before"]) for r in runs], [get(r["after"]) for r in runs]
        mean = lambda v: sum(v) / len(v)
        return f"{mean(v0):.3f} → {mean(v1):.3f}（{min(v1):.3f}–{max(v1):.3f}）"

    k = max((int(x) for x in runs[0]["after"].get("pass_at", {})), default=None)
    cols = [cell(lambda e: e["accuracy"])]
    if k:
        cols += [cell(lambda e: e["pass_at"]["1"]), cell(lambda e: e["pass_at"][str(k)])]
    return f"| {label} | {len(runs)} | " + " | ".join(cols) + " |"


def plot(groups: dict[str, list[dict]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    for color, (label, runs) in zip(("C3", "C0", "C2", "C1"), groups.items()):
        n = len(runs)
        steps, mean, lo, hi = band(runs, "greedy")
        axes[0].plot(steps, mean, "o-", color=color, ms=3, label=f"{label} (mean of {n})")
        axes[0].fill_between(steps, lo, hi, color=color, alpha=0.2)
        ks = sorted(
            {k for r in runs for e in r["evals"].values() for k in e if k != "greedy"}, key=int
        )
        for k, style in zip(ks, ("-", "--")):
            steps, mean, lo, hi = band(runs, k)
            axes[1].plot(steps, mean, style, color=color, marker=".", label=f"{label}: pass@{k}")
            axes[1].fill_between(steps, lo, hi, color=color, alpha=0.15)
        length = min(len(r["reward"]) for r in runs)
        cols = [[r["reward"][i] for r in runs] for i in range(length)]
        xs = range(1, length + 1)
        axes[2].plot(xs, [sum(c) / n for c in cols], color=color, label=label)
        axes[2].fill_between(
            xs, [min(c) for c in cols], [max(c) for c in cols], color=color, alpha=0.2
        )
    titles = (
        "held-out accuracy (greedy)",
        "held-out pass@1 / pass@k (sampled)",
        f"training reward ({SMOOTH}-step moving average)",
    )
    for ax, t in zip(axes, titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title}  (line = mean over seeds, band = min..max)", fontsize=11)
    save_figure(fig, png)  # 后缀定格式；不留半张图、不留临时文件


def main(argv=None) -> None:
    ap = CourseParser(allow_abbrev=False, description="几个 seed 的均值和范围（L2.08）")
    ap.add_argument(
        "--runs",
        type=Path,
        default=ROOT / "runs" / "bands",
        help="运行目录放在哪（默认 runs/bands）",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="默认 0 1 2")
    ap.add_argument(
        "--group",
        nargs=2,
        action="append",
        metavar=("LABEL", "ARGS"),
        help="一组：图例名 + 传给 grpo_train.py 的参数（可给多次；默认：默认运行和对照）",
    )
    ap.add_argument(
        "--png",
        type=Path,
        default=Path(__file__).resolve().parent / "seed_bands.png",
        help="图写到哪（默认本目录的 seed_bands.png，会盖掉仓库附带的那张）",
    )
    ap.add_argument("--title", default="tiny GRPO, 100 steps")
    ap.add_argument("--plot-only", action="store_true", help="不跑缺的运行，只用已有的目录")
    args = ap.parse_args(argv)
    problem = figure_problem(args.png, "--png")  # 在跑任何运行之前
    if problem:
        ap.error(problem)
    groups = {}
    for label, extra in args.group or GROUPS:
        folders = [run_dir(args.runs, label, s) for s in args.seeds]
        for folder, seed in zip(folders, args.seeds):
            if not args.plot_only:
                ensure_run(folder, seed, extra)
            if not (folder / "eval_after.json").is_file():
                sys.exit(
                    f"错误：{folder} 还没跑完（没有 eval_after.json）；去掉 --plot-only 让脚本把它跑完"
                )
        try:
            groups[label] = [load_run(f) for f in folders]
        except MetricsError as err:
            sys.exit(f"错误：{err}")
    plot(groups, args.png, args.title)
    print(f"图：{args.png}")
    k = max((int(x) for x in groups[next(iter(groups))][0]["after"].get("pass_at", {})), default=1)
    print(f"| 设置 | seed 数 | 贪心正确率 | pass@1 | pass@{k} |\n|---|---:|---|---|---|")
    for label, runs in groups.items():
        print(summary(label, runs))


if __name__ == "__main__":
    main()
