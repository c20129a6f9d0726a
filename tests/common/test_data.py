"""common.data：本地 jsonl、合成题生成器（答案重新计算核对）、prompt 渲染（真实 Qwen3 tokenizer）。"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

import pytest

from common.data import (
    INSTRUCTION,
    DataError,
    build_prompt,
    load_jsonl,
    reference_completion,
    split_train_heldout,
    synthetic_problems,
)
from common.tokenizer import QWEN3_EOS_IDS, load_qwen3_tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_load_jsonl_fixture():
    problems = load_jsonl(FIXTURES / "gsm8k_sample.jsonl")
    assert [p.gold for p in problems] == ["11", "160", "1500", "-5", "16"]
    assert all(p.answer.endswith(p.answer.rsplit("####", 1)[1]) for p in problems)


@pytest.mark.parametrize(
    "name,needle",
    [
        ("gsm8k_bad_json.jsonl", "第 2 行：不是合法的 JSON"),
        ("gsm8k_no_final_answer.jsonl", "第 2 行：answer 里没有"),
        ("gsm8k_missing_field.jsonl", "第 2 行：缺少字符串字段 'question'"),
        ("does_not_exist.jsonl", "数据文件不存在"),
    ],
)
def test_load_jsonl_errors_name_the_row(name, needle):
    with pytest.raises(DataError, match=needle):
        load_jsonl(FIXTURES / name)


def test_load_jsonl_empty(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match="是空的"):
        load_jsonl(tmp_path / "empty.jsonl")


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _calc(expr: str):
    """只认 + - * / 和整数的小计算器（不用 eval）。"""

    def ev(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(expr)

    return ev(ast.parse(expr, mode="eval").body)


def _solve_from_question(q: str) -> int:
    """不看答案，只从题面按模板重新算一遍。"""
    n = [int(x) for x in re.findall(r"\d+", q)]
    if "buys" in q and "more" in q:
        return n[0] + n[1]
    if "bags" in q:
        return n[0] * n[1] - n[2]
    if "finds" in q:
        return (n[0] + n[1]) // n[2]
    if "shares" in q:
        assert n[0] % n[1] == 0
        return n[0] // n[1]
    if "gives" in q:
        return n[0] - n[1]
    raise AssertionError(f"未知模板：{q}")


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_synthetic_gold_is_always_right(difficulty):
    for p in synthetic_problems(400, seed=7, difficulty=difficulty):
        assert p.gold == str(_solve_from_question(p.question)), p
        assert int(p.gold) >= 0
        # 每个计算注解 <<a op b=c>> 都算得对，最后一步就是 #### 后的答案
        notes = re.findall(r"<<([^=<>]+)=([^<>]+)>>", p.answer)
        assert notes
        for expr, val in notes:
            assert _calc(expr) == int(val), (expr, val)
        assert notes[-1][1] == p.gold
        assert p.answer.endswith(f"#### {p.gold}")


def test_synthetic_is_deterministic_and_seeded():
    assert synthetic_problems(50, seed=3) == synthetic_problems(50, seed=3)
    assert synthetic_problems(50, seed=3) != synthetic_problems(50, seed=4)
    assert synthetic_problems(50, seed=3, difficulty=1) != synthetic_problems(
        50, seed=3, difficulty=2
    )


def test_difficulty_knob_adds_steps():
    steps = {
        d: sum(p.answer.count("<<") for p in synthetic_problems(300, difficulty=d)) / 300
        for d in (1, 2, 3)
    }
    assert steps[1] == 1.0 and steps[1] < steps[2] < steps[3]


@pytest.mark.parametrize("bad", [dict(n=5, difficulty=4), dict(n=-1)])
def test_synthetic_bad_args(bad):
    with pytest.raises(DataError):
        synthetic_problems(**bad)


def test_split_is_disjoint_and_deterministic():
    problems = synthetic_problems(300, seed=1)
    train, held = split_train_heldout(problems, 50, seed=0)
    assert len(held) == 50 and not {p.question for p in held} & {p.question for p in train}
    assert split_train_heldout(problems, 50, seed=0) == (train, held)
    with pytest.raises(DataError):
        split_train_heldout(problems, 0)


def test_reference_completion_is_correct_and_formatted():
    from common.reward import correctness_reward, format_reward

    for p in synthetic_problems(100, seed=2, difficulty=3) + load_jsonl(
        FIXTURES / "gsm8k_sample.jsonl"
    ):
        c = reference_completion(p)
        assert "<<" not in c and "####" not in c
        assert correctness_reward(c, p.gold) == 1.0
        assert format_reward(c) == 1.0


@pytest.fixture(scope="module")
def qwen3_tok():
    return load_qwen3_tokenizer()


def test_qwen3_prompt_has_empty_think_block(qwen3_tok):
    prompt = build_prompt(qwen3_tok, "What is 2 + 3?")
    assert prompt.startswith("<|im_start|>user\nWhat is 2 + 3?\n" + INSTRUCTION + "<|im_end|>\n")
    # enable_thinking=False：模板自己补上空的 think 块，模型直接作答
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = build_prompt(qwen3_tok, "What is 2 + 3?", enable_thinking=True)
    assert thinking.endswith("<|im_start|>assistant\n")


def test_qwen3_eos_ids(qwen3_tok):
    assert qwen3_tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]) == list(QWEN3_EOS_IDS)
    # pad 与第二个 EOS 是同一个 token：所以 mask 绝不能从 pad 推出来（见 L2.02）
    assert qwen3_tok.pad_token_id == QWEN3_EOS_IDS[1]


def test_build_prompt_needs_chat_template():
    class NoTemplate:
        chat_template = None

    with pytest.raises(DataError, match="chat template"):
        build_prompt(NoTemplate(), "q")
