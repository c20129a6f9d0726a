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


def test_aggregation_names_are_defined_once():
    from solutions import l2_05_grpo_loss, l2_07_grpo_train

    assert l2_07_grpo_train.AGGREGATIONS == tuple(l2_05_grpo_loss.AGGREGATIONS)


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
