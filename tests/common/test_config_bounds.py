"""issue 35：通过了各自的检查、却在运行目录建好之后才崩溃或卡住的值，现在在加载任何东西之前被拒绝。

每个值都有一句中文，点名那个参数并说出要改成什么；运行目录不会被建出来。
"""

from __future__ import annotations

import pytest

from common.config.config_cli import build_parser
from common.config.config_cli import parse_config as parse_command_line
from common.config.grpo_config import N_TRAIN_MAX, SEED_MAX
from common.config.model_plan import plan_or_exit


def parse_config(argv):
    """What grpo_train.py does with its command line: parse it, then plan the model."""
    return plan_or_exit(parse_command_line(argv))[0]


CASES = [
    # 以前：采样时 RuntimeError（1e-300 在 float32 里是 0，整行被 top-p 截掉）
    (["--top-p", "1e-300"], "--top-p = 1e-300 不合法：要在 [1.2e-38, 1] 里"),
    (["--temperature", "1e-300"], "--temperature = 1e-300 不合法：要在 [1e-6, 100] 里"),
    # 以前：「错误：Overflow when unpacking long long」，没说是哪个参数
    (["--seed", "99999999999999999999"], f"--seed = 99999999999999999999 不合法：要 0 到 {SEED_MAX}"),
    # 以前：一声不响地生成二十亿道题，直到被杀
    (["--n-train", "2000000000"], f"--n-train = 2000000000 不合法：要 2 到 {N_TRAIN_MAX} 的整数"),
    # 以前：GSM8K 的 test 只有 1319 道，悄悄只用 1319 道
    (["--data", "gsm8k", "--n-heldout", "5000"], "--n-heldout 5000 超过了 GSM8K test 的 1319 道题"),
    # 以前：MemoryError（或吃光内存）
    (["--prompts-per-step", "100000000"], "--prompts-per-step 100000000 比训练题还多"),
    (["--data", "gsm8k", "--prompts-per-step", "8000", "--micro-batch", "8"],
     "GSM8K train 只有 7473 道"),
    (["--group-size", "100000000"], "减小 --prompts-per-step 或 --group-size"),
    (["--pass-k", "100000000"], "减小 --pass-k 或 --eval-batch"),
]  # fmt: skip


@pytest.mark.parametrize("argv, needle", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_value_that_would_crash_later_is_refused_now(tmp_path, monkeypatch, argv, needle):
    import common.config.model_plan as plan

    monkeypatch.setattr(plan, "host_memory_gib", lambda: 64.0)  # 与这台机器的内存无关
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), *argv])
    msg = str(exc.value.code)
    assert msg.startswith("配置错误") and needle in msg, msg
    assert "Traceback" not in msg and not (tmp_path / "run").exists()


def test_the_memory_check_names_the_numbers_it_used(tmp_path, monkeypatch):
    import common.config.model_plan as plan

    monkeypatch.setattr(plan, "host_memory_gib", lambda: 64.0)
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), "--pass-k", "100000000"])
    msg = str(exc.value.code)
    assert "100000000 条回答" in msg and "这台机器的内存只有 64.0 GiB" in msg, msg
    # 大的 --eval-batch 本身无害：一批最多 held-out 题数那么多条
    cfg = parse_config(["--out", str(tmp_path / "ok"), "--eval-batch", "1000000000"])
    assert cfg.eval_batch == 1000000000


def test_the_boundary_values_are_accepted(tmp_path):
    cfg = parse_config(
        ["--out", str(tmp_path / "run"), "--top-p", "1e-6", "--temperature", "1e-6",
         "--seed", str(SEED_MAX), "--data", "gsm8k", "--n-heldout", "1319"]
    )  # fmt: skip
    assert (cfg.top_p, cfg.seed, cfg.n_heldout) == (1e-6, SEED_MAX, 1319)


@pytest.mark.parametrize(
    "argv, needle",
    [(["--step", "5"], "不认识的参数: --step 5（是不是 --steps？）"),
     (["--setps", "5"], "不认识的参数: --setps 5（是不是 --steps？）"),
     (["--res", "runs/x"], "不认识的参数: --res runs/x（是不是 --resume？）"),
     (["--lr-warm", "3"], "不认识的参数: --lr-warm 3"),],
)  # fmt: skip
def test_no_abbreviations_and_a_did_you_mean(tmp_path, argv, needle):
    """以前：--step 5 被 argparse 的前缀匹配悄悄当成 --steps 5；--setps 5 只说「不认识」。"""
    with pytest.raises(SystemExit) as exc:
        parse_config(["--out", str(tmp_path / "run"), *argv])
    assert needle in str(exc.value.code), exc.value.code
    assert not build_parser().allow_abbrev
