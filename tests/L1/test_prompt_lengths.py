"""L1.04 的 prompt_lengths.py：分位数的定义、token 数与 chat template 直接分词一致、脚本整体跑通。"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from common.data import INSTRUCTION, load_gsm8k
from common.tokenizer import load_qwen3_tokenizer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L1_concepts" / "04_vram_ledger" / "prompt_lengths.py"


@pytest.fixture(scope="module")
def script():
    return runpy.run_path(str(SCRIPT))  # 不以 __main__ 运行：只取出函数


def test_nearest_rank_percentile(script):
    values = list(range(1, 21))  # 1..20
    assert script["percentile"](values, 0.5) == 10  # 第 ceil(0.5·20) = 10 个
    assert script["percentile"](values, 0.95) == 19
    assert script["percentile"](values, 1.0) == 20 and script["percentile"](values, 0.0) == 1
    s = script["summarize"]([5, 1, 3])
    assert s == {"n": 3, "mean": 3.0, "p50": 3, "p95": 5, "max": 5, "min": 1}
    with pytest.raises(ValueError):
        script["percentile"]([], 0.5)


def test_lengths_match_tokenized_chat_template(script):
    """脚本数的 token = 让 chat template 自己分词（tokenize=True）得到的 token 数。"""
    tok = load_qwen3_tokenizer()
    problems = load_gsm8k("test", limit=20)
    got = script["prompt_lengths"](tok, problems)
    for p, n in zip(problems, got):
        direct = tok.apply_chat_template(
            [{"role": "user", "content": f"{p.question}\n{INSTRUCTION}"}],
            tokenize=True,
            return_dict=False,
            add_generation_prompt=True,
            enable_thinking=False,
        )
        assert n == len(direct), p.question[:60]
        assert tok.decode(direct[-4:]) == "<think>\n\n</think>\n\n"  # thinking 关：空的 think 块


def test_bad_tokenizer_folder_is_a_clear_error(script, tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        script["main"](["--tokenizer", str(tmp_path)])
    assert err.value.code != 0 and "tokenizer.json" in capsys.readouterr().err


@pytest.mark.slow
def test_script_prints_the_table(script, tmp_path, capsys):
    out = tmp_path / "lengths.json"
    assert script["main"](["--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "p95" in table and "train" in table and "test" in table
    rows = json.loads(out.read_text())
    assert rows["train"]["n"] == 7473 and rows["test"]["n"] == 1319
    for r in rows.values():
        assert r["min"] <= r["p50"] <= r["p95"] <= r["max"] and r["min"] <= r["mean"] <= r["max"]
