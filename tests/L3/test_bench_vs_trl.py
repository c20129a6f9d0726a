"""L3.01 bench_vs_trl.py：CPU 上 tiny 走通整个流程（时间没有意义）。"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "bench_vs_trl.py"


@pytest.mark.slow
def test_tiny_run_on_cpu_writes_the_summary(tmp_path):
    main = runpy.run_path(str(BENCH))["main"]
    args = ["--preset", "tiny", "--micro-batch", "8", "--prompts", "2", "--group", "4"]
    assert main(args + ["--max-new-tokens", "8", "--steps", "2", "--out", str(tmp_path)]) == 0
    (summary,) = tmp_path.glob("*/summary.json")
    (row,) = json.loads(summary.read_text(encoding="utf-8"))
    assert row["micro_batch"] == 8 and row["trl_step_s"] > 0 and row["ours_train_s"] > 0
