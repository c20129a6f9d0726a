"""诊断信息里「回看 L2.0X「…」」指向的课文小节必须真的存在（课文改标题时，这里会先报出来）。

扫描的模块自动发现，不用登记：tests/L2 里的每个模块（每节课的测试 test_l<级>_<NN>_*.py、
典型错误表 mistakes_*.py、其它测试），以及 tests/L1、tests/L3 里每节课自己的测试 test_l<级>_<NN>_*.py
（有练习的 L1、L3 课也一样要求）。扫的是它们模块级的值：字符串、`Mistake` 这样带 `section`
的对象，以及由它们组成的 list / tuple / dict。指向写成 `L2.05「标题开头」`，按 tests/diagnose.py 的
`section_heading` 找到 L2_algorithm/05_*/README.md 里以它开头的标题；任何一级（L1/L2/L3）的课都可以指。
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from pathlib import Path

import pytest
from diagnose import Mistake, section_heading

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LESSON_TEST_GLOB = "L[0-9]/test_l[0-9]_[0-9][0-9]_*.py"  # 每节课自己的测试（任何一级）
LESSON_TESTS = sorted(HERE.parent.glob(LESSON_TEST_GLOB))
MODULE_FILES = sorted(
    {p for p in HERE.glob("*.py") if p.name != Path(__file__).name} | set(LESSON_TESTS)
)
_POINTER = re.compile(r"L[1-3]\.\d\d「[^」{]+」")  # `{`：f-string 里还没填的模板不算


def _texts(value, depth=0):
    """`value` 里所有的字符串（往下最多看 4 层容器 / dataclass）。"""
    if isinstance(value, str):
        yield value
    elif depth < 4:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = [getattr(value, f.name) for f in dataclasses.fields(value)]
        elif isinstance(value, dict):
            items = [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
        else:
            items = [getattr(value, "section", None)]
        for item in items:
            yield from _texts(item, depth + 1)


def _import(path: Path):
    """按文件名 import 一个测试模块（它所在的文件夹放进 sys.path：它自己 import 的同目录模块也找得到）。"""
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    return importlib.import_module(path.stem)


def _pointers():
    found = {}
    for path in MODULE_FILES:
        mod = _import(path)
        for value in vars(mod).values():
            for text in _texts(value):
                for pointer in _POINTER.findall(text):
                    found.setdefault(pointer, path.name)
    return found


POINTERS = _pointers()


def _lesson(pointer: str) -> str:
    """`L2.05「…」` -> `l2_05`（和测试文件名 test_l2_05_*.py 的写法一样）。"""
    return f"l{pointer[1]}_{pointer[3:5]}"


def _has_exercise_functions(lesson: str) -> bool:
    """solutions/ 里这节课的模块有没有要学习者写的函数（只有检查点答案的课没有诊断可言）。"""
    import importlib
    import inspect

    mod = next((m for m in sorted((ROOT / "solutions").glob(f"{lesson}_*.py"))), None)
    if mod is None:
        return False
    module = importlib.import_module(f"solutions.{mod.stem}")
    return any(
        inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")
        for n, f in vars(module).items()
    )


def test_every_tested_lesson_points_back_to_its_sections():
    """扫描本身没漏：有练习函数、也有测试文件的每节课，诊断里至少指向一次课文（否则多半是典型错误换了
    写法，这里没扫到）。只测脚本的课（如 L2.08 的分析脚本）没有要诊断的练习。"""
    tested = {p.stem[len("test_") :][:5] for p in LESSON_TESTS}
    tested = {lesson for lesson in tested if _has_exercise_functions(lesson)}
    pointed = {_lesson(p) for p in POINTERS}
    assert tested, f"{HERE.parent} 里没有找到 {LESSON_TEST_GLOB}"
    assert tested <= pointed, (
        f"这些课的测试里没有找到任何「L<级>.<NN>「…」」指向：{sorted(tested - pointed)}"
    )


@pytest.mark.parametrize("pointer", sorted(POINTERS))
def test_section_exists(pointer):
    assert section_heading(pointer) is not None, (
        f"{POINTERS[pointer]} 里的「{pointer}」在课文里找不到以它开头的标题（课文改了标题？）"
    )


def _mistakes():
    """扫描到的模块里，模块级的每个 `Mistake`（往下最多看 4 层容器）。"""
    found = {}

    def walk(value, depth=0):
        if isinstance(value, Mistake):
            found.setdefault((value.what, value.section), value)
        elif depth < 4 and isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)
        elif depth < 4 and isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item, depth + 1)

    for path in MODULE_FILES:
        for value in vars(_import(path)).values():
            walk(value)
    return list(found.values())


def test_each_diagnosis_points_to_one_section():
    """「看起来是：<错误>。回看 <章节>。」：<错误> 只说错在哪，指向只有 `section` 一处，不能再写「回看」或另一节。"""
    mistakes = _mistakes()
    assert mistakes, "一个 Mistake 都没扫到"
    bad = [m.what for m in mistakes if "回看" in m.what or _POINTER.search(m.what)]
    assert not bad, "这些典型错误的说明里又指了一次课文（章节只写在 section 里）：\n" + "\n".join(
        bad
    )
