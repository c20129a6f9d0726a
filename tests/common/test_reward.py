"""common.gsm8k.reward：答案抽取、精确判对、格式 reward。

- READING：人读这段输出会说"最终答案是几"——期望值是按人的读法逐条手写的（规格），不是把函数输出抄过来。
- DESIGN：模块文档里写明的取舍（表达式不求值、混合分数不读……），人可能有别的读法，这里钉住我们的选择。
- hypothesis：任意文本不抛异常、reward 只取 {0, 1}、大整数精确比较、规范串可回读、快速路径等于朴素逐个读数。
- 1 MB 对抗输入：每次调用 < 1 s（宽松的上限，只为抓灾难性回溯；实际耗时见 tests/common/bench_reward.py）。
- 与 math-verify 0.9.0 对照：只在两者都适用的 \\boxed{数} 上要求判定一致；排除的情况及原因见 MATH_VERIFY_EXCLUDED。
"""

from __future__ import annotations

import re
import time
from fractions import Fraction

import pytest
from bench_reward import adversarial_inputs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from common.gsm8k import reward
from common.gsm8k.reward import (
    REWARD_FUNCS,
    correctness_reward,
    extract_answer,
    format_reward,
    get_reward_fn,
)

# (输出, 人读出的最终答案, gold, 是否答对)
READING = [
    # --- \boxed{}：课程要求的格式 ---
    (
        "Natalia sold 48/2 = 24 clips in May.\nAltogether she sold 48 + 24 = 72 clips.\nThe answer is \\boxed{72}.",
        "72",
        "72",
        1,
    ),
    (
        "Weng earns 12/60 = $0.2 per minute.\nFor 50 minutes she earned 0.2 * 50 = $10.\n\\boxed{10}",
        "10",
        "10",
        1,
    ),
    (
        "The house costs 80,000 + 50,000 = 130,000 dollars in total.\n\\boxed{130,000}",
        "130000",
        "130000",
        1,
    ),
    ("The total is 1,200 + 34 = 1,234.\n\\[\n\\boxed{1{,}234}\n\\]", "1234", "1,234", 1),
    ("She pays 3 * $6 = $18.\nSo the answer is $\\boxed{\\$18}$.", "18", "18", 1),
    ("Each week he saves 3 * 6 = 18 dollars.\n\\boxed{18 \\text{ dollars}}", "18", "18", 1),
    ("\\boxed{\\text{18 dollars}}", "18", "18", 1),
    ("The ribbon is 48 / 4 = 12 cm long, so $\\boxed{12\\text{ cm}}$.", "12", "12", 1),
    ("The price per pound is 10 / 4 = 2.50 dollars.\n\\boxed{2.50}", "2.5", "2.5", 1),
    ("Total cost: 2 * 2.50 = 5.00\n\\boxed{5.00}", "5", "5", 1),
    ("She drinks 3/4 of a cup each day.\n\\boxed{\\frac{3}{4}}", "0.75", "0.75", 1),
    ("Each of the 2 friends gets 7/2 pizzas.\n\\boxed{\\dfrac{7}{2}}", "3.5", "3.5", 1),
    ("Each gets one third of the cake: \\boxed{\\frac{1}{3}}", "1/3", "0.33", 0),
    (
        "The temperature went from 5 to -3 degrees, a change of -3 - 5 = -8.\n\\boxed{-8}",
        "-8",
        "-8",
        1,
    ),
    ("The change is \\boxed{−8} degrees.", "-8", "-8", 1),
    ("Let x be the number of apples. Then 3x = 45, so\n\\boxed{x = 15}", "15", "15", 1),
    ("Adding them up: \\boxed{3 + 4 = 7}", "7", "7", 1),
    ("First day: \\boxed{12} eggs. Over a week: 12 * 7 = 84.\n\\boxed{84}", "84", "84", 1),
    (
        "So the answer is \\boxed{84}.\n\nI hope this helps! Let me know if you have other questions.",
        "84",
        "84",
        1,
    ),
    (
        "Total: 16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars. \\boxed{18}. Double check: 9 * 2 = 18, so \\boxed{",
        "18",
        "18",
        1,
    ),
    ("He ran 3 * 60 = 180 meters... \\boxed{170}", "170", "180", 0),
    ("The total is \\boxed{1,234}", "1234", "1243", 0),
    ("The final score is \\boxed{7.0}", "7", "7", 1),
    ("She spent 40% of her money: \\boxed{40\\%}", "40", "40", 1),
    ("So the total is \\boxed{\\text{Total} = 54}", "54", "54", 1),
    ("\\boxed{\\$1{,}000.00}", "1000", "1000", 1),
    ("The town has \\boxed{1\\,000} people.", "1000", "1000", 1),
    ("\\boxed{3 \\text{ and } 4}", None, "4", 0),  # 两个数，没有唯一答案
    ("The day is \\boxed{\\text{Tuesday}}", None, "2", 0),
    ("\\boxed{}", None, "0", 0),
    (
        "\\boxed{99999999999999999999999998}",
        "99999999999999999999999998",
        "99999999999999999999999999",
        0,
    ),
    (
        "\\boxed{99999999999999999999999999}",
        "99999999999999999999999999",
        "99,999,999,999,999,999,999,999,999",
        1,
    ),
    # --- GSM8K 的 #### ---
    ("48 / 2 = 24\n48 + 24 = 72\n#### 72", "72", "72", 1),
    ("The total is 1,234.50 dollars.\n#### $1,234.50", "1234.5", "1234.5", 1),
    ("#### 1,000", "1000", "1000", 1),
    ("He pays 6 * 3 = 18 dollars.\n#### 18 dollars", "18", "18", 1),
    ("She ends with 5 - 8 = -3 apples owed.\n#### -3", "-3", "-3", 1),
    ("#### 72\n\nNote: this is problem 5 of the set.", "72", "72", 1),
    (
        "#### 70\nWait, I made a mistake. 48 + 24 = 72.\n\\boxed{72}",
        "72",
        "72",
        1,
    ),  # 最后一个标记说了算：后面的 \boxed
    ("The answer is 5.\n#### 6", "6", "6", 1),  # 后面的 ####
    ("\\boxed{70} is wrong. 48 + 24 = 72.\n#### 72", "72", "72", 1),  # 过时的盒子不算数
    ("The answer is \\boxed{70}. Wait: 48 + 24 = 72, so the answer is 72.", "72", "72", 1),
    # markdown 小标题不是 #### 答案行：退到最后一个数
    (
        "#### Step 1: Find the eggs\nShe has 16 - 3 = 13 eggs.\n#### Step 2: Sell them\n13 * 2 = 26 dollars.",
        "26",
        "26",
        1,
    ),
    (
        "#### 1. Eggs per day\n16 - 3 - 4 = 9\n#### 2. Money\n9 * 2 = 18\nShe makes $18 every day.",
        "18",
        "18",
        1,
    ),
    # --- "answer is / Answer:" ---
    ("Janet makes 9 * 2 = 18 dollars.\nThe answer is 18.", "18", "18", 1),
    ("So she needs 4 more boxes.\nThe final answer is: **4**", "4", "4", 1),
    ("**Answer:** $18", "18", "18", 1),
    ("**Final Answer**: 1,234", "1234", "1234", 1),
    ("Therefore the cost is 5 * 2 = 10, so the answer is $10$.", "10", "10", 1),
    ("The answer is 12 - 5 = 7.", "7", "7", 1),  # "answer is" 后面是算式：取算式结果
    ("所以她每天赚 9 * 2 = 18 美元。答案是 18。", "18", "18", 1),
    ("Therefore, the answer is -3.", "-3", "-3", 1),
    ("Each bottle holds 1.5 liters, so the answer is 0.5 liters.", "0.5", "0.5", 1),
    ("So the answer is 3/4 of a cup.", "0.75", "0.75", 1),
    ("The answer is \\(\\frac{5}{2}\\).", "2.5", "2.5", 1),
    ("Answer = 17", "17", "17", 1),
    ("The answer would be 20 dollars.", "20", "19", 0),
    # --- 没有标记：最后一个数 ---
    ("She has 5 apples. She buys 3 more. Now she has 8 apples.", "8", "8", 1),
    ("He pays $1,250.00 in total.", "1250", "1250", 1),
    ("The discount is 25%.", "25", "25", 1),
    ("It takes 2.5 hours.", "2.5", "2.5", 1),
    ("The rope is 12 cm long.", "12", "12", 1),
    ("The total is 1,234,567.", "1234567", "1234567", 1),
    ("The balance is -45 dollars.", "-45", "-45", 1),
    ("The balance is −45.", "-45", "-45", 1),
    ("It took 10-15 minutes.", "15", "15", 1),  # "-" 在两个数之间是连字符，不是负号
    ("The numbers are 1,2,3", "3", "3", 1),
    ("The change is +5.", "5", "5", 1),
    ("Her net change is -$5.", "-5", "-5", 1),
    ("Each pencil costs .75 dollars.", "0.75", "0.75", 1),
    ("Total = 5.0.", "5", "5", 1),
    ("She needs 18 eggs for recipe B2.", "18", "18", 1),  # "B2" 是编号，不是数
    ("The town has 1\u2009234\u2009567 people.", "1234567", "1234567", 1),  # 细空格分组
    ("It costs 1\u00a0000 dollars.", "1000", "1000", 1),
    ("所以一共是 36 个苹果", "36", "36", 1),
    ("I cannot solve this problem.", None, "5", 0),
    ("", None, "5", 0),
    # --- <think> ---
    ("<think>\nLet me compute 6 * 7 = 42.\n</think>\n\nThe answer is \\boxed{42}.", "42", "42", 1),
    ("<think>The answer is 41.</think>\nSo the total is 42.", "42", "42", 1),
    ("<think>\\boxed{41}</think>\nFinal: 42", "42", "42", 1),
    (
        "<think>\n\n</think>\n\nShe sells 16 - 3 - 4 = 9 eggs for 9 * 2 = 18 dollars.\n\\boxed{18}",
        "18",
        "18",
        1,
    ),
    (
        "<think>\nOkay, so 16 - 3 = 13 and then 13 * 2 = 26",
        None,
        "26",
        0,
    ),  # 一直没想完：没有给出答案
]

