"""L2.06 process_logits：temperature、top-p nucleus 的边界情况，与逐 token 朴素实现对照。"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_06_sampling")


def _kept(out: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(out)


def _naive_nucleus(row: torch.Tensor, top_p: float) -> set[int]:
    """逐个 token 累加（float64）：从概率最大的开始收，累计概率一达到 top_p 就停。"""
    probs = torch.softmax(row.double(), -1)
    order = sorted(range(len(probs)), key=lambda i: -probs[i].item())
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs[i].item()
        if mass >= top_p:
            break
    return kept


def test_top_p_one_keeps_everything(mod):
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0)) * 5
    out = mod.process_logits(logits, temperature=1.0, top_p=1.0)
    assert out.shape == logits.shape
    assert _kept(out).all()
    torch.testing.assert_close(out, logits)


def test_tiny_top_p_keeps_only_argmax(mod):
    logits = torch.randn(5, 30, generator=torch.Generator().manual_seed(1)) * 2
    out = mod.process_logits(logits, top_p=1e-6)
    assert (_kept(out).sum(-1) == 1).all()
    assert torch.equal(out.argmax(-1), logits.argmax(-1))
    rows = torch.arange(5)
    torch.testing.assert_close(out[rows, logits.argmax(-1)], logits[rows, logits.argmax(-1)])


@pytest.mark.parametrize(
    "top_p,n_kept", [(0.25, 1), (0.3, 2), (0.5, 2), (0.75, 3), (0.76, 4), (1.0, 4)]
)
def test_ties_and_exactly_reaching_the_threshold(mod, top_p, n_kept):
    # 4 个 logits 相同 -> 概率精确为 0.25，累计 0.25/0.5/0.75/1.0 在浮点里也是精确的。
    # 「累计概率达到 top_p」包含恰好等于：top_p=0.5 时两个 token 就够了，不能收第三个，也不能只收一个。
    logits = torch.zeros(2, 4)
    out = mod.process_logits(logits, top_p=top_p)
    assert (_kept(out).sum(-1) == n_kept).all(), (
        f"top_p={top_p} 时应保留 {n_kept} 个，得到 {_kept(out).sum(-1).tolist()}"
    )


@pytest.mark.parametrize("top_p,n_kept", [(0.49, 1), (0.51, 2), (0.79, 2), (0.81, 3)])
def test_threshold_just_below_and_above(mod, top_p, n_kept):
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))  # 排序后 0.5, 0.3, 0.2
    out = mod.process_logits(logits, top_p=top_p)
    assert _kept(out).sum().item() == n_kept
    assert _kept(out)[0, 1], "概率最大的 token 永远保留"


def test_removed_positions_are_minus_inf_and_kept_are_untouched(mod):
    logits = torch.tensor([[1.0, 4.0, 2.0, 3.0, -1.0]])
    out = mod.process_logits(logits, temperature=0.5, top_p=0.9)
    kept = _kept(out)
    assert (out[~kept] == float("-inf")).all()
    torch.testing.assert_close(out[kept], (logits / 0.5)[kept])
    # 保留的是按概率排在最前面的那些（原词表位置要对）
    assert kept[0, 1] and kept[0, 3]
    assert not kept[0, 4]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 0.99), st.floats(0.3, 3.0))
def test_matches_naive_nucleus(mod, seed, top_p, temperature):
    logits = (
        torch.randn(
            3, 12, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        ).float()
        * 2
    )
    out = mod.process_logits(logits, temperature=temperature, top_p=top_p)
    for b in range(3):
        scaled = logits[b].double() / temperature
        probs = torch.softmax(scaled, -1).sort(descending=True).values.cumsum(-1)
        if (probs - top_p).abs().min() < 1e-5:
            continue  # 正好压在阈值上：float32 的舍入说了算，不比较
        want = _naive_nucleus(scaled, top_p)
        got = set(torch.nonzero(_kept(out[b])).flatten().tolist())
        assert got == want, f"行 {b}: 保留 {sorted(got)}，期望 {sorted(want)}"


def test_temperature_scales_logits(mod):
    logits = torch.randn(2, 10, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(mod.process_logits(logits, temperature=2.0), logits / 2.0)
    torch.testing.assert_close(mod.process_logits(logits, temperature=0.5), logits / 0.5)


def test_temperature_is_applied_before_top_p(mod):
    # 温度越高分布越平，同样的 top_p 要收更多 token；温度越低越少
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(4)) * 2
    n_cold = _kept(mod.process_logits(logits, temperature=0.5, top_p=0.9)).sum(-1)
    n_one = _kept(mod.process_logits(logits, temperature=1.0, top_p=0.9)).sum(-1)
    n_hot = _kept(mod.process_logits(logits, temperature=2.0, top_p=0.9)).sum(-1)
    assert (n_cold <= n_one).all() and (n_one <= n_hot).all() and (n_cold < n_hot).any()


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_raises(mod, temperature):
    with pytest.raises(ValueError):
        mod.process_logits(torch.zeros(1, 5), temperature=temperature)


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5])
def test_bad_top_p_raises(mod, top_p):
    with pytest.raises(ValueError):
        mod.process_logits(torch.zeros(1, 5), top_p=top_p)


def test_rows_are_independent_and_input_untouched(mod):
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(5)) * 3
    before = logits.clone()
    batch = mod.process_logits(logits, temperature=0.8, top_p=0.7)
    assert torch.equal(logits, before), "不要原地修改输入的 logits"
    for b in range(3):
        torch.testing.assert_close(
            mod.process_logits(logits[b : b + 1], temperature=0.8, top_p=0.7)[0], batch[b]
        )


def test_bf16_dtype_is_kept_and_samples_stay_in_nucleus(mod):
    logits = (torch.randn(8, 100, generator=torch.Generator().manual_seed(6)) * 3).bfloat16()
    out = mod.process_logits(logits, temperature=0.7, top_p=0.8)
    assert out.dtype == torch.bfloat16
    samples = torch.multinomial(
        out.float().softmax(-1), 200, replacement=True, generator=torch.Generator().manual_seed(7)
    )
    assert _kept(out).gather(-1, samples).all(), "采样结果落在了 nucleus 之外"
