"""L2.07 grpo_train.py：配置校验（中文报错 + 非零退出码）、训练循环冒烟测试、续跑逐位一致。

冒烟和续跑用 tiny 预设、很小的尺寸（几步、每步 4 题 × 4 条、短回答），在子进程里跑，和学习者的用法一样。
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.metrics import deterministic_part, read_metrics

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
SMALL = [
    "--n-heldout",
    "8",
    "--prompts-per-step",
    "4",
    "--group-size",
    "4",
    "--micro-batch",
    "8",
    "--max-new-tokens",
    "16",
    "--eval-every",
    "2",
    "--n-train",
    "200",
]
REQUIRED_KEYS = {
    "step",
    "reward_mean",
    "reward_std",
    "accuracy",
    "format_rate",
    "zero_std_frac",
    "completion_len_mean",
    "completion_len_max",
    "truncation_rate",
    "entropy",
    "kl",
    "clip_fraction",
    "grad_norm",
    "lr",
    "rollout_s",
    "train_s",
    "tokens_per_s",
    "peak_vram_gb",
}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("grpo_train_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args, check=True):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, (
            f"grpo_train.py 失败（exit {proc.returncode}）：\n{proc.stderr[-3000:]}"
        )
    return proc


def test_script_is_at_most_260_lines():
    n = len(SCRIPT.read_text(encoding="utf-8").splitlines())
    assert n <= 260, f"grpo_train.py 有 {n} 行，课程承诺不超过 260 行"


def test_defaults_come_from_the_preset(script, tmp_path):
    from common.models import get_preset

    cfg = script.get_config(["--out", str(tmp_path / "run")])
    for key, value in get_preset("tiny").defaults.items():
        assert getattr(cfg, key) == value
    assert cfg.preset == "tiny" and cfg.impl == "solutions" and cfg.eps_high == cfg.eps_low
    assert script.get_config(["--out", str(tmp_path / "r"), "--lr", "0.5"]).lr == 0.5  # 命令行优先


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--group-size", "1"], "--group-size 至少为 2"),
        (
            ["--prompts-per-step", "3", "--group-size", "4", "--micro-batch", "8"],
            "必须能被 --micro-batch=8 整除",
        ),
        (["--preset", "gpt-5"], "未知的模型预设"),
        (["--data", "no/such/file.jsonl"], "文件不存在"),
        (["--reward", "vibes"], "vibes"),
        (["--aggregation", "grpo"], "--aggregation"),
        (["--temperature", "0"], "--temperature"),
    ],
)
def test_bad_config_is_rejected_in_chinese(script, tmp_path, argv, expected):
    with pytest.raises(SystemExit) as exc:
        script.get_config(["--out", str(tmp_path / "run"), *argv])
    assert "错误" in str(exc.value.code) and expected in str(exc.value.code)


def test_gpu_preset_on_cpu_is_rejected(script, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("这台机器有 CUDA")
    with pytest.raises(SystemExit) as exc:
        script.get_config(["--out", str(tmp_path / "run"), "--preset", "qwen3-0.6b"])
    assert "需要 NVIDIA GPU" in str(exc.value.code) and "--preset tiny" in str(exc.value.code)


def test_existing_run_and_resume_rules(script, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = script.get_config(["--out", str(run)])
    (run / "config.json").write_text(json.dumps(vars(cfg)), encoding="utf-8")
    with pytest.raises(SystemExit, match="已经有一次运行"):
        script.get_config(["--out", str(run)])
    with pytest.raises(SystemExit, match=r"续跑时不能改 \['lr'\]"):
        script.get_config(["--resume", str(run), "--lr", "0.5"])
    with pytest.raises(SystemExit, match="不存在"):
        script.get_config(["--resume", str(tmp_path / "nothing")])
    resumed = script.get_config(["--resume", str(run), "--steps", "999"])
    assert resumed.steps == 999 and resumed.lr == cfg.lr and resumed.out == str(run)


@pytest.mark.slow
def test_bad_config_exits_nonzero():
    proc = _run("--group-size", "1", check=False)
    assert proc.returncode != 0 and "配置错误" in proc.stderr and "Traceback" not in proc.stderr


def _finite_or_null(row):
    return all(v is None or not isinstance(v, float) or math.isfinite(v) for v in row.values())


@pytest.mark.slow
def test_smoke_run_writes_the_run_folder(tmp_path):
    out = tmp_path / "run"
    _run("--out", out, "--steps", "3", *SMALL)
    for name in (
        "config.json",
        "metrics.jsonl",
        "eval_before.json",
        "eval_after.json",
        "curves.png",
        "checkpoint.pt",
    ):
        assert (out / name).is_file(), f"运行目录里缺 {name}"
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert REQUIRED_KEYS <= set(row), f"缺少指标：{REQUIRED_KEYS - set(row)}"
        assert _finite_or_null(row) and 0 <= row["accuracy"] <= 1 and 0 <= row["zero_std_frac"] <= 1
    assert any(r["grad_norm"] > 0 for r in rows), "三步里梯度全是 0：warm start 应该给出非零 reward"
    assert 0 <= rows[1]["eval_accuracy"] <= 1
    for name in ("eval_before.json", "eval_after.json"):
        assert 0 <= json.loads((out / name).read_text())["accuracy"] <= 1
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_degenerate_batches_do_not_produce_nan(tmp_path):
    """max_new_tokens=1：每条回答要么是空的（只有 EOS），要么被截断；reward 全 0 -> 每组 std=0。"""
    out = tmp_path / "run"
    _run(
        "--out",
        out,
        "--steps",
        "2",
        *SMALL,
        "--max-new-tokens",
        "1",
        "--beta",
        "0.1",
        "--aggregation",
        "token_mean",
    )
    rows = read_metrics(out / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert _finite_or_null(row) and row["loss"] is not None and row["kl"] is not None
        assert row["completion_len_max"] <= 1 and row["truncation_rate"] + row["empty_rate"] == 1.0


@pytest.mark.slow
def test_resume_is_bit_identical(tmp_path):
    """停在第 3 步再续跑到第 6 步 == 一口气跑 6 步：metrics.jsonl 除计时/显存外逐位相同。"""
    args = [*SMALL, "--num-iterations", "2", "--beta", "0.05", "--save-every", "100"]
    _run("--out", tmp_path / "straight", "--steps", "6", *args)
    _run("--out", tmp_path / "split", "--steps", "3", *args)
    proc = _run("--resume", tmp_path / "split", "--steps", "6")
    assert "续跑" in proc.stdout
    straight = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in split] == [1, 2, 3, 4, 5, 6]
    assert any(r["grad_norm"] > 0 and r["kl"] > 0 for r in straight[3:]), (
        "续跑段没有真正的更新，测试没有意义"
    )
    assert any(r["clip_fraction"] > 0 for r in straight), "μ=2 时应该有 token 被 clip"
    for a, b in zip(straight, split):
        assert deterministic_part(a) == deterministic_part(b), f"第 {a['step']} 步不一致"
    after = [
        json.loads((tmp_path / d / "eval_after.json").read_text()) for d in ("straight", "split")
    ]
    assert after[0] == after[1]
