"""L2.01 group_advantages：性质、边界情况、与逐组朴素实现对照。"""

from __future__ import annotations

import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_01_advantages")


def _naive(rewards: list[float], g: int, eps: float, scale: str) -> list[float]:
    """逐组 Python 循环的参考（statistics.stdev 即无偏 std）。"""
    out = []
    std_all = statistics.stdev(rewards)
    for i in range(0, len(rewards), g):
        grp = rewards[i : i + g]
        mean = sum(grp) / g
        std = {"group": statistics.stdev(grp), "batch": std_all, "none": None}[scale]
        out += [(r - mean) if std is None else (r - mean) / (std + eps) for r in grp]
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_naive_loop(mod, scale):
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0, 1.0, 0.2, 0.5, 0.0, 0.4]
    got = mod.group_advantages(torch.tensor(rewards, dtype=torch.float64), 4, scale=scale)
    torch.testing.assert_close(
        got, torch.tensor(_naive(rewards, 4, 1e-6, scale), dtype=torch.float64)
    )


def test_cs336_reference_example(mod):
    # stanford-cs336/assignment5-alignment 讲义里的例子：组 [0.2, 0.5, 0, 0.4] -> [-0.338, 1.015, -1.240, 0.564]
    got = mod.group_advantages(torch.tensor([0.2, 0.5, 0.0, 0.4]), 4)
    torch.testing.assert_close(got, torch.tensor([-0.338, 1.015, -1.240, 0.564]), atol=1e-3, rtol=0)


rewards_st = st.integers(2, 6).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.integers(1, 5).flatmap(
            lambda p: st.lists(st.floats(-10, 10, allow_nan=False), min_size=p * g, max_size=p * g)
        ),
    )
)


@settings(max_examples=60, deadline=None)
@given(rewards_st, st.floats(-100, 100, allow_nan=False))
def test_properties(mod, gr, shift):
    g, rewards = gr
    r = torch.tensor(rewards, dtype=torch.float64)
    for scale in ("group", "none"):
        a = mod.group_advantages(r, g, scale=scale)
        assert torch.isfinite(a).all()
        # 每组 advantage 之和为 0（组均值是基线）
        torch.testing.assert_close(
            a.view(-1, g).sum(1),
            torch.zeros(len(rewards) // g, dtype=torch.float64),
            atol=1e-6,
            rtol=0,
        )
        # 所有 reward 加同一个常数，advantage 不变
        torch.testing.assert_close(
            mod.group_advantages(r + shift, g, scale=scale), a, atol=1e-6, rtol=1e-6
        )


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_zero_std_group_gives_zeros(mod, scale):
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    a = mod.group_advantages(r, 4, scale=scale)
    assert not torch.isnan(a).any()
    assert torch.equal(a[:8], torch.zeros(8))
    assert (a[8:] != 0).all()


def test_integer_rewards_are_accepted(mod):
    a = mod.group_advantages(torch.tensor([1, 0, 1, 0]), 2)
    assert a.is_floating_point()


@pytest.mark.parametrize(
    "rewards,g,scale",
    [
        (torch.zeros(6), 1, "group"),  # group_size < 2
        (torch.zeros(7), 2, "group"),  # 不能整除
        (torch.zeros(2, 4), 4, "group"),  # 不是一维
        (torch.zeros(8), 4, "std"),  # 未知 scale
    ],
)
def test_bad_input_raises(mod, rewards, g, scale):
    with pytest.raises(ValueError):
        mod.group_advantages(rewards, g, scale=scale)


def test_non_contiguous_rewards(mod):
    # 从更大的张量里切出来的 reward（步长不为 1）也要能用：reshape 可以，view 会报错
    full = torch.tensor([1.0, 9.0, 0.0, 9.0, 0.0, 9.0, 1.0, 9.0])
    r = full[::2]
    assert not r.is_contiguous()
    torch.testing.assert_close(mod.group_advantages(r, 2), mod.group_advantages(r.contiguous(), 2))
