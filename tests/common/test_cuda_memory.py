"""common.vram.measure：测一段代码的 CUDA 显存峰值、把显存上限压到 32 GiB。没有 GPU 时走 CPU 分支，并假装有 GPU 检查接线。"""

from __future__ import annotations

import pytest
import torch

from common.vram import measure as cuda_memory
from common.vram.ledger import GiB


def test_measuring_helpers_on_cpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("这台机器有 CUDA；CPU 分支只在没有 GPU 时走")
    with cuda_memory.peak_memory("x", verbose=True) as m:
        torch.zeros(10)
    assert m["cuda"] is False and "peak" not in m
    assert cuda_memory.cap_to_gpu_gb(32) is None
    assert "没有 CUDA" in capsys.readouterr().out


def test_measuring_helpers_call_the_cuda_api(monkeypatch):
    """没有 GPU 也能检查接线：把 torch.cuda 的几个函数换成假的。"""
    calls = []
    fake = {
        "synchronize": lambda device=None: None,
        "reset_peak_memory_stats": lambda device=None: calls.append("reset"),
        "memory_allocated": lambda device=None: 3 * GiB,
        "max_memory_allocated": lambda device=None: 5 * GiB,
        "memory_reserved": lambda device=None: 6 * GiB,
        "max_memory_reserved": lambda device=None: 7 * GiB,
        "get_device_properties": lambda device=None: type("P", (), {"total_memory": 140 * GiB})(),
        "set_per_process_memory_fraction": lambda frac, device=None: calls.append(frac),
    }
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(cuda_memory, "cuda_available", lambda: True)
    with cuda_memory.peak_memory("step") as m:
        pass
    assert calls[0] == "reset"
    assert (m["peak"], m["allocated"], m["reserved"], m["peak_reserved"]) == (
        5 * GiB,
        3 * GiB,
        6 * GiB,
        7 * GiB,
    )
    assert cuda_memory.cap_to_gpu_gb(32) == pytest.approx(32 / 140) and calls[-1] == pytest.approx(
        32 / 140
    )


@pytest.mark.parametrize("cap", [32, 200])
def test_a_cap_at_or_above_the_card_means_the_whole_card(monkeypatch, capsys, cap):
    """真的 5090 报的总显存比 32 GiB 少一点（约 31.4 GiB）：--cap-gb 32 不该报错，而是用整张卡，说一句。"""
    calls = []
    props = type("P", (), {"total_memory": int(31.36 * GiB)})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(
        torch.cuda, "set_per_process_memory_fraction", lambda f, device=None: calls.append(f)
    )
    monkeypatch.setattr(cuda_memory, "cuda_available", lambda: True)
    assert cuda_memory.cap_to_gpu_gb(cap) == 1.0 and calls == [1.0]
    out = capsys.readouterr().out
    assert "31.36 GiB" in out and "用整张卡" in out, out
