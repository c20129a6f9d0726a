"""common/ 按工作分成几个包：包之间的 import 只往下走（所以没有环），每个包的 __init__.py 说清它的工作。"""

from __future__ import annotations

import ast
from pathlib import Path

COMMON = Path(__file__).resolve().parents[2] / "common"
# 从上到下（common/__init__.py 的 docstring 同序）：一个包只 import 排在它后面的包
LAYERS = ("config", "model", "decode", "vram", "gsm8k", "run", "options")
# common/ 里包以外的东西：assets/ 是数据；pytest_plugin.py 是为旧安装留的旧路径（MAINTAINING.md 第 3 节）
NOT_PACKAGES = {"__init__.py", "assets", "pytest_plugin.py", "__pycache__"}


def _common_packages_imported(path: Path) -> set[str]:
    """`path` 里 import 到的 common 的包（函数里的 import 也算）。"""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        found |= {m.split(".")[1] for m in modules if m.startswith("common.")}
    return found


def test_common_is_the_packages_and_nothing_else():
    entries = {p.name for p in COMMON.iterdir()} - NOT_PACKAGES
    assert entries == set(LAYERS), (
        f"common/ 里应当正好是这些包 {sorted(LAYERS)}，实际是 {sorted(entries)}："
        "新模块放进工作相符的包，新包要写进 LAYERS（定下它在哪一层）"
    )
    assert all((COMMON / p / "__init__.py").is_file() for p in LAYERS)


def test_packages_import_only_the_ones_below():
    up = []
    for layer, pkg in enumerate(LAYERS):
        for path in sorted((COMMON / pkg).rglob("*.py")):
            for other in _common_packages_imported(path) - {pkg}:
                if other not in LAYERS or LAYERS.index(other) < layer:
                    up.append(f"{path.relative_to(COMMON.parent)} -> common.{other}")
    assert not up, (
        f"这些 import 往上走（包的顺序从上到下是 {' > '.join(LAYERS)}），会让包之间出现环：{up}。"
        "把用到的东西挪到下层的包，或者把这个模块挪到上层的包"
    )


def test_the_top_level_imports_no_package():
    for name in ("__init__.py", "pytest_plugin.py"):
        assert not _common_packages_imported(COMMON / name), f"common/{name} 不该 import 任何包"


def test_each_package_says_its_job_and_only_hands_on_nothing():
    for pkg in LAYERS:
        tree = ast.parse((COMMON / pkg / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert doc.strip(), (
            f"common/{pkg}/__init__.py 缺 docstring：两行说它的工作，再说课里从它 import 什么"
        )
        assert "A lesson imports" in doc, (
            f"common/{pkg}/__init__.py 的 docstring 没说课里从它 import 什么"
        )
        assert len(tree.body) == 1, (
            f"common/{pkg}/__init__.py 只放 docstring：import 写全路径（from common.{pkg}.模块 import 名字）"
        )
