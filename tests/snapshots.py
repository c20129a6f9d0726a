"""快照测试的公共部分：用 solutions 生成的输入/输出存成 .pt，测试时让被测实现重算并比对。

每个练习模块在 tests/snapshot_cases/<模块名>.py 里写 `CASES = [Case(...), ...]`，
再运行 `python tests/make_snapshots.py` 重新生成 tests/snapshots/ 下的文件。
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from diagnose import describe_mismatch

SNAPSHOT_DIR = Path(__file__).resolve().parent / "snapshots"


@dataclass
class Case:
    name: str
    func: str
    inputs: Callable[[], dict[str, Any]]  # 确定性地造出关键字参数
    rtol: float = 1e-5
    atol: float = 1e-6
    module: str = field(default="", init=False)  # 由 all_cases() 填入

    @property
    def path(self) -> Path:
        return SNAPSHOT_DIR / f"{self.module}__{self.name}.pt"

    @property
    def id(self) -> str:
        return f"{self.module}::{self.name}"


def all_cases() -> list[Case]:
    import snapshot_cases

    cases = []
    for info in sorted(pkgutil.iter_modules(snapshot_cases.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"snapshot_cases.{info.name}")
        for case in mod.CASES:
            case.module = info.name
            cases.append(case)
    return cases


def run(case: Case, package: str) -> Any:
    fn = getattr(importlib.import_module(f"{package}.{case.module}"), case.func)
    return fn(**case.inputs())


def assert_same(got: Any, want: Any, rtol: float, atol: float, where: str = "输出") -> None:
    """递归比较张量 / 元组 / 字典 / 数字；不一致时用一句中文失败（tests/diagnose.py 的 describe_mismatch）。"""
    msg = describe_mismatch(got, want, rtol=rtol, atol=atol)
    if msg is not None:
        pytest.fail(f"{where}与参考实现的快照不一致：{msg}。", pytrace=False)


def to_saveable(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return tuple(to_saveable(v) for v in x)
    if isinstance(x, dict):
        return {k: to_saveable(v) for k, v in x.items()}
    return x
