"""common/__init__.py 只挡掉两条已知无害的启动信息，同一个 logger 的其它警告照常打印。"""

from __future__ import annotations

import enum
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import common  # noqa: F401  装上过滤器

ROOT = Path(__file__).resolve().parents[2]
SO = "/venv/lib/python3.11/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"


def _passes(logger: str, msg: str, *args) -> bool:
    record = logging.LogRecord(logger, logging.WARNING, __file__, 1, msg, args, None)
    return bool(logging.getLogger(logger).filter(record))


def test_torchao_kernel_load_failure_dropped_only_on_cpu_torch():
    failure = f"Failed to load {SO}: Could not load this library: {SO}"
    # CPU 版 torch 上 torchao 的 CUDA kernel 不可能加载成功：挡掉；CUDA 版 torch 上可能是真的装坏了：保留
    assert _passes("torchao", failure) == (torch.version.cuda is not None)
    assert _passes("torchao", "Skipping import of cpp extensions due to incompatible torch version")
    assert _passes("torchao", "Failed to load my_own_extension.so: boom")


def test_pytree_enum_deprecation_dropped_only_for_torchao_enums():
    msg = "%s is an Enum subclass and is now natively supported by torch.compile"
    theirs = enum.Enum("KernelPreference", "AUTO")
    theirs.__module__ = "torchao.quantization.quantize_.common.kernel_preference"
    ours = enum.Enum("Ours", "A")
    assert not _passes("torch.utils._pytree", msg, theirs)
    assert _passes("torch.utils._pytree", msg, ours)
    assert _passes("torch.utils._pytree", "some other pytree warning")


@pytest.mark.slow
def test_train_trl_help_prints_no_startup_noise():
    """train_trl.py 先 import transformers/trl（会顺带 import torchao）：--help 的 stderr 里什么都不该有。"""
    script = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py"
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
