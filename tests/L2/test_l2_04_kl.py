"""L2.04 KL 估计量 k1/k2/k3：公式与方向、k3 >= 0、在玩具 categorical 上的精确期望与固定种子 Monte-Carlo 检验。

输出不对时，失败信息的第一行是一句中文：认出了下面 `*_MISTAKES` 里的典型错误就直接说是哪一种、回看课文哪一节。
"""

from __future__ import annotations

import math

import pytest
import torch
from diagnose import Mistake, check
from hypothesis import given, settings
from hypothesis import strategies as st
from mistake_tools import derived, diagnosis_line, named

N_SAMPLES = 200_000

FORMULA = "L2.04「2. 公式，以及它们从哪来」的表"
SPEC = "L2.04「3.1 三个函数的规格」"
PITFALL_DIRECTION = "L2.04「4. 坑，以及出处」坑 1"

# 典型错误：参数与被测函数相同 (logp, ref_logp) -> 这种错误算出的结果
K1_MISTAKES = [
    Mistake(
        "把 k1 的符号写反了（算成了 ref_logp − logp）",
        PITFALL_DIRECTION,
        lambda logp, ref_logp: ref_logp - logp,
    ),
    Mistake(
        "给 k1 取了绝对值（k1 的单个样本本来就可以为负，取了绝对值就不再无偏）",
        FORMULA,
        lambda logp, ref_logp: (logp - ref_logp).abs(),
    ),
]
K2_MISTAKES = [
    Mistake("漏掉了 k2 的 ½", FORMULA, lambda logp, ref_logp: (logp - ref_logp) ** 2),
    Mistake(
        "把 k2 的 ½ 放进了平方里（(½·Δ)² = ¼Δ²）",
        FORMULA,
        lambda logp, ref_logp: (0.5 * (logp - ref_logp)) ** 2,
    ),
    Mistake(
        "忘了给 k2 平方（算成了 ½·(logp − ref_logp)）",
        FORMULA,
        lambda logp, ref_logp: 0.5 * (logp - ref_logp),
    ),
]
K3_MISTAKES = [
    Mistake(
        "把 k3 的比值方向写反了（用了 r = π/π_ref，即 exp(logp − ref_logp) − (logp − ref_logp) − 1）",
        PITFALL_DIRECTION,
        lambda logp, ref_logp: torch.exp(logp - ref_logp) - (logp - ref_logp) - 1,
    ),
    Mistake(
        "漏掉了 k3 最后的 −1（r − log r 的期望是 KL + 1）",
        SPEC,
        lambda logp, ref_logp: torch.exp(ref_logp - logp) - (ref_logp - logp),
    ),
    Mistake(
        "把 k3 里 log r 的符号写反了（写成了 (r − 1) + log r）",
        SPEC,
        lambda logp, ref_logp: torch.exp(ref_logp - logp) + (ref_logp - logp) - 1,
    ),
]
MISTAKES = {"kl_k1": K1_MISTAKES, "kl_k2": K2_MISTAKES, "kl_k3": K3_MISTAKES}

# 手算的例子（课文 3.2 节用的也是这三个 token）：Δ = logp − ref_logp = [1, 0, −1]，log r = −Δ
PROBE = dict(logp=torch.tensor([-1.0, -0.5, -2.0]), ref_logp=torch.tensor([-2.0, -0.5, -1.0]))
WANT = {
    "kl_k1": torch.tensor([1.0, 0.0, -1.0]),
    "kl_k2": torch.tensor([0.5, 0.0, 0.5]),
    # k3 = r − 1 − log r：r = e^{-1} 时 = e^{-1}；r = 1 时 = 0；r = e 时 = e − 2
    "kl_k3": torch.tensor([math.exp(-1.0), 0.0, math.e - 2.0]),
}


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_04_kl")


