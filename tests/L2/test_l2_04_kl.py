"""L2.04 KL 估计量 k1/k2/k3：公式与方向、k3 >= 0、在玩具 categorical 上的精确期望与固定种子 Monte-Carlo 检验。"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

N_SAMPLES = 200_000


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_04_kl")


def test_values_and_direction(mod):
    # logp = log π(x) = -1，ref_logp = log π_ref(x) = -2：当前策略比参考更偏爱 x
    logp, ref = torch.tensor([-1.0, -0.5]), torch.tensor([-2.0, -0.5])
    torch.testing.assert_close(mod.kl_k1(logp, ref), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(mod.kl_k2(logp, ref), torch.tensor([0.5, 0.0]))
    # k3 = r - 1 - log r，r = π_ref/π = e^{-1}；方向写反（r = π/π_ref）会得到 e - 2 ≈ 0.718
    torch.testing.assert_close(mod.kl_k3(logp, ref), torch.tensor([math.exp(-1.0), 0.0]))


def test_shapes_preserved(mod):
    logp = torch.randn(2, 3, 4)
    for fn in (mod.kl_k1, mod.kl_k2, mod.kl_k3):
        assert fn(logp, logp + 0.1).shape == (2, 3, 4)


@settings(max_examples=200, deadline=None)
@given(st.floats(-40, 0), st.floats(-40, 0))
def test_k3_and_k2_nonnegative(mod, lp, rp):
    logp, ref = torch.tensor([lp], dtype=torch.float64), torch.tensor([rp], dtype=torch.float64)
    k3 = mod.kl_k3(logp, ref).item()
    # 数学上 k3 >= 0；写成 exp(x) - x - 1 时，x≈1e-16 会舍入出 -1.1e-16，允许这几个 ulp 的误差
    assert k3 >= -1e-15
    assert mod.kl_k2(logp, ref).item() >= 0.0
    if lp == rp:
        assert k3 == 0.0


def _toy(distance: float):
    """6 个类别的玩具 categorical：π = softmax(a)，π_ref = softmax(a + distance·b)。distance 越大两者越远。"""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(a, 0)
    ref = torch.log_softmax(a + distance * b, 0)
    exact_kl = (logp.exp() * (logp - ref)).sum().item()  # KL(π || π_ref) = Σ π log(π/π_ref)
    return logp, ref, exact_kl


@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
@pytest.mark.parametrize("distance", [0.3, 1.5])
def test_exact_expectation(mod, name, distance):
    """不采样：对 x ~ π 精确求期望 Σ_x π(x)·k(x)。k1、k3 的期望恰好是 KL（k3：Σπ·π_ref/π = 1），k2 不是。"""
    logp, ref, kl = _toy(distance)
    expectation = (logp.exp() * getattr(mod, name)(logp, ref)).sum().item()
    if name == "kl_k2":
        # 二阶近似 KL ≈ ½E[(log r)²]，偏差是三阶小量：近时相对偏差小，远时明显
        rel = abs(expectation - kl) / kl
        assert rel > 1e-3
        assert rel < 0.05 if distance == 0.3 else rel > 0.1
    else:
        assert expectation == pytest.approx(kl, rel=1e-10)


@pytest.mark.parametrize("distance", [0.3, 1.5])
def test_monte_carlo_means(mod, distance):
    """固定种子采样 N=200k 个 x ~ π，每个估计量的样本均值与真值的差要在 4 个标准误（SE = std/√N）以内。

    k1、k3 的真值是 KL(π||π_ref)；k2 的真值是它自己的期望 ½E[(log r)²]，而这个值与 KL 的差（偏差）
    远大于 4 个 SE——也就是说 k2 的偏差是真实存在的，不是采样噪声。
    """
    logp, ref, kl = _toy(distance)
    g = torch.Generator().manual_seed(1234)
    x = torch.multinomial(logp.exp(), N_SAMPLES, replacement=True, generator=g)
    lp, rp = logp[x], ref[x]  # 采到的 token 在两个分布下的 log 概率
    k2_expect = (logp.exp() * 0.5 * (logp - ref) ** 2).sum().item()
    for name, truth in (("kl_k1", kl), ("kl_k2", k2_expect), ("kl_k3", kl)):
        k = getattr(mod, name)(lp, rp)
        se = (k.std() / math.sqrt(N_SAMPLES)).item()
        assert abs(k.mean().item() - truth) < 4 * se, (
            f"{name}: 样本均值 {k.mean().item():.5f}，真值 {truth:.5f}，SE {se:.2e}"
        )
        if name == "kl_k2":
            assert abs(k2_expect - kl) > 10 * se, "k2 的偏差应当远大于采样误差"


def test_k3_lower_variance_than_k1_when_close(mod):
    """两个分布接近时，k3 的方差比 k1 小得多（Schulman 博客的要点）；k1 的单个样本还可能为负。"""
    logp, ref, _ = _toy(0.3)
    p = logp.exp()

    def var(k):
        m = (p * k).sum()
        return (p * (k - m) ** 2).sum().item()

    k1, k3 = mod.kl_k1(logp, ref), mod.kl_k3(logp, ref)
    assert var(k3) < 0.1 * var(k1)
    assert (k1 < 0).any() and (k3 >= 0).all()


def _grad(fn):
    """对 logits a 求梯度：a 决定当前策略 π = softmax(a)。"""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_()
    ref = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    logp = torch.log_softmax(a, 0)
    (g_a,) = torch.autograd.grad(fn(logp, ref), a)
    return g_a


def test_gradient_of_estimators_in_the_loss(mod):
    """「估计量的值无偏」不等于「放进 loss 后梯度无偏」（README 坑 2、坑 3）。

    这里精确求期望（不采样）：采样分布是 π 本身但不求导（对应"样本已经采好了"），梯度只经过 logp。
    """
    w = lambda logp: logp.exp().detach()  # noqa: E731  采样权重 π(x)，不带梯度
    reverse_kl = _grad(lambda lp, rp: (lp.exp() * (lp - rp)).sum())  # ∇ KL(π || π_ref)：我们想要的
    forward_kl = _grad(lambda lp, rp: (rp.exp() * (rp - lp)).sum())  # ∇ KL(π_ref || π)：方向反了的
    # k3 放进 loss：梯度的期望是「反方向」KL 的梯度，不是 KL(π||π_ref) 的
    k3_in_loss = _grad(lambda lp, rp: (w(lp) * mod.kl_k3(lp, rp)).sum())
    torch.testing.assert_close(k3_in_loss, forward_kl)
    assert (k3_in_loss - reverse_kl).abs().max() > 1e-3
    # 乘上 ratio = π/π_old（值为 1，但可导）之后：正好是 KL(π||π_ref) 的梯度（DeepSeek-V3.2、TRL use_bias_correction_kl）
    ratio = lambda lp: torch.exp(lp - lp.detach())  # noqa: E731
    corrected = _grad(lambda lp, rp: (w(lp) * ratio(lp) * mod.kl_k3(lp, rp)).sum())
    torch.testing.assert_close(corrected, reverse_kl)
    # k1 放进 loss：梯度的期望恰好是 0（E_π[∇log π] = 0），它根本不把策略往参考模型拉
    k1_in_loss = _grad(lambda lp, rp: (w(lp) * mod.kl_k1(lp, rp)).sum())
    torch.testing.assert_close(k1_in_loss, torch.zeros_like(k1_in_loss), atol=1e-12, rtol=0)
