"""L1.04 的 measure_vram.py：CPU 上用 tiny 预设跑通（不测显存、明确说出来），参数错误给出清楚的提示。"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L1_concepts" / "04_vram_ledger" / "measure_vram.py"


def _run(*args, timeout=600):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def main():
    return runpy.run_path(str(SCRIPT))["main"]  # 不以 __main__ 运行：只取出 main()


@pytest.mark.parametrize(
    "args,hint",
    [
        (["--prompts", "3", "--group", "4", "--micro-batch", "5"], "--micro-batch"),
        (["--group", "1"], "--group"),
        (["--preset", "qwen3-7b"], "qwen3-0.6b"),
        (["--cap-gb", "0"], "--cap-gb"),
        (["--cap-gb", "nan"], "--cap-gb"),  # 以前：nan 被接受
        (["--prompts", "0"], "prompts"),  # 以前：0 被当成「没给」，换成了预设的值
        (["--group", "0"], "group"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
        (["--lr", "-1"], "--lr 必须是正数"),  # 以前：torch 的 ValueError，traceback
        (["--json", "/nonexistent-i47/x.json"], "不存在"),  # 以前：跑完整个 run 才 traceback
        (["--prompts", "abc"], "--prompts 要一个整数"),  # 以前：argparse 的英文
    ],
)
def test_bad_arguments_exit_nonzero_with_a_hint(main, capsys, args, hint):
    with pytest.raises(SystemExit) as err:
        main(args)
    err_text = capsys.readouterr().err
    assert err.value.code != 0 and hint in err_text and "错误" in err_text, err_text


@pytest.mark.parametrize("args", [["--micro-batch", "0"], ["--micro-btach", "8"]])
def test_the_error_is_one_line_without_the_usage_block(main, capsys, args):
    """issue 44 以前：二十多个参数的 usage 先占满一屏，中文的那一行在最后。"""
    with pytest.raises(SystemExit) as err:
        main(args)
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "错误：" in lines[0], lines


def test_micro_batch_defaults_to_the_presets_value():
    """不给 --micro-batch：取预设的（GPU 配方 8，和 grpo_train.py 一样），比 P·G 大时就是一次算完整批。"""
    from common.config.config_cli import base_config
    from common.options.presets import gpu_recipe

    parse = runpy.run_path(str(SCRIPT))["parse_args"]
    assert parse([]).micro_batch == base_config("tiny", None).micro_batch
    assert parse(["--prompts", "2", "--group", "4"]).micro_batch == 8  # 预设的 32 > P·G = 8
    assert parse(["--micro-batch", "2"]).micro_batch == 2
    assert (
        base_config("qwen3-0.6b", None).micro_batch == gpu_recipe()["micro_batch"]
    )  # GPU 上取到的


@pytest.mark.slow  # 造一个小 Qwen3 目录要 import transformers 的模型部分，约 2.5 s
def test_model_folder_is_checked_before_anything_runs(main, capsys, tmp_path, monkeypatch):
    """--model：坏目录在加载任何东西之前报错；好目录（小形状的 Qwen3）过了检查，才轮到 CUDA 检查。"""
    from small_qwen import make_model_dir

    for args, hint in [
        (["--preset", "qwen3-0.6b", "--model", str(tmp_path / "nope")], "模型目录不存在"),
        (["--preset", "qwen3-0.6b", "--model", str(tmp_path), "--init", "random"], "--init random"),
        (["--preset", "tiny", "--model", str(tmp_path / "nope")], "make_warmstart.py --out"),
    ]:
        with pytest.raises(SystemExit) as err:
            main(args)
        assert err.value.code != 0 and hint in capsys.readouterr().err
    import torch

    if torch.cuda.is_available():
        return
    folder = make_model_dir(tmp_path / "small-qwen3")
    with pytest.raises(SystemExit):  # 形状不是 Qwen3-0.6B 的：--preset 要求形状一致
        main(["--preset", "qwen3-0.6b", "--model", str(folder)])
    assert "去掉 --preset" in capsys.readouterr().err


def test_gpu_preset_on_a_cpu_machine_says_what_to_do(main, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("这台机器有 CUDA")
    with pytest.raises(SystemExit) as err:  # 在 parse 时就拒绝：还没加载任何东西
        main(["--preset", "qwen3-0.6b"])
    msg = capsys.readouterr().err
    assert err.value.code == 2 and "--preset tiny" in msg and "显存账本：全参数需要约" in msg


@pytest.mark.slow
def test_tiny_preset_runs_on_cpu(tmp_path):
    import torch

    out = tmp_path / "vram.json"
    r = _run(
        "--preset",
        "tiny",
        "--prompts",
        "2",
        "--group",
        "4",
        "--max-new-tokens",
        "12",
        "--beta",
        "0.04",
        "--json",
        str(out),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    if not torch.cuda.is_available():
        assert "没有 CUDA" in r.stdout and "不测显存" in r.stdout
    summary = json.loads(out.read_text(encoding="utf-8"))
    phases = [row["phase"] for row in summary["phases"]]
    assert phases == ["loaded", "rollout", "ref_forward", "backward", "optimizer", "after_step"]
    assert all(row["predicted_gib"] > 0 for row in summary["phases"])
    assert summary["settings"]["beta"] == 0.04 and summary["settings"]["prompt_len"] > 0


@pytest.mark.slow  # 起一个子进程跑 tiny 两步（约 9 s）
def test_training_questions_are_what_grpo_train_drew(tmp_path):
    """--questions training：每步的题和 grpo_train.py 同一个 seed 抽到的一样（选题的随机数流在 CPU 上，
    和题数 P 无关：每步一个新的排列，取前 P 个）。对照 L2.08 附带的 tiny 运行（seed 0，P = 16）。"""
    shipped = ROOT / "L2_algorithm" / "08_reading_the_curves" / "tiny_runs" / "seed0"
    cfg = json.loads((shipped / "config.json").read_text(encoding="utf-8"))
    assert (cfg["preset"], cfg["seed"], cfg["data"], cfg["n_heldout"]) == (
        "tiny",
        0,
        "synthetic",
        200,
    )
    rows = [json.loads(x) for x in (shipped / "metrics.jsonl").read_text().splitlines()[:2]]
    out = tmp_path / "vram.json"
    args = ("--preset", "tiny", "--prompts", "2", "--group", "2", "--max-new-tokens", "4")
    r = _run(*args, "--questions", "training", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert summary["questions"] == "training"
    assert summary["prompt_ids"] == [row["prompt_ids"][:2] for row in rows], (
        "measure_vram.py --questions training 抽到的题和 grpo_train.py 同一个 seed 的不一样"
    )
