"""L2.03 policy_gradient_loss / clipped_surrogate_loss：裁剪行为（正负 advantage、非对称 eps_high）、梯度、性质；
写错时点名是哪种典型错误。另外核对课文里关于本课程训练脚本的说法（μ = 1 时从不裁剪，μ > 1 时第一轮也不裁剪）。

典型错误（故意写错的实现）在 tests/L2/mistakes_l2_03.py；失败信息的第一行是一句中文（tests/diagnose.py）。
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from pathlib import Path

import pytest
import torch
from diagnose import (
    assert_named,
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    expect_value_error,
    guarded,
    hint_sections,
    make_checker,
    require_grad,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistakes_l2_03 import (
    CLIP_HIGHER,
    CLIP_SPEC,
    CRASHES,
    DETACHED_INSIDE,
    DIAGNOSIS_INPUTS,
    EXAMPLE,
    FORMULA,
    HINTS,
    MISTAKE_IDS,
    MISTAKES,
    NAMES,
    PG_SPEC,
    PITFALL_DETACH,
    RATIOS,
    SHOWN_BY_LATER,
    TABLE,
    far_below_zero,
    grad_when_caller_forgets_detach,
)

ROOT = Path(__file__).resolve().parents[2]
PITFALL_ON_POLICY = "L2.03「坑 3：完全 on-policy 时 clip 从不触发」"
WHY_RATIO = "L2.03「为什么还要一个比值」"


KEEP_INPUTS = "L2.03「3. 练习：两个函数的规格」"


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    return guarded(
        impl("l2_03_policy_loss"), SPEC, CRASHES, keep_inputs={n: KEEP_INPUTS for n in SPEC}
    )


# ---------------------------------------------------------------- 参考：逐元素的朴素公式


def _naive_pg(logp, advantages):
    rows = [[-a * lp for lp in row] for row, a in zip(logp.tolist(), advantages.tolist())]
    return torch.tensor(rows, dtype=logp.dtype).reshape(logp.shape)


def _naive_clip_elem(r, a, eps_low, eps_high):
    """一个 token：(loss, clipped, 对 logp 的梯度)。"""
    rc = min(max(r, 1 - eps_low), 1 + eps_high)
    clipped = rc * a < r * a
    return -min(r * a, rc * a), clipped, (0.0 if clipped else -r * a)


def _naive_clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, grad=False):
    eps_high = eps_low if eps_high is None else eps_high
    out = [
        [_naive_clip_elem(math.exp(lp - olp), a, eps_low, eps_high) for lp, olp in zip(row, orow)]
        for row, orow, a in zip(logp.tolist(), old_logp.tolist(), advantages.tolist())
    ]
    loss = torch.tensor([[e[0] for e in row] for row in out], dtype=logp.dtype)
    flags = torch.tensor([[e[1] for e in row] for row in out], dtype=torch.bool)
    grads = torch.tensor([[e[2] for e in row] for row in out], dtype=logp.dtype)
    return grads if grad else (loss, flags)


WANT = {"policy_gradient_loss": _naive_pg, "clipped_surrogate_loss": _naive_clip}
SPEC = {"policy_gradient_loss": PG_SPEC, "clipped_surrogate_loss": CLIP_SPEC}


def _loss_sign_flipped(got, **inputs):
    want = WANT["clipped_surrogate_loss"](**inputs)[0]
    return float((got[0].detach().double() * want.double()).sum()) < 0


def _wrong_inside_the_clip_range(got, logp, old_logp, advantages, eps_low=0.2, eps_high=None):
    """ratio 在 [1 − eps_low, 1 + eps_high] 之内的 token：两支相等，loss 就是 −r·A。"""
    eps_high = eps_low if eps_high is None else eps_high
    r = torch.exp(logp.detach().double() - old_logp.double())
    inside = (r > 1 - eps_low + 1e-9) & (r < 1 + eps_high - 1e-9)
    plain = -r * advantages.double()[:, None]
    diff = (got[0].detach().double() - plain).abs()[inside]
    return bool((diff > 1e-6 * (1 + plain.abs()[inside])).any())


def _flags_only(got, **inputs):
    want = WANT["clipped_surrogate_loss"](**inputs)
    loss_ok = torch.allclose(got[0].detach().double(), want[0].double(), rtol=1e-5, atol=1e-6)
    return loss_ok and not torch.equal(got[1].bool(), want[1])


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = {
    "policy_gradient_loss": [
        symptom(
            "符号反了：loss = −A·logp（最小化它 = 提高好回答的概率）",
            PG_SPEC,
            lambda got, logp, advantages: (
                float((got.double() * _naive_pg(logp, advantages)).sum()) < 0
            ),
        )
    ],
    "clipped_surrogate_loss": [
        symptom(
            "loss 的符号反了：loss = −min(r·A, clip(r)·A)（我们最小化 loss）",
            CLIP_SPEC,
            _loss_sign_flipped,
        ),
        symptom(
            "ratio 在 [1 − eps_low, 1 + eps_high] 之内的 token 上 loss 也不对：那里两支相等，loss 就是 −r·A；"
            "检查 ratio = exp(logp − old_logp) 和 A 的广播",
            CLIP_SPEC,
            _wrong_inside_the_clip_range,
        ),
        symptom(
            "loss 对了，clipped 标记不对：「被裁剪」是裁剪分支严格更小（A > 0 时 r > 1 + eps_high，"
            "A < 0 时 r < 1 − eps_low；A = 0 从不算）",
            CLIP_SPEC,
            _flags_only,
        ),
    ],
}
_check = make_checker(WANT, {n: MISTAKES[n] + SYMPTOMS[n] for n in MISTAKES}, SPEC, names=NAMES)


def _logp_for_ratios(ratios, rows=1):
    """old_logp = 0 时，logp = log(ratio)：直接按想要的 ratio 构造输入。"""
    logp = torch.log(torch.tensor([ratios] * rows, dtype=torch.float64)).requires_grad_()
    return logp, torch.zeros_like(logp)


def _clip_case(mod, a, section, **eps):
    """RATIOS 那一行、advantage = a：检查 (loss, clipped) 和梯度，返回 (loss, clipped)。"""
    logp, old = _logp_for_ratios(RATIOS)
    inputs = dict(logp=logp, old_logp=old, advantages=torch.tensor([a], dtype=torch.float64), **eps)
    out = mod.clipped_surrogate_loss(**inputs)
    where = f"A={a:+g}、{eps or 'eps_low=0.2'}、ratio={RATIOS} 时的 (loss, clipped)"
    _check("clipped_surrogate_loss", out, inputs, where=where, section=section)
    loss, clipped = out
    require_grad(loss, "clipped_surrogate_loss 返回的 loss", CLIP_SPEC)
    loss.sum().backward()
    check(
        logp.grad,
        _naive_clip(**inputs, grad=True),
        where=f"A={a:+g} 时对 logp 的梯度（未裁剪处 −r·A，被裁剪处 0）",
        section=section,
    )
    return loss, clipped


@pytest.mark.parametrize("name", sorted(DIAGNOSIS_INPUTS))
def test_typical_mistakes_are_caught(mod, name):
    """这组输入让每种典型错误给出和参考答案不同、彼此也不同的结果。"""
    inputs = DIAGNOSIS_INPUTS[name]()
    _check(name, getattr(mod, name)(**inputs), inputs, where=f"{name} 在诊断输入上的输出")


def test_policy_gradient_loss_value_and_grad(mod):
    logp = torch.tensor(
        [[-1.0, -2.0, -0.5], [-0.1, -3.0, -1.0]], dtype=torch.float64, requires_grad=True
    )
    adv = torch.tensor([2.0, -0.5], dtype=torch.float64)
    inputs = dict(logp=logp, advantages=adv)
    loss = mod.policy_gradient_loss(**inputs)
    _check("policy_gradient_loss", loss, inputs)
    require_grad(loss, "policy_gradient_loss", PG_SPEC)
    loss.sum().backward()
    # d(-A·logp)/dlogp = -A：好回答（A>0）的梯度下降方向是提高 logp
    check(
        logp.grad,
        torch.tensor([[-2.0] * 3, [0.5] * 3], dtype=torch.float64),
        where="policy_gradient_loss 对 logp 的梯度（应为 −A）",
        section=FORMULA,
    )


def test_positive_advantage_clips_only_above(mod):
    """A > 0：ratio 超过 1+eps 的部分被裁掉（梯度为 0）；ratio 小于 1-eps 不裁（还要把概率拉回来）。"""
    _clip_case(mod, 2.0, TABLE, eps_low=0.2)


def test_negative_advantage_clips_only_below(mod):
    """A < 0：ratio 低于 1-eps 的部分被裁掉；ratio 很大时不裁，loss = -r·A 随 r 无上界（坏回答概率涨了要全额惩罚）。"""
    _clip_case(mod, -1.0, TABLE, eps_low=0.2)


@pytest.mark.parametrize("a", [1.0, -1.0])
def test_asymmetric_eps_high(mod, a):
    """DAPO clip-higher：eps_high=0.28 时 ratio=1.25 对 A>0 不再被裁，下界仍是 1-eps_low；A<0 一侧不受 eps_high 影响。"""
    _clip_case(mod, a, CLIP_HIGHER, eps_low=0.2, eps_high=0.28)
    # 下界 1-eps_low=0.85：0.5、0.79 被裁，0.9 不裁；eps_high 再大也不影响 A<0 的一侧
    _clip_case(mod, a, CLIP_HIGHER, eps_low=0.15, eps_high=0.5)


def test_worked_example_of_the_lesson(mod):
    """课文 3.3 节的表：A = +1、−1、0 三行，eps_high=0.28。"""
    inputs = DIAGNOSIS_INPUTS["clipped_surrogate_loss"]()
    _check(
        "clipped_surrogate_loss",
        mod.clipped_surrogate_loss(**inputs),
        inputs,
        where="课文 3.3 节那张表（A = +1 / −1 / 0，eps_high=0.28）",
        section=EXAMPLE,
    )


def test_ratio_in_log_space(mod):
    """3.2 节：ratio 要在 log 空间相减再 exp。log 概率在 −120 附近（float32）时 exp 下溢成 0，先 exp 再除得 NaN。"""
    inputs = far_below_zero()
    _check(
        "clipped_surrogate_loss",
        mod.clipped_surrogate_loss(**inputs),
        inputs,
        where="3.3 节那张表平移到 log 概率 −120 附近（float32）时的 (loss, clipped)",
    )


BAD_SHAPES = [
    # (logp, old_logp, advantages, 这是哪种非法输入)
    (
        (3, 4),
        (3, 4),
        (3, 1),
        "advantages 是 (B, 1) = (3, 1)（CS336 作业的写法，不拦下会和 (3, 4) 广播成 (3, 3, 4)）",
    ),
    ((3, 4), (3, 4), (3, 4), "advantages 是 (B, T) = (3, 4)，应为 (B,) = (3,)"),
    ((3, 4), (3, 4), (4,), "advantages 是 (4,)，和 logp 的 B = 3 对不上"),
    ((12,), (12,), (12,), "logp 是一维的 (12,)，应为 (B, T)"),
]


@pytest.mark.parametrize("logp_shape, old_shape, adv_shape, what", BAD_SHAPES)
def test_bad_shapes_raise(mod, logp_shape, old_shape, adv_shape, what):
    """规格 3.1、3.2：advantages 必须是 (B,)，logp 必须是 (B, T)；否则抛 ValueError（像 L2.05 的 grpo_loss）。"""
    logp, adv = torch.zeros(logp_shape), torch.zeros(adv_shape)
    expect_value_error(lambda: mod.policy_gradient_loss(logp, adv), f"policy_gradient_loss：{what}")
    expect_value_error(
        lambda: mod.clipped_surrogate_loss(logp, torch.zeros(old_shape), adv),
        f"clipped_surrogate_loss：{what}",
    )


def test_old_logp_shape_must_match(mod):
    expect_value_error(
        lambda: mod.clipped_surrogate_loss(torch.zeros(3, 4), torch.zeros(3, 5), torch.zeros(3)),
        "clipped_surrogate_loss：old_logp 是 (3, 5)，logp 是 (3, 4)",
    )


def test_eps_high_none_means_eps_low(mod):
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 7, generator=g) * 0.3
    old = logp + torch.randn(3, 7, generator=g) * 0.3
    adv = torch.tensor([1.0, -1.0, 0.3])
    inputs = dict(logp=logp, old_logp=old, advantages=adv, eps_low=0.15)
    got = mod.clipped_surrogate_loss(**inputs)
    check(
        got,
        mod.clipped_surrogate_loss(**inputs, eps_high=0.15),
        where="eps_high=None 的结果（应与 eps_high=eps_low=0.15 完全相同）",
        section=CLIP_SPEC,
        names=NAMES["clipped_surrogate_loss"],
    )
    _check("clipped_surrogate_loss", got, inputs, where="eps_high=None 时的 (loss, clipped)")


def test_zero_advantage_never_clipped(mod):
    logp, old = _logp_for_ratios(RATIOS)
    inputs = dict(logp=logp, old_logp=old, advantages=torch.zeros(1, dtype=torch.float64))
    _check(
        "clipped_surrogate_loss",
        mod.clipped_surrogate_loss(**inputs),
        inputs,
        where="A = 0 时的 (loss, clipped)（loss 全 0，从不算裁剪）",
    )


def test_on_policy_gradient_equals_policy_gradient(mod):
    """old_logp == logp（每批只更新一次）时 ratio ≡ 1，clipped surrogate 的梯度就是朴素 policy gradient 的梯度。"""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    a = base.clone().requires_grad_()
    loss, clipped = mod.clipped_surrogate_loss(a, base.clone(), adv)
    require_grad(loss, "clipped_surrogate_loss 返回的 loss", CLIP_SPEC)
    loss.sum().backward()
    b = base.clone().requires_grad_()
    pg = mod.policy_gradient_loss(b, adv)
    require_grad(pg, "policy_gradient_loss", PG_SPEC)
    pg.sum().backward()
    check(
        clipped,
        torch.zeros(4, 5, dtype=torch.bool),
        where="old_logp == logp（ratio ≡ 1）时的 clipped",
        section=PITFALL_ON_POLICY,
    )
    minus_a = -adv[:, None].expand(4, 5)  # 两个梯度各自和 −A 比：只错一个时点名的是它（issue 44）
    check(b.grad, minus_a, where="policy_gradient_loss 对 logp 的梯度（应为 −A）", section=FORMULA)
    check(
        a.grad,
        minus_a,
        where="ratio ≡ 1 时 clipped_surrogate_loss 的梯度（应等于 policy_gradient_loss 的梯度 −A）",
        section=WHY_RATIO,
    )


def test_old_logp_must_be_detached(mod):
    """课文坑 2 的实测：old_logp 和 logp 在同一张图里时梯度恒为 0；detach 之后才是 −A。
    函数本身不 detach old_logp（规格 3.2）：在函数里 detach 会把这个现象藏起来，诊断会点名。"""
    section = PITFALL_DETACH
    check(
        grad_when_caller_forgets_detach(mod.clipped_surrogate_loss),
        torch.zeros(1, 2),
        where="old_logp 没 detach 时的梯度",
        section=section,
        inputs={},
        mistakes=[DETACHED_INSIDE],
    )
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = mod.clipped_surrogate_loss(logp, logp.detach(), torch.tensor([1.0]))
    loss.sum().backward()
    check(logp.grad, torch.full((1, 2), -1.0), where="detach 后的梯度", section=section)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(-1.5, 1.5), min_size=6, max_size=6),
    st.floats(-3, 3).filter(lambda v: v == 0 or abs(v) > 1e-3),  # 不要次正规数：r·A 会下溢成相等
    st.floats(0.01, 0.5),
    st.floats(0.01, 0.5),
)
# 固定的例子：ratio 落在 [1 − eps_low, 1 + eps_high] 的两侧和里面，A 正负各一个，eps_low ≠ eps_high
@example(log_ratios=[-0.7, -0.25, -0.05, 0.05, 0.22, 0.5], a=1.5, eps_low=0.2, eps_high=0.28)
@example(log_ratios=[-0.7, -0.25, -0.05, 0.05, 0.22, 0.5], a=-1.5, eps_low=0.2, eps_high=0.28)
def test_clip_mask_and_loss_property(mod, log_ratios, a, eps_low, eps_high):
    """对任意 ratio / advantage：clipped 恰好是「A>0 且 r>1+eps_high」或「A<0 且 r<1-eps_low」，
    loss 在这些位置等于 -clip(r)·A、其余位置等于 -r·A；被裁剪处梯度为 0。"""
    logp = torch.tensor([log_ratios], dtype=torch.float64).requires_grad_()
    inputs = dict(
        logp=logp,
        old_logp=torch.zeros_like(logp),
        advantages=torch.tensor([a], dtype=torch.float64),
        eps_low=eps_low,
        eps_high=eps_high,
    )
    loss, clipped = mod.clipped_surrogate_loss(**inputs)
    loss.sum().backward()
    # 恰好在边界上（两个分支相等）的位置算不算「裁剪」取决于舍入，不检查
    ratios = [math.exp(x) for x in log_ratios]
    keep = torch.tensor(
        [[min(abs(r - (1 + eps_high)), abs(r - (1 - eps_low))) >= 1e-9 for r in ratios]]
    )
    want_loss, want_flags = _naive_clip(**inputs)
    where = f"ratio={[round(r, 4) for r in ratios]}、A={a}、eps_low={eps_low}、eps_high={eps_high}"
    check(
        (loss.detach()[keep], clipped[keep]),
        (want_loss[keep], want_flags[keep]),
        where=f"{where} 时的 (loss, clipped)",
        section=CLIP_SPEC,
        rtol=1e-9,
        atol=1e-12,
        names=NAMES["clipped_surrogate_loss"],
    )
    check(
        logp.grad[keep],
        _naive_clip(**inputs, grad=True)[keep],
        where=f"{where} 时对 logp 的梯度",
        section=CLIP_SPEC,
        rtol=1e-9,
        atol=1e-12,
    )


# ---------------------------------------------------------------- 课文对本课程训练脚本的说法

SMALL = ["--n-heldout", "4", "--prompts-per-step", "4", "--group-size", "4", "--micro-batch", "8"]
SMALL += ["--max-new-tokens", "16", "--n-train", "200", "--steps", "1"]


def _run_script_and_record(tmp_path, monkeypatch, *argv):
    """在进程内跑一步 grpo_train.py（tiny、solutions），记下每次 grpo_loss 调用的 clip_fraction 和 |logp − old|。"""
    spec = importlib.util.spec_from_file_location(
        "grpo_train_for_l2_03", ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    functions = importlib.import_module("solutions.l2_07_grpo_train")  # 脚本里的 L
    calls, original = [], functions.grpo_loss

    def recording(logp, old_logp, *args, **kwargs):
        loss, metrics = original(logp, old_logp, *args, **kwargs)
        calls.append((metrics["clip_fraction"], (logp.detach() - old_logp).abs().max().item()))
        return loss, metrics

    monkeypatch.setattr(functions, "grpo_loss", recording)  # 脚本调用的是 L.grpo_loss(...)
    cfg = script.parse_config(["--out", str(tmp_path), "--impl", "solutions", *SMALL, *argv])
    cfg, spec = script.plan_or_exit(cfg)
    threads = torch.get_num_threads()
    try:
        script.main(cfg, spec)
    finally:
        torch.set_num_threads(threads)  # 脚本在 CPU 上切到单线程；别影响同一进程里后面的测试
    return calls


@pytest.mark.slow
def test_course_script_clips_only_after_the_first_update(tmp_path, monkeypatch):
    """课文坑 3：μ = 1 时 old_logp 就是 logp.detach()，从不裁剪；μ = 2 时第一轮 ratio 逐位为 1、不裁剪，第二轮才裁剪。"""
    section = PITFALL_ON_POLICY
    mu1 = _run_script_and_record(tmp_path / "mu1", monkeypatch, "--num-iterations", "1")
    assert mu1 and all(c == 0.0 and d == 0.0 for c, d in mu1), (
        f"μ = 1：每次 grpo_loss 的 (clip_fraction, max|logp − old|) 应全是 0，得到 {mu1}。回看 {section}"
    )
    # lr 1e-3：让第二轮的 ratio 明显偏离 1，证明 clip 在这里确实会起作用
    mu2 = _run_script_and_record(
        tmp_path / "mu2", monkeypatch, "--num-iterations", "2", "--lr", "1e-3"
    )
    first, second = mu2[: len(mu2) // 2], mu2[len(mu2) // 2 :]
    assert first and all(c == 0.0 and d == 0.0 for c, d in first), (
        f"μ = 2 的第一轮：ratio 应逐位为 1、不裁剪，得到 {first}。回看 {section}"
    )
    assert any(c > 0 for c, _ in second), (
        f"μ = 2 的第二轮应有被裁剪的 token（lr=1e-3），得到 {second}：测试失去了意义"
    )


# ---------------------------------------------------------------- 诊断本身（不依赖 --impl）

ALL = [(name, m) for name, ms in MISTAKES.items() for m in ms]
ALL_IDS = [f"{n}-{i}" for n, ids in MISTAKE_IDS.items() for i in ids]


@pytest.mark.parametrize("name, mistake", ALL, ids=ALL_IDS)
def test_each_typical_mistake_is_named(name, mistake):
    """把已知错误的实现按测试的顺序送进同一个检查：它第一次和正确结果不同的那组输入上，
    失败信息的第一行必须只点名这个错误（学习者先看到的就是这一行）。"""
    makers = [DIAGNOSIS_INPUTS[name]] + ([far_below_zero] if name in SHOWN_BY_LATER else [])
    cases = [(inputs, WANT[name](**inputs), {}) for inputs in (make() for make in makers)]
    assert_named_first(
        mistake, cases, MISTAKES[name], where="输出", section=SPEC[name], names=NAMES.get(name)
    )


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
@pytest.mark.parametrize("name", list(MISTAKES))
def test_no_two_mistakes_give_the_same_output(name):
    """诊断表本身：每组诊断输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们）。"""
    makers = [DIAGNOSIS_INPUTS[name]] + ([far_below_zero] if name in SHOWN_BY_LATER else [])
    cases = [(inputs, WANT[name](**inputs), {}) for inputs in (make() for make in makers)]
    assert not (found := collisions(MISTAKES[name], cases)), "\n".join(found)


def test_detaching_inside_is_named():
    """诊断本身：在函数里 detach old_logp 的错误版，失败信息第一行必须点名它。"""
    assert_named(
        DETACHED_INSIDE,
        {},
        torch.zeros(1, 2),
        [DETACHED_INSIDE],
        where="梯度",
        section=PITFALL_DETACH,
    )


def test_each_symptom_is_absent_from_the_right_answer():
    """症状只在错的输出上成立：诊断输入和 log 概率很低的输入的正确结果上一条都不成立。"""
    for name, make in DIAGNOSIS_INPUTS.items():
        for inputs in (make(), far_below_zero()) if name in SHOWN_BY_LATER else (make(),):
            want = WANT[name](**inputs)
            assert not [s.what for s in SYMPTOMS[name] if s.fn(want, **inputs)], name


def test_diagnoses_point_at_real_sections():
    assert_sections_exist(
        {m.section for ms in SYMPTOMS.values() for m in ms}
        | {m.section for _, m in ALL}
        | set(SPEC.values())
        | {
            FORMULA,
            EXAMPLE,
            TABLE,
            PITFALL_DETACH,
            PITFALL_ON_POLICY,
            WHY_RATIO,
            HINTS,
            KEEP_INPUTS,
        }
        | hint_sections(CRASHES)
    )