@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
def test_values_and_direction(mod, name):
    # 第 0 个 token：logp = −1，ref_logp = −2，当前策略比参考更偏爱它；第 2 个反过来；第 1 个两者相同。
    # k3 方向写反（r = π/π_ref）时第 0 个会得到 e − 2 ≈ 0.718，而不是 e^{-1} ≈ 0.368
    got = getattr(mod, name)(**PROBE)
    check(
        got, WANT[name], where=f"{name} 的输出", section=SPEC, inputs=PROBE, mistakes=MISTAKES[name]
    )


@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
def test_shapes_preserved(mod, name):
    logp = torch.randn(2, 3, 4, dtype=torch.float64)
    out = getattr(mod, name)(logp, logp + 0.1)
    assert out.shape == (2, 3, 4), (
        f"{name} 输入 (2, 3, 4)，输出却是 {tuple(out.shape)}：三个估计量都是逐元素运算，"
        f"不要求和、求平均（那是 L2.05 的事）。回看 {SPEC}"
    )
    # 后面的精确期望在 float64 下比到 1e-10：输出悄悄变成 float32，那里只会看到「两个几乎一样的数不相等」
    assert out.dtype == torch.float64, (
        f"{name} 输入是 float64，输出却是 {out.dtype}：输出要和输入同 dtype，"
        f"不要 .float()、也不要用默认 dtype 新建张量。回看 {SPEC}"
    )


@settings(max_examples=200, deadline=None, report_multiple_bugs=False)
@given(st.floats(-40, 0), st.floats(-40, 0))
def test_k3_and_k2_nonnegative(mod, lp, rp):
    logp, ref = torch.tensor([lp], dtype=torch.float64), torch.tensor([rp], dtype=torch.float64)
    k3 = mod.kl_k3(logp, ref).item()
    k2 = mod.kl_k2(logp, ref).item()
    # 数学上 k3 >= 0；写成 exp(x) - x - 1 时，x≈1e-16 会舍入出 -1.1e-16，允许这几个 ulp 的误差
    assert k3 >= -1e-15, (
        f"logp={lp}、ref_logp={rp} 时 k3 = {k3}，应当 >= 0（log r <= r − 1）。回看 {SPEC}"
    )
    assert k2 >= 0.0, (
        f"logp={lp}、ref_logp={rp} 时 k2 = {k2}，应当 >= 0（它是一个平方）。回看 {FORMULA}"
    )
    if lp == rp:
        assert k3 == 0.0, f"logp == ref_logp = {lp} 时 k3 应恰好为 0，得到 {k3}。回看 {SPEC}"


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

    def expect(fn):  # Σ_x π(x)·k(x)
        return (logp.exp() * fn(logp=logp, ref_logp=ref)).sum().item()

    expectation = expect(getattr(mod, name))
    if name == "kl_k2":
        # 二阶近似 KL ≈ ½E[(log r)²]，偏差是三阶小量：近时相对偏差小，远时明显
        want = expect(lambda logp, ref_logp: 0.5 * (logp - ref_logp) ** 2)
    else:
        want = kl
    check(
        expectation,
        want,
        where=f"{name} 在玩具分布上的精确期望 Σπ·k 的值",
        section=FORMULA,
        inputs={},
        mistakes=derived(MISTAKES[name], lambda bad: lambda: expect(bad)),
        rtol=1e-10,
        atol=0.0,
    )
    if name == "kl_k2":  # 测试数据本身的前提：k2 的偏差确实存在，近时小、远时大
        rel = abs(expectation - kl) / kl
        assert rel > 1e-3 and (rel < 0.05 if distance == 0.3 else rel > 0.1), rel


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
        check(
            k.mean().item(),
            truth,
            where=f"{name} 在 {N_SAMPLES} 个样本上的均值（容差 4 个标准误 SE = {se:.2e}）",
            section=FORMULA,
            inputs={},
            mistakes=derived(
                MISTAKES[name], lambda bad: lambda: bad(logp=lp, ref_logp=rp).mean().item()
            ),
            rtol=0.0,
            atol=4 * se,
        )
        if name == "kl_k2":  # 测试数据本身的前提
            assert abs(k2_expect - kl) > 10 * se, "k2 的偏差应当远大于采样误差"


