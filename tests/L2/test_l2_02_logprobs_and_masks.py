"""L2.02 token_logprobs / token_entropy / completion_mask / masked_mean：
与朴素实现对照、边界情况，以及「不出现完整 float32 (B,T,V)」的内存性质。"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_02_logprobs_and_masks")


def _logits(b, t, v, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, v, generator=g) * scale).to(dtype)


def _tokens(b, t, v, seed=1):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def _naive_logprobs(logits, tokens):
    """课程定义里的朴素写法：整块 float32 log_softmax 再 gather。"""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------- token_logprobs


def test_logprobs_match_naive_float32(mod):
    logits, tokens = _logits(2, 10, 100), _tokens(2, 10, 100)
    got = mod.token_logprobs(logits, tokens)
    assert got.shape == (2, 10) and got.dtype == torch.float32
    # atol 1e-4：float32 的 logsumexp 在不同 CPU 内核路径上可差到 1e-5 量级；写错公式的误差是 O(1)
    torch.testing.assert_close(got, _naive_logprobs(logits, tokens), rtol=1e-5, atol=1e-4)
    assert (got <= 0).all(), "log 概率不可能为正"


def test_logprobs_bf16_logits_match_float32_log_softmax(mod):
    # 训练时 logits 是 bf16：结果必须等于「先升到 float32 再 log_softmax」，而不是 bf16 里的 log_softmax
    logits, tokens = _logits(3, 50, 257, torch.bfloat16), _tokens(3, 50, 257)
    got = mod.token_logprobs(logits, tokens)
    assert got.dtype == torch.float32, "返回值应为 float32（在 bf16 里算 log 概率会损失精度）"
    want = _naive_logprobs(logits, tokens)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    # 对照：直接在 bf16 里做 log_softmax 的误差要大得多，这正是要升精度的原因
    bf16_err = (
        (torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0].float() - want)
        .abs()
        .max()
    )
    assert bf16_err > 1e-3


def test_logprobs_more_rows_than_one_chunk(mod):
    # 行数不是 CHUNK_ROWS 的整数倍，检查切块的边界没有错位
    rows = 2 * getattr(mod, "CHUNK_ROWS", 128) + 7
    logits, tokens = _logits(1, rows, 33), _tokens(1, rows, 33)
    torch.testing.assert_close(
        mod.token_logprobs(logits, tokens), _naive_logprobs(logits, tokens), rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_gradient_matches_naive(mod, dtype):
    # 训练脚本要对它反向传播：梯度必须和朴素写法一致（有 checkpoint 重算也一样）
    base, tokens = _logits(2, 150, 40, dtype), _tokens(2, 150, 40)
    weights = torch.randn(2, 150, generator=torch.Generator().manual_seed(2))
    a = base.clone().requires_grad_()
    (mod.token_logprobs(a, tokens) * weights).sum().backward()
    b = base.clone().requires_grad_()
    (_naive_logprobs(b, tokens) * weights).sum().backward()
    assert a.grad is not None and a.grad.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(a.grad, b.grad, **tol)


def test_logprobs_shape_mismatch_raises(mod):
    with pytest.raises(ValueError):
        mod.token_logprobs(torch.zeros(2, 5, 10), torch.zeros(2, 4, dtype=torch.long))


def _load_memory_script():
    path = (
        Path(__file__).resolve().parents[2]
        / "L2_algorithm"
        / "02_logprobs_and_masks"
        / "logprob_memory.py"
    )
    spec = importlib.util.spec_from_file_location("logprob_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_full_float32_tensor_in_forward_or_backward(mod):
    # 用课上那个计数脚本的 measure()：盯住每个算子的输出和 autograd 存下的张量
    measure = _load_memory_script().measure
    b, t, v = 4, 160, 64  # 640 行：远多于一块
    full_bytes = b * t * v * 4
    r = measure(mod.token_logprobs, _logits(b, t, v, torch.bfloat16), _tokens(b, t, v))
    # 1) 没有任何一个算子一次产出完整的 float32 (B,T,V)
    assert r["max_fp32_bytes"] <= full_bytes // 2, (
        f"出现了 {r['max_fp32_bytes']} 字节的 float32 张量（完整的 (B,T,V) 是 {full_bytes}）：要按行分块，每块单独 .float()"
    )
    # 2) 为 backward 存下的 float32 加起来也不能接近完整的 (B,T,V)
    assert r["saved_fp32_bytes"] <= full_bytes // 2, (
        f"autograd 为 backward 存了共 {r['saved_fp32_bytes']} 字节的 float32（完整的 (B,T,V) 是 {full_bytes}）："
        "每块的 float32 中间结果都被留到了 backward。用 torch.utils.checkpoint 包住每一块的计算"
    )


def test_memory_script_at_qwen3_shapes(impl_name, capsys, monkeypatch):
    # 脚本在 meta 设备上按 Qwen3 的真实尺寸数字节，不分配内存
    script = _load_memory_script()
    monkeypatch.setattr(
        "sys.argv", ["logprob_memory.py", "--batch", "2", "--seq", "256", "--impl", impl_name]
    )
    script.main()
    out = capsys.readouterr().out
    full = 2 * 256 * 151_936 * 4 / 1e9  # 完整 float32 (B,T,V) 的 GB 数
    chunk = 128 * 151_936 * 4 / 1e9  # 一块 128 行
    assert f"朴素 log_softmax + gather | {full:.3f} GB | {full:.3f} GB" in out
    assert f"分块，不用 checkpoint | {chunk:.3f} GB | {full:.3f} GB" in out


# ---------------------------------------------------------------- token_entropy


def test_entropy_matches_naive(mod):
    logits = _logits(2, 300, 50, torch.bfloat16)
    p = torch.softmax(logits.float(), -1)
    want = -(p * torch.log(p)).sum(-1)
    got = mod.token_entropy(logits)
    assert got.shape == (2, 300) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_entropy_limits(mod):
    v = 1000
    uniform = torch.zeros(1, 2, v)
    torch.testing.assert_close(mod.token_entropy(uniform), torch.full((1, 2), math.log(v)))
    peaked = torch.zeros(1, 1, v)
    peaked[..., 3] = 100.0  # 几乎全部概率在一个 token 上
    assert mod.token_entropy(peaked).item() < 1e-3


# ---------------------------------------------------------------- completion_mask


def _naive_mask(ids, eos):
    eos = {eos} if isinstance(eos, int) else set(eos)
    out = []
    for row in ids.tolist():
        m, seen = [], False
        for tok in row:
            m.append(0.0 if seen else 1.0)
            seen = seen or tok in eos
        out.append(m)
    return torch.tensor(out)


def test_mask_edge_cases(mod):
    eos = 2
    ids = torch.tensor(
        [
            [2, 5, 5, 5],  # EOS 在第 0 位：只保留 EOS 本身
            [5, 6, 2, 2],  # EOS 之后是 pad（pad == eos）：第一个 EOS 算，后面的不算
            [5, 6, 7, 8],  # 没有 EOS（被截断）：全 1
            [5, 6, 7, 2],  # EOS 在最后一位：全 1
        ]
    )
    want = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.float32
    )
    got = mod.completion_mask(ids, eos)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_mask_several_eos_ids(mod):
    # Qwen3：<|im_end|>=151645 与 <|endoftext|>=151643 都结束生成；哪个先出现就停在哪
    im_end, eot, pad = 151645, 151643, 151643
    ids = torch.tensor([[10, im_end, pad, pad], [10, 11, eot, pad], [10, 11, 12, 13]])
    want = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float32)
    torch.testing.assert_close(mod.completion_mask(ids, [im_end, eot]), want)
    torch.testing.assert_close(mod.completion_mask(ids, (im_end, eot)), want)
    # 只给一个 id 时，另一个就是普通 token
    torch.testing.assert_close(mod.completion_mask(ids, im_end)[1], torch.ones(4))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda b: st.integers(1, 9).flatmap(
            lambda t: st.lists(
                st.lists(st.integers(0, 5), min_size=t, max_size=t), min_size=b, max_size=b
            )
        )
    ),
    st.one_of(st.integers(0, 5), st.lists(st.integers(0, 5), min_size=1, max_size=3)),
)
def test_mask_matches_naive_loop(mod, rows, eos):
    ids = torch.tensor(rows)
    torch.testing.assert_close(mod.completion_mask(ids, eos), _naive_mask(ids, eos))


# ---------------------------------------------------------------- masked_mean


def test_masked_mean_all_and_per_row(mod):
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    m = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    torch.testing.assert_close(mod.masked_mean(x, m), torch.tensor((1 + 2 + 10 + 20 + 30) / 5))
    torch.testing.assert_close(mod.masked_mean(x, m, dim=1), torch.tensor([1.5, 20.0]))
    torch.testing.assert_close(mod.masked_mean(x, m, dim=0), torch.tensor([5.5, 11.0, 30.0, 0.0]))
    assert mod.masked_mean(x, m).dim() == 0
    torch.testing.assert_close(mod.masked_mean(x, m.bool(), dim=1), torch.tensor([1.5, 20.0]))


def test_masked_mean_empty_slice_is_zero(mod):
    x = torch.randn(3, 5)
    m = torch.tensor([[1.0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    row = mod.masked_mean(x, m, dim=1)
    assert not torch.isnan(row).any()
    assert row[1].item() == 0.0
    assert mod.masked_mean(x, torch.zeros_like(x)).item() == 0.0


def test_masked_positions_never_leak(mod):
    # pad 位置上的值可能是垃圾（NaN/inf）；0 * NaN = NaN，只靠乘 mask 是不够的
    x = torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]], requires_grad=True)
    m = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(mod.masked_mean(x, m), torch.tensor(2.0))
    row = mod.masked_mean(x, m, dim=1)
    torch.testing.assert_close(row, torch.tensor([1.0, 3.0]))
    row.sum().backward()
    assert torch.isfinite(x.grad).all(), "被遮住的位置不应该让梯度变成 NaN"


def test_masked_mean_gradient_with_empty_slice(mod):
    x = torch.randn(2, 3, requires_grad=True)
    m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mod.masked_mean(x, m, dim=1).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 10_000))
def test_masked_mean_matches_naive(mod, b, t, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=g, dtype=torch.float64)
    m = (torch.rand(b, t, generator=g) > 0.5).double()
    for dim in (None, 0, 1):
        got = mod.masked_mean(x, m, dim=dim)
        if dim is None:
            sel = [v for v, k in zip(x.flatten().tolist(), m.flatten().tolist()) if k]
            want = torch.tensor(sum(sel) / len(sel) if sel else 0.0, dtype=torch.float64)
        else:
            xs, ms = (x, m) if dim == 1 else (x.T, m.T)
            want = torch.tensor(
                [
                    (sum(v for v, k in zip(xr, mr) if k) / sum(mr)) if sum(mr) else 0.0
                    for xr, mr in zip(xs.tolist(), ms.tolist())
                ],
                dtype=torch.float64,
            )
        torch.testing.assert_close(got, want)
