"""每节课的检查点：README 的题目、答案页 ANSWERS.md、答案键（solutions）和你的作答（exercises）四方一致。

`pytest` 检查四方一致，并证明判分两个方向都灵：对的答案过、错的答案不过，而且错的时候只指回
课文的某一节，不泄露答案。给你的作答判分的 `test_your_answers` 只在 `pytest --impl exercises` 时收集。
答案页的每一行都要有「回看」：对所有的课检查（按 `quiz.lesson_readmes()` 自动发现，不用登记）。
"""

from __future__ import annotations

import importlib

import pytest
from quiz import (
    ROOT,
    find_heading,
    grade,
    lesson_readmes,
    module_name,
    parse_answers,
    parse_checkpoint,
)

READMES = lesson_readmes()


def _ids(p):
    return module_name(p)  # 例如 l2_01_advantages：`-k l2_01` 或 `-k 01_advantages` 都能选中


def _key(readme) -> dict[str, str]:
    return importlib.import_module(f"solutions.{module_name(readme)}").CHECKPOINT_ANSWERS


def test_every_lesson_has_a_checkpoint():
    assert READMES, "没有找到任何课程 README"
    missing = [_ids(p) for p in READMES if not parse_checkpoint(p)]
    assert not missing, f"这些课缺少「## 检查点」或题目格式不对: {missing}"


@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_readme_answers_page_and_key_agree(readme):
    questions, answers, key = parse_checkpoint(readme), parse_answers(readme), _key(readme)
    where = f"{readme.parent.name}"
    assert [q.qid for q in questions] == sorted(key, key=lambda s: int(s[1:])), (
        f"{where}: README 的题号与 solutions/{module_name(readme)}.py 的答案键不一致"
    )
    assert sorted(answers) == sorted(key), (
        f"{where}: 答案页 ANSWERS.md 里这节课的题号与答案键不一致"
    )
    text = readme.read_text(encoding="utf-8")
    assert "<details><summary>答案" not in text, f"{where}: 答案与解析应放在答案页，不放在题目下面"
    for q in questions:
        ans = key[q.qid]
        assert len(q.options) >= 2, f"{q.qid} 至少要有两个选项"
        assert q.options == [chr(ord("A") + i) for i in range(len(q.options))], (
            f"{q.qid} 选项应从 A 起连续编号"
        )
        assert set(ans) <= set(q.options) and ans == "".join(sorted(set(ans))), (
            f"{q.qid} 答案 {ans!r} 不是合法选项"
        )
        if q.kind == "单选":
            assert len(ans) == 1, f"{q.qid} 是单选题，答案只能有一个字母"
        assert answers[q.qid].key == ans, (
            f"{q.qid}: 答案页写的是 {answers[q.qid].key!r}，答案键是 {ans!r}"
        )
        section = answers[q.qid].section
        if section is not None:
            assert find_heading(readme, section), (
                f"{where} {q.qid}: 答案页的「回看「{section}」」在课文里找不到这个标题"
            )


@pytest.mark.exercises_only  # 默认的 pytest 不收集：拿答案键给答案键判分，什么也证明不了
@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_your_answers(readme):
    """给你在 exercises/ 里的作答判分（`pytest --impl exercises tests/test_checkpoints.py`）。"""
    mod = module_name(readme)
    yours = importlib.import_module(f"exercises.{mod}").CHECKPOINT_ANSWERS
    if all(answer is None for answer in yours.values()):
        # 一题都还没答：和没写的函数一样，只在「还没实现」一节里说一行（tests/pytest_plugin.py）
        todo = NotImplementedError('把每题的 None 换成大写字母串（多选按字母顺序，如 "AC"）。')
        todo.course_stub_location = (f"exercises/{mod}.py", "检查点作答 CHECKPOINT_ANSWERS")
        raise todo
    problems = grade(readme, _key(readme), yours)
    if problems:
        head = f"{readme.parent.relative_to(ROOT)} 的检查点还有 {len(problems)} 题没过："
        pytest.fail(head + "\n" + "\n".join(problems), pytrace=False)


@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_grading_rejects_a_wrong_answer_without_revealing_it(readme):
    """判分器的反方向：把每道题换成一个错的选项，必须被判错，且提示里不出现正确答案。"""
    key = _key(readme)
    answers = parse_answers(readme)
    for qid, right in key.items():
        options = next(q.options for q in parse_checkpoint(readme) if q.qid == qid)
        wrong = next(o for o in options if o != right)
        problems = grade(readme, key, {**key, qid: wrong})
        assert len(problems) == 1 and problems[0].startswith(f"{qid} 不对"), problems
        assert answers[qid].line not in problems[0] and f"：{right}。" not in problems[0]
    # 大小写、多选的字母顺序不影响判分
    shuffled = {q: a.lower()[::-1] for q, a in key.items()}
    assert grade(readme, key, shuffled) == []
    assert grade(readme, key, dict.fromkeys(key)) and all(
        "还没作答" in line for line in grade(readme, key, dict.fromkeys(key))
    )


@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_every_answer_points_back_to_a_section(readme):
    """答错时只能给指向：所以答案页的每一行都要有「回看「…」。」（标题是否存在由上面的测试检查）。"""
    missing = [qid for qid, a in parse_answers(readme).items() if a.section is None]
    assert not missing, f"{module_name(readme)}: 这些题在答案页上没有「回看「…」。」：{missing}"
