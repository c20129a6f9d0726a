"""Measuring CUDA memory: the peak of a block, and a cap that makes a big card act like a 32 GiB one.

Used by L1_concepts/04_vram_ledger/measure_vram.py (measured against the ledger's prediction) and
L3_frameworks/01_trl_vllm_colocate/train_trl.py (--cap-gb). Bytes in, bytes out; printed in GiB.
"""

from __future__ import annotations

import contextlib

import torch

from common.vram.ledger import GiB


def cuda_available() -> bool:
    return torch.cuda.is_available()


@contextlib.contextmanager
def peak_memory(label: str = "", device=None, verbose: bool = False):
    """Measure the CUDA memory of a block. Yields a dict filled on exit (bytes): peak and peak_reserved
    (max allocated / reserved inside the block), allocated and reserved (at exit), start (allocated at entry).
    On a machine without CUDA it yields {"cuda": False} and, if verbose, says so."""
    result: dict = {"label": label, "cuda": cuda_available()}
    if not result["cuda"]:
        if verbose:
            print(f"[peak_memory] {label}: 没有 CUDA，不测显存（CPU 上这一步只检查代码能跑通）")
        yield result
        return
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    result["start"] = torch.cuda.memory_allocated(device)
    try:
        yield result
    finally:
        torch.cuda.synchronize(device)
        result["peak"] = torch.cuda.max_memory_allocated(device)
        result["allocated"] = torch.cuda.memory_allocated(device)
        result["reserved"] = torch.cuda.memory_reserved(device)
        result["peak_reserved"] = torch.cuda.max_memory_reserved(device)
        if verbose:
            print(
                f"[peak_memory] {label}: peak {result['peak'] / GiB:.2f} GiB，"
                f"allocated {result['allocated'] / GiB:.2f} GiB，reserved {result['reserved'] / GiB:.2f} GiB"
            )


def cap_to_gpu_gb(gpu_gb: float = 32.0, device=None) -> float | None:
    """Emulate a smaller card: cap this process's PyTorch allocator at gpu_gb GiB via
    torch.cuda.set_per_process_memory_fraction(gpu_gb GiB / total). Returns the fraction,
    or None on a machine without CUDA. The CUDA context is outside the cap (on a real card it is not).
    A cap at or above the card's total (--cap-gb 32 on a 5090, whose total is a little under 32 GiB)
    means the whole card: fraction 1.0, with a one-line note."""
    if not cuda_available():
        print(f"[cap_to_gpu_gb] 没有 CUDA，跳过 {gpu_gb:g} GiB 显存上限的模拟")
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    if gpu_gb * GiB >= total:
        print(
            f"[cap_to_gpu_gb] 这张卡一共 {total / GiB:.2f} GiB，不比 {gpu_gb:g} GiB 多：不设上限，用整张卡"
        )
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        return 1.0
    fraction = gpu_gb * GiB / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction
