"""L2.10 第 1.3 节的表：真模型上 dynamic sampling 开和关（借来的 H100，每个 seed 一对，逐题配对）。

    python L2_algorithm/10_dynamic_sampling/gpu_on_off.py

读 gpu_runs/ 里的运行目录（不带 checkpoint）：off-sS 是默认的 GRPO 加 --skip-zero-adv 1，on-sS 再加
--dynamic-sampling 2；有对照（off-ctl-sS、on-ctl-sS，--reward shuffled）就一起读。训练前和第 100 步评全部
1319 道 GSM8K test 题（--final-heldout 1319），第 50 步评其中的前 500 道。同一个 seed 的两边 held-out 题相同，
每一步的前 P 道候选题也相同（开的一边多采的是排在后面的新题），所以可以逐题配对。
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
from tiny_on_off import SHIPPED, greedy_by_step  # noqa: E402

from common.gsm8k.paired_stats import paired, signed  # noqa: E402
from common.run.json_files import read_json_object  # noqa: E402
from common.run.metrics import read_metrics  # noqa: E402

RUNS = HERE / "gpu_runs"
NAMES = ("off", "on", "off-ctl", "on-ctl")
STEPS = (50, 100)  # 第 50 步：前 500 道；第 100 步（最后一步）：全部 1319 道


def seeds() -> list[int]:
    """gpu_runs/ 里开和关都有的 seed。"""
    found = {int(f.name.removeprefix("on-s")) for f in RUNS.glob("on-s*")}
    return sorted(s for s in found if (RUNS / f"off-s{s}").is_dir())


def _mean(rows: list[dict], key: str, part=slice(None)) -> float:
    return statistics.fmean(r[key] for r in rows[part])


def one_run(folder: Path) -> dict:
    """一个运行目录：逐题贪心结果和正确率、比训练前（逐题配对）、到起点的 KL、熵、截断、梯度范数。"""
    greedy = greedy_by_step(folder, STEPS)
    start = greedy[0]
    rows = read_metrics(folder / "metrics.jsonl")
    kl = {r["step"]: r["kl_start"] for r in rows if r.get("kl_start") is not None}
    config = read_json_object(folder / "config.json", SHIPPED)
    clip = config["grad_clip"]
    return {
        "greedy": greedy,
        "config": config,
        "n": {s: len(greedy[s]) for s in (0, *STEPS)},
        "acc": {s: statistics.fmean(greedy[s]) for s in (0, *STEPS)},
        # 训练前在同一批题上的正确率：第 50 步只评了前 500 道，和训练前的前 500 道比
        "start_on": {s: statistics.fmean(start[: len(greedy[s])]) for s in STEPS},
        "gain": {s: paired(start[: len(greedy[s])], greedy[s]) for s in STEPS},
        "kl": kl,
        "entropy": (_mean(rows, "entropy", slice(0, 10)), _mean(rows, "entropy", slice(-10, None))),
        "truncation": _mean(rows, "truncation_rate"),
        "grad_norm": _mean(rows, "grad_norm"),
        "clipped": statistics.fmean(r["grad_norm"] > clip for r in rows),  # 被 --grad-clip 裁剪的步
        "rows": rows,
    }


def shared_parts(off: list[dict], on: list[dict]) -> dict:
    """两条同卡的那段（开的一边 elapsed_s 不超过关的最后一步）里每步的平均秒数：rollout、补采、训练。
    两条的 elapsed_s 从同一秒起算（训练前的评估在同一秒写完，timeline-s0.txt）；关的那条跑完以后，
    开的那条独占这张卡，那几步不算进来。"""
    end = off[-1]["elapsed_s"]
    both = {"off": off, "on": [r for r in on if r["elapsed_s"] <= end]}
    keys = ("rollout_s", "extra_rollout_s", "train_s")
    out = {k: {key: statistics.fmean(r.get(key, 0.0) for r in rows) for key in keys}
           for k, rows in both.items()}  # fmt: skip
    for k, rows in both.items():
        out[k]["steps"] = len(rows)
        out[k]["total_s"] = sum(out[k][key] for key in keys)
    return out


def report() -> dict:
    """每个 seed：各运行的结果；开 − 关（逐题配对）；开的一边每步采几批、丢几组、补采花的秒数。"""
    out = {}
    for seed in seeds():
        runs = {k: RUNS / f"{k}-s{seed}" for k in NAMES if (RUNS / f"{k}-s{seed}").is_dir()}
        r = {k: one_run(f) for k, f in runs.items()}
        on_rows = r["on"]["rows"]
        P = r["on"]["config"]["prompts_per_step"]
        greedy = {k: x["greedy"] for k, x in r.items()}
        # 运行 − 它自己的对照（同一个 seed、同样开或关，--reward shuffled）：有对照目录时才有
        controls = {
            k: {s: paired(greedy[f"{k}-ctl"][s], greedy[k][s]) for s in STEPS}
            for k in ("off", "on")
            if f"{k}-ctl" in greedy
        }
        out[seed] = {
            "runs": r,
            "on_minus_off": {s: paired(greedy["off"][s], greedy["on"][s]) for s in STEPS},
            "minus_control": controls,
            "batches": statistics.fmean(x["groups_drawn"] / P for x in on_rows),
            "dropped": _mean(on_rows, "groups_dropped"),
            # 有信号、但排在凑够的 P 组之后的组：采了，没训练
            "surplus": statistics.fmean(
                x["groups_drawn"] - x["groups_dropped"] - x["groups_kept"] for x in on_rows
            ),
            "shared": shared_parts(r["off"]["rows"], on_rows),
            "short_steps": sum(x["groups_kept"] < P for x in on_rows),
            "extra_s": _mean(on_rows, "extra_rollout_s"),
            "off_zero_std": _mean(r["off"]["rows"], "zero_std_frac"),
            "P": P,
        }
    return out


if __name__ == "__main__":
    for seed, rep in report().items():
        print(
            f"seed {seed}：开的运行每步平均采 {rep['batches']:.2f} 批、丢 {rep['dropped']:.1f} 组、"
            f"有信号却没训练的 {rep['surplus']:.1f} 组、{rep['short_steps']} 步凑不够 {rep['P']} 组，"
            f"补采平均 {rep['extra_s']:.2f} s/步；"
            f"关的运行 zero_std_frac 均值 {rep['off_zero_std']:.3f}"
        )
        for name, r in rep["runs"].items():
            cells = "".join(
                f"  第 {s} 步（{r['n'][s]} 题）{r['acc'][s]:.3f}"
                f"（{signed(r['gain'][s]['diff'])}，p = {r['gain'][s]['p']:.2g}）"
                for s in STEPS
            )
            kl = "、".join(f"第 {s} 步 {v:.3f}" for s, v in sorted(r["kl"].items()))
            print(
                f"  {name:8s}训练前 {r['acc'][0]:.3f}（前 500 道 {r['start_on'][50]:.3f}）{cells}"
            )
            print(
                f"  {'':8s}到起点的 KL {kl}；熵 前 10 步 {r['entropy'][0]:.3f} → 后 10 步 "
                f"{r['entropy'][1]:.3f}；截断 {r['truncation']:.3f}；"
                f"梯度范数均值 {r['grad_norm']:.2f}，{r['clipped']:.0%} 的步被裁剪"
            )
        for k, t in rep["shared"].items():
            print(
                f"  两条同卡时（{k} 的前 {t['steps']} 步）每步：rollout {t['rollout_s']:.2f} s + "
                f"补采 {t['extra_rollout_s']:.2f} s + 训练 {t['train_s']:.2f} s = {t['total_s']:.2f} s"
            )
        for k, by_step in rep["minus_control"].items():
            for s, d in by_step.items():
                print(
                    f"  第 {s} 步 {k} − {k}-ctl {signed(d['diff'])} ± {d['se']:.3f}"
                    f"（{d['up']} / {d['down']} 题），p = {d['p']:.2g}"
                )
        for s, d in rep["on_minus_off"].items():
            print(
                f"  第 {s} 步 开 − 关 {signed(d['diff'])} ± {d['se']:.3f}"
                f"（{d['up']} 题开对关错 / {d['down']} 题关对开错），p = {d['p']:.2g}"
            )
