"""每节课的检查点题目：README、答案键（solutions）和你的作答（exercises）三方一致。"""

from __future__ import annotations

import importlib

import pytest
from quiz import ROOT, lesson_readmes, module_name, parse_checkpoint

READMES = lesson_readmes()


def _ids(p):
    return module_name(p)  # 例如 l2_01_advantages：`-k l2_01` 或 `-k 01_advantages` 都能选中


def test_every_lesson_has_a_checkpoint():
    assert READMES, "没有找到任何课程 README"
    missing = [_ids(p) for p in READMES if not parse_checkpoint(p)[0]]
    assert not missing, f"这些课缺少「## 检查点」或题目格式不对: {missing}"


@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_readme_and_answer_key_agree(readme):
    questions, readme_answers = parse_checkpoint(readme)
    key = importlib.import_module(f"solutions.{module_name(readme)}").CHECKPOINT_ANSWERS
    assert [q.qid for q in questions] == sorted(key, key=lambda s: int(s[1:])), (
        f"{readme.parent.name}: README 的题号与 solutions/{module_name(readme)}.py 的答案键不一致"
    )
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
        assert readme_answers.get(q.qid) == ans, (
            f"{q.qid}: README 答案区写的是 {readme_answers.get(q.qid)!r}，答案键是 {ans!r}"
        )


@pytest.mark.parametrize("readme", READMES, ids=_ids)
def test_your_answers(readme, impl_name):
    if impl_name == "solutions":
        pytest.skip(
            "答案键自己和 README 的一致性由上一个测试检查；这个测试检查的是 --impl exercises"
        )
    mod = module_name(readme)
    key = importlib.import_module(f"solutions.{mod}").CHECKPOINT_ANSWERS
    yours = importlib.import_module(f"{impl_name}.{mod}").CHECKPOINT_ANSWERS
    todo = [q for q, a in yours.items() if a is None]
    if todo:
        pytest.fail(
            f"还没作答：exercises/{mod}.py 里 CHECKPOINT_ANSWERS 的 {', '.join(todo)}。"
            f'读 {readme.parent.relative_to(ROOT)}/README.md 的「检查点」，把答案写成大写字母串（多选按字母顺序，如 "AC"）。',
            pytrace=False,
        )
    wrong = [q for q in key if str(yours.get(q, "")).upper() != key[q]]
    if wrong:
        pytest.fail(
            f"{readme.parent.relative_to(ROOT)} 的检查点 {', '.join(wrong)} 答得不对。回到 README 对应段落再想想，"
            f"实在卡住再展开「答案与解析」。",
            pytrace=False,
        )
