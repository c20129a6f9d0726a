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


# 学习者最常从这几个脚本起步（L2.07 第 6 节的 GPU 页面）：它们都要先 import common、再 import torch
SCRIPTS_ON_THE_GPU_PAGE = (
    "L2_algorithm/07_grpo_train/grpo_train.py",
    "L3_frameworks/01_trl_vllm_colocate/train_trl.py",
    "L1_concepts/04_vram_ledger/measure_vram.py",
    "L2_algorithm/08_reading_the_curves/compare_runs.py",
)


def _first_import_line(tree, names: tuple[str, ...]) -> int:
    import ast

    lines = [
        node.lineno
        for node in tree.body
        if isinstance(node, ast.Import)
        and any(a.name.split(".")[0] in names for a in node.names)
        or isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] in names
    ]
    return min(lines, default=10**9)


@pytest.mark.parametrize("script", SCRIPTS_ON_THE_GPU_PAGE)
def test_common_is_imported_before_torch(script):
    """import torch 要几秒：这几秒里按 Ctrl-C，只有先 import 了 common（装上 excepthook）才是一行中文。"""
    import ast

    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    common_at = _first_import_line(tree, ("common",))
    heavy_at = _first_import_line(tree, ("torch", "transformers", "trl"))
    assert common_at < heavy_at, (
        f"{script}：第 {heavy_at} 行先 import 了重的包，common 在第 {common_at} 行"
    )


def test_a_ctrl_c_nobody_catches_is_one_line():
    """一个没人接住的 Ctrl-C（import 期间）：一行中文，没有 traceback，退出状态仍是中断（SIGINT）。"""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import common, os, signal, time; "
        "os.kill(os.getpid(), signal.SIGINT); time.sleep(5)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode in (-2, 130), proc.returncode
    assert proc.stderr.strip() == "已中断（Ctrl-C）。" and "Traceback" not in proc.stderr
    other = subprocess.run(  # 别的异常照旧有 traceback
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import common; 1/0",
         str(ROOT)], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert other.returncode == 1 and "ZeroDivisionError" in other.stderr