def test_k3_lower_variance_than_k1_when_close(mod):
    """两个分布接近时，k3 的方差比 k1 小得多（Schulman 博客的要点）；k1 的单个样本还可能为负。"""
    logp, ref, _ = _toy(0.3)
    p = logp.exp()

    def var(k):
        m = (p * k).sum()
        return (p * (k - m) ** 2).sum().item()

    k1, k3 = mod.kl_k1(logp, ref), mod.kl_k3(logp, ref)
    assert var(k3) < 0.1 * var(k1), (
        f"两个分布接近时 k3 的方差应远小于 k1：得到 Var(k3) = {var(k3):.3g}，Var(k1) = {var(k1):.3g}。"
        f"先让 test_values_and_direction 通过；回看 {FORMULA}"
    )
    assert (k1 < 0).any(), f"k1 在这个分布上应当有负的样本（它可正可负）。回看 {FORMULA}"
    assert (k3 >= 0).all(), f"k3 的每个样本都应 >= 0。回看 {SPEC}"


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
    assert (forward_kl - reverse_kl).abs().max() > 1e-3  # 两个方向的梯度在这个例子上确实不同

    def in_loss(k, ratio=False):  # E_π[∇ k]（ratio=True：k 先乘上值为 1、但可导的 π/π_old）
        r = (lambda lp: torch.exp(lp - lp.detach())) if ratio else (lambda lp: 1.0)
        return _grad(lambda lp, rp: (w(lp) * r(lp) * k(logp=lp, ref_logp=rp)).sum())

    cases = [
        # (估计量, 乘不乘比值, 期望的梯度, 说明)
        # k3 放进 loss：梯度的期望是「反方向」KL 的梯度，不是 KL(π||π_ref) 的
        ("kl_k3", False, forward_kl, "k3 直接进 loss 的梯度期望 = ∇KL(π_ref‖π)"),
        # 乘上 ratio 之后：正好是 KL(π||π_ref) 的梯度（DeepSeek-V3.2、TRL use_bias_correction_kl）
        ("kl_k3", True, reverse_kl, "ratio·k3 进 loss 的梯度期望 = ∇KL(π‖π_ref)"),
        # k2 的值有偏，但 on-policy 时放进 loss，梯度的期望恰好是 ∇KL(π||π_ref)（arXiv:2510.01555）
        ("kl_k2", False, reverse_kl, "k2 直接进 loss 的梯度期望 = ∇KL(π‖π_ref)"),
        # k1 放进 loss：梯度的期望恰好是 0（E_π[∇log π] = 0），它根本不把策略往参考模型拉
        ("kl_k1", False, torch.zeros_like(reverse_kl), "k1 直接进 loss 的梯度期望 = 0"),
    ]
    for name, ratio, want, what in cases:
        check(
            in_loss(getattr(mod, name), ratio),
            want,
            where=f"{what}（对 logits 的梯度）",
            section="L2.04「4. 坑，以及出处」坑 2",
            inputs={},
            mistakes=derived(MISTAKES[name], lambda bad, ratio=ratio: lambda: in_loss(bad, ratio)),
            rtol=1e-7,
            atol=1e-12,
        )
    assert (
        in_loss(mod.kl_k3) - reverse_kl
    ).abs().max() > 1e-3  # k3 进 loss 的梯度确实不是我们想要的


@pytest.mark.parametrize(
    "name,mistakes",
    [(n, m) for n, ms in MISTAKES.items() for m in ms],
    ids=lambda x: getattr(x, "what", x),
)
def test_each_known_mistake_is_named(name, mistakes):
    """诊断本身：把每个典型错误的输出送进同一个 check，第一行必须点名这个错误（CI 用 solutions 跑）。"""
    m = mistakes
    line = diagnosis_line(
        m.fn(**PROBE),
        WANT[name],
        where=f"{name} 的输出",
        section=SPEC,
        inputs=PROBE,
        mistakes=MISTAKES[name],
    )
    assert line == named(m), line
