"""L2.04 KL 估计量 k1/k2/k3：公式与方向、k3 精确 >= 0、log 概率很低时不出 NaN、在玩具 categorical 上的精确期望
与固定种子 Monte-Carlo 检验；kl_estimator_stats（精确的偏差、单样本方差、为负的概率）。

输出不对时，失败信息的第一行是一句中文：认出了下面 `*_MISTAKES` 里的典型错误就直接说是哪一种、回看课文哪一节。
"""

from __future__ import annotations

import math

import pytest
import torch
from diagnose import (
    Mistake,
    assert_sections_exist,
    check,
    collisions,
    describe_mismatch,
    expect_value_error,
    guarded,
    hint_sections,
    looks_like,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistake_tools import derived, diagnosis_line, named

N_SAMPLES = 200_000

FORMULA = "L2.04「2. 公式，以及它们从哪来」的表"
SPEC = "L2.04「3.1 三个函数的规格」"
HINTS = "L2.04「3.3 提示」"
STATS = "L2.04「3.4 第四个函数：`kl_estimator_stats`，量一量偏差和方差」"
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
K3_PROB_SPACE = Mistake(
    "k3 的 r 是在概率空间里算的（各自 exp 之后相除）：log 概率很低时 e^logp 下溢成 0，0/0 = NaN",
    SPEC,
    lambda logp, ref_logp: (
        torch.exp(ref_logp) / torch.exp(logp) - 1 - torch.log(torch.exp(ref_logp) / torch.exp(logp))
    ),
)
K3_MISTAKES.append(K3_PROB_SPACE)
K3_MISTAKES.append(
    Mistake(
        "k3 整体的符号反了（算成了 log r − (r − 1)，它 ≤ 0）：k3 = (r − 1) − log r ≥ 0",
        SPEC,
        lambda logp, ref_logp: (ref_logp - logp) - torch.expm1(ref_logp - logp),
    )
)
NEGATIVE_K3 = (
    "k3 先算出 r = e^(log r) 再减 1、减 log r 了（无论哪种顺序；log r 很小时 e^x 舍入成 1 或只差一个 ulp，"
    "结果成了 −1e-16 这样的负数，而 k3 要精确 >= 0）"
)
MISTAKES = {"kl_k1": K1_MISTAKES, "kl_k2": K2_MISTAKES, "kl_k3": K3_MISTAKES}

# 手算的例子（课文 3.2 节用的也是这三个 token）：Δ = logp − ref_logp = [1, 0, −1]，log r = −Δ
PROBE = dict(logp=torch.tensor([-1.0, -0.5, -2.0]), ref_logp=torch.tensor([-2.0, -0.5, -1.0]))
WANT = {
    "kl_k1": torch.tensor([1.0, 0.0, -1.0]),
    "kl_k2": torch.tensor([0.5, 0.0, 0.5]),
    # k3 = r − 1 − log r：r = e^{-1} 时 = e^{-1}；r = 1 时 = 0；r = e 时 = e − 2
    "kl_k3": torch.tensor([math.exp(-1.0), 0.0, math.e - 2.0]),
}


SECTIONS = {"kl_k1": SPEC, "kl_k2": SPEC, "kl_k3": SPEC, "kl_estimator_stats": STATS}
# 函数里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
CRASHES = {
    "kl_estimator_stats": {
        "dim_range": "logp、ref_logp 是一维的 (V,)：只有 dim=0 这一维",
        "not_tensor": "对 Python 数调用了张量的方法：有个量过早变成了 Python 数（estimator 返回的是张量）",
        "index": "下标越界：π 和 k 的形状不一样（两个都应是 (V,)），检查是不是把其中一个的形状弄变了",
    },
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    return guarded(impl("l2_04_kl"), SECTIONS, CRASHES, keep_inputs=SECTIONS)


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
_ZERO_AT_EQUAL = symptom(
    "logp == ref_logp 的位置 k 应恰好为 0（两个分布在这里一样）：检查公式里的常数项",
    SPEC,
    lambda got, logp, ref_logp: bool((got[logp == ref_logp] != 0).any()),
)
K_SYMPTOMS = {
    "kl_k1": [
        symptom(
            "k1 的方向（符号）反了：k1 = logp − ref_logp = log(π/π_ref)",
            PITFALL_DIRECTION,
            lambda got, logp, ref_logp: (
                float((got.double() * (logp - ref_logp).double()).sum()) < 0
            ),
        ),
        _ZERO_AT_EQUAL,
    ],
    "kl_k2": [
        symptom(
            "k2 出现了负数：k2 = ½·(logp − ref_logp)² ≥ 0",
            FORMULA,
            lambda got, **kw: bool((got < 0).any()),
        ),
        _ZERO_AT_EQUAL,
    ],
    "kl_k3": [
        symptom(
            "k3 出现了负数：k3 = (r − 1) − log r ≥ 0", SPEC, lambda got, **kw: bool((got < 0).any())
        ),
        _ZERO_AT_EQUAL,
    ],
}


@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
def test_values_and_direction(mod, name):
    # 第 0 个 token：logp = −1，ref_logp = −2，当前策略比参考更偏爱它；第 2 个反过来；第 1 个两者相同。
    # k3 方向写反（r = π/π_ref）时第 0 个会得到 e − 2 ≈ 0.718，而不是 e^{-1} ≈ 0.368
    got = getattr(mod, name)(**PROBE)
    check(
        got,
        WANT[name],
        where=f"{name} 的输出",
        section=SPEC,
        inputs=PROBE,
        mistakes=MISTAKES[name] + K_SYMPTOMS[name],
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
        f"{name} 输入是 float64，输出却是 {out.dtype}（规格：和输入同 dtype）："
        f"中间转成了别的精度，或用默认 dtype 新建了张量。回看 {SPEC}"
    )


def _far_below_zero():
    """3.2 节那三个 token 整体平移到 log 概率 −120 附近（float32）：k 只看两者的差，e^−120 却下溢成 0。"""
    return {k: (v - 120.0).float() for k, v in PROBE.items()}


def test_k3_when_log_probs_are_very_low(mod):
    """规格 3.1：logp、ref_logp 都在 −120 附近（float32）时 k3 照样是 3.2 节的数；在概率空间里算是 0/0 = NaN。"""
    inputs = _far_below_zero()
    assert torch.exp(inputs["logp"]).eq(0).all()  # 测试数据本身的前提：float32 里确实下溢了
    check(
        mod.kl_k3(**inputs),
        WANT["kl_k3"],
        where="logp、ref_logp 都在 −120 附近（float32）时 kl_k3 的输出",
        section=SPEC,
        inputs=inputs,
        mistakes=K3_MISTAKES,
        rtol=1e-5,
        atol=1e-6,
    )


# log r = ref_logp − logp 很小（float64 里 ~1e-16，float32 里 ~1e-8）：e^x 舍入成 1 或只差一个 ulp
TINY = {
    torch.float64: [1e-16, -1e-16, 2e-16, 5e-17, 7e-17, 1.2e-16, 3e-16, -3e-16, 1e-15, 0.0],
    torch.float32: [1e-8, -1e-8, 3e-8, 4e-8, 5e-8, 6e-8, 1e-7, -6e-8, 0.0],
}


def _tiny_log_ratios(dtype):
    """高概率的 token（logp ≈ −0.001·i）上，ref_logp 只比 logp 多 TINY 里那么一点点。"""
    logp = (-1e-3 * torch.arange(1, len(TINY[dtype]) + 1, dtype=torch.float64)).to(dtype)
    return logp, logp + torch.tensor(TINY[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_k3_is_exactly_nonnegative(mod, dtype):
    """规格 3.1：k3 在浮点里也精确 >= 0（不是「差几个 ulp 的负数也行」），logp == ref_logp 处恰好为 0。"""
    logp, ref = _tiny_log_ratios(dtype)
    k3 = mod.kl_k3(logp, ref)
    if (k3 < 0).any():
        i = int((k3 < 0).nonzero()[0])
        x = (ref - logp)[i].item()
        pytest.fail(
            f"{looks_like(NEGATIVE_K3, HINTS)}\n"
            f"（{dtype}，log r = {x:.3g} 时 kl_k3 = {k3[i].item():.3g} < 0）",
            pytrace=False,
        )
    zero = logp == ref
    assert (k3[zero] == 0).all(), (
        f"logp == ref_logp 的位置 k3 应恰好为 0，得到 {k3[zero].tolist()}。回看 {SPEC}"
    )


def test_the_literal_formula_really_goes_negative():
    """测试数据本身的前提：按字面顺序写的 k3 在这些输入上确实会出负数，而 expm1 的写法不会。"""
    for dtype in TINY:
        logp, ref = _tiny_log_ratios(dtype)
        log_r = ref - logp
        assert ((torch.exp(log_r) - log_r - 1) < 0).any(), dtype
        assert ((torch.exp(log_r) - 1 - log_r) < 0).any(), dtype
        assert ((torch.expm1(log_r) - log_r) >= 0).all(), dtype


@settings(max_examples=200, deadline=None, report_multiple_bugs=False)
@given(st.floats(-40, 0), st.floats(-40, 0))
# 固定的例子：两个方向各一个（k3 的符号、k2 忘了平方都在这里出负数），两者相等，以及 log r = 1e-16
# （按字面顺序写的 e^x − x − 1 在这里是负数）
@example(lp=-1.0, rp=-2.0)
@example(lp=-3.0, rp=-1.0)
@example(lp=-0.5, rp=-0.5)
@example(lp=-0.001, rp=-0.001 + 1e-16)
def test_k3_and_k2_nonnegative(mod, lp, rp):
    logp, ref = torch.tensor([lp], dtype=torch.float64), torch.tensor([rp], dtype=torch.float64)
    k3 = mod.kl_k3(logp, ref).item()
    k2 = mod.kl_k2(logp, ref).item()
    assert k3 >= 0.0, (
        f"logp={lp}、ref_logp={rp} 时 k3 = {k3}，应当精确 >= 0（log r <= r − 1）。回看 {SPEC}"
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


# ---------------------------------------------------------------- kl_estimator_stats（3.4 节）

# 测试自己写的三个估计量：kl_estimator_stats 的测试不依赖你的 kl_k1/k2/k3 写没写对
REF_K = {
    "k1": lambda logp, ref_logp: logp - ref_logp,
    "k2": lambda logp, ref_logp: 0.5 * (logp - ref_logp) ** 2,
    "k3": lambda logp, ref_logp: torch.expm1(ref_logp - logp) - (ref_logp - logp),
    # 任意一个逐元素的估计量也要能量：λ = 0.5 的控制变量 k1 + λ(r − 1)，同样无偏
    "k1+0.5(r-1)": lambda logp, ref_logp: (logp - ref_logp) + 0.5 * torch.expm1(ref_logp - logp),
}
KEYS = ("kl", "mean", "bias", "var", "neg_frac")


def _naive_stats(logp, ref_logp, estimator):
    """逐个类别的 Python 循环（float64）：按 π 加权的期望、方差和为负的概率。"""
    lp, rp, k = logp.tolist(), ref_logp.tolist(), estimator(logp, ref_logp).tolist()
    p = [math.exp(x) for x in lp]
    kl = sum(pi * (a - b) for pi, a, b in zip(p, lp, rp))
    mean = sum(pi * ki for pi, ki in zip(p, k))
    var = sum(pi * (ki - mean) ** 2 for pi, ki in zip(p, k))
    neg = sum(pi for pi, ki in zip(p, k) if ki < 0)
    return {"kl": kl, "mean": mean, "bias": mean - kl, "var": var, "neg_frac": neg}


def _stats_variant(logp, ref_logp, estimator, *, bug):
    """改一处的 kl_estimator_stats：典型错误的输出。"""
    dtype = torch.float32 if bug == "float32" else torch.float64
    lp, rp = logp.to(dtype), ref_logp.to(dtype)
    uniform = torch.full_like(lp, 1 / lp.numel())
    p = {"weight_ref": rp.exp(), "weight_ref_all": rp.exp(), "uniform": uniform}.get(bug, lp.exp())
    swapped = bug == "estimator_swapped"
    k = (estimator(ref_logp, logp) if swapped else estimator(logp, ref_logp)).to(dtype)
    if bug == "kl_reversed":
        kl = (rp.exp() * (rp - lp)).sum()
    elif bug == "kl_sign":
        kl = (p * (rp - lp)).sum()
    else:  # 只有 weight_ref_all、uniform 连精确 KL 也换了权重
        kl = ((p if bug in ("weight_ref_all", "uniform") else lp.exp()) * (lp - rp)).sum()
    mean = k.mean() if bug == "uniform_moments" else (p * k).sum()
    center = kl if bug == "var_about_kl" else mean
    var = k.var() if bug == "var_unweighted" else (p * (k - center) ** 2).sum()
    if bug == "uniform_moments":  # 均值和方差都是对 V 个类别的平均，kl 和 neg_frac 仍按 π
        var = ((k - mean) ** 2).mean()
    negative = k <= 0 if bug == "tie_negative" else k < 0
    out = {
        "kl": kl.item(),
        "mean": mean.item(),
        "bias": (kl - mean if bug == "bias_sign" else mean - kl).item(),
        "var": math.sqrt(var.item()) if bug == "std_not_var" else var.item(),
        "neg_frac": negative.to(dtype).mean().item()
        if bug == "neg_count"
        else p[negative].sum().item(),
    }
    return out


def _stats_mistake(what, bug, **tol):
    return Mistake(what, STATS, lambda **kw: _stats_variant(**kw, bug=bug), **tol)


_WEIGHT_REF = "期望按 π_ref 加权了（样本是从当前策略 π 采的）"
STATS_MISTAKES = [
    _stats_mistake(_WEIGHT_REF, "weight_ref"),
    _stats_mistake(_WEIGHT_REF, "weight_ref_all"),
    _stats_mistake(
        "对 V 个类别直接求了平均（等于假设每个类别一样可能，而样本是从 π 采的）", "uniform"
    ),
    _stats_mistake(
        "mean 和 var 是对 V 个类别的直接平均（k.mean()）：期望要按 π 加权（样本是从 π 采的），kl 倒是按 π 算的",
        "uniform_moments",
    ),
    _stats_mistake("精确 KL 的方向反了（算成了 KL(π_ref‖π)）", "kl_reversed"),
    _stats_mistake("bias 的符号反了（规格是 mean − kl，估计量的期望比真值多多少）", "bias_sign"),
    _stats_mistake(
        "方差没按 π 加权（对 V 个数用了 torch.var：等权、还除以 V − 1）",
        "var_unweighted",
    ),
    _stats_mistake("var 返回的是标准差（多开了一次根号）", "std_not_var"),
    _stats_mistake(
        "neg_frac 数的是 k < 0 的类别个数占比，不是采一个样本时 k < 0 的概率", "neg_count"
    ),
    _stats_mistake(
        "调用 estimator 时两个参数的位置反了（estimator(ref_logp, logp)）：它的签名是 (logp, ref_logp)",
        "estimator_swapped",
    ),
    _stats_mistake("精确 KL 的符号反了（算出的 kl 是负的，而 KL 散度 ≥ 0）", "kl_sign"),
    _stats_mistake(
        "方差是绕着真值 kl 算的，不是绕着这个估计量自己的期望 mean",
        "var_about_kl",
    ),
    _stats_mistake(
        "neg_frac 把 k = 0 的类别也算成了负的（用了 k <= 0）：k 恰好为 0 的样本不是负的，规格是 k < 0",
        "tie_negative",
    ),
    # float32 的几种写法舍入不同：和错误版只在 float32 的误差以内一致
    _stats_mistake(
        "统计量是在 float32 里算的（规格：全部在 float64 里算）",
        "float32",
        rtol=1e-5,
        atol=1e-7,
    ),
]
STATS_BUGS = [
    "weight_ref",
    "weight_ref_all",
    "uniform",
    "uniform_moments",
    "kl_reversed",
    "bias_sign",
    "var_unweighted",
    "std_not_var",
    "neg_count",
    "estimator_swapped",
    "kl_sign",
    "var_about_kl",
    "tie_negative",
    "float32",
]


def _lesson_example():
    """3.4 节的例子：π = [0.8, 0.2]，π_ref = [0.6, 0.4]（float64）。"""
    logp = torch.log(torch.tensor([0.8, 0.2], dtype=torch.float64))
    return dict(logp=logp, ref_logp=torch.log(torch.tensor([0.6, 0.4], dtype=torch.float64)))


def _tie_example(dtype=torch.float64):
    """π = [0.5, 0.3, 0.2]，π_ref = [0.5, 0.15, 0.35]：类别 0 上两个 log 概率逐位相同，k1 = k2 = k3 = 0 恰好成立。
    π 和 π_ref 不是彼此对调（[0.5, 0.2, 0.3] 会是）：对调时「按 π_ref 加权」和「estimator 的参数反了」算出同样的数。"""
    logp = torch.log(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)).to(dtype)
    ref = torch.log(torch.tensor([0.5, 0.15, 0.35], dtype=torch.float64)).to(dtype)
    return dict(logp=logp, ref_logp=ref)


def _float32_example():
    """6 个类别的玩具分布（distance=1.5）存成 float32：期望值用这些 float32 的数本身在 float64 里算。"""
    logp, ref, _ = _toy(1.5)
    return dict(logp=logp.float(), ref_logp=ref.float())


# kl_estimator_stats 的测试依次用的例子（test_each_stats_mistake_is_named 按这个顺序检查）
STATS_PROBES = [_lesson_example, _tie_example, _float32_example]


def _check_stats(mod, inputs, where, section=STATS):
    got = mod.kl_estimator_stats(**inputs)
    want = _naive_stats(**inputs)
    if inputs["logp"].dtype != torch.float64:
        # 规格 3.4：estimator 在传进来的（float32）输入上调用、k 再升到 float64，或者先把输入升到 float64
        # 再调用 estimator，两种都是「全部在 float64 里算」；k 差 float32 的一次舍入，两种都接受
        upcast = {
            **inputs,
            "logp": inputs["logp"].double(),
            "ref_logp": inputs["ref_logp"].double(),
        }
        if describe_mismatch(got, _naive_stats(**upcast), rtol=1e-9, atol=1e-12) is None:
            want = _naive_stats(**upcast)
    if isinstance(got, dict):
        wrong = {k: type(got[k]).__name__ for k in KEYS if k in got and type(got[k]) is not float}
        assert not wrong, (
            f"kl_estimator_stats 返回的值应是 Python float（规格），得到 {wrong}。回看 {STATS}"
        )
    check(
        got,
        want,
        where=where,
        section=section,
        inputs=inputs,
        mistakes=STATS_MISTAKES,
        rtol=1e-9,
        atol=1e-12,
    )
    return got


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_stats_worked_example(mod, name):
    """3.4 节的手算例子（课文里的数就是这里的逐类别循环算出来的，保留 4 位）。"""
    inputs = {**_lesson_example(), "estimator": REF_K[name]}
    got = _check_stats(mod, inputs, f"3.4 节例子上 {name} 的统计量", section=STATS)
    lesson = {
        "k1": {"kl": 0.0915, "mean": 0.0915, "bias": 0.0, "var": 0.1539, "neg_frac": 0.2},
        "k2": {"kl": 0.0915, "mean": 0.0811, "bias": -0.0104, "var": 0.0063, "neg_frac": 0.0},
        "k3": {"kl": 0.0915, "mean": 0.0915, "bias": 0.0, "var": 0.0116, "neg_frac": 0.0},
    }[name]
    assert {
        k: round(got[k], 4) + 0.0 for k in KEYS
    } == lesson  # 课文和代码一致（+0.0 把 −0.0 变成 0.0）


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_stats_when_a_sample_is_exactly_zero(mod, name):
    """类别 0 上 π = π_ref：k 恰好为 0，不算负的（neg_frac 是 P(k < 0)，不是 P(k <= 0)）。"""
    inputs = {**_tie_example(), "estimator": REF_K[name]}
    got = _check_stats(mod, inputs, f"类别 0 上 π = π_ref（k = 0）时 {name} 的统计量")
    assert round(got["neg_frac"], 12) == (0.2 if name == "k1" else 0.0)


@pytest.mark.parametrize("name", ["k1", "k3"])
def test_stats_float32_input_in_float64(mod, name):
    """输入是 float32：统计量照样在 float64 里算，和「这些 float32 的数」的逐类别循环比到 1e-9（在 float32 里算差 1e-8 量级）。"""
    inputs = {**_float32_example(), "estimator": REF_K[name]}
    _check_stats(mod, inputs, f"float32 输入时 {name} 的统计量（应在 float64 里算）")


@pytest.mark.parametrize("name", sorted(REF_K))
@pytest.mark.parametrize("distance", [0.3, 1.5])
def test_stats_on_toy_distributions(mod, name, distance):
    logp, ref, _ = _toy(distance)
    inputs = dict(logp=logp, ref_logp=ref, estimator=REF_K[name])
    _check_stats(mod, inputs, f"6 个类别的玩具分布（distance={distance}）上 {name} 的统计量")


def test_stats_tell_the_three_estimators_apart(mod):
    """它量出来的正是第 2 节的结论：k1、k3 无偏，k2 有偏；k3 从不为负、两分布接近时方差远小于 k1。"""
    logp, ref, kl = _toy(0.3)
    s = {n: mod.kl_estimator_stats(logp, ref, REF_K[n]) for n in ("k1", "k2", "k3")}
    assert abs(s["k1"]["bias"]) < 1e-12 and abs(s["k3"]["bias"]) < 1e-12, (
        f"k1、k3 的 bias 应为 0（无偏），得到 {s['k1']['bias']:.3g}、{s['k3']['bias']:.3g}。回看 {STATS}"
    )
    assert abs(s["k2"]["bias"]) > 1e-5 and s["k3"]["neg_frac"] == 0.0 < s["k1"]["neg_frac"]
    assert s["k3"]["var"] < 0.1 * s["k1"]["var"] and s["k1"]["kl"] == pytest.approx(kl, rel=1e-12)


def test_stats_float32_input(mod):
    logp, ref, _ = _toy(1.5)
    inputs = dict(logp=logp.float(), ref_logp=ref.float(), estimator=REF_K["k3"])
    got = mod.kl_estimator_stats(**inputs)
    check(
        got,
        _naive_stats(logp, ref, REF_K["k3"]),
        where="float32 输入时 k3 的统计量（在 float64 里算，只差输入本身的舍入）",
        section=STATS,
        rtol=1e-5,
        atol=1e-7,
    )


@pytest.mark.parametrize(
    "logp, ref_logp, what",
    [
        (torch.zeros(2, 3), torch.zeros(2, 3), "logp、ref_logp 是二维的 (2, 3)，应为 (V,)"),
        (
            torch.log(torch.tensor([0.5, 0.5])),
            torch.log(torch.tensor([0.2, 0.3, 0.5])),
            "logp 有 2 个类别、ref_logp 有 3 个",
        ),
        (
            torch.tensor([0.0, 0.0]),
            torch.log(torch.tensor([0.5, 0.5])),
            "logp 没归一化（概率和为 2）",
        ),
        (
            torch.log(torch.tensor([0.5, 0.5])),
            torch.tensor([0.0, float("-inf")]),
            "ref_logp 里有 −inf",
        ),
        (torch.tensor([float("nan"), 0.0]), torch.log(torch.tensor([0.5, 0.5])), "logp 里有 NaN"),
    ],
)
def test_stats_bad_input_raises(mod, logp, ref_logp, what):
    expect_value_error(lambda: mod.kl_estimator_stats(logp, ref_logp, REF_K["k1"]), what)


# ---------------------------------------------------------------- 诊断本身（不依赖 --impl）


@pytest.mark.parametrize(
    "name,mistakes",
    [(n, m) for n, ms in MISTAKES.items() for m in ms if m is not K3_PROB_SPACE],
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


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
@pytest.mark.parametrize("name", list(MISTAKES))
def test_no_two_mistakes_give_the_same_output(name):
    """诊断表本身：3.2 节的三个 token 上、log 概率都在 −120 附近时，两个不同的典型错误算出的结果不同。"""
    cases = [(PROBE, WANT[name], {}), (_far_below_zero(), WANT[name], dict(rtol=1e-5, atol=1e-6))]
    assert not (found := collisions(MISTAKES[name], cases)), "\n".join(found)


def test_stats_table_has_no_two_mistakes_with_the_same_output():
    cases = []
    for make, names in zip(STATS_PROBES, (("k1", "k2", "k3"), ("k1", "k2", "k3"), ("k1", "k3"))):
        for name in names:
            inputs = {**make(), "estimator": REF_K[name]}
            cases.append((inputs, _naive_stats(**inputs), dict(rtol=1e-9, atol=1e-12)))
    assert not (found := collisions(STATS_MISTAKES, cases)), "\n".join(found)


def test_k3_in_probability_space_is_named():
    inputs = _far_below_zero()
    line = diagnosis_line(
        K3_PROB_SPACE.fn(**inputs),
        WANT["kl_k3"],
        where="x",
        section=SPEC,
        inputs=inputs,
        mistakes=K3_MISTAKES,
        rtol=1e-5,
        atol=1e-6,
    )
    assert line == named(K3_PROB_SPACE), line


@pytest.mark.parametrize("i", range(len(STATS_MISTAKES)), ids=STATS_BUGS)
def test_each_stats_mistake_is_named(i):
    """按测试的顺序（3.4 节的例子、k = 0 的例子、float32 的输入，每个都是 k1/k2/k3）：每个典型错误在它第一次
    和正确结果不同的地方只点名它自己，后面的例子上也只会被点名、不会得到一句泛泛的「不对」。"""
    m, lines = STATS_MISTAKES[i], []
    for make, names in zip(STATS_PROBES, (("k1", "k2", "k3"), ("k1", "k2", "k3"), ("k1", "k3"))):
        for name in names:
            inputs = {**make(), "estimator": REF_K[name]}
            line = diagnosis_line(
                m.fn(**inputs),
                _naive_stats(**inputs),
                where="x",
                section=STATS,
                inputs=inputs,
                mistakes=STATS_MISTAKES,
                rtol=1e-9,
                atol=1e-12,
            )
            assert line is None or line.startswith("看起来是"), line
            if line is not None:
                lines.append(line)
    assert lines, f"没有任何一个例子能暴露「{m.what}」"
    assert lines[0] == named(m), f"第一次暴露「{m.what}」时，第一行是：{lines[0]}"


def test_each_symptom_is_absent_from_the_right_answer():
    for name, symptoms in K_SYMPTOMS.items():
        assert not [s.what for s in symptoms if s.fn(WANT[name], **PROBE)], name


def test_diagnoses_point_at_real_sections():
    sections = {m.section for ms in MISTAKES.values() for m in ms} | {
        m.section for m in STATS_MISTAKES
    }
    sections |= {m.section for ms in K_SYMPTOMS.values() for m in ms}
    assert_sections_exist(
        sections | {SPEC, HINTS, STATS, FORMULA.split("的表")[0]} | hint_sections(CRASHES)
    )
