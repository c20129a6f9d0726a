"""L1 各节目录里的小脚本：能在 CPU 上跑通，打印课里贴出来的那些东西。"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_look_at_a_rollout_prints_the_group():
    r = subprocess.run(
        [sys.executable, str(ROOT / "L1_concepts" / "02_llm_as_policy" / "look_at_a_rollout.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "正确答案 25" in out and out.count("advantage =") == 4 and "<|im_end|>" in out
    # 课里贴的那组：两条对、两条错，组内 advantage ±0.87
    assert (
        out.count("reward = 1，advantage = +0.87") == 2
        and out.count("reward = 0，advantage = -0.87") == 2
    )
