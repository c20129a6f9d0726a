"""common/metrics.py：jsonl 追加与续跑截断、计时/显存键的约定、curves.png 能画出来。"""

from __future__ import annotations

import json
import math

import pytest

from common.metrics import MetricsLogger, deterministic_part, plot_curves, read_metrics, write_json


def test_log_append_and_truncate_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLogger(path)
    for s in range(1, 6):
        log.log({"step": s, "reward_mean": s / 10, "rollout_s": 0.1 * s})
    # 在第 3 步的 checkpoint 上续跑：第 4、5 步（checkpoint 之后才记下的）要丢掉，再追加
    log = MetricsLogger(path, resume_from_step=3)
    log.log({"step": 4, "reward_mean": 0.4})
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4]


def test_nan_becomes_null_and_step_is_required(tmp_path):
    log = MetricsLogger(tmp_path / "m.jsonl")
    log.log({"step": 1, "kl": float("nan"), "grad_norm": math.inf})
    assert read_metrics(tmp_path / "m.jsonl") == [{"step": 1, "kl": None, "grad_norm": None}]
    with pytest.raises(ValueError, match="step"):
        log.log({"reward_mean": 1.0})


def test_partial_last_line_is_ignored(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "rew', encoding="utf-8")
    assert read_metrics(path) == [{"step": 1}]


def test_deterministic_part_drops_timing_and_memory():
    row = {
        "step": 3,
        "reward_mean": 0.5,
        "rollout_s": 1.2,
        "tokens_per_s": 99.0,
        "peak_vram_gb": 3.1,
    }
    assert deterministic_part(row) == {"step": 3, "reward_mean": 0.5}


def test_write_json_is_complete(tmp_path):
    write_json(tmp_path / "eval.json", {"accuracy": 0.25, "n": 4})
    assert json.loads((tmp_path / "eval.json").read_text()) == {"accuracy": 0.25, "n": 4}
    assert not list(tmp_path.glob("*.tmp"))


def test_plot_curves_writes_png(tmp_path):
    rows = [
        {
            "step": s,
            "reward_mean": s / 10,
            "accuracy": s / 12,
            "completion_len_mean": 20 - s,
            "entropy": 1.0 / s,
            "clip_fraction": 0.0,
            "eval_accuracy": 0.5 if s % 5 == 0 else None,
        }
        for s in range(1, 11)
    ]
    out = plot_curves(rows, tmp_path / "curves.png", title="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp*"))
