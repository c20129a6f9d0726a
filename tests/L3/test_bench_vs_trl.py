"""L3.01 bench_vs_trl.py：跳过的前几步与 grpo_train.py 的 EARLY_EVALS 一致；CPU 上 tiny 走通整个流程（时间没有意义）。"""

from __future__ import annotations

import ast
import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "bench_vs_trl.py"
TRAIN = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"


def test_skipped_steps_cover_the_early_evaluations():
    tree = ast.parse(TRAIN.read_text(encoding="utf-8"))
    node = next(
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "EARLY_EVALS"
    )
    early = ast.literal_eval(node.value)
    assert runpy.run_path(str(BENCH))["EARLY"] == max(early)


@pytest.mark.slow
def test_tiny_run_on_cpu_writes_the_summary(tmp_path):
    main = runpy.run_path(str(BENCH))["main"]
    args = ["--preset", "tiny", "--micro-batch", "8", "--prompts", "2", "--group", "4"]
    assert main(args + ["--max-new-tokens", "8", "--steps", "2", "--out", str(tmp_path)]) == 0
    (summary,) = tmp_path.glob("*/summary.json")
    (row,) = json.loads(summary.read_text(encoding="utf-8"))
    assert row["micro_batch"] == 8 and row["trl_step_s"] > 0 and row["ours_train_s"] > 0