# 模块文档里写明的取舍（人也许会有别的读法）
DESIGN = [
    ("\\boxed{3+4}", None),  # 盒子里的表达式不求值（从不 eval）
    ("\\boxed{2\\frac{1}{2}}", None),  # 带分数不读
    ("\\boxed{2\\pi}", None),  # 不认识的 LaTeX 命令
    ("The total is 1 234.", "234"),  # 普通空格在正文里不算千分位（"3 500 ml" 有歧义）
    ("\\boxed{1 234}", "1234"),  # 整个盒子只有这一个数时才算
    ("#### 1 234", "1234"),
    ("\\boxed{1/3}", "1/3"),  # 不能有限小数的分数写成最简 p/q
    ("\\boxed{\\frac{2}{6}}", "1/3"),
    ("\\boxed{\\frac{5}{0}}", None),
    ("\\boxed{50\\%}", "50"),  # 去掉 %，不除以 100（GSM8K 的 gold 是裸数）
    ("1e-5", "5"),  # 不读科学计数法
    ("twelve", None),  # 不读英文数词
    ("x5", None),  # 数字粘在字母后面不算数
    ("1" * 101, None),  # 超过 100 位的数不是答案
    ("The numbers are " + "1," * 200 + "1", None),  # 超过 120 个字符的数字/分隔符串不读
    ("So \\boxed{5}. Let me write it again: \\boxed{", "5"),  # 未闭合（被截断）的盒子跳过，用前一个
    ("\\boxed{\\boxed{5}}", "5"),
    ("The answer is 5.\nLet me verify the answer.", "5"),  # 后面的 "the answer." 不是答案短语
    ("-0", "0"),
    ("-$-5", "5"),
    ("007", "7"),
]

