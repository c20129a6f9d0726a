"""exercises/ 与 solutions/ 保持同步：同样的模块、同样的公开名字和签名、同样的常量。

「仓库里的练习都还是空桩」检查的是这个仓库本身，不是学习者：只有设了 RL_COURSE_CHECK_STUBS=1
（.ci/run 会设）才收集它。学习者写完练习后运行 README 里的 `pytest`，不会因为「练习不再是空桩」变红。
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
from pathlib import Path

import pytest

import exercises
import solutions

MODULES = sorted(
    m.name for m in pkgutil.iter_modules(solutions.__path__) if not m.name.startswith("_")
)


def _public(mod):
    return {
        name: obj
        for name, obj in vars(mod).items()
        if not name.startswith("_")
        and (getattr(obj, "__module__", None) == mod.__name__ or name == "CHECKPOINT_ANSWERS")
    }


def test_same_modules():
    ex = sorted(
        m.name for m in pkgutil.iter_modules(exercises.__path__) if not m.name.startswith("_")
    )
    assert ex == MODULES


@pytest.mark.parametrize("name", MODULES)
def test_same_public_api(name):
    sol = importlib.import_module(f"solutions.{name}")
    ex = importlib.import_module(f"exercises.{name}")
    ps, pe = _public(sol), _public(ex)
    assert sorted(ps) == sorted(pe), f"{name}: 公开名字不一致"
    for key, obj in ps.items():
        if callable(obj):
            assert inspect.signature(obj) == inspect.signature(pe[key]), f"{name}.{key}: 签名不一致"
    if "CHECKPOINT_ANSWERS" in ps:
        assert sorted(ps["CHECKPOINT_ANSWERS"]) == sorted(pe["CHECKPOINT_ANSWERS"])


def _constants(mod) -> dict:
    """大写的模块级常量（CHECKPOINT_ANSWERS 除外：练习里是 None）。"""
    return {
        name: value
        for name, value in vars(mod).items()
        if name.isupper() and not callable(value) and name != "CHECKPOINT_ANSWERS"
    }


@pytest.mark.parametrize("name", MODULES)
def test_constants_copied_into_exercises_match(name):
    """exercises/ 是给学习者的独立文件，常量只能抄一份；抄的必须和 solutions/ 里的一字不差。"""
    sol = _constants(importlib.import_module(f"solutions.{name}"))
    ex = _constants(importlib.import_module(f"exercises.{name}"))
    assert sorted(ex) == sorted(sol), f"{name}: 常量名字不一致"
    for key, value in sol.items():
        assert ex[key] == value, f"exercises/{name}.py 的 {key} 和 solutions/ 里的不一样"


TESTS = Path(__file__).resolve().parent


def lesson_test_files(name: str) -> list[Path]:
    """这节课自己的测试文件：l2_02_logprobs_and_masks -> tests/L2/test_l2_02_*.py（按文件名发现）。"""
    level, number = name.split("_")[:2]
    return sorted(TESTS.glob(f"L{level[1:]}/test_{level}_{number}_*.py"))


def _names_in(path: Path) -> set[str]:
    """测试文件里出现的名字：变量名、属性名（`mod.kl_k3`），以及字符串常量（`getattr(mod, "kl_k3")`）。"""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def _public_functions(name: str) -> list[str]:
    sol = importlib.import_module(f"solutions.{name}")
    return sorted(k for k, v in _public(sol).items() if inspect.isfunction(v))


# 只有检查点、没有函数的课（L1、L3 的阅读课）不在这里：它们由 tests/test_checkpoints.py 检查
WITH_FUNCTIONS = [name for name in MODULES if _public_functions(name)]


@pytest.mark.parametrize("name", WITH_FUNCTIONS)
def test_every_public_function_has_a_lesson_test(name):
    """solutions/ 里每个公开函数，这节课的测试文件（tests/L<级>/test_<模块前缀>_*.py）里至少有一个用到它。"""
    functions = _public_functions(name)
    files = lesson_test_files(name)
    level, number = name.split("_")[:2]
    assert files, (
        f"solutions/{name}.py 有公开函数 {functions}，但没有这节课的测试文件"
        f" tests/L{level[1:]}/test_{level}_{number}_*.py（MAINTAINING.md 1.4 节）"
    )
    used = set().union(*(_names_in(f) for f in files))
    untested = [f for f in functions if f not in used]
    assert not untested, (
        f"solutions/{name}.py 的这些公开函数在 {[f.name for f in files]} 里一次也没有出现：{untested}"
    )


def _is_stub(fn: ast.FunctionDef) -> bool:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise):
        return False
    exc = body[0].exc
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _exercises_are_still_stubs(name):
    path = Path(exercises.__path__[0]) / f"{name}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            assert _is_stub(node), (
                f"exercises/{name}.py::{node.name} 不是空桩（只能有 docstring + raise NotImplementedError）"
            )
    answers = getattr(importlib.import_module(f"exercises.{name}"), "CHECKPOINT_ANSWERS", {})
    assert all(v is None for v in answers.values()), (
        f"exercises/{name}.py 的 CHECKPOINT_ANSWERS 应全为 None"
    )


if os.environ.get("RL_COURSE_CHECK_STUBS") == "1":

    @pytest.mark.parametrize("name", MODULES)
    def test_exercises_are_still_stubs(name):
        """仓库里的练习必须保持空桩：学习者 clone 下来要自己写。"""
        _exercises_are_still_stubs(name)
