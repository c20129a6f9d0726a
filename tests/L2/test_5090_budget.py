"""L2.07 第 6.4、6.5 节和 L2.08 里用这一页的参数在 H100 上量过的数：每个都从附带的文件算出来。"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from common.gsm8k.paired_stats import paired

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
L208 = (ROOT / "L2_algorithm" / "08_reading_the_curves" / "README.md").read_text(encoding="utf-8")
EVAL_BATCH = (
    ROOT / "L2_algorithm" / "08_reading_the_curves" / "real_recipe" / "eval_batch_h100.json"
)
TIMING = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "gpu_record" / "hw-mb8-s2"


def _flat(text: str) -> str:
    return re.sub(r"\n(?!\n)\s*", "", text)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_the_eval_batch_effect_is_the_shipped_measurement():
    record = json.loads(EVAL_BATCH.read_text(encoding="utf-8"))
    assert "H100" in record["device"] and record["cap_gb"] == 32.0
    by = record["by_eval_batch"]
    assert all(len(v["greedy"]) == 500 for v in by.values())
    acc = {b: sum(v["greedy"]) / 500 for b, v in by.items()}
    assert all(abs(acc[b] - by[b]["accuracy"]) < 1e-12 for b in by)
    flips = {b: paired(by["512"]["greedy"], by[b]["greedy"]) for b in ("64", "128")}
    page = _flat(PAGE)
    expected = (
        f"eval batch 512 是 {acc['512']:.3f}，64（这一页的默认）是 {acc['64']:.3f}，128 是 {acc['128']:.3f}，"
        f"256 是 {acc['256']:.3f}。和 512 比，64 有 {flips['64']['up'] + flips['64']['down']} 道题的判分变了"
        f"（{flips['64']['up']} 道变对、{flips['64']['down']} 道变错），128 有 "
        f"{flips['128']['up'] + flips['128']['down']} 道。"
    )
    assert expected in page, f"L2.07 第 6.4 节「你的训练前不会是 0.290」和文件不一致：{expected}"
    assert f"64 是 {acc['64']:.3f}，128 是 {acc['128']:.3f}" in _flat(L208)
    assert f"| **{by['64']['eval_s']:.1f} s** |" in PAGE


def test_the_step_and_checkpoint_times_are_the_shipped_run():
    config = json.loads((TIMING / "config.json").read_text(encoding="utf-8"))
    assert config["micro_batch"] == 8 and "H100" in config["provenance"]["device"]
    rows = [r for r in _rows(TIMING / "metrics.jsonl") if r["step"] > 2]
    step = statistics.median(r["rollout_s"] + r["train_s"] for r in rows)
    rollout = statistics.median(r["rollout_s"] for r in rows)
    train = statistics.median(r["train_s"] for r in rows)
    first = _rows(TIMING / "metrics.jsonl")[:2]
    assert (
        f"**{step:.2f} s**：rollout {rollout:.2f} s、训练 {train:.2f} s；前两步含编译，"
        f"{first[0]['rollout_s'] + first[0]['train_s']:.1f} s 和 {first[1]['rollout_s'] + first[1]['train_s']:.1f} s"
    ) in PAGE
    log = (TIMING / "train_log.txt").read_text(encoding="utf-8")
    minutes, seconds = re.findall(r"12/12 \[(\d+):(\d+)<", log)[-1]
    total = int(minutes) * 60 + int(seconds)
    last = _rows(TIMING / "metrics.jsonl")[-1]["elapsed_s"]
    assert (
        f"**约 {round(total - last, -1):.0f} s**（进度条的总时间 {total} s 减去最后一行的 `elapsed_s` {last:.1f} s）"
        in PAGE
    )


def test_the_5090_estimate_from_the_h100_blocks():
    """第 6.5 节：H100 上量的一步（micro-batch 8）按带宽（rollout）和算力（训练）换到 5090。"""
    rows = [r for r in _rows(TIMING / "metrics.jsonl") if r["step"] > 2]
    rollout = statistics.median(r["rollout_s"] for r in rows)
    train = statistics.median(r["train_s"] for r in rows)
    bandwidth = 3.35 / 1.79  # 课文引用的公开规格：H100 SXM / 5090 的显存带宽（TB/s）
    compute = 989 / 419  # 稠密 BF16 张量算力（TFLOPS）：H100 / 5090；FP32 累加再减半
    step = [rollout * bandwidth + train * compute, rollout * bandwidth + train * compute * 2]
    page = _flat(PAGE)
    assert f"慢 {bandwidth:.1f} 倍，训练按算力比慢 {compute:.1f}–{compute * 2:.1f} 倍" in page
    assert (
        f"一步约 {step[0]:.0f}–{step[1]:.0f} s，**100 步的训练约 {100 * step[0] / 60:.0f}–"
        f"{100 * step[1] / 60:.0f} 分钟**，四次约 {400 * step[0] / 3600:.1f}–{400 * step[1] / 3600:.1f} 小时"
        in page
    )
    assert f"4 次约 {400 * step[0] / 3600:.1f}–{400 * step[1] / 3600:.1f} 小时" in page