# "answer is" 后面的数若紧跟运算（ASCII 的 x/X、times、plus/minus、multiplied by/divided by，后面再跟一个数），
# 那是算式的开头，不是答案：退到下一条规则（通常是算式的结果）。后面不跟数时，x/times 只是普通的词。
OPERATOR_AFTER_PHRASE = [
    ("The answer is 4 x 5 = 20.", "20"),
    ("The answer is 4 X 5 = 20.", "20"),
    ("The answer is 4x5 = 20.", "20"),
    ("So the answer is 3 times 4 = 12", "12"),
    ("The answer is 2 x $5 = $10.", "10"),
    ("The answer is 2 times -3 = -6.", "-6"),
    ("The answer is 12 minus 5 = 7 apples.", "7"),
    ("The answer is 6 divided by 2 = 3.", "3"),
    ("The answer is 4 multiplied by 5 = 20.", "20"),
    ("The answer is 3 x .5 = 1.5 liters.", "1.5"),
    ("She sold 3 times as many. The answer is 3 times.", "3"),
    ("The answer is 7 X-rays.", "7"),
    ("Answer: 5 x", "5"),
]


# 对冲（hedge）：答案行里写了不止一个不同的数，就是没有给出答案，判 None（reward 0）。
# 在 RL 里，对冲一旦能拿分，策略就会学着把候选都列出来（L2.08「reward 要防对冲」）。
HEDGES = [
    "#### 12 or 13",
    "The answer is 12 or 13.",
    "The answer is either 12 or 13",
    "Answer: 12, 13",
    "#### 12 (or 13)",
    "**Answer:** 12 dollars or 13 dollars",
    "The answer is 12-13 apples.",
    "答案是 12 或 13。",
    "\\boxed{12 \\text{ or } 13}",
    "\\boxed{12, 13}",
    "The answer is 12 or 13.\n#### 12 or 13",
    "\\boxed{12} Hmm, or maybe the answer is 12 or 13.",  # 最后一个标记是对冲：前面的盒子也救不回来
    # 答案行后面接着解释、又带了别的数：同样不算一个承诺（人也许读得出 10；我们宁可不付钱）
    "The answer is 10 apples, which is 2 more than 8.",
    "The answer is: Janet has 7 apples and 3 pears",
    "The answer is 4 xylophones and 2 drums.",
    "#### 4/5 6\nSo she has 12 apples.",  # 后面没有标记的数改不了一个对冲的 #### 行
]


