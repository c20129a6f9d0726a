"""common.gsm8k.data：课程自带的 GSM8K、本地 jsonl、合成题生成器（答案重新计算核对）、prompt 渲染（真实 Qwen3 tokenizer）。"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import operator
import re
from pathlib import Path

import pytest

from common.gsm8k.data import (
    GSM8K_DIR,
    GSM8K_SPLITS,
    INSTRUCTION,
    DataError,
    Problem,
    build_prompt,
    load_gsm8k,
    load_jsonl,
    parse_gold,
    reference_completion,
    split_train_heldout,
    synthetic_problems,
)
from common.model.tokenizer import QWEN3_EOS_IDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# ---------------------------------------------------------------------------------------------
# 课程自带的 GSM8K（common/assets/gsm8k）
# ---------------------------------------------------------------------------------------------
# 解压后内容的 sha256，以及上游 git blob id（openai/grade-school-math @ 3101c7d5，`git ls-tree` 可查）。
# 这些值由 `git show 3101c7d5:grade_school_math/data/<split>.jsonl | sha256sum` 算出，不是从本仓库的文件抄的。
GSM8K_SHA256 = {
    "train": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    "test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
}
GSM8K_GIT_BLOB = {
    "train": "7d97154b91aef28d01c3301741c81ce90039a4b1",
    "test": "e4c2ff4942b9a78bd74f04141224c11e28d12dc9",
}


@pytest.fixture(scope="module")
def gsm8k():
    return {split: load_gsm8k(split) for split in GSM8K_SPLITS}


@pytest.mark.parametrize("split", ["train", "test"])
def test_shipped_gsm8k_is_the_upstream_file(split):
    raw = gzip.decompress((GSM8K_DIR / f"{split}.jsonl.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == GSM8K_SHA256[split]
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
    assert blob == GSM8K_GIT_BLOB[split]
    # 来源说明里写的 blob id 与文件一致；许可证原文随数据一起发
    assert blob in (GSM8K_DIR / "README.md").read_text(encoding="utf-8")
    assert "MIT License" in (GSM8K_DIR / "LICENSE").read_text(encoding="utf-8")
    assert raw.count(b"\n") == GSM8K_SPLITS[split]


def test_shipped_gsm8k_rows_and_golds(gsm8k):
    assert {s: len(rows) for s, rows in gsm8k.items()} == {"train": 7473, "test": 1319}
    for split, rows in gsm8k.items():
        for i, p in enumerate(rows):
            assert isinstance(p, Problem) and p.question and p.answer, (split, i)
            assert parse_gold(p.answer) == p.gold is not None, (split, i)
    # 第一题（hub 数据集页面上的第一行）：Natalia 卖发夹，答案 72
    assert gsm8k["train"][0].question.startswith("Natalia sold clips to 48 of her friends")
    assert gsm8k["train"][0].gold == "72"
    assert gsm8k["test"][0].question.startswith("Janet\u2019s ducks lay 16 eggs per day")
    assert gsm8k["test"][0].gold == "18"
    # 千分位和负数的 gold 也读成规范数
    golds = {p.gold for rows in gsm8k.values() for p in rows}
    assert {"109200000", "-7", "-47"} <= golds and not any("," in g for g in golds)


def test_shipped_gsm8k_limit_keeps_order(gsm8k):
    assert load_gsm8k("test", limit=5) == gsm8k["test"][:5]
    assert load_gsm8k("test", limit=0) == []
    assert load_gsm8k("test", limit=10**6) == gsm8k["test"]


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(split="validation"), "只有 train 和 test"),
        (dict(source="modelscope"), "shipped"),
        (dict(limit=-1), "limit"),
    ],
)
def test_load_gsm8k_bad_args(kwargs, needle):
    with pytest.raises(DataError, match=needle):
        load_gsm8k(**kwargs)


def test_load_gsm8k_missing_or_broken_shipped_file(tmp_path, monkeypatch):
    import common.gsm8k.data as D

    monkeypatch.setattr(D, "GSM8K_DIR", tmp_path)
    with pytest.raises(DataError, match="找不到课程自带的 GSM8K"):
        load_gsm8k("test")
    (tmp_path / "test.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="已损坏"):
        load_gsm8k("test")


@pytest.mark.slow  # 读两遍完整的 GSM8K：约 0.7 CPU 秒（默认一档留给快的测试，CI 的 slow 一档照样跑）
def test_load_gsm8k_from_hub_same_problems(gsm8k, monkeypatch):
    """source="hub" 走 datasets.load_dataset（这里换成内存里的同样几行：测试不联网）。"""
    import datasets

    rows = [dict(question=p.question, answer=p.answer) for p in gsm8k["test"][:7]]
    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert load_gsm8k("test", limit=3, source="hub") == gsm8k["test"][:3]
    assert calls == [("openai/gsm8k", "main", "test")]


def test_load_splits_gsm8k_is_shipped_and_hub_is_the_hub(gsm8k, monkeypatch):
    """训练脚本的 --data gsm8k 读自带的副本（不联网），--data hub 才去 hub；held-out = test 的前 n 道。"""
    import datasets

    from common.gsm8k.data import load_splits

    calls = []

    def fake_load_dataset(name, config, split):
        calls.append(split)
        return datasets.Dataset.from_list(
            [dict(question=p.question, answer=p.answer) for p in gsm8k[split][:9]]
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    train, held = load_splits("gsm8k", 5)
    assert (train, held) == (gsm8k["train"], gsm8k["test"][:5]) and calls == []
    train, held = load_splits("hub", 5)
    assert (train, held) == (gsm8k["train"][:9], gsm8k["test"][:5]) and calls == ["train", "test"]


def test_load_gsm8k_hub_unreachable_points_to_shipped(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        load_gsm8k("train", source="hub")
    msg = str(err.value)
    assert msg.startswith("无法从 Hugging Face 下载 openai/gsm8k") and "source='shipped'" in msg


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
    from common.gsm8k.reward import correctness_reward, format_reward

    for p in synthetic_problems(100, seed=2, difficulty=3) + load_jsonl(
        FIXTURES / "gsm8k_sample.jsonl"
    ):
        c = reference_completion(p)
        assert "<<" not in c and "####" not in c
        assert correctness_reward(c, p.gold) == 1.0
        assert format_reward(c) == 1.0


@pytest.fixture(scope="module")
def qwen3_tok(qwen3_tokenizer):
    return qwen3_tokenizer  # tests/conftest.py：整个会话共用一份


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


def test_a_template_the_sandbox_stops_is_a_data_error(qwen3_tok):
    """模板在渲染时才出错（沙箱拦下对 Python 内部的访问）：一句中文的 DataError，不是 jinja2 的 traceback。"""
    import copy

    tok = copy.copy(qwen3_tok)
    tok.chat_template = "{{ ''.__class__.__mro__ }}"
    with pytest.raises(DataError, match="chat template 渲染失败（SecurityError"):
        build_prompt(tok, "q")


# ---------------------------------------------------------------------------------------------
# gold 必须是一个普通的数；非 UTF-8、重复题、切完训练集为空：各有一句中文，指出文件和行
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tail, gold",
    [("72", "72"), ("1,234", "1234"), ("-3", "-3"), ("0.5", "0.5"), (" 109,200,000 ", "109200000"),
     ("1２", "12"), ("１２", "12"), ("-１,２３４.５", "-1234.5")],  # 全角数字（以前 1２ 读成 1）
)  # fmt: skip
def test_plain_golds_parse(tail, gold):
    assert parse_gold(f"2 + 2 = 4\n#### {tail}") == gold


@pytest.mark.parametrize(
    "tail", ["1e309", "1,2345", "12 - 5", "5/0", "72 dollars", "", "$5", "--3", "١٢", "1٢"]
)
def test_anything_else_after_the_marks_is_not_a_gold(tail, tmp_path):
    """以前：1e309 -> 1，1,2345 -> 2345，12 - 5 -> 5，5/0 -> 0，一声不吭地读成了别的数。"""
    assert parse_gold(f"work\n#### {tail}") is None
    path = tmp_path / "d.jsonl"
    rows = [{"question": "q1", "answer": "#### 4"}, {"question": "q2", "answer": f"x\n#### {tail}"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match="第 2 行：`####` 后面的 .* 不是一个数"):
        load_jsonl(path)


def test_a_gold_longer_than_the_limit_names_the_limit(tmp_path):
    """以前：150 位的 gold 被拒，却没说上限是多少。"""
    from common.gsm8k.reward import MAX_NUMBER_DIGITS

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### " + "7" * 150}) + "\n")
    with pytest.raises(DataError, match=f"第 1 行.*150 位数字.*上限 {MAX_NUMBER_DIGITS} 位"):
        load_jsonl(path)


def test_non_utf8_file_names_the_file_line_and_encoding(tmp_path):
    path = tmp_path / "gbk.jsonl"
    good = json.dumps({"question": "q", "answer": "#### 1"}).encode() + b"\n"
    path.write_bytes(
        good
        + json.dumps({"question": "小明", "answer": "#### 2"}, ensure_ascii=False).encode("gbk")
    )
    with pytest.raises(DataError) as err:
        load_jsonl(path)
    msg = str(err.value)
    assert str(path) in msg and "第 2 行" in msg and "不是 UTF-8" in msg


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"question": "q", "answer": "#### 1"}).encode())
    assert [p.gold for p in load_jsonl(path)] == ["1"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_duplicates_are_removed_before_the_split_with_a_count(tmp_path, capsys):
    from common.gsm8k.data import load_splits

    rows = [{"question": f"q{i % 30}", "answer": f"#### {i % 30}"} for i in range(60)]
    train, held = load_splits(str(_jsonl(tmp_path / "d.jsonl", rows)), 10)
    assert "去掉了 30 道重复的题" in capsys.readouterr().out
    assert len(held) == 10 and len(train) == 20
    assert not {p.question for p in train} & {p.question for p in held}


def test_a_step_cannot_draw_more_problems_than_the_train_split_has(tmp_path):
    """issue 35：P 比训练题多时 randperm(len(train))[:P] 悄悄少抽；现在加载数据时（建运行目录之前）拒绝。"""
    from common.gsm8k.data import load_splits

    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(30)]
    path = _jsonl(tmp_path / "d.jsonl", rows)
    assert len(load_splits(str(path), 10, per_step=20)[0]) == 20
    with pytest.raises(DataError, match="只剩 20 道训练题，每步却要抽 --prompts-per-step 21 道"):
        load_splits(str(path), 10, per_step=21)


def test_gsm8k_held_out_cannot_ask_for_more_than_the_test_split():
    """issue 35 以前：--n-heldout 5000 悄悄只用 GSM8K test 的 1319 道（train_trl.py 也读这里）。"""
    from common.gsm8k.data import load_splits

    with pytest.raises(DataError, match="--n-heldout 5000 超过了 GSM8K test 的 1319 道题"):
        load_splits("gsm8k", 5000)


def test_forty_identical_rows_are_a_data_error_not_an_empty_train_split(tmp_path):
    """以前：40 道一样的题全进了 held-out，训练集为空，最后是 `ValueError: prompt_ids 是空的` 的 traceback。"""
    from common.gsm8k.data import load_splits

    path = _jsonl(tmp_path / "same.jsonl", [{"question": "q", "answer": "#### 1"}] * 40)
    with pytest.raises(DataError, match=f"{path}：去重后只有 1 道不同的题"):
        load_splits(str(path), 20)


def test_same_question_with_two_golds_names_both_lines(tmp_path):
    rows = [{"question": "q", "answer": "#### 1"}, {"question": "r", "answer": "#### 2"}]
    path = _jsonl(tmp_path / "c.jsonl", [*rows, {"question": "q", "answer": "#### 7"}])
    with pytest.raises(DataError, match="第 1 行和第 3 行是同一道题.*1 和 7"):
        load_jsonl(path)


def test_synthetic_pool_keeps_its_repeats():
    """合成题池不去重：课程里的默认运行和它们的数字就是用这个池子跑出来的；held-out 仍不进训练集。"""
    from common.gsm8k.data import SYNTHETIC_SEED, load_splits

    train, held = load_splits("synthetic", 50, n_train=600, difficulty=2)
    pool = synthetic_problems(600, seed=SYNTHETIC_SEED, difficulty=2)
    assert (train, held) == split_train_heldout(pool, 50)
    assert len({p.question for p in train}) < len(train), "这个池子本来就有重复的题"
    assert not {p.question for p in train} & {p.question for p in held}
