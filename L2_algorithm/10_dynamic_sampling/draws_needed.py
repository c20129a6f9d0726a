"""L2.10 第 1 节的数字：真模型运行里每步有多少组没有信号，dynamic sampling 要补采几批。

    python L2_algorithm/10_dynamic_sampling/draws_needed.py

读 L2.08 附带的三次 100 步运行（real_recipe/ 的 recipe-s0、recipe-s1、recipe100-s2；每步 16 题 × 8 条）的
metrics.jsonl：每步的 zero_std_frac 就是这一步 16 组里 reward 全相同的比例。然后做一个假设：
每一批新题里有信号的组数，服从这次运行 100 步里的经验分布，而且各批之间独立（同一步里模型没变，
换了一批新题）。在这个假设下精确算出（卷积，不抽随机数）：
  - 平均每步要采几批（第一批 + 补采），即 rollout 的时间大约是不开 dynamic sampling 时的几倍；
  - 补采 D 批之后仍凑不够 16 组的概率；
  - 平均每步训练几个有信号的组。
这是估计，不是测量：开了 dynamic sampling 之后模型会变，分布也跟着变。
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录
from common.run.metrics import read_metrics

RUNS = Path(__file__).resolve().parents[1] / "08_reading_the_curves" / "real_recipe"
NAMES = ("recipe-s0", "recipe-s1", "recipe100-s2")  # seed 0、1、2 跑到第 100 步的三次运行
STEPS = 100


def informative_counts(name: str) -> tuple[int, list[int]]:
    """(每步的组数 P, 第 1–100 步每步有信号的组数)。"""
    rows = [r for r in read_metrics(RUNS / name / "metrics.jsonl") if r["step"] <= STEPS]
    P = len(rows[0]["prompt_ids"])
    return P, [P - round(r["zero_std_frac"] * P) for r in rows]


def _convolve(a: list[float], b: list[float]) -> list[float]:
    out = [0.0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def plan(counts: list[int], P: int, extra: int) -> dict:
    """补采最多 extra 批时：平均采几批、凑不够 P 组的概率、平均训练几个有信号的组。"""
    pmf = [counts.count(k) / len(counts) for k in range(P + 1)]
    total = [1.0]  # 已采批次里有信号的组数之和的分布（0 批：0 组）
    draws = 0.0
    for _ in range(1 + extra):
        draws += sum(total[:P])  # 这一批要不要采：前面的加起来还不到 P 组
        total = _convolve(total, pmf)
    short = sum(total[:P])
    kept = sum(p * min(k, P) for k, p in enumerate(total))
    return {"draws": draws, "short": short, "kept": kept}


def report() -> dict:
    """每次运行的 zero_std_frac 均值、每步有信号的组数，和 D = 0–3 时的估计。"""
    out = {}
    for name in NAMES:
        P, counts = informative_counts(name)
        zero = [(P - k) / P for k in counts]
        out[name] = {
            "P": P,
            "zero_std_mean": statistics.fmean(zero),
            "zero_std_min": min(zero),
            "zero_std_max": max(zero),
            "informative_mean": statistics.fmean(counts),
            "plans": {d: plan(counts, P, d) for d in range(4)},
        }
    return out


if __name__ == "__main__":
    for name, r in report().items():
        print(
            f"{name}：zero_std_frac 均值 {r['zero_std_mean']:.3f}（每步 {r['zero_std_min']:.3f}–"
            f"{r['zero_std_max']:.3f}），每步有信号的组 {r['informative_mean']:.2f} / {r['P']}"
        )
        for d, p in r["plans"].items():
            print(
                f"  --dynamic-sampling {d}：平均采 {p['draws']:.2f} 批，凑不够 {r['P']} 组的概率 "
                f"{p['short']:.3f}，平均训练 {p['kept']:.2f} 个有信号的组"
            )
