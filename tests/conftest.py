"""pytest 配置：`impl` fixture 按 `--impl` 取被测模块（选项和中文提示在 tests/pytest_plugin.py，由根目录的 conftest.py 注册）。

- `pytest`                      测 solutions/（CI 跑的就是这个，证明课程本身是对的）
- `pytest --impl exercises ...` 测你自己在 exercises/ 里写的代码
"""

from __future__ import annotations

import getpass
import importlib
import os
import tempfile
import types
from pathlib import Path

import pytest

# 测试全部离线：不访问 Hugging Face hub（模型、tokenizer、数据都由本仓库在本地造出）
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# 测试里的张量和模型都很小：多线程的同步开销比省下的计算还多，在 2 核、还有别的负载的机器上
# CPU 时间能翻两三倍。所以测试单线程跑（和 grpo_train.py 在 CPU 上一样）；你自己设了
# OMP_NUM_THREADS 就按你的来。必须在 import torch 之前设；子进程（测试里运行的脚本）也继承它。
os.environ.setdefault("OMP_NUM_THREADS", "1")

# 用 ATEN_CPU_CAPABILITY=avx2 / default 模拟一台指令集更低的 CPU 时，oneDNN 也得按同一级别选 kernel：
# 否则在有 AMX 的机器上，bf16 的 SDPA 会按硬件选 AMX 的打包路径，再调用按低指令集编译、不支持它的
# 函数（RuntimeError: pack_vnni2 is only supported when avx512 is supported）——这种组合在真的
# AVX2 机器上不存在。你自己设了 ONEDNN_MAX_CPU_ISA 就按你的来。
_ONEDNN_ISA_FOR_ATEN = {"default": "SSE41", "avx2": "AVX2"}
_aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
if _aten in _ONEDNN_ISA_FOR_ATEN:
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", _ONEDNN_ISA_FOR_ATEN[_aten])
    # torch.compile（torchao 的 8-bit AdamW 用它）把编译好的 C++ kernel 缓存在一个目录里，缓存的键不含
    # ATEN_CPU_CAPABILITY：先用本机指令集跑过一次，再模拟低指令集时会拿到按本机向量化的 kernel，
    # 编译报「'at::vec' has not been declared」。每个模拟的级别用自己的缓存目录。
    _cache = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}_{_aten}"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_cache))


def pytest_configure(config):
    # pytest 结束时调 5 次 gc.collect()，收集 __del__ 里抛出、没人接住的异常（报成警告）。import 了 torch 之后
    # 堆很大，5 次约 0.6–0.9 s，单独跑一个测试文件时占了不小的一块。一次 gc.collect() 已经会回收引用环、
    # 触发那些 __del__，所以只做一次。gc_collect_iterations_key 是 pytest 9 给 pytester 留的开关；
    # 别的 pytest 版本没有它，就照它的默认值。
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:
        return
    config.stash[gc_collect_iterations_key] = 1


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """离线的真实 Qwen3 tokenizer，整个测试会话只加载一次（每加载一次约 0.6 s CPU）。只读，别改它的属性。"""
    from common.model.tokenizer import load_qwen3_tokenizer

    return load_qwen3_tokenizer()


@pytest.fixture(scope="session")
def impl_name(request) -> str:
    return request.config.getoption("--impl")


@pytest.fixture(scope="session")
def impl(impl_name):
    """按名字取被测模块：`impl("l2_01_advantages")` -> exercises/solutions 里的同名模块。"""

    def load(module: str) -> types.ModuleType:
        return importlib.import_module(f"{impl_name}.{module}")

    return load


def pytest_pycollect_makeitem(collector, name, obj):
    """标了 `@pytest.mark.exercises_only` 的测试只在 `--impl exercises` 时收集。

    它们给学习者自己的作答判分（比如 tests/test_checkpoints.py 的 test_your_answers）：默认的
    `pytest` 测的是 solutions/，拿答案键给答案键判分什么也证明不了，所以干脆不收集（不是跳过）。
    """
    marks = getattr(obj, "pytestmark", [])
    if any(getattr(m, "name", None) == "exercises_only" for m in marks):
        if collector.config.getoption("--impl") != "exercises":
            return []
    return None
