"""common.gsm8k.reward 在真实 GSM8K 文本上：8,792 条标准解答全部判对；与 OpenAI 给 GPT-3 解答标的 is_correct 对照。

- 标准解答：课程自带的 GSM8K（common/assets/gsm8k）每一行的 answer（带 <<…>> 计算注解，最后一行 `#### N`），
  用它自己的 gold 打分，必须全部是 1.0。
- GPT-3 解答：openai/grade-school-math @ 3101c7d5 的 grade_school_math/data/example_model_solutions.jsonl
  （tests/fixtures/ 里的 gzip 副本；MIT，许可证原文同 common/assets/gsm8k/LICENSE）。测试集 1,319 题 × 4 个模型（6B/175B，finetuning/verification），
  每条解答以 `A: <数>` 结尾，OpenAI 标了 is_correct。我们的 correctness_reward 与它逐条比较；
  不一致的每一条都必须列在 DISAGREEMENTS 里并写明原因（列出的若变成一致，测试也失败，名单保持诚实）。
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from common.gsm8k.data import load_gsm8k
from common.gsm8k.reward import correctness_reward, extract_answer

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k_example_model_solutions.jsonl.gz"
)
MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")

# (测试集行号, 模型) -> 我们与 is_correct 不一致的原因。实测（5,276 条）没有一条不一致，所以名单是空的。
DISAGREEMENTS: dict[tuple[int, str], str] = {}


@pytest.fixture(scope="module")
def solutions():
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_every_gold_solution_scores_one():
    problems = load_gsm8k("train") + load_gsm8k("test")
    assert len(problems) == 8792
    wrong = [
        (i, p.gold, extract_answer(p.answer))
        for i, p in enumerate(problems)
        if correctness_reward(p.answer, p.gold) != 1.0
    ]
    assert not wrong, f"{len(wrong)} 条标准解答没有判对（行号, gold, 读出的答案）：{wrong[:10]}"


def _gold(ground_truth: str) -> str:
    """ground_truth 是测试集的标准解答，但最后一行写成 `A: 18`（不是 `#### 18`）。"""
    assert "\nA:" in ground_truth, ground_truth[-80:]
    return ground_truth.rsplit("\nA:", 1)[1].strip()


def test_fixture_is_the_test_split(solutions):
    test = load_gsm8k("test")
    assert len(solutions) == len(test) == 1319
    for row, p in zip(solutions, test):
        assert row["question"].strip() == p.question
        assert correctness_reward(p.answer, _gold(row["ground_truth"])) == 1.0


def test_agreement_with_openai_is_correct(solutions):
    verdicts = {}  # (行号, 模型) -> (is_correct, 我们的判定)
    for i, row in enumerate(solutions):
        gold = _gold(row["ground_truth"])
        for model in MODELS:
            sol = row[model]
            verdicts[i, model] = (
                sol["is_correct"],
                correctness_reward(sol["solution"], gold) == 1.0,
            )
    labels = [label for label, _ in verdicts.values()]
    assert len(verdicts) == 5276 and 0 < sum(labels) < len(labels)  # 正确、错误的解答都有
    disagree = {key for key, (label, ours) in verdicts.items() if label != ours}
    new = sorted(disagree - set(DISAGREEMENTS))
    assert not new, f"{len(new)} 条与 OpenAI 的 is_correct 不一致且没有列出原因：{new[:10]}"
    healed = sorted(set(DISAGREEMENTS) - disagree)
    assert not healed, f"这些列出的不一致已经变成一致，从 DISAGREEMENTS 里删掉：{healed}"


def test_answer_is_read_from_the_a_line(solutions):
    """以 `A: <数>` 收尾的解答，读出的就是这一行的数（一致不是碰巧：不是前面某个算式的结果）。"""
    n = 0
    for row in solutions:
        for model in MODELS:
            text = row[model]["solution"]
            last = text.rstrip().rsplit("\n", 1)[-1]
            if last.startswith("A:"):
                n += 1
                assert extract_answer(text) == extract_answer(last[2:]), text[-200:]
    assert n == 5265  # 另外 11 条没写到 `A:`（被截断，或一串数字无限重复）
