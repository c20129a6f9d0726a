"""L1.04 的 prompt_lengths.py：分位数的定义、token 数与 chat template 直接分词一致、脚本整体跑通，
以及账本用的 prompt 长度（common.gsm8k.data.GSM8K_PROMPT_TOKENS_MAX）等于它量出来的最长 prompt。"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from common.gsm8k.data import GSM8K_PROMPT_TOKENS_MAX, GSM8K_SPLITS, INSTRUCTION, load_gsm8k
from common.options.presets import gpu_recipe

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


@pytest.mark.slow  # 第一次加载真实 tokenizer 要 import transformers 的 tokenizer 部分，约 4 s
def test_lengths_match_tokenized_chat_template(script, qwen3_tokenizer):
    """脚本数的 token = 让 chat template 自己分词（tokenize=True）得到的 token 数。"""
    tok = qwen3_tokenizer
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


@pytest.mark.slow  # 用真实 Qwen3 tokenizer 重新分词全部 8,792 道 GSM8K：约 3 s CPU
def test_script_prints_the_table_and_the_ledger_uses_its_max(script, tmp_path, capsys, monkeypatch):
    """重新量一遍随仓库附带的全部 GSM8K（真实 Qwen3 tokenizer）：账本的 prompt 长度就是量出来的最长 prompt，
    L1.04 贴的表就是脚本现在打印的表。"""
    measured = []  # 脚本 main() 每个 split 量出的长度（按 GSM8K_SPLITS 的顺序），不用再分词一遍

    def recording(tok, problems):
        measured.append(script["prompt_lengths"](tok, problems))
        return measured[-1]

    monkeypatch.setitem(script["main"].__globals__, "prompt_lengths", recording)
    out = tmp_path / "lengths.json"
    assert script["main"](["--json", str(out)]) == 0
    table = capsys.readouterr().out.split("结果写到")[0]  # 最后一行是 JSON 的路径，课文里没有
    rows = json.loads(out.read_text())
    assert rows["train"]["n"] == 7473 and rows["test"]["n"] == 1319
    for r in rows.values():
        assert r["min"] <= r["p50"] <= r["p95"] <= r["max"] and r["min"] <= r["mean"] <= r["max"]
    longest = max(r["max"] for r in rows.values())
    assert longest == GSM8K_PROMPT_TOKENS_MAX == 240, (
        f"量出来最长的 GSM8K prompt 是 {longest} token，common/gsm8k/data.py 的 GSM8K_PROMPT_TOKENS_MAX 是 "
        f"{GSM8K_PROMPT_TOKENS_MAX}：改常量（以及它注释里的 p95），再按 L1 课文的测试重贴账本输出"
    )
    lesson = (ROOT / "L1_concepts" / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    assert table in lesson, (
        "L1_concepts/04_vram_ledger/README.md 里贴的 prompt_lengths.py 输出已经过时：重新运行它，把输出原样贴回去"
    )

    # 2.8 节「为什么取最大值」里数出来的题数（训练集）
    train = sorted(dict(zip(GSM8K_SPLITS, measured))["train"])
    n, p95 = len(train), rows["train"]["p95"]
    at_most_p95 = sum(x <= p95 for x in train)
    over_180 = sum(x > 180 for x in train)
    per_step = gpu_recipe()["prompts_per_step"]  # GPU 配方每步抽几道题
    for quoted in (
        f"{n:,} 道题里有 {at_most_p95:,} 道不超过 {p95} token",
        f"1 − ({at_most_p95}/{n})^{per_step}",
        f"超过 180 token 的也只有 {over_180} 道",
        f"1 − ({n - over_180}/{n})^{per_step}",
    ):
        assert quoted in lesson, f"L1.04 第 2.8 节的题数要按实测改成：{quoted}"
    assert train.count(train[-1]) == 1, "L1.04 第 2.8 节说最长的 prompt 只有一道题"
