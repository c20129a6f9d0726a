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
GPU_RECORD = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "gpu_record"
TIMING = GPU_RECORD / "hw-mb8-s2"


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
        f"**{step:.2f} s**：rollout {rollout:.2f} s、训练 {train:.2f} s；前两步含一次性的开销（没有细分），"
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


def _bar_seconds(log: Path, steps: int) -> int:
    """train_log.txt 里进度条走完时的总时间（`steps/steps [MM:SS<00:00`）。"""
    found = re.findall(rf"{steps}/{steps} \[(\d+):(\d\d)<00:00", log.read_text(encoding="utf-8"))
    assert found, f"{log} 里找不到进度条的总时间"
    return int(found[-1][0]) * 60 + int(found[-1][1])


def test_the_5090_estimate_from_the_h100_blocks():
    """第 6.5 节：H100 上量的几块（micro-batch 8）加成一次运行；一步按带宽（rollout）和算力（训练）换到 5090；
    四次的总账、第 6.7 节 TRL 一次的粗推、页首的总账，以及首页 README、L2.08 第 6.5 节引用的同一组数。"""
    all_rows = _rows(TIMING / "metrics.jsonl")
    rows = [r for r in all_rows if r["step"] > 2]
    step = statistics.median(r["rollout_s"] + r["train_s"] for r in rows)
    rollout = statistics.median(r["rollout_s"] for r in rows)
    train = statistics.median(r["train_s"] for r in rows)
    first = sum(r["rollout_s"] + r["train_s"] for r in all_rows[:2]) - 2 * step  # 一次性的开销
    ev = json.loads(EVAL_BATCH.read_text(encoding="utf-8"))["by_eval_batch"]["64"]["eval_s"]
    save = _bar_seconds(TIMING / "train_log.txt", len(all_rows)) - all_rows[-1]["elapsed_s"]
    # H100 一次：100 步 + 一次性开销 + 2 次存盘 + 评估（对照 3 次；运行多一次底噪评估，
    # eval batch 32 没有量过，课文按 64 的两倍时间猜）
    once = 100 * step + first + 2 * save
    run, control = once + 3 * ev + 2 * ev, once + 3 * ev
    assert round(run / 60) == round(control / 60), (run, control)
    extra = (run + control) / 2 - 100 * step - first  # 每次运行的评估和存盘（H100）
    bandwidth = 3.35 / 1.79  # 课文引用的公开规格：H100 SXM / 5090 的显存带宽（TB/s）
    compute = 989 / 419  # 稠密 BF16 张量算力（TFLOPS）：H100 / 5090；FP32 累加再减半
    lo, hi = (rollout * bandwidth + train * c for c in (compute, 2 * compute))
    # 四次：训练 + 评估和存盘（5090 上最多慢到两倍）+ 加载（课文猜每次约 1 分钟）
    total = [(400 * s + 4 * (k * extra + 60)) / 3600 for s, k in ((lo, 1), (hi, 2))]
    budget = f"{total[0]:.1f}–{total[1]:.1f} 小时"
    # H100 上 TRL 100 步的总时间
    trl = _bar_seconds(GPU_RECORD / "trl100-s2" / "train_log.txt", 100)
    trl_minutes = f"{trl * lo / step / 60:.0f}–{trl * hi / step / 60:.0f} 分钟"
    page = _flat(PAGE)
    quotes = [
        f"约 {first:.0f} s（{all_rows[0]['rollout_s'] + all_rows[0]['train_s']:.1f} + "
        f"{all_rows[1]['rollout_s'] + all_rows[1]['train_s']:.1f} − 2 × {step:.2f}）",
        f"× {ev:.1f} s ≈ {3 * ev:.0f} s",
        f"**一次约 {round(run / 60)} 分钟，四次约 {round(2 * (run + control) / 60)} 分钟**",
        f"慢 {bandwidth:.1f} 倍；训练按算力比慢 {compute:.1f}–{compute * 2:.1f} 倍",
        f"一步约 {rollout:.2f} × {bandwidth:.2f} + {train:.2f} × ({compute:.2f}–{2 * compute:.2f}) "
        f"≈ {lo:.1f}–{hi:.1f} s",
        f"**100 步的训练约 {100 * lo / 60:.0f}–{100 * hi / 60:.0f} 分钟**，"
        f"四次约 {400 * lo / 3600:.1f}–{400 * hi / 3600:.1f} 小时",
        f"H100 上每次运行约 {extra / 60:.1f} 分钟",
        f"**四次约 {budget}**",
        f"一步慢 {lo / step:.1f}–{hi / step:.1f} 倍）粗推是约 {trl_minutes}",
        f"第 6.4 节的四次运行在 5090 上约 {budget}，第 6.7 节的 TRL 一次再加约 {trl_minutes}",
    ]
    for quote in quotes:
        assert quote in page, f"L2.07 第 6.5 节的时间和附带的记录对不上，应该写：{quote}"
    minutes = f"{100 * lo / 60:.0f}–{100 * hi / 60:.0f} 分钟"
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    l208 = L208.split("### 6.5 ", 1)[1].split("\n### ", 1)[0]
    for where, other in (("首页 README", front), ("L2.08 第 6.5 节", l208)):
        for figure in (minutes, budget):
            assert figure in other, f"{where}引用的 5090 时间要和 L2.07 第 6.5 节一致：{figure}"
