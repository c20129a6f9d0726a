"""The GPU kernels of a torch.profiler trace, each with the CPU op that launched it, on every torch we use.

    for k in kernel_launches(prof.events()):
        k.name, k.op, k.start_us, k.end_us   # k.op.cpu_parent ... = the ranges it ran inside

Two shapes of ``FunctionEvent`` exist. torch 2.13 gives every device event ``linked_correlation_id``:
the ``id`` of the launching op. torch 2.11 (the GPU box) has no such field; there the profiler only
appends ``Kernel(name, device, duration)`` to the launching op's ``kernels`` list (both versions do:
it is how ``key_averages()`` credits device time to ops). Without the id, device events are paired
with those entries by (name, duration), in time order: kernels on a stream run in launch order.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from torch.autograd import DeviceType


class Launch(NamedTuple):
    """One device event (kernel, memcpy, memset): times in µs on the profiler's clock; ``op`` is the
    CPU FunctionEvent that launched it, or None when the profiler linked it to no op."""

    name: str
    op: Any
    start_us: float
    end_us: float


def _key(name: str, duration_us: float) -> tuple[str, float]:
    return name, round(duration_us, 3)  # µs with ns resolution, computed the same way on both sides


def _gpu_annotation(e) -> bool:
    """A record_function range as the GPU timeline shows it (first to last kernel launched inside
    it): a CUDA event with ``is_user_annotation``, not a kernel; torch's own tables skip it too."""
    return bool(getattr(e, "is_user_annotation", False))


def kernel_launches(events: Iterable) -> list[Launch]:
    """``prof.events()`` -> every CUDA device event in start order, with its launching CPU op.

    GPU-side record_function ranges are left out: they span the kernels inside them, gaps included.

    Candidate ops: CPU events that are not async. On torch 2.13 also ``linked_correlation_id == 0``
    (ops and record_function ranges): the CUDA runtime calls are CPU events too, but their ids are
    CUPTI's numbering and may equal an op's id."""
    events = list(events)
    device = sorted(
        (e for e in events if e.device_type == DeviceType.CUDA and not _gpu_annotation(e)),
        key=lambda e: e.time_range.start,
    )
    ops = [
        e for e in events if e.device_type == DeviceType.CPU and not getattr(e, "is_async", False)
    ]
    if device and all(hasattr(e, "linked_correlation_id") for e in device):
        by_id = {e.id: e for e in ops if getattr(e, "linked_correlation_id", 0) == 0}
        return [
            Launch(e.name, by_id.get(e.linked_correlation_id), e.time_range.start, e.time_range.end)
            for e in device
        ]
    # torch 2.11: the ops' kernel lists, oldest op first (a legacy op's one "kernel" is its own CUDA time)
    waiting: dict[tuple[str, float], deque] = defaultdict(deque)
    for op in sorted(ops, key=lambda e: e.time_range.start):
        if not getattr(op, "is_legacy", False):
            for k in getattr(op, "kernels", ()):
                waiting[_key(k.name, k.duration)].append(op)
    out = []
    for e in device:
        queue = waiting.get(_key(e.name, e.time_range.end - e.time_range.start))
        op = queue.popleft() if queue else None
        out.append(Launch(e.name, op, e.time_range.start, e.time_range.end))
    return out


def op_chain(op) -> list[str]:
    """The names of ``op`` and the ranges around it, innermost first ([] for None)."""
    names = []
    while op is not None:
        names.append(op.name)
        op = op.cpu_parent
    return names
