"""L3.01 第 2 节的对照表：手写的 grpo_train.py 和 TRL + vLLM colocate，同一张 H100、同一个配方、同一个 seed。

    python L3_frameworks/01_trl_vllm_colocate/side_by_side.py          # 打印 README 里那张表

只读仓库里附带的文件，不跑任何东西：
- gpu_record/trl100-s2/：TRL 1.16 + vLLM 0.26 跑了 100 步（steps.jsonl 每步的时间和显存，metrics.jsonl，
  eval_questions.jsonl 是第 0、50、100 步 500 题的逐题贪心结果）；
- gpu_record/hw-mb8-s2/：同一台机器上紧接着用 grpo_train.py 跑的 12 步（只为计时：同样的 micro-batch 8）；
- L2.08 的 real_recipe/recipe100-s2/：grpo_train.py 同一个 seed 跑到第 100 步的评估（micro-batch 32，
  两个进程同卡，所以它的时间不用；micro-batch 只改显存和速度，不改数学）。
每一格是什么、为什么两边不一样：README「2. 同一张卡上的对照」。
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录：没 pip install 也能跑
from common.gsm8k.paired_stats import paired, signed

HERE = Path(__file__).resolve().parent
RECORD = HERE / "gpu_record"
TRL_RUN = RECORD / "trl100-s2"
HW_TIMING = RECORD / "hw-mb8-s2"
HW_RUN = HERE.parents[1] / "L2_algorithm" / "08_reading_the_curves" / "real_recipe" / "recipe100-s2"
WARMUP = 2  # 前两步含编译和 CUDA graph 的捕获：中位数从第 3 步算起
EVAL_STEPS = (0, 50, 100)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def median(values) -> float:
    return statistics.median(list(values))


def greedy_by_step(run: Path) -> dict[int, list[int]]:
    """eval_questions.jsonl -> {步数: 逐题 0/1}；第 0 步 = 训练前（grpo_train.py 的在 eval_before.json 里）。"""
    out = {r["step"]: r["greedy"] for r in rows(run / "eval_questions.jsonl")}
    if 0 not in out:
        out[0] = json.loads((run / "eval_before.json").read_text(encoding="utf-8"))["per_question"][
            "greedy"
        ]
    return out


def trl_timing() -> dict:
    """TRL 的每步时间（中位数，第 3 步起）：steps.jsonl 的 generate_s 里含权重同步 sync_s；score_s 里含
    generate_s，再加奖励和 vLLM 重要性权重要的 old logp 前向；step_s 里含 score_s，其余是训练。"""
    steps = [r for r in rows(TRL_RUN / "steps.jsonl") if r["step"] > WARMUP]
    metrics = {r["step"]: r for r in rows(TRL_RUN / "metrics.jsonl")}
    config = json.loads((TRL_RUN / "config.json").read_text(encoding="utf-8"))
    n = config["prompts_per_step"] * config["group_size"]
    tokens = [
        metrics[r["step"]]["completion_len_mean"] * n / (r["generate_s"] - r["sync_s"])
        for r in steps
    ]
    return {
        "rollout_s": median(r["generate_s"] - r["sync_s"] for r in steps),
        "score_s": median(r["score_s"] - r["generate_s"] for r in steps),
        "train_s": median(r["step_s"] - r["score_s"] for r in steps),
        "sync_s": median(r["sync_s"] for r in steps),
        "step_s": median(r["step_s"] for r in steps),
        "tokens_per_s": median(tokens),
        "peak_alloc_gb": max(r["peak_alloc_gb"] for r in steps),
        "peak_reserved_gb": max(r["peak_reserved_gb"] for r in steps),
        "device_used_gb": max(r["device_used_gb"] for r in steps),
        "mismatch_mean": median(m["rollout_logp_diff_mean"] for m in metrics.values()),
        "mismatch_max": max(m["rollout_logp_diff_max"] for m in metrics.values()),
    }


def hw_timing() -> dict:
    """grpo_train.py 的每步时间（中位数，第 3 步起）：rollout_s、train_s 直接记在 metrics.jsonl；策略模型
    自己采样，没有权重同步，也没有另一份 logp（rollout 的 logp 就是训练前向算的那份）。"""
    steps = [r for r in rows(HW_TIMING / "metrics.jsonl") if r["step"] > WARMUP]
    return {
        "rollout_s": median(r["rollout_s"] for r in steps),
        "score_s": None,
        "train_s": median(r["train_s"] for r in steps),
        "sync_s": None,
        "step_s": median(r["rollout_s"] + r["train_s"] for r in steps),
        "tokens_per_s": median(r["tokens_per_s"] for r in steps),
        "peak_alloc_gb": max(r["peak_vram_gb"] for r in steps),
        "peak_reserved_gb": None,
        "device_used_gb": None,
        "mismatch_mean": None,
        "mismatch_max": None,
    }


def heldout() -> dict[str, dict[int, float]]:
    """两边在第 0、50、100 步的 500 题贪心正确率。"""
    runs = {"hw": greedy_by_step(HW_RUN), "trl": greedy_by_step(TRL_RUN)}
    return {k: {s: sum(v[s]) / len(v[s]) for s in EVAL_STEPS} for k, v in runs.items()}


def gains() -> dict[str, dict]:
    """每边第 100 步对起点的逐题配对比较（common.gsm8k.paired_stats：up/down、差、符号检验 p）。"""
    out = {}
    for name, run in (("hw", HW_RUN), ("trl", TRL_RUN)):
        g = greedy_by_step(run)
        out[name] = paired(g[0], g[100])
    return out


def _cell(value, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def table() -> str:
    """README 里那张 Markdown 表（测试拿它和 README 逐字比）。"""
    hw, trl = hw_timing(), trl_timing()
    acc = heldout()
    g = gains()
    lines = [
        "| | 手写 grpo_train.py | TRL 1.16 + vLLM 0.26 colocate |",
        "|---|---|---|",
        f"| 每步（中位数，第 3 步起） | {hw['step_s']:.2f} s | {trl['step_s']:.2f} s |",
        f"| 其中 rollout（采样） | {hw['rollout_s']:.2f} s | {trl['rollout_s']:.2f} s |",
        f"| 其中奖励 + old logp 前向 | — | {trl['score_s']:.2f} s |",
        f"| 其中训练（前向、反向、AdamW） | {hw['train_s']:.2f} s | {trl['train_s']:.2f} s |",
        f"| 其中权重同步 | — | {trl['sync_s']:.3f} s |",
        f"| rollout 吞吐 | {hw['tokens_per_s']:.0f} token/s | {trl['tokens_per_s']:.0f} token/s |",
        f"| PyTorch 分配的峰值 | {hw['peak_alloc_gb']:.1f} GiB | {trl['peak_alloc_gb']:.1f} GiB"
        " （含 vLLM 的 KV cache）|",
        f"| PyTorch 占着的峰值（reserved） | — | {_cell(trl['peak_reserved_gb'], '.1f')} GiB |",
        f"| 整张卡已用（含 CUDA context） | — | {_cell(trl['device_used_gb'], '.1f')} GiB |",
        f"| held-out 贪心：起点 | {acc['hw'][0]:.3f} | {acc['trl'][0]:.3f} |",
        f"| held-out 贪心：第 50 步 | {acc['hw'][50]:.3f} | {acc['trl'][50]:.3f} |",
        f"| held-out 贪心：第 100 步 | {acc['hw'][100]:.3f} | {acc['trl'][100]:.3f} |",
        f"| 第 100 步比起点（逐题配对：升/降，p） | {signed(g['hw']['diff'])}（{g['hw']['up']}/"
        f"{g['hw']['down']}，p = {g['hw']['p']:.3f}） | {signed(g['trl']['diff'])}（{g['trl']['up']}/"
        f"{g['trl']['down']}，p = {g['trl']['p']:.3f}） |",
        f"| 采样端与训练端的 \\|Δlogp\\|（每步均值的中位数 / 最大） | 0（同一个模型采样） | "
        f"{trl['mismatch_mean']:.4f} / {trl['mismatch_max']:.2f} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
