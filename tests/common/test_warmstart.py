"""tiny 预设的 warm-start checkpoint：随仓库附带、与代码里的 tokenizer/结构一致、起点正确率在 GRPO 能学的区间，
并且能由 L2_algorithm/07_grpo_train/make_warmstart.py 确定地重新生成。"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from common.model.models import TINY_ARCH, TINY_WARMSTART_DIR, load_model
from common.model.tokenizer import build_tiny_tokenizer

SCRIPT = (
    Path(__file__).resolve().parents[2] / "L2_algorithm" / "07_grpo_train" / "make_warmstart.py"
)
REGENERATE = "python L2_algorithm/07_grpo_train/make_warmstart.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_warmstart", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def info():
    path = TINY_WARMSTART_DIR / "warmstart.json"
    assert path.is_file(), f"仓库里应附带 {TINY_WARMSTART_DIR}；运行 `{REGENERATE}` 生成"
    return json.loads(path.read_text(encoding="utf-8"))


def test_shipped_checkpoint_is_small_and_matches_the_code(info):
    files = {p.name for p in TINY_WARMSTART_DIR.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "warmstart.json",
    } <= files
    size_mb = sum(p.stat().st_size for p in TINY_WARMSTART_DIR.iterdir()) / 2**20
    assert size_mb < 8, f"warm-start checkpoint 应该只有几 MB，现在 {size_mb:.1f} MB"
    model, tok = load_model("tiny")  # init="pretrained" = this checkpoint
    code_tok = build_tiny_tokenizer()
    assert (
        json.loads(tok.backend_tokenizer.to_str())["model"]
        == json.loads(code_tok.backend_tokenizer.to_str())["model"]
    ), (
        f"附带的 tokenizer 和 common/model/tokenizer.py 现在造出来的不一样（合成题的词表变了？）：运行 `{REGENERATE}` 重新生成"
    )
    assert tok.chat_template == code_tok.chat_template
    for key, value in TINY_ARCH.items():
        got = (
            model.config.rope_parameters["rope_theta"]
            if key == "rope_theta"
            else getattr(model.config, key)
        )
        assert got == value, (
            f"checkpoint 的 {key}={got}，代码里是 {value}：运行 `{REGENERATE}` 重新生成"
        )
    assert model.config.vocab_size == len(tok) and model.dtype == torch.float32


def test_recorded_start_is_a_good_rl_starting_point(info):
    # GRPO needs a non-zero but low start, and groups whose G answers disagree (std > 0)
    start = info["start"]
    assert info["recipe"]["name"] == _script().DEFAULT_RECIPE
    assert 0.02 <= start["accuracy"] <= 0.45 and start["n"] == 200
    assert start["pass_at"]["8"] >= 0.5 > start["zero_std_frac"]
    assert start["pass_at"]["8"] > start["pass_at"]["1"]
    assert info["loss_last"] < info["loss_first"] / 3


@pytest.mark.slow  # 200 道 held-out 题的贪心生成
def test_shipped_checkpoint_reproduces_its_recorded_start(info):
    """Re-measure greedy accuracy on grpo_train.py's 200 held-out problems (what eval_before.json holds)."""
    ws = _script()
    model, tok = load_model("tiny")
    defaults = ws.preset_config("tiny")
    stats = ws.measure(model, tok, ws.grpo_heldout(defaults), group_size=0,
                       max_new_tokens=defaults.max_new_tokens, temperature=1.0)  # fmt: skip
    # same machine: identical; another CPU may round differently and flip a problem or two
    assert abs(stats["accuracy"] - info["start"]["accuracy"]) <= 0.03, (
        f"重新测得贪心正确率 {stats['accuracy']}，warmstart.json 记的是 {info['start']['accuracy']}"
    )


def test_recipes():
    """worked：只有标准解答（老老实实的 SFT）；默认配方和附带 checkpoint 记录的一致。"""
    ws = _script()
    assert ws.RECIPES["worked"]["styles"] == {"worked": 1.0}
    assert ws.RECIPES["shortcut"]["styles"]["guess"] > 0.5
    shipped = json.loads((TINY_WARMSTART_DIR / "warmstart.json").read_text(encoding="utf-8"))
    recipe = ws.RECIPES[ws.DEFAULT_RECIPE]
    assert shipped["recipe"]["styles"] == recipe["styles"]
    assert shipped["recipe"]["steps"] == recipe["steps"]


@pytest.mark.slow  # 生成一万多道合成题：约 2 CPU 秒
def test_sft_problems_never_contain_a_heldout_question():
    ws = _script()
    defaults = ws.preset_config("tiny")
    heldout = {p.question for p in ws.grpo_heldout(defaults)}
    sft = ws.sft_problems(defaults.n_train)
    assert len(sft) > 10_000 and not heldout & {p.question for p in sft}


def test_sft_target_styles():
    from common.gsm8k.data import reference_completion, synthetic_problems
    from common.gsm8k.reward import correctness_reward, extract_answer, format_reward

    ws = _script()
    problems = synthetic_problems(400, seed=5, difficulty=2)
    for p in problems[:50]:
        worked, hashed, guess = (ws.target_text(p, {s: 1.0}) for s in ("worked", "hash", "guess"))
        assert worked == reference_completion(p)
        assert correctness_reward(worked, p.gold) == 1.0 and format_reward(worked) == 1.0
        assert correctness_reward(hashed, p.gold) == 1.0 and format_reward(hashed) == 0.0
        assert (
            format_reward(guess) == 1.0
            and extract_answer(guess) in p.question.replace(".", " ").split()
        )
    # the style of a problem depends only on its question, and the shares follow the mixture
    mix = {"worked": 0.25, "hash": 0.25, "guess": 0.5}
    texts = [ws.target_text(p, mix) for p in problems]
    assert texts == [ws.target_text(p, mix) for p in problems]
    share_guess = sum(not any(c in t for c in "=#") for t in texts) / len(texts)
    assert abs(share_guess - 0.5) < 0.08


@pytest.mark.slow
def test_make_warmstart_is_deterministic_and_writes_a_loadable_checkpoint(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    ws = _script()
    # keep the probe short: 16 held-out problems
    monkeypatch.setattr(ws, "grpo_heldout", lambda d: _script().grpo_heldout(d)[:16])
    for name in ("a", "b"):
        ws.main(["--out", str(tmp_path / name), "--steps", "6", "--recipe", "worked"])
    a = Qwen3ForCausalLM.from_pretrained(tmp_path / "a")
    b = Qwen3ForCausalLM.from_pretrained(tmp_path / "b")
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), f"{n}: 同样的配方两次 SFT 结果不同"
    tok = PreTrainedTokenizerFast.from_pretrained(tmp_path / "a")
    assert tok.chat_template and len(tok) == a.config.vocab_size
    info = json.loads((tmp_path / "a" / "warmstart.json").read_text(encoding="utf-8"))
    assert info["recipe"]["steps"] == 6 and info["recipe"]["name"] == "worked"
    assert info["loss_last"] < info["loss_first"] and info["start"]["n"] == 16
    assert set(info["start"]["pass_at"]) == {"1", "8"}
    # no temp folder left behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
