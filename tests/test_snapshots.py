"""快照测试：被测实现在固定输入上的输出必须与参考实现（生成快照时）一致。"""

from __future__ import annotations

import importlib

import pytest
import torch
from snapshots import all_cases, assert_same

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_snapshot(case, impl_name):
    assert case.path.exists(), f"缺少快照 {case.path.name}：运行 python tests/make_snapshots.py"
    saved = torch.load(case.path, weights_only=True)
    inputs = case.inputs()
    # 输入造法改了却没重新生成快照，会让比较失去意义
    assert_same(inputs, saved["inputs"], 0, 0, where="快照输入")
    fn = getattr(importlib.import_module(f"{impl_name}.{case.module}"), case.func)
    where = f"{impl_name}.{case.module}.{case.func} 在快照 {case.name} 上的输出"
    assert_same(fn(**inputs), saved["output"], case.rtol, case.atol, where=where)
