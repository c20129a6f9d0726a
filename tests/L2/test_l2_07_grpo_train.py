"""L2.07 microbatch_weight：按权重累加 micro-batch 的损失，必须精确等于整个 batch 一次算出的损失。

参考值在这里独立写出（三种 aggregation 的定义见 L2.05），不依赖被测代码。
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_07_grpo_train")


def _aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, aggregation: str, max_len: int
) -> torch.Tensor:
    """整个 batch 的聚合（参考定义）。mask 全 0 的行在 sequence_mean 里贡献 0。"""
    if aggregation == "sequence_mean":
        rows = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        return rows.mean()
    if aggregation == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
    return (per_token * mask).sum() / (mask.shape[0] * max_len)


def _mask(lengths, T):
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_weighted_microbatches_equal_full_batch(mod, aggregation, data):
    n_mb = data.draw(st.integers(1, 4))
    m = data.draw(st.integers(1, 4))
    T = data.draw(st.integers(1, 7))
    lengths = data.draw(st.lists(st.integers(0, T), min_size=n_mb * m, max_size=n_mb * m))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000)))
    per_token = torch.randn(n_mb * m, T, generator=g, dtype=torch.float64)
    mask = _mask(lengths, T)
    full = _aggregate(per_token, mask, aggregation, max_len=T + 2)
    acc = torch.zeros((), dtype=torch.float64)
    for i in range(0, n_mb * m, m):
        w = mod.microbatch_weight(mask[i : i + m], mask, aggregation)
        assert isinstance(w, float)
        acc = acc + w * _aggregate(
            per_token[i : i + m], mask[i : i + m], aggregation, max_len=T + 2
        )
    torch.testing.assert_close(acc, full)


def test_concrete_values(mod):
    mask = _mask([3, 1, 0, 4], 4)  # 共 8 个有效 token
    assert mod.microbatch_weight(mask[:2], mask, "token_mean") == pytest.approx(4 / 8)
    assert mod.microbatch_weight(mask[2:], mask, "token_mean") == pytest.approx(4 / 8)
    assert mod.microbatch_weight(mask[:1], mask, "token_mean") == pytest.approx(3 / 8)
    for agg in ("sequence_mean", "constant"):
        assert mod.microbatch_weight(mask[:1], mask, agg) == pytest.approx(1 / 4)


def test_empty_batch_and_bad_input(mod):
    empty = torch.zeros(4, 5)
    assert mod.microbatch_weight(empty[:2], empty, "token_mean") == 0.0
    with pytest.raises(ValueError):
        mod.microbatch_weight(empty[:2], empty, "grpo")
    with pytest.raises(ValueError):
        mod.microbatch_weight(torch.zeros(5), empty, "token_mean")
