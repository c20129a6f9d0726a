"""common.decode.profiler_kernels：每个 GPU kernel 对上发射它的算子，torch 2.13 和 torch 2.11 两种事件形状（假的 profile）。"""

from __future__ import annotations

import pytest
from profiler_fakes import SHAPES, FakeProfile

from common.decode.profiler_kernels import kernel_launches, op_chain


@pytest.mark.parametrize("shape", SHAPES)
def test_each_kernel_gets_the_op_that_launched_it(shape):
    p = FakeProfile(shape)
    step = p.op("train_step")
    fwd = p.op("aten::mm", p.op("body_forward", step))
    bwd = p.op("aten::mm", p.op("autograd::engine::evaluate_function: MmBackward0", step))
    p.kernel("gemm", fwd, 100, start=0)
    p.kernel("gemm", bwd, 100, start=150)  # 同名、同样长：只能按时间先后对上
    p.kernel("memset", None, 5, start=120)  # profiler 没有连到任何算子
    p.kernel("softmax", fwd, 7, start=100)
    p.gpu_range("body_forward", 0, 107)  # record_function 在 GPU 上的区间：不是 kernel，不该出现
    got = [(k.name, op_chain(k.op), k.start_us, k.end_us) for k in kernel_launches(p.events())]
    assert got == [
        ("gemm", ["aten::mm", "body_forward", "train_step"], 0, 100),
        ("softmax", ["aten::mm", "body_forward", "train_step"], 100, 107),
        ("memset", [], 120, 125),
        ("gemm", ["aten::mm", "autograd::engine::evaluate_function: MmBackward0", "train_step"],
         150, 250),
    ]  # fmt: skip


def test_the_two_shapes_differ_only_in_the_link_field():
    """测试用的两种形状确实不同：2.13 的 device 事件带 linked_correlation_id，2.11 的没有，kernels 列表两边都有。"""
    new, old = FakeProfile("2.13"), FakeProfile("2.11")
    for p in (new, old):
        p.kernel("gemm", p.op("aten::mm"), 10)
    assert all(hasattr(e, "linked_correlation_id") for e in new.events())
    assert not any(hasattr(e, "linked_correlation_id") for e in old.events())
    assert (
        [len(e.kernels) for e in new.events()]
        == [len(e.kernels) for e in old.events()]
        == [1, 0, 0]
    )


def test_runtime_calls_whose_id_equals_an_op_id_are_not_taken_for_the_op():
    """CUDA runtime 调用（cudaLaunchKernel）也是 CPU 事件，它的 id 是 CUPTI 的编号，可能等于某个算子的 id。"""
    p = FakeProfile("2.13")
    first, second = p.op("aten::add"), p.op("aten::mul")
    p.kernel("k_mul", second, 3)  # 它的 launch 事件 id = 1 = aten::add 的 id
    p.kernel("k_add", first, 3, start=10)
    assert any(e.name == "cudaLaunchKernel" and e.id == first.id for e in p.events())
    got = {k.name: k.op.name for k in kernel_launches(p.events())}
    assert got == {"k_mul": "aten::mul", "k_add": "aten::add"}
