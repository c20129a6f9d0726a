"""快照测试的公共部分：用 solutions 生成的输入/输出存成 .pt，测试时让被测实现在**存下的输入**上重算并比对。

每个练习模块在 tests/snapshot_cases/<模块名>.py 里写 `CASES = [Case(...), ...]`，
再运行 `python tests/make_snapshots.py`（或 `--only <模块名>`）重新生成 tests/snapshots/ 下的文件。

为什么用存下的输入，而不是每次按造法重新造：造法里有 log_softmax、exp 这样的运算，不同 CPU
（AVX-512 / AVX2 / ARM）的 kernel 在最后一位上舍入不同。在存下的输入上算，换一台机器也只剩被测函数
自己的舍入，由每个用例的容差吸收。造法本身有没有改（改了却没重新生成快照），另由
`inputs_mismatch` 在容差内检查。
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from diagnose import describe_mismatch

SNAPSHOT_DIR = Path(__file__).resolve().parent / "snapshots"
REGENERATE = "python tests/make_snapshots.py"


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


def load(path: Path) -> dict[str, Any]:
    """快照文件的内容：{"inputs": {参数名: 值}, "output": 参考实现的输出}。"""
    return torch.load(path, weights_only=True)


def run(case: Case, package: str, inputs: Mapping[str, Any]) -> Any:
    """`package`（solutions / exercises）里的 `case.func` 在 `inputs` 的副本上的输出。"""
    fn = getattr(importlib.import_module(f"{package}.{case.module}"), case.func)
    return fn(**to_saveable(dict(inputs)))  # 副本：被测函数就地改了输入，也不会改到快照


def assert_same(got: Any, want: Any, rtol: float, atol: float, where: str = "输出") -> None:
    """递归比较张量 / 元组 / 字典 / 数字；不一致时用一句中文失败（tests/diagnose.py 的 describe_mismatch）。"""
    msg = describe_mismatch(got, want, rtol=rtol, atol=atol)
    if msg is not None:
        pytest.fail(f"{where}与参考实现的快照不一致：{msg}。", pytrace=False)


def input_tolerance(case: Case, value: Any) -> tuple[float, float]:
    """重新造出的输入和存下的输入比较时的 (rtol, atol)：用例的容差，且至少容得下存储 dtype 的一次舍入。

    造法在 float32 里算、最后转成 bf16 时，另一台 CPU 上 float32 的末位不同，可能让某个元素舍入到
    相邻的 bf16 值（相对差 ≤ 一个 eps）。造法真的改了（种子、形状、系数）时，差别远大于此。
    """
    rtol, atol = case.rtol, case.atol
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        rtol = max(rtol, 2 * torch.finfo(value.dtype).eps)
    return rtol, atol


def _structure_mismatch(got: Any, want: Any) -> str | None:
    """容器的种类必须一样（list 和 tuple 传给被测函数时是不同的输入）；数值由 describe_mismatch 比较。"""
    if isinstance(want, (list, tuple, dict)) and type(got) is not type(want):
        return f"应为 {type(want).__name__}，得到 {type(got).__name__}"
    if isinstance(want, dict):
        if sorted(got) != sorted(want):
            return f"键是 {sorted(got)}，应为 {sorted(want)}"
        pairs = [(repr(k), got[k], want[k]) for k in want]
    elif isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return f"长度是 {len(got)}，应为 {len(want)}"
        pairs = [(f"[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want))]
    else:
        return None
    for where, g, w in pairs:
        if (msg := _structure_mismatch(g, w)) is not None:
            return f"{where}：{msg}"
    return None


def inputs_mismatch(got: Mapping[str, Any], want: Mapping[str, Any], case: Case) -> str | None:
    """重新造出的输入 `got` 与存下的 `want` 在 `input_tolerance` 内一致时返回 None，否则一句中文。"""
    if (msg := _structure_mismatch(got, want)) is not None:
        return msg
    for key, w in want.items():
        msg = describe_mismatch(got[key], w, *input_tolerance(case, w))
        if msg is not None:
            return f"参数 {key!r}：{msg}"
    return None


def output_mismatch(got: Any, want: Any, case: Case) -> str | None:
    """输出在用例的容差内一致（容器种类也一样）时返回 None，否则一句中文。"""
    if (msg := _structure_mismatch(got, want)) is not None:
        return msg
    return describe_mismatch(got, want, rtol=case.rtol, atol=case.atol)


def to_saveable(x: Any) -> Any:
    """张量 detach + clone；list、tuple、dict 保持原来的种类（torch.load(weights_only=True) 都认）。"""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(to_saveable(v) for v in x)
    if isinstance(x, dict):
        return {k: to_saveable(v) for k, v in x.items()}
    return x
