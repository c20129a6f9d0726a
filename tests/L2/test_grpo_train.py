"""L2.07 grpo_train.py：读起来像 nanoGPT（行数、行宽、配置在顶部）、配置校验（中文报错 + 非零退出码）、
--impl exercises 先检查再加载（fail fast）、训练循环冒烟测试、续跑逐位一致。

冒烟和续跑用 tiny 预设、很小的尺寸（几步、每步 4 题 × 4 条、短回答），在子进程里跑，和学习者的用法一样。
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from common.config.config_cli import build_parser, preset_config
from common.config.config_cli import parse_config as parse_command_line
from common.config.grpo_config import (
    FIELDS,
    GRPOConfig,
    to_json,
)
from common.config.model_plan import plan_or_exit
from common.model.models import TINY_WARMSTART_DIR
from common.options.presets import get_preset, gpu_recipe, preset_names
from common.run.metrics import deterministic_part, read_metrics

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "L2_algorithm" / "07_grpo_train"
SCRIPT = LESSON / "grpo_train.py"
SMALL = [
    "--n-heldout", "8", "--prompts-per-step", "4", "--group-size", "4", "--micro-batch", "8",
    "--max-new-tokens", "16", "--eval-every", "2", "--n-train", "200", "--pass-k", "2",
]  # fmt: skip
REQUIRED_KEYS = {
    "step", "prompt_ids", "reward_mean", "reward_std", "accuracy", "format_rate", "zero_std_frac",
    "completion_len_mean", "completion_len_max", "truncation_rate", "entropy", "kl",
    "clip_fraction", "grad_norm", "lr", "rollout_s", "train_s", "tokens_per_s", "peak_vram_gb",
}  # fmt: skip


def parse_config(argv):
    """What grpo_train.py does with its command line: parse it, then plan the model."""
    return plan_or_exit(parse_command_line(argv))[0]


def _run(*args, check=True):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = str(ROOT)  # 用这份仓库里的 common/solutions（不管 pip install -e 指向哪）
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, (
            f"grpo_train.py 失败（exit {proc.returncode}）：\n{proc.stderr[-3000:]}"
        )
    return proc


def _columns(line: str) -> int:
    """显示宽度：中文等全角字符占两列（和编辑器、终端里看到的一样）。"""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


def test_script_reads_like_nanogpt():
    """一个文件、从上往下读完就是算法：编号的 11 步都在，每行 ≤ 100 列（ruff format 排版，CI 检查）。"""
    text = SCRIPT.read_text(encoding="utf-8")
    lines = text.splitlines()
    wide = [i + 1 for i, line in enumerate(lines) if _columns(line) > 100]
    assert not wide, f"grpo_train.py 这些行超过 100 列（不该横向滚动）：{wide}"
    steps = [int(n) for n in re.findall(r"^\s*# (\d+)\)", text, flags=re.M)]
    steps += [int(n) for n in re.findall(r"；(\d+)\)", text)]
    assert sorted(set(steps)) == list(range(1, 12)), (
        f"第 1–11 步的编号注释不全：{sorted(set(steps))}"
    )
    assert "fmt: skip" not in text and "fmt: off" not in text


def test_every_knob_is_in_the_config_with_help():
    """--help 由 GRPOConfig 的字段生成：每个字段一个参数，都有说明和默认值。"""
    text = " ".join(build_parser().format_help().split())
    for name, f in FIELDS.items():
        assert f.metadata["help"].strip(), name
        assert f"--{name.replace('_', '-')}" in text, name
        assert " ".join(f.metadata["help"].split())[:12] in text, f"--help 里缺 {name} 的说明"
    assert text.count("(default:") >= len(FIELDS)


@pytest.mark.slow  # 子进程里跑 grpo_train.py --help：要先 import torch/transformers，约 2 CPU-s
def test_the_scripts_help_lists_every_knob():
    proc = _run("--help")
    text = " ".join(proc.stdout.split())
    assert all(f"--{name.replace('_', '-')}" in text for name in FIELDS)
    assert "qwen3-0.6b" in text and proc.stderr == ""


@pytest.mark.slow  # 约 1.8 s（读预设、算显存账）：默认一档每个课的文件 ≤ 7.5 s
def test_defaults_are_the_config_plus_the_preset(tmp_path):
    cfg = parse_config(["--out", str(tmp_path / "run")])
    plain = GRPOConfig(preset="tiny", lora_rank=0, out=cfg.out)
    assert dataclasses.replace(cfg, eps_high=None) == plain and cfg.eps_high == cfg.eps_low
    assert parse_config(["--out", str(tmp_path / "r"), "--lr", "0.5"]).lr == 0.5  # 命令行优先
    for name in preset_names():
        merged = preset_config(name)
        assert all(getattr(merged, k) == v for k, v in get_preset(name).overrides.items()), name


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--group-size", "1"], "--group-size = 1 不合法：至少为 2"),
        (["--prompts-per-step", "3", "--group-size", "4", "--micro-batch", "8"],
         "必须能被 --micro-batch=8 整除"),
        (["--preset", "gpt-5"], "未知的模型预设"),
        (["--data", "no/such/file.jsonl"], "不是存在的 jsonl 文件"),
        (["--reward", "vibes"], "--reward 只能是 correctness | format_only | correctness_plus_format | shuffled | shuffled_batch"),
        (["--warmup-steps", "-1"], "--warmup-steps = -1 不合法：要 >= 0 的整数"),
        (["--early-evals", "1,x"], "--early-evals = '1,x' 不合法：要是逗号分隔的正整数"),
        (["--early-evals", "0,5"], "--early-evals = '0,5' 不合法"),
        (["--start-evals", "3"], "--start-evals = 3 不合法：要 1 到 2 的整数"),
        (["--aggregation", "grpo"], "--aggregation"),
        (["--temperature", "0"], "--temperature"),
        (["--rollout", "turbo"], "--rollout"),
        (["--impl", "mine"], "--impl"),
        (["--lr", "nan"], "--lr = nan 不合法"),
        (["--lr", "abc"], "--lr: 要一个数，得到 'abc'"),
        (["--eps-high", "-5"], "--eps-high = -5.0 不合法"),
        (["--max-new-tokens", "100000"], "超出了 tiny 的上下文"),
        (["--nonsense", "1"], "不认识的参数"),
        (["--model", "no/such/dir", "--preset", "qwen3-0.6b"], "模型目录不存在：no/such/dir"),
        (["--model", "no/such/dir"], "不认识的模型 'no/such/dir'"),
        (["--model", "./no/such/dir", "--preset", "tiny"], "make_warmstart.py --out"),
        (["--skip-zero-adv", "2"], "--skip-zero-adv = 2 不合法：要 0 到 1 的整数"),
        (["--skip-zero-adv", "1", "--beta", "0.04"], "--skip-zero-adv 1 只在 --beta 0 且 --num-iterations 1 时成立"),
        (["--skip-zero-adv", "1", "--num-iterations", "2"], "μ = 2"),
        (["--dynamic-sampling", "-1"], "--dynamic-sampling = -1 不合法：要 >= 0 的整数"),
        (["--dynamic-sampling", "3", "--n-train", "300", "--n-heldout", "200", "--prompts-per-step", "32",
          "--micro-batch", "8"], "一步最多采 (1 + 3) × 32 = 128 道不同的题，比训练题还多"),
        (["--final-heldout", "100"], "--final-heldout 100 比 --n-heldout 200 还小"),
        (["--final-heldout", "2000", "--data", "gsm8k"], "--final-heldout 2000 超过了 GSM8K test 的 1319 道题"),
        (["--final-heldout", "6000"], "--final-heldout 6000 必须小于 --n-train 5000"),
        (["--eval-kl", "2"], "--eval-kl = 2 不合法：要 0 到 1 的整数"),
    ],
)  # fmt: skip
def test_bad_config_is_rejected_in_chinese(tmp_path, argv, expected):
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), *argv])
    assert "错误" in str(exc.value.code) and expected in str(exc.value.code)
    assert not (tmp_path / "run").exists(), "配置错误时不应留下运行目录"


def test_every_bad_value_is_listed_at_once(tmp_path):
    argv = ["--lr", "inf", "--beta", "nan", "--eval-every", "0", "--save-every", "-1",
            "--difficulty", "9", "--grad-clip", "-1", "--n-train", "0", "--weight-decay", "nan"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), *argv])
    msg = str(exc.value.code)
    for flag in argv[::2]:
        assert f"{flag} = " in msg, flag


def test_gpu_preset_on_cpu_is_rejected(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("这台机器有 CUDA")
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), "--preset", "qwen3-0.6b"])
    msg = str(exc.value.code)
    assert "需要 NVIDIA GPU" in msg and "--preset tiny" in msg and "显存账本：全参数需要约" in msg


def test_existing_run_and_resume_rules(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = parse_config(["--out", str(run)])
    (run / "config.json").write_text(json.dumps(to_json(cfg)), encoding="utf-8")
    with pytest.raises(SystemExit, match="已经有一次运行"):
        parse_config(["--out", str(run)])
    with pytest.raises(SystemExit, match=r"续跑时不能改 \['lr'\]"):
        parse_config(["--resume", str(run), "--lr", "0.5"])
    with pytest.raises(SystemExit, match="不存在"):
        parse_config(["--resume", str(tmp_path / "nothing")])
    resumed = parse_config(["--resume", str(run), "--steps", "999"])
    assert resumed.steps == 999 and resumed.lr == cfg.lr and resumed.out == str(run)
    (run / "config.json").write_text(json.dumps({**to_json(cfg), "lr": "fast"}), encoding="utf-8")
    with pytest.raises(SystemExit, match="--lr 应是 float"):  # 手改坏的 config.json：重新校验
        parse_config(["--resume", str(run)])
    (run / "config.json").write_text('{"lr": 0.1', encoding="utf-8")
    with pytest.raises(SystemExit, match="读不出来"):
        parse_config(["--resume", str(run)])


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_model_dir_alone_takes_the_gpu_recipe(tmp_path):
    """只给 --model 目录：GPU 配方（presets.toml 的 [recipe.gpu]）；CPU 上 ≤ 50M 参数的模型全参数训练。"""
    from small_qwen import make_model_dir

    folder = make_model_dir(tmp_path / "small-qwen2", family="qwen2")
    cfg = parse_config(["--out", str(tmp_path / "run"), "--model", str(folder)])
    assert cfg.preset is None and cfg.lora_rank == 0 and cfg.model == str(folder)
    assert all(getattr(cfg, k) == v for k, v in gpu_recipe().items())
    ws = parse_config(["--out", str(tmp_path / "ws"), "--model", str(TINY_WARMSTART_DIR)])
    assert (
        ws.data == "synthetic" and ws.lr == GRPOConfig().lr
    )  # make_warmstart.py 的目录：tiny 配方


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
    for name in ("config.json", "metrics.jsonl", "eval_before.json", "eval_after.json",
                 "curves.png", "checkpoint.pt"):  # fmt: skip
        assert (out / name).is_file(), f"运行目录里缺 {name}"
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert REQUIRED_KEYS <= set(row), f"缺少指标：{REQUIRED_KEYS - set(row)}"
        assert _finite_or_null(row) and 0 <= row["accuracy"] <= 1 and 0 <= row["zero_std_frac"] <= 1
        assert 0 <= row["eval_accuracy"] <= 1  # 第 1、2、3 步都评估（前几步密集评估）
    assert "eval_pass_at_2" not in rows[0] and 0 <= rows[1]["eval_pass_at_2"] <= 1
    # L2.07 第 3 节的键表要列全脚本写下的每个键（eval_pass_at_<k> 按默认 k = 8 的写法列）
    lesson = (LESSON / "README.md").read_text(encoding="utf-8")
    table = lesson.split("`metrics.jsonl` 每行的键")[1].split("\n\n")[1]
    documented = set(re.findall(r"`([a-z0-9_]+)`", table))
    written = {re.sub(r"^eval_pass_at_(?!1$)\d+$", "eval_pass_at_8", k) for r in rows for k in r}
    assert written <= documented, f"L2.07 第 3 节的 metrics.jsonl 键表漏了：{written - documented}"
    assert any(r["grad_norm"] > 0 for r in rows), "三步里梯度全是 0：warm start 应该给出非零 reward"
    for name in ("eval_before.json", "eval_after.json"):
        ev = json.loads((out / name).read_text())
        assert 0 <= ev["accuracy"] <= 1 and set(ev["pass_at"]) == {"1", "2"}
        assert 0 <= ev["pass_at"]["1"] <= ev["pass_at"]["2"] <= 1
        assert {"question", "gold", "completion", "reward"} <= set(ev["examples"][0])
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # 逐题结果：训练前、训练后各一份（eval_*.json 的 per_question），训练中每次评估一行（eval_questions.jsonl）
    questions = read_metrics(out / "eval_questions.jsonl")
    assert [q["step"] for q in questions] == [r["step"] for r in rows if "eval_accuracy" in r]
    for q, r in zip(questions, [r for r in rows if "eval_accuracy" in r]):
        assert len(q["greedy"]) == 8 and sum(q["greedy"]) / 8 == r["eval_accuracy"]
        if "eval_pass_at_2" in r:
            assert q["k"] == 2 and sum(c / 2 for c in q["correct_of_k"]) / 8 == r["eval_pass_at_1"]
    for name in ("eval_before.json", "eval_after.json"):
        pq = json.loads((out / name).read_text())["per_question"]
        assert len(pq["greedy"]) == len(pq["correct_of_k"]) == 8 and pq["k"] == 2


@pytest.mark.slow
def test_early_evals_off_and_the_flip_floor(tmp_path):
    """--early-evals none：只在每 eval_every 步和最后一步评估；--start-evals 2 写下 eval_floor.json。"""
    out = tmp_path / "run"
    _run("--out", out, "--steps", "3", *SMALL, "--early-evals", "none", "--start-evals", "2")
    rows = read_metrics(out / "metrics.jsonl")
    assert ["eval_accuracy" in r for r in rows] == [False, True, True]  # 第 2 步定期、第 3 步最后
    floor = json.loads((out / "eval_floor.json").read_text(encoding="utf-8"))
    before = json.loads((out / "eval_before.json").read_text(encoding="utf-8"))
    assert floor["n"] == 8 and floor["accuracy_first"] == before["accuracy"]
    assert floor["batch_size_first"] == GRPOConfig().eval_batch == 2 * floor["batch_size_second"]
    assert floor["grade_flips"] == floor["up"] + floor["down"] == len(floor["flipped"])


@pytest.mark.slow
def test_degenerate_batches_do_not_produce_nan(tmp_path):
    """max_new_tokens=1：每条回答要么是空的（只有 EOS），要么被截断；reward 全 0 -> 每组 std=0。"""
    out = tmp_path / "run"
    _run("--out", out, "--steps", "2", *SMALL, "--max-new-tokens", "1", "--beta", "0.1",
         "--aggregation", "token_mean")  # fmt: skip
    rows = read_metrics(out / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert _finite_or_null(row) and row["loss"] is not None and row["kl"] is not None
        assert row["completion_len_max"] <= 1 and row["truncation_rate"] + row["empty_rate"] == 1.0


@pytest.mark.slow
def test_resume_is_bit_identical(tmp_path):
    """停在第 3 步再续跑到第 6 步 == 一口气跑 6 步：metrics.jsonl 除计时/显存外逐位相同。"""
    args = [*SMALL, "--num-iterations", "2", "--beta", "0.05", "--save-every", "100",
            "--warmup-steps", "5"]  # fmt: skip
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
    assert any("eval_pass_at_2" in r for r in straight[3:]), "续跑段应该有带 pass@k 的评估"
    for a, b in zip(straight, split):
        da, db = deterministic_part(a), deterministic_part(b)
        if a["step"] == 3:  # 第一段的最后一步总要带 pass@k 评估（这一段的成绩）：只多出这几个评估键
            extra = set(db) - set(da)
            assert extra <= {f"eval_pass_at_{k}" for k in (1, 2)}, f"第 3 步多出了 {extra}"
            db = {k: v for k, v in db.items() if k not in extra}
        assert da == db, f"第 {a['step']} 步不一致"
    after = [
        json.loads((tmp_path / d / "eval_after.json").read_text()) for d in ("straight", "split")
    ]
    assert after[0] == after[1]
    lrs = [r["lr"] for r in split]  # 预热跨过了续跑的那一步：学习率照样接着升
    assert lrs[:5] == pytest.approx([0.2 * s * 3e-5 for s in range(1, 6)]) and lrs[5] == 3e-5


@pytest.mark.slow
def test_a_run_and_its_control_train_on_the_same_prompts(tmp_path):
    """同一个 seed 的运行和对照：10 步里每一步选到的题都一样（选题有自己的随机数流），续跑之后也一样；
    第 1 步两者的权重、回答都还一样，组内打乱只改 reward 落在哪条回答上：每组的 reward 统计不变。"""
    args = [*SMALL, "--eval-every", "10", "--pass-k", "0", "--early-evals", "none"]
    _run("--out", tmp_path / "run", "--steps", "10", *args)
    _run("--out", tmp_path / "control", "--steps", "5", "--reward", "shuffled", *args)
    _run("--resume", tmp_path / "control", "--steps", "10")
    run = read_metrics(tmp_path / "run" / "metrics.jsonl")
    control = read_metrics(tmp_path / "control" / "metrics.jsonl")
    assert [r["step"] for r in control] == list(range(1, 11))
    assert [r["prompt_ids"] for r in run] == [r["prompt_ids"] for r in control]
    assert len({tuple(r["prompt_ids"]) for r in run}) == 10, "每一步都选到同样的题：选题没有在动"
    first, ctl = run[0], control[0]
    for key in ("reward_mean", "reward_std", "zero_std_frac", "accuracy", "completion_len_mean"):
        assert first[key] == ctl[key], key
    later = [
        (a["accuracy"], a["grad_norm"]) != (b["accuracy"], b["grad_norm"])
        for a, b in zip(run[1:], control[1:])
    ]
    assert any(later), "对照和运行 10 步里一模一样：对照的 reward 没有被打乱"


@pytest.mark.slow
def test_dynamic_sampling_final_heldout_and_kl_to_the_start(tmp_path):
    """--dynamic-sampling 2 --skip-zero-adv 1 --eval-kl 1 --final-heldout 16，运行和它的组内打乱对照各 4 步：
    补采真的发生、训练的组不超过 P、日志的新键自洽；最后一步评 16 题、中间评 8 题；kl_start 从 0 开始变大；
    运行和对照每一步的候选题都一样（L2.10 第 2.1 节）。"""
    args = [*SMALL, "--steps", "4", "--dynamic-sampling", "2", "--skip-zero-adv", "1",
            "--eval-kl", "1", "--final-heldout", "16", "--pass-k", "0"]  # fmt: skip
    _run("--out", tmp_path / "run", *args)
    _run("--out", tmp_path / "control", "--reward", "shuffled", *args)
    run = read_metrics(tmp_path / "run" / "metrics.jsonl")
    control = read_metrics(tmp_path / "control" / "metrics.jsonl")
    P = 4
    for row in run + control:
        drawn, dropped, kept = row["groups_drawn"], row["groups_dropped"], row["groups_kept"]
        assert len(row["prompt_ids"]) == 3 * P and drawn % P == 0 and drawn <= 3 * P
        assert row["zero_std_frac"] == pytest.approx(dropped / drawn)
        assert kept == (P if dropped == drawn else min(P, drawn - dropped))
        assert kept == P or drawn == 3 * P, "凑不够 P 组却没有补采到上限"
        assert row["extra_rollout_s"] >= 0 and "kl_start" in row and row["kl_start"] >= 0
    assert any(r["groups_drawn"] > P for r in run), "4 步里一次补采都没有：这个测试没有意义"
    assert run[0]["kl_start"] < 1e-6 < run[-1]["kl_start"]  # 第 1 步还在起点（只差浮点舍入）
    assert [r["prompt_ids"] for r in run] == [r["prompt_ids"] for r in control]  # 同一串候选题
    first, ctl = run[0], control[0]  # 第 1 步权重还一样：组内打乱不改哪些组全相同
    assert [first[k] for k in ("groups_drawn", "groups_dropped", "groups_kept")] == [
        ctl[k] for k in ("groups_drawn", "groups_dropped", "groups_kept")
    ]
    lesson = (LESSON / "README.md").read_text(encoding="utf-8")  # L2.07 第 3 节的键表列全了新键
    table = lesson.split("`metrics.jsonl` 每行的键")[1].split("\n\n")[1]
    written = {k for r in run for k in r}
    assert written <= set(re.findall(r"`([a-z0-9_]+)`", table)), "L2.07 第 3 节的键表漏了新键"
    questions = read_metrics(tmp_path / "run" / "eval_questions.jsonl")
    assert [len(q["greedy"]) for q in questions] == [8, 8, 8, 16]  # 最后一步评 --final-heldout 道
    for name in ("eval_before.json", "eval_after.json"):
        assert json.loads((tmp_path / "run" / name).read_text(encoding="utf-8"))["n"] == 16


# 「训练有用」的 CI 版：默认设置（tiny、每步 16 题 × 8 条、默认 lr、默认的 200 道 held-out）只跑 10 步、只评贪心。
# 这就是 100 步默认运行（seed 0）的前 10 步：L2.07 第 5 节里真实运行 0.060 -> 0.400、对照 0.060 -> 0.025。
LEARN = ["--steps", "10", "--eval-every", "10", "--save-every", "10", "--pass-k", "0", "--seed", "0"]  # fmt: skip


def _heldout_gain(out: Path) -> tuple[float, float]:
    before = json.loads((out / "eval_before.json").read_text(encoding="utf-8"))["accuracy"]
    after = json.loads((out / "eval_after.json").read_text(encoding="utf-8"))["accuracy"]
    return before, after


@pytest.mark.slow
def test_training_helps_and_the_shuffled_control_does_not(tmp_path):
    """真实 reward：held-out 贪心正确率明显上升；reward 在回答之间打乱（对照）：基本不动。

    两次运行只差 reward 里有没有信息。把损失或 advantage 的符号弄反，第一个断言就会失败。
    """
    _run("--out", tmp_path / "real", *LEARN)
    _run("--out", tmp_path / "control", "--reward", "shuffled", *LEARN)
    b, a = _heldout_gain(tmp_path / "real")
    cb, ca = _heldout_gain(tmp_path / "control")
    assert a - b >= 0.2, (
        f"默认设置训练 10 步，held-out 贪心正确率 {b:.3f} -> {a:.3f}，没有明显上升："
        "检查 advantage 和损失的符号（L2.01、L2.03）"
    )
    assert abs(ca - cb) <= 0.1, (
        f"reward 打乱的对照 10 步后 held-out 正确率 {cb:.3f} -> {ca:.3f}：没有信息的 reward 不该让它大幅变化"
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_a_model_folder_alone_trains_on_the_cpu(tmp_path, family):
    """任何稠密的 Qwen3 / Qwen2 目录（这里：小形状的随机权重 + 真实 tokenizer 文件），只给 --model、不给
    --preset：GPU 配方、全参数（CPU 上 ≤ 50M 参数），训练 2 步并写出完整的运行目录。"""
    from small_qwen import make_model_dir

    folder = make_model_dir(tmp_path / f"small-{family}", family=family)
    out = tmp_path / "run"
    _run("--model", folder, "--out", out, "--steps", "2", "--prompts-per-step", "2",
         "--group-size", "2", "--micro-batch", "4", "--max-new-tokens", "8", "--n-heldout", "2",
         "--pass-k", "0", "--eval-every", "2")  # fmt: skip
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert cfg["model"] == str(folder) and cfg["preset"] is None and cfg["data"] == "gsm8k"
    assert cfg["provenance"]["libraries"]["torch"] and cfg["provenance"]["device"]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert (out / "eval_after.json").is_file() and (out / "checkpoint.pt").is_file()


@pytest.mark.slow  # 造一个小模型目录要 import transformers 的模型部分，约 2.5 s
def test_a_llama_folder_is_refused_and_leaves_nothing(tmp_path):
    from small_qwen import make_model_dir

    folder = make_model_dir(tmp_path / "llama-ish")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), "--model", str(folder)])
    assert "model_type 是 'llama'" in str(exc.value.code) and "qwen2" in str(exc.value.code)
    assert not (tmp_path / "run").exists()


# issue 24 里「校验通过了」的每一个值，外加几个同类的：都要在加载任何东西之前被拒绝，并点名那个参数
BAD_VALUES = [
    ("--lr", "nan"), ("--lr", "inf"), ("--lr", "1e30"), ("--beta", "nan"), ("--eps-low", "nan"),
    ("--eps-high", "nan"), ("--eps-high", "-5"), ("--grad-clip", "nan"), ("--grad-clip", "-1"),
    ("--weight-decay", "nan"), ("--temperature", "inf"), ("--eval-every", "0"),
    ("--save-every", "0"), ("--save-every", "-1"), ("--n-train", "0"), ("--difficulty", "9"),
    ("--max-new-tokens", "100000"), ("--top-p", "nan"), ("--eps-low", "1.5"), ("--pass-k", "-1"),
    ("--num-iterations", "0"), ("--seed", "-1"), ("--init", "zeros"),
]  # fmt: skip


@pytest.mark.parametrize("flag, value", BAD_VALUES)
def test_every_bad_value_is_rejected_before_anything_loads(tmp_path, flag, value):
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), flag, value])
    msg = str(exc.value.code)
    assert msg.startswith("配置错误") and flag in msg, msg
    assert not (tmp_path / "run").exists(), "配置错误时不应留下运行目录"


def test_n_heldout_must_leave_training_problems(tmp_path):
    with pytest.raises(SystemExit, match="--n-heldout 200 必须小于 --n-train 100"):
        parse_config(["--out", str(tmp_path / "run"), "--n-train", "100"])


def test_out_that_cannot_be_a_folder_is_rejected_before_the_model_loads(tmp_path, monkeypatch):
    """以前：--out 是文件、在文件下面、只读，都要等模型加载完才 FileExistsError / PermissionError。"""
    import common.run.run_folder as R

    a_file = tmp_path / "notes.txt"
    a_file.write_text("x", encoding="utf-8")
    for out, needle in [(a_file, "是一个文件"), (a_file / "run", "在文件")]:
        with pytest.raises(SystemExit, match=needle):
            parse_config(["--out", str(out)])
    monkeypatch.setattr(R.os, "access", lambda path, mode: False)  # root 不受权限位限制：模拟只读
    with pytest.raises(SystemExit, match="没有权限在 .* 里写"):
        parse_config(["--out", str(tmp_path / "ro" / "run")])


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda text, cfg: text[: len(text) // 2], "读不出来（JSONDecodeError"),
        (lambda text, cfg: "[1, 2]", "不是一个 JSON 对象"),
        (lambda text, cfg: json.dumps({**cfg, "lr": "0.001"}), "--lr 应是 float"),
        (lambda text, cfg: json.dumps({**cfg, "lr": float("nan")}), "--lr = nan 不合法"),
        (lambda text, cfg: json.dumps({**cfg, "steps": None}), "--steps 应是 int"),
        (lambda text, cfg: json.dumps({**cfg, "reward": 3}), "--reward 应是 str"),
        (lambda text, cfg: json.dumps({k: v for k, v in cfg.items() if k != "beta"}), "缺少 ['beta']"),
        (lambda text, cfg: json.dumps({**cfg, "bta": 0.1}), "多出 ['bta']"),
        (lambda text, cfg: "\ufeff{", "读不出来"),
    ],
)  # fmt: skip
def test_a_hand_edited_config_json_is_revalidated_on_resume(tmp_path, edit, needle):
    """以前：截断 -> JSONDecodeError，类型不对 -> AttributeError / TypeError 的 traceback。"""
    run = tmp_path / "run"
    run.mkdir()
    cfg = to_json(parse_config(["--out", str(run)]))
    path = run / "config.json"
    path.write_text(edit(json.dumps(cfg), cfg), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        parse_config(["--resume", str(run)])
    msg = str(exc.value.code)
    assert msg.startswith("配置错误") and needle in msg and "config.json" in msg, msg


def test_warmup_is_linear_then_constant():
    spec = importlib.util.spec_from_file_location("grpo_train_for_test", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # 只定义函数，不训练（main 在 __name__ == "__main__" 之下）
    warmup_lr = script.warmup_lr
    assert [warmup_lr(s, 2e-6, 4) for s in (1, 2, 3, 4, 5, 100)] == pytest.approx(
        [5e-7, 1e-6, 1.5e-6, 2e-6, 2e-6, 2e-6]
    )
    assert [warmup_lr(s, 3e-5, 0) for s in (1, 2, 50)] == [3e-5] * 3  # 0 = 不预热
