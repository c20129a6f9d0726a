"""L2.10 第 1.2 节的表：tiny 上 dynamic sampling 开（--dynamic-sampling 2）和关，三个 seed，各配组内打乱的对照。

    python L2_algorithm/10_dynamic_sampling/tiny_on_off.py

关的运行和对照是 L2.08 附带的 tiny_runs/seedS、seedS-shuffled（默认命令，只给 --seed）；开的是本目录 tiny_ds/ 里的
ds-sS、ds-ctl-sS（同样的命令加 --dynamic-sampling 2）。CPU 上同一份代码、同一个 seed 的运行逐位可复现，
所以两边可以逐题配对：每个 seed 的 held-out 题相同，候选题的前 P 道也相同。
代价按「每步采了几批」算（批数 = groups_drawn / P），不按秒：CPU 上的时间有噪声，批数没有。
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from common.gsm8k.paired_stats import paired, signed  # noqa: E402
from common.run.json_files import read_json_object, read_jsonl  # noqa: E402
from common.run.metrics import read_metrics  # noqa: E402

HERE = Path(__file__).resolve().parent
OFF = ROOT / "L2_algorithm" / "08_reading_the_curves" / "tiny_runs"
ON = HERE / "tiny_ds"
SEEDS = (0, 1, 2)
STEPS = (10, 20, 40, 100)  # 都评估过的步（默认的 early_evals 和 eval_every）


def folders(seed: int) -> dict[str, Path]:
    return {
        "off": OFF / f"seed{seed}",
        "off-ctl": OFF / f"seed{seed}-shuffled",
        "on": ON / f"ds-s{seed}",
        "on-ctl": ON / f"ds-ctl-s{seed}",
    }


SHIPPED = "附带的运行目录被改过或缺了文件：git checkout 把它恢复"


def greedy_by_step(folder: Path, steps=STEPS) -> dict[int, list[int]]:
    """一个运行目录每次评估的逐题贪心结果：{步: [0/1, ...]}，0 = 训练前；steps 里缺哪一步就报错。"""
    before = read_json_object(folder / "eval_before.json", SHIPPED)["per_question"]["greedy"]
    out = {0: before} | {
        r["step"]: r["greedy"] for r in read_jsonl(folder / "eval_questions.jsonl")
    }
    missing = [s for s in steps if s not in out]
    if missing:
        raise ValueError(f"{folder} 在第 {missing} 步没有评估：{SHIPPED}")
    return out


def report() -> dict:
    """每个 seed：四次运行在 STEPS 的正确率；开 − 关（逐题配对）；每步平均采几批、训练几组。"""
    out = {}
    for seed in SEEDS:
        dirs = folders(seed)
        greedy = {k: greedy_by_step(f) for k, f in dirs.items()}
        acc = {k: {s: statistics.fmean(g[s]) for s in (0, *STEPS)} for k, g in greedy.items()}
        on_off = {s: paired(greedy["off"][s], greedy["on"][s]) for s in STEPS}
        rows = read_metrics(dirs["on"] / "metrics.jsonl")
        P = read_json_object(dirs["on"] / "config.json", SHIPPED)["prompts_per_step"]
        out[seed] = {
            "acc": acc,
            "on_minus_off": on_off,
            "batches": statistics.fmean(r["groups_drawn"] / P for r in rows),
            "kept": statistics.fmean(r["groups_kept"] for r in rows),
            "short_steps": sum(r["groups_kept"] < P for r in rows),
            "off_zero_std": statistics.fmean(
                r["zero_std_frac"] for r in read_metrics(dirs["off"] / "metrics.jsonl")
            ),
            "P": P,
        }
    return out


if __name__ == "__main__":
    for seed, r in report().items():
        print(f"seed {seed}：开的运行每步平均采 {r['batches']:.2f} 批，训练 {r['kept']:.2f} / {r['P']} 组"
              f"（{r['short_steps']} 步凑不够）；关的运行 zero_std_frac 均值 {r['off_zero_std']:.3f}")  # fmt: skip
        for name, acc in r["acc"].items():
            print(f"  {name:8s}" + "".join(f"  第 {s} 步 {a:.3f}" for s, a in acc.items()))
        for s, d in r["on_minus_off"].items():
            print(f"  第 {s} 步 开 − 关 {signed(d['diff'])} ± {d['se']:.3f}，p = {d['p']:.3g}")