@pytest.mark.parametrize("text", HEDGES)
def test_a_hedge_never_pays(text):
    assert extract_answer(text) is None
    for gold in ("12", "13", "10", "7", "3", "4", "2"):
        assert correctness_reward(text, gold) == 0.0


# 不是对冲：同一个数说了几遍、算式只取结果、单位里的 ^2、没有标记时的最后一个数
NOT_HEDGES = [
    ("The answer is 12 (12 apples).", "12"),
    ("The answer is 12 cm^2.", "12"),
    ("#### 9 * 2 = 18", "18"),
    ("The answer is 12. Then she buys 13 more pens for the next class.", "12"),  # 句号后是下一句
    ("\\boxed{12}, so she has 12 apples.", "12"),
    ("First \\boxed{12}, then 12 * 6 = \\boxed{72}", "72"),  # 几个盒子：最后一个说了算
    ("She could have 12 or 13. She has 13.", "13"),  # 没有标记：最后一个数
    ("#### 72\n\n#### Explanation of step 5", "72"),  # 后面的小标题不是答案行
]


@pytest.mark.parametrize("text,expected", NOT_HEDGES)
def test_not_a_hedge(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text,expected", OPERATOR_AFTER_PHRASE)
def test_operator_after_answer_phrase(text, expected):
    assert extract_answer(text) == expected


# extract_answer 之外，format_reward 的规格：(输出, format_reward)
FORMAT = [
    ("The answer is \\boxed{72}.", 1.0),
    ("48 + 24 = 72\n\\[\n\\boxed{72}\n\\]", 1.0),
    ("So she earns $\\boxed{18}$ dollars per week.", 1.0),
    ("\\boxed{72}", 1.0),  # 没有推理也满足格式：这正是只奖励格式会被 hack 的原因
    ("The answer is \\boxed{70}.", 1.0),  # 答错也满足格式
    ("\\boxed{72 \\text{ dollars}}", 1.0),
    ("\\boxed{\\frac{3}{4}}", 1.0),
    (
        "The answer is \\boxed{72}.\n\n**Final Answer**\n\\[\\boxed{72}\\]",
        1.0,
    ),  # 同一个答案框了两次
    ("<think>\n6 * 12 = 72\n</think>\n\n\\boxed{72}", 1.0),
    ("The answer is 72.", 0.0),
    ("#### 72", 0.0),
    ("First \\boxed{12}, then 12 * 6 = \\boxed{72}", 0.0),  # 框了中间结果
    (
        "\\boxed{72}\n\nLet me double check this: 8 * 9 = 72, and 70 + 2 = 72. Yes.",
        0.0,
    ),  # 框后还有长文
    ("\\boxed{3+4}", 0.0),
    ("\\boxed{}", 0.0),
    ("\\boxed{x}", 0.0),
    ("The answer is \\boxed{7", 0.0),  # 截断
    ("\\boxed{5} and then \\boxed{", 0.0),
    ("\\boxed{72}" * 5, 0.0),  # 超过 4 个盒子
    ("<think>\\boxed{72}", 0.0),
    ("<think>\\boxed{72}</think> The answer is 72.", 0.0),  # 盒子只在思考里
    ("", 0.0),
]


@pytest.mark.parametrize("text,expected,gold,right", READING)
def test_reading(text, expected, gold, right):
    assert extract_answer(text) == expected
    assert correctness_reward(text, gold) == float(right)


def test_reading_table_is_big_and_varied():
    assert len(READING) >= 60
    assert {right for *_, right in READING} == {0, 1}
    assert any(e is None for _, e, _, _ in READING)


@pytest.mark.parametrize("text,expected", DESIGN)
def test_design_decisions(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text,expected", FORMAT)
def test_format_reward(text, expected):
    assert format_reward(text) == expected


def test_correctness_never_depends_on_format():
    for text in (
        "The answer is 72.",
        "#### 72",
        "\\boxed{72}",
        "First \\boxed{12}, then 12 * 6 = \\boxed{72}",
    ):
        assert correctness_reward(text, "72") == 1.0


@pytest.mark.parametrize(
    "gold,value",
    [("72", 72), (" 1,234 ", 1234), ("-5", -5), ("2.50", Fraction(5, 2)), ("$18", 18), ("1 000", 1000),
     ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", 72)],
)  # fmt: skip
def test_gold_is_normalised_like_answers(gold, value):
    assert correctness_reward(f"\\boxed{{{value}}}", gold) == 1.0
    assert correctness_reward(f"\\boxed{{{value + 1}}}", gold) == 0.0


@pytest.mark.parametrize("gold", ["", "abc", "3 and 4", "1/0", "#### Step 3"])
def test_bad_gold_is_a_clear_error(gold):
    with pytest.raises(ValueError, match="gold"):
        correctness_reward("\\boxed{3}", gold)


def test_reward_funcs():
    assert set(REWARD_FUNCS) == {"correctness", "format_only", "correctness_plus_format"}
    cases = {  # (正确, 格式) -> 各 reward 的值
        ("\\boxed{72}", "72"): (1.0, 1.0, 1.1),
        ("The answer is 72.", "72"): (1.0, 0.0, 1.0),
        ("\\boxed{70}", "72"): (0.0, 1.0, 0.1),
        ("no idea", "72"): (0.0, 0.0, 0.0),
    }
    for (text, gold), want in cases.items():
        got = tuple(
            get_reward_fn(n)(text, gold)
            for n in ("correctness", "format_only", "correctness_plus_format")
        )
        assert got == pytest.approx(want)


def test_get_reward_fn_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        get_reward_fn("corectness")
    assert all(name in str(err.value) for name in REWARD_FUNCS)


def test_non_string_completion_is_a_clear_error():
    with pytest.raises(TypeError, match="str"):
        extract_answer(None)


# ---------------------------------------------------------------------------------------------
# hypothesis
# ---------------------------------------------------------------------------------------------
PIECES = ["\\boxed{", "}", "{", "####", " ", "\n", "answer is ", "Answer:", "答案是", "<think>", "</think>", "$", "\\$",
          ",", ".", "-", "−", "+", "/", "=", "%", "\\frac", "\\text{", "**", "x", "1", "23", "456", "0", "7,890", "\u2009",
          "dollars", "\\,", "{,}", "1/0", "9" * 30]  # fmt: skip
markup_text = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
any_text = st.one_of(st.text(max_size=200), markup_text)
# extract_answer 返回的规范串："12"、"-2.5"、"1/3"（见 common/gsm8k/reward.py 模块文档）
CANONICAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?|-?[1-9][0-9]*/[1-9][0-9]*")


@settings(max_examples=150, deadline=None)
@given(any_text, st.sampled_from(["72", "-5", "2.5", "1,234", "0"]))
def test_never_raises_and_rewards_are_binary(text, gold):
    answer = extract_answer(text)
    assert answer is None or CANONICAL.fullmatch(answer), answer
    assert correctness_reward(text, gold) in (0.0, 1.0)
    assert format_reward(text) in (0.0, 1.0)
    assert REWARD_FUNCS["correctness_plus_format"](text, gold) in (0.0, 0.1, 1.0, 1.1)


# 一定读得出答案的文本（生成，不过滤）：可选的任意前缀 + "</think>"（前缀被略过），再接不含 \boxed{、<think>
# 的标记碎片，最后一行按课程四条规则之一写出一个数（盒子、####、答案短语、句中最后一个数）。
SAFE_PIECES = [p for p in PIECES if p not in ("\\boxed{", "<think>")]
ENDINGS = ["\\boxed{{{}}}", "$\\boxed{{{}}}$.", "#### {}", "The answer is {}.", "**Answer:** {}", "答案是 {}",
           "So she has {} apples."]  # fmt: skip


@st.composite
def written_numbers(draw):
    """一个数的各种写法：符号、货币、千分位、小数（含多余的 0）、分数、\\frac。"""
    n = draw(st.integers(0, 10**12))
    den = draw(st.one_of(st.none(), st.integers(1, 999)))
    if den is None:
        whole = f"{n:,}" if draw(st.booleans()) else str(n)
        body = whole + draw(st.from_regex(r"(\.[0-9]{1,4})?", fullmatch=True))
    else:
        body = draw(st.sampled_from([f"{n}/{den}", f"\\frac{{{n}}}{{{den}}}"]))
    sign = draw(st.sampled_from(["", "-", "−", "+"]))
    return sign + draw(st.sampled_from(["", "$", "\\$"])) + body


MARKER_PIECES = ("####", "answer is ", "Answer:", "答案是")
# 结尾没有答案标记（最后一个数）时，中间不能出现标记：「最后一个标记说了算」，中间的一个对冲标记会让它读不出来
UNMARKED_PIECES = [p for p in SAFE_PIECES if p not in MARKER_PIECES]


def _answerable(ending: str):
    pieces = SAFE_PIECES if ending != ENDINGS[-1] else UNMARKED_PIECES
    return st.builds(
        lambda prefix, middle, number: prefix + middle + "\n" + ending.format(number),
        st.one_of(st.just(""), any_text.map(lambda t: t + "</think>")),
        st.lists(st.sampled_from(pieces), max_size=30).map("".join),
        written_numbers(),
    )


answerable_text = st.sampled_from(ENDINGS).flatmap(_answerable)


@settings(max_examples=150, deadline=None)
@given(answerable_text)
@example("#### Step 1\nSo she has 12 apples.")  # 小标题不是标记：读最后一个数
def test_canonical_answers_read_back_as_themselves(text):
    answer = extract_answer(text)
    assert answer is not None, text
    assert CANONICAL.fullmatch(answer), answer
    assert extract_answer(f"\\boxed{{{answer}}}") == answer
    assert extract_answer(f"The answer is {answer}") == answer


big_int = st.integers(-(10**40), 10**40)


@settings(max_examples=100, deadline=None)
@given(
    big_int,
    big_int,
    st.sampled_from(["{:d}", "{:,d}", "\\${:,d}", "{:d}.00", "{:d} \\text{{ apples}}"]),
)
def test_exact_comparison_of_big_numbers(a, b, fmt):
    text = "\\boxed{" + fmt.format(a) + "}"
    assert correctness_reward(text, str(b)) == (1.0 if a == b else 0.0)
    assert correctness_reward(text, str(a)) == 1.0
    assert correctness_reward(text, str(a + 1)) == 0.0


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 10**9),
    st.sampled_from(["\\boxed{{{}}}", "#### {}", "The answer is {}.", "So she has {} left."]),
)
def test_separators_round_trip(n, template):
    for written in (f"{n}", f"{n:,}", f"${n:,}", f"{n:,}.00"):
        assert extract_answer("Step 1: 3 + 4 = 7.\n" + template.format(written)) == str(n)


# 朴素读法：从左到右切出所有数，取最后一个（不设任何上限）。快速路径（从右往左找）必须与它一致。
# 输入直接生成成「至多 MAX_GLUED_RUNS 段数字」（不用 assume 过滤）：数字段之间夹不含数字的碎片。
@st.composite
def few_digit_runs(draw):
    runs = draw(
        st.lists(st.text("0123456789", min_size=1, max_size=4), max_size=reward.MAX_GLUED_RUNS)
    )
    gaps = [draw(st.text(",.-+−$ xa\u2009\u00a0\\()中", max_size=8)) for _ in range(len(runs) + 1)]
    return gaps[0] + "".join(run + gap for run, gap in zip(runs, gaps[1:]))


@settings(max_examples=200, deadline=None)
@given(few_digit_runs())
def test_last_number_fast_path_equals_naive_left_to_right(text):
    assert len(re.findall(r"[0-9]+", text)) <= reward.MAX_GLUED_RUNS
    tokens = list(reward._NUMBER_TEXT.finditer(text))
    naive = reward._canonical(tokens[-1]) if tokens else None
    assert extract_answer(text) == naive


# ---------------------------------------------------------------------------------------------
# 1 MB 对抗输入：每次调用 < 1 s。灾难性回溯会用掉几秒到几分钟；实测耗时见 bench_reward.py
# ---------------------------------------------------------------------------------------------
def _assert_fast(text):
    for fn in (extract_answer, format_reward, lambda t: correctness_reward(t, "7")):
        t0 = time.perf_counter()
        fn(text)
        assert time.perf_counter() - t0 < 1.0, (
            f"{len(text)} 字符的输入用了超过 1 s：有回溯或二次方的扫描"
        )


@pytest.fixture(scope="module")
def adversarial():
    return adversarial_inputs()


@pytest.mark.parametrize("name", list(adversarial_inputs()))
def test_adversarial_1mb_inputs_are_fast(adversarial, name):
    _assert_fast(adversarial[name])


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join))
def test_random_repeated_1mb_inputs_are_fast(unit):
    _assert_fast(unit * (1_000_000 // len(unit)))


# ---------------------------------------------------------------------------------------------
# 与 math-verify 0.9.0 对照
# ---------------------------------------------------------------------------------------------
# 两者都适用：答案是 \boxed{} 里的一个数（含千分位逗号、{,}、\$、\text{单位}、\frac、负号、多余的 0）。
# 不要求一致（排除）的情况，及原因：
MATH_VERIFY_EXCLUDED = [
    # (输出, gold, 我们的判定, 原因)
    (
        "\\boxed{70}. Wait, 48 + 24 = 72.\n#### 72",
        "72",
        1.0,
        "最后一个标记说了算；math-verify 总是先取盒子",
    ),
    (
        "\\boxed{12}\n\\boxed{13}",
        "13",
        1.0,
        "几个盒子只取最后一个；math-verify 把它们当成集合 {12, 13}",
    ),
    ("\\boxed{\\text{18 dollars}}", "18", 1.0, "math-verify 把整段 \\text 当成符号 18dollars"),
    ("\\boxed{1\\,234}", "1234", 1.0, "math-verify 把 \\, 分组读成 1+234=235"),
    ("\\boxed{1 234}", "1234", 1.0, "同上：空格分组"),
    ("\\boxed{50\\%}", "0.5", 0.0, "math-verify 认为 50% = 0.5；GSM8K 的 gold 是裸数，我们只认 50"),
    ("\\boxed{3+4}", "7", 0.0, "math-verify 用 sympy 化简表达式；我们从不求值"),
    (
        "<think>\\boxed{4}</think> \\boxed{5}",
        "5",
        1.0,
        "math-verify 不认 <think>，把两个盒子当成集合 {4, 5}",
    ),
    ("\\boxed{\\frac{1}{3}}", "0.333333", 0.0, "math-verify 按 6 位小数近似比较；我们精确比较"),
]


@pytest.fixture(scope="module")
def math_verify():
    import math_verify  # dev 依赖里锁定的版本：装坏了要报错，不能悄悄跳过

    return math_verify


def _mv_verdict(mv, text, gold):
    return 1.0 if mv.verify(mv.parse(gold), mv.parse(text)) else 0.0


@pytest.mark.parametrize("text,gold,ours,why", MATH_VERIFY_EXCLUDED)
def test_math_verify_exclusions_are_real(math_verify, text, gold, ours, why):
    # 钉住我们的判定，也确认 math-verify 在这里确实不同（否则这条不必排除）
    assert correctness_reward(text, gold) == ours
    assert _mv_verdict(math_verify, text, gold) != ours, why


def _decimal(v: Fraction) -> str:
    """分母整除 100 的数写成最多两位小数，如 Fraction(-5, 2) -> "-2.5"。"""
    cents = abs(int(v * 100))
    return ("-" if v < 0 else "") + f"{cents // 100}.{cents % 100:02d}".rstrip("0").rstrip(".")


INT_FORMS = [
    str, "{:,}".format, "\\${:,}".format, "{}.00".format, "{} \\text{{ dollars}}".format, "{}\\text{{ cm}}".format,
    lambda n: f"{n:,}".replace(",", "{,}"), "x = {}".format, "\\textbf{{{}}}".format, "{}^\\circ".format,
]  # fmt: skip
DECIMAL_FORMS = [str, "\\${}".format, "{}0".format, "{} \\text{{ kg}}".format, "x = {}".format]


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.integers(-(10**7), 10**7).map(Fraction),
        st.integers(-(10**6), 10**6).map(lambda k: Fraction(k, 100)),
    ),
    st.integers(0, 9),
    st.sampled_from([0, 0, 1, -1, Fraction(1, 100), 1000]),
)
def test_agrees_with_math_verify_on_boxed_numbers(math_verify, value, form_index, delta):
    if value.denominator == 1:
        written = INT_FORMS[form_index](int(value))
    else:
        written = DECIMAL_FORMS[form_index % len(DECIMAL_FORMS)](_decimal(value))
    text = f"Step by step: 3 + 4 = 7. The answer is $\\boxed{{{written}}}$."
    gold = _decimal(value + delta)
    assert correctness_reward(text, gold) == _mv_verdict(math_verify, text, gold), (text, gold)


@pytest.mark.parametrize(
    "text,gold",
    [("\\boxed{-\\frac{3}{4}}", "-0.75"), ("\\boxed{\\dfrac{7}{2}}", "3.5"), ("\\boxed{\\frac12}", "0.5"),
     ("\\boxed{−5}", "-5"), ("\\boxed{+5}", "5"), ("\\boxed{99999999999999999999999998}", "99999999999999999999999999"),
     ("\\[\\boxed{1{,}000{,}000}\\]", "1000000"), ("\\boxed{12\\text{ cm}^2}", "12"), ("\\boxed{3}\\text{ then }\\boxed{4}", "3")],
)  # fmt: skip
def test_agrees_with_math_verify_on_fixed_cases(math_verify, text, gold):
    assert correctness_reward(text, gold) == _mv_verdict(math_verify, text, gold)
