"""假的 torch.profiler 结果，用真的 FunctionEvent 搭，有 torch 2.13 和 torch 2.11 两种事件形状。

两个版本的 profiler 都把每个 device 事件记进发射它的算子的 ``kernels`` 列表（``append_kernel``）；
2.13 另外给每个事件一个 ``linked_correlation_id``（device 事件：发射它的算子的 id），2.11 的 FunctionEvent
没有这个字段。"2.11" 形状把事件削成 torch 2.11.0 的 ``FunctionEvent.__init__`` 设的那些字段
（torch/autograd/profiler_util.py，2.11.0 的 wheel 里读出来的），别的照旧。
"""

from __future__ import annotations

import itertools

from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

SHAPES = ("2.13", "2.11")
FIELDS_2_11 = frozenset(
    "concrete_inputs count cpu_children cpu_memory_usage cpu_parent device_index "
    "device_memory_usage device_resource_id device_type flops fwd_thread id input_shapes is_async "
    "is_legacy is_remote is_user_annotation kernels kwinputs _metadata_json name node_id "
    "overload_name scope self_cpu_percent sequence_nr stack thread time_range total_cpu_percent "
    "total_device_percent trace_name use_device".split()
)


class FakeProfile:
    """``events()`` 像 ``prof.events()``：CPU 算子（带父子关系）、CUDA runtime 调用、device 事件。

    op 的时间区间按建立的先后排（每个 10 µs）；kernel 的 id 是另一套编号（CUPTI 的），从 1 起，
    所以会和算子的 id 撞上，和真的 profile 一样。"""

    def __init__(self, shape: str = "2.13"):
        assert shape in SHAPES
        self.shape, self._events = shape, []
        self._op_ids, self._cupti_ids, self._clock = itertools.count(1), itertools.count(1), 0.0

    def _add(self, e: FunctionEvent) -> FunctionEvent:
        if self.shape == "2.11":
            for name in set(vars(e)) - FIELDS_2_11:
                delattr(e, name)
        self._events.append(e)
        return e

    def op(self, name: str, parent: FunctionEvent | None = None) -> FunctionEvent:
        self._clock += 10.0
        e = FunctionEvent(
            id=next(self._op_ids), name=name, thread=1, start_us=self._clock,
            end_us=self._clock + 10.0, use_device="cuda",
        )  # fmt: skip
        if parent is not None:
            e.set_cpu_parent(parent)
            parent.append_cpu_child(e)
        return self._add(e)

    def kernel(self, name: str, op: FunctionEvent | None, us: float, start: float = 0.0) -> None:
        """``op`` 发射的一个 device 事件（op=None：profiler 没把它连到任何算子）。"""
        corr = next(self._cupti_ids)
        linked = 0 if op is None else op.id
        if op is not None:  # launch 本身：一个 CPU 上的 runtime 事件，id 是 CUPTI 的编号
            launch = FunctionEvent(
                id=corr, name="cudaLaunchKernel", thread=1, start_us=op.time_range.start,
                end_us=op.time_range.start + 1.0, linked_correlation_id=linked,
            )  # fmt: skip
            self._add(launch)
        k = FunctionEvent(
            id=corr, name=name, thread=7, start_us=start, end_us=start + us,
            device_type=DeviceType.CUDA, linked_correlation_id=linked, use_device="cuda",
        )  # fmt: skip
        if op is not None:  # profiler 的后处理：device 事件记进发射它的算子
            op.append_kernel(name, 0, k.time_range.end - k.time_range.start)
        self._add(k)

    def gpu_range(self, name: str, start: float, us: float) -> None:
        """record_function 的一段在 GPU 时间线上的样子（从里面第一个到最后一个 kernel）：不是 kernel。"""
        e = FunctionEvent(
            id=next(self._cupti_ids), name=name, thread=7, start_us=start, end_us=start + us,
            device_type=DeviceType.CUDA, is_user_annotation=True, use_device="cuda",
        )  # fmt: skip
        self._add(e)

    def events(self) -> list[FunctionEvent]:
        return self._events
