"""exercises/ 与 solutions/ 保持同步：同样的模块、同样的公开名字和签名；main 上的练习都还是空桩。"""

from __future__ import annotations

import ast
import importlib
import inspect
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


def _is_stub(fn: ast.FunctionDef) -> bool:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise):
        return False
    exc = body[0].exc
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


@pytest.mark.parametrize("name", MODULES)
def test_exercises_are_still_stubs(name):
    """main 上的练习必须保持空桩：学习者 clone 下来要自己写。"""
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
