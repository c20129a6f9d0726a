"""L1.04 第 7.2 节：现在的配方在 H100 上的实测（h100_recipe/）。课文里的每个数都从附带的文件算出来。"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from common.vram.decode_shape import static_shape
from common.vram.ledger import GiB
from common.vram.shapes import get_model

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "L1_concepts" / "04_vram_ledger"
RUNS = LESSON / "h100_recipe"
TEXT = (LESSON / "README.md").read_text(encoding="utf-8")
SECTION = TEXT.split("### 7.2 ", 1)[1].split("\n## ", 1)[0]


def _json(name: str) -> dict:
    return json.loads((RUNS / f"{name}.json").read_text(encoding="utf-8"))


def _rollout_s(name: str) -> list[float]:
    """measure_vram.py 每一步打印的 rollout 秒数（第 1 步起）。"""
    text = (RUNS / f"{name}.txt").read_text(encoding="utf-8")
    return [float(x) for x in re.findall(r"步：.*?用时 rollout ([\d.]+)s", text)]


def test_the_ledger_check_quotes_the_shipped_measurements():
    runs = [_json("measure_vram_3steps"), _json("measure_vram_8steps")]
    for r in runs:
        assert "H100" in r["device"] and r["cap_gb"] == 32.0 and r["init"] == "random"
        s = r["settings"]
        assert (s["prompts"], s["group"], s["micro_batch"], s["beta"]) == (16, 8, 8, 0.0)
    peak, ledger = runs[0]["peak_gib"], runs[0]["predicted_peak_gib"]
    assert f"{runs[1]['peak_gib']:.2f}" == f"{peak:.2f}", "课文说两次相同"
    change = f"{(ledger - peak) / peak:+.0%}".replace("-", "−")  # 课文用数学的减号
    quoted = f"整步峰值实测 **{peak:.2f} GiB**，账本 {ledger:.2f} GiB（{change}）"
    assert quoted in SECTION.replace("\n", "")
    assert f"reserved 最高 {runs[0]['max_reserved_gib']:.2f} GiB" in SECTION
    assert f"整张卡已用 {runs[0]['device_used_gib']:.2f} GiB" in SECTION
    assert f"prompt 只有 {runs[0]['settings']['prompt_len']} token" in SECTION


def test_fused_window_in_the_training_loop():
    base, fw = _rollout_s("measure_vram_8steps"), _rollout_s("measure_vram_8steps_fused_win128")
    assert len(base) == len(fw) == 8
    b, f = statistics.median(base[1:]), statistics.median(fw[1:])
    flat = SECTION.replace("\n", "")
    assert f"每步 rollout {f:.1f} s，默认写法 {b:.1f} s（{f / b:.2f} 倍）" in flat
    extra = _json("measure_vram_8steps_fused_win128")["peak_gib"]
    plain = _json("measure_vram_8steps")["peak_gib"]
    assert f"峰值 {extra:.2f} GiB，多 {extra - plain:.2f} GiB" in flat
    assert f"{fw[0]:.1f} s 对 {base[0]:.1f} s" in flat


def test_the_oom_and_its_three_caches():
    oom = RUNS / "grpo_train_oom"
    for name in ("steps2", "steps2_expandable_segments", "steps3", "steps3_pass_k0"):
        assert "Tried to allocate 10.50 GiB" in (oom / f"{name}.txt").read_text(encoding="utf-8")
    rows = [json.loads(x) for x in (oom / "steps3_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1], "第 1 步跑完、第 2 步没有"
    assert f"第 1 步的峰值却是 **{rows[0]['peak_vram_gb']:.2f} GiB**" in SECTION
    per_token = get_model("Qwen3-0.6B").kv_bytes_per_token()
    assert f"每个 token {per_token // 1024} KiB" in SECTION
    for rows_, longest, what in ((64, 156, "评估"), (128, 112, "第 1 步"), (128, 127, "第 2 步")):
        r, slots = static_shape(rows_, longest, 512)
        gib = r * slots * per_token / GiB
        assert f"{r} 行 × {slots} 槽（{gib:.2f} GiB）" in SECTION or (
            f"{r} 行 × {slots} 槽（{gib:.1f} GiB）" in SECTION
        ), f"{what}的解码器 {r} × {slots} = {gib:.2f} GiB 和课文不一致"
    assert static_shape(128, 126, 512)[1] == 640 and static_shape(128, 127, 512)[1] == 768
