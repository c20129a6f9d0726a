"""pytest 配置：`impl` fixture 按 `--impl` 取被测模块（选项和中文提示在 common/pytest_plugin.py）。

- `pytest`                      测 solutions/（CI 跑的就是这个，证明课程本身是对的）
- `pytest --impl exercises ...` 测你自己在 exercises/ 里写的代码
"""

from __future__ import annotations

import importlib
import os
import types

# 测试全部离线：不访问 Hugging Face hub（模型、tokenizer、数据都由本仓库在本地造出）
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest


@pytest.fixture(scope="session")
def impl_name(request) -> str:
    return request.config.getoption("--impl")


@pytest.fixture(scope="session")
def impl(impl_name):
    """按名字取被测模块：`impl("l2_01_advantages")` -> exercises/solutions 里的同名模块。"""

    def load(module: str) -> types.ModuleType:
        return importlib.import_module(f"{impl_name}.{module}")

    return load
