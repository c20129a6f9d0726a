"""L2.03 policy_gradient_loss / clipped_surrogate_loss：裁剪行为（正负 advantage、非对称 eps_high）、梯度、性质。"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_03_policy_loss")


def _logp_for_ratios(ratios):
    """old_logp = 0 时，logp = log(ratio)：直接按想要的 ratio 构造输入。"""
    logp = torch.log(torch.tensor([ratios], dtype=torch.float64)).requires_grad_()
    return logp, torch.zeros_like(logp)


def test_policy_gradient_loss_value_and_grad(mod):
    logp = torch.tensor(
        [[-1.0, -2.0, -0.5], [-0.1, -3.0, -1.0]], dtype=torch.float64, requires_grad=True
    )
    adv = torch.tensor([2.0, -0.5], dtype=torch.float64)
    loss = mod.policy_gradient_loss(logp, adv)
    assert loss.shape == (2, 3)
    want = torch.tensor([[2.0, 4.0, 1.0], [-0.05, -1.5, -0.5]], dtype=torch.float64)
    torch.testing.assert_close(loss.detach(), want)
    loss.sum().backward()
    # d(-A·logp)/dlogp = -A：好回答（A>0）的梯度下降方向是提高 logp
    torch.testing.assert_close(
        logp.grad, torch.tensor([[-2.0] * 3, [0.5] * 3], dtype=torch.float64)
    )


# ratio 依次为 0.5, 0.79, 0.9, 1.0, 1.1, 1.25, 1.5
RATIOS = [0.5, 0.79, 0.9, 1.0, 1.1, 1.25, 1.5]


def test_positive_advantage_clips_only_above(mod):
    """A > 0：ratio 超过 1+eps 的部分被裁掉（梯度为 0）；ratio 小于 1-eps 不裁（还要把概率拉回来）。"""
    logp, old = _logp_for_ratios(RATIOS)
    loss, clipped = mod.clipped_surrogate_loss(
        logp, old, torch.tensor([2.0], dtype=torch.float64), eps_low=0.2
    )
    assert clipped.dtype == torch.bool
    assert clipped.tolist() == [[False, False, False, False, False, True, True]]
    want = [-2.0 * r for r in RATIOS[:5]] + [-2.0 * 1.2, -2.0 * 1.2]
    torch.testing.assert_close(loss.detach(), torch.tensor([want], dtype=torch.float64))
    loss.sum().backward()
    # 未裁剪：d(-r·A)/dlogp = -r·A；被裁剪：0
    want_grad = [-2.0 * r for r in RATIOS[:5]] + [0.0, 0.0]
    torch.testing.assert_close(logp.grad, torch.tensor([want_grad], dtype=torch.float64))


def test_negative_advantage_clips_only_below(mod):
    """A < 0：ratio 低于 1-eps 的部分被裁掉；ratio 很大时不裁，loss = -r·A 随 r 无上界（坏回答概率涨了要全额惩罚）。"""
    logp, old = _logp_for_ratios(RATIOS)
    loss, clipped = mod.clipped_surrogate_loss(
        logp, old, torch.tensor([-1.0], dtype=torch.float64), eps_low=0.2
    )
    assert clipped.tolist() == [[True, True, False, False, False, False, False]]
    want = [0.8, 0.8] + list(RATIOS[2:])
    torch.testing.assert_close(loss.detach(), torch.tensor([want], dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0.0, 0.0] + list(RATIOS[2:])], dtype=torch.float64)
    )


def test_asymmetric_eps_high(mod):
    """DAPO clip-higher：eps_high=0.28 时 ratio=1.25 对 A>0 不再被裁，下界仍是 1-eps_low。"""
    logp, old = _logp_for_ratios(RATIOS)
    pos = torch.tensor([1.0], dtype=torch.float64)
    _, sym = mod.clipped_surrogate_loss(logp, old, pos, eps_low=0.2)
    loss, asym = mod.clipped_surrogate_loss(logp, old, pos, eps_low=0.2, eps_high=0.28)
    assert sym[0, 5] and not asym[0, 5]  # 1.25：对称时被裁，非对称时不裁
    assert asym[0, 6]  # 1.5 > 1.28 仍被裁
    assert loss[0, 6].item() == pytest.approx(-1.28)
    # 负 advantage 的下界只由 eps_low 决定，eps_high 不影响
    neg = torch.tensor([-1.0], dtype=torch.float64)
    loss_n, clip_n = mod.clipped_surrogate_loss(logp, old, neg, eps_low=0.2, eps_high=0.28)
    assert clip_n.tolist() == [[True, True, False, False, False, False, False]]
    assert loss_n[0, 0].item() == pytest.approx(0.8)
    # 下界 1-eps_low=0.85：0.5、0.79 被裁，0.9 不裁；eps_high 再大也不影响 A<0 的一侧
    _, c = mod.clipped_surrogate_loss(logp, old, neg, eps_low=0.15, eps_high=0.5)
    assert c.tolist() == [[True, True, False, False, False, False, False]]


def test_eps_high_none_means_eps_low(mod):
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 7, generator=g) * 0.3
    old = logp + torch.randn(3, 7, generator=g) * 0.3
    adv = torch.tensor([1.0, -1.0, 0.3])
    a = mod.clipped_surrogate_loss(logp, old, adv, eps_low=0.15)
    b = mod.clipped_surrogate_loss(logp, old, adv, eps_low=0.15, eps_high=0.15)
    torch.testing.assert_close(a[0], b[0])
    assert torch.equal(a[1], b[1])


def test_zero_advantage_never_clipped(mod):
    logp, old = _logp_for_ratios(RATIOS)
    loss, clipped = mod.clipped_surrogate_loss(logp, old, torch.zeros(1, dtype=torch.float64))
    assert not clipped.any()
    assert torch.equal(loss.detach(), torch.zeros_like(loss))


def test_on_policy_gradient_equals_policy_gradient(mod):
    """old_logp == logp（每批只更新一次）时 ratio ≡ 1，clipped surrogate 的梯度就是朴素 policy gradient 的梯度。"""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    a = base.clone().requires_grad_()
    loss, clipped = mod.clipped_surrogate_loss(a, base.clone(), adv)
    loss.sum().backward()
    b = base.clone().requires_grad_()
    mod.policy_gradient_loss(b, adv).sum().backward()
    assert not clipped.any()
    torch.testing.assert_close(a.grad, b.grad)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(-1.5, 1.5), min_size=6, max_size=6),
    st.floats(-3, 3).filter(lambda v: v == 0 or abs(v) > 1e-3),  # 不要次正规数：r·A 会下溢成相等
    st.floats(0.01, 0.5),
    st.floats(0.01, 0.5),
)
def test_clip_mask_and_loss_property(mod, log_ratios, a, eps_low, eps_high):
    """对任意 ratio / advantage：clipped 恰好是「A>0 且 r>1+eps_high」或「A<0 且 r<1-eps_low」，
    loss 在这些位置等于 -clip(r)·A、其余位置等于 -r·A；被裁剪处梯度为 0。"""
    lr = torch.tensor([log_ratios], dtype=torch.float64)
    logp = lr.clone().requires_grad_()
    adv = torch.tensor([a], dtype=torch.float64)
    loss, clipped = mod.clipped_surrogate_loss(
        logp, torch.zeros_like(lr), adv, eps_low=eps_low, eps_high=eps_high
    )
    loss.sum().backward()
    for j, x in enumerate(log_ratios):
        r = math.exp(x)
        if min(abs(r - (1 + eps_high)), abs(r - (1 - eps_low))) < 1e-9:
            continue  # 恰好在边界上：两个分支相等，算不算「裁剪」取决于舍入，不检查
        expect_clip = (a > 0 and r > 1 + eps_high) or (a < 0 and r < 1 - eps_low)
        assert bool(clipped[0, j]) == expect_clip
        rc = min(max(r, 1 - eps_low), 1 + eps_high)
        assert loss[0, j].item() == pytest.approx(
            -(rc if expect_clip else r) * a, rel=1e-9, abs=1e-12
        )
        if expect_clip:
            assert logp.grad[0, j].item() == 0.0
        else:
            assert logp.grad[0, j].item() == pytest.approx(-r * a, rel=1e-9, abs=1e-12)
