"""L2.02 token_logprobs / token_entropy / completion_mask / masked_mean：
与朴素实现对照、边界情况，以及「不出现完整 float32 (B,T,V)」的内存性质；写错时点名是哪种典型错误。

典型错误（故意写错的实现）在 tests/L2/mistakes_l2_02.py；失败信息的第一行是一句中文（tests/diagnose.py）。
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from diagnose import (
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    crash_first_line,
    expect_value_error,
    explained,
    guarded,
    hint_sections,
    make_checker,
    require_grad,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mistakes_l2_02 import (
    BF16,
    CHUNKS,
    CRASHES,
    DIAGNOSIS_INPUTS,
    EMPTY_AND_NAN,
    ENTROPY_SPEC,
    EXAMPLE,
    FORMULA,
    FRACTIONAL,
    HINTS,
    LOGP_SPEC,
    MASK_SPEC,
    MEAN_SPEC,
    MISTAKE_IDS,
    MISTAKES,
    PAD_IS_EOS,
    SHIFT,
    _logits,
    _peaked,
    _tokens,
)

KEEP_INPUTS = "L2.02「3. 练习：前四个函数的规格」"


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    return guarded(
        impl("l2_02_logprobs_and_masks"),
        SPEC,
        CRASHES,
        keep_inputs={name: KEEP_INPUTS for name in SPEC},
    )


# ---------------------------------------------------------------- 参考：朴素实现


def _naive_logprobs(logits, tokens):
    """课程定义里的朴素写法：整块 float32 log_softmax 再 gather。"""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _naive_entropy(logits):
    """在 float64 里算 −Σ p·log p（log p 直接来自 log_softmax：p 下溢成 0 时这一项是 0·有限数 = 0）。"""
    logp = torch.log_softmax(logits.double(), -1)
    return -(logp.exp() * logp).sum(-1).float()


def _naive_mask(completion_ids, eos_token_ids):
    eos = {eos_token_ids} if isinstance(eos_token_ids, int) else set(eos_token_ids)
    out = []
    for row in completion_ids.tolist():
        m, seen = [], False
        for tok in row:
            m.append(0.0 if seen else 1.0)
            seen = seen or tok in eos
        out.append(m)
    return torch.tensor(out).reshape(completion_ids.shape)


def _naive_masked_mean(x, mask, dim=None):
    """逐元素 Python 循环（只支持二维）：只看 mask 非 0 的元素，空切片给 0。"""

    def mean(values, weights):
        picked = [(v, w) for v, w in zip(values, weights) if w != 0]
        total = sum(w for _, w in picked)
        return sum(v * w for v, w in picked) / total if total else 0.0

    xs, ms = x.tolist(), mask.float().tolist()
    if dim is None:
        return torch.tensor(mean(sum(xs, []), sum(ms, [])), dtype=x.dtype)
    if dim in (0, -2):
        xs, ms = [list(c) for c in zip(*xs)], [list(c) for c in zip(*ms)]
    return torch.tensor([mean(xr, mr) for xr, mr in zip(xs, ms)], dtype=x.dtype)


WANT = {
    "token_logprobs": _naive_logprobs,
    "token_entropy": _naive_entropy,
    "completion_mask": _naive_mask,
    "masked_mean": _naive_masked_mean,
}
# atol 1e-4：float32 的 logsumexp 在不同 CPU 内核路径上可差到 1e-5 量级；写错公式的误差是 O(1)
TOL = {
    "token_logprobs": dict(rtol=1e-5, atol=1e-4),
    "token_entropy": dict(rtol=1e-5, atol=1e-4),
    "completion_mask": dict(rtol=0, atol=0),
    "masked_mean": dict(rtol=1e-5, atol=1e-6),
}
SPEC = {
    "token_logprobs": LOGP_SPEC,
    "token_entropy": ENTROPY_SPEC,
    "completion_mask": MASK_SPEC,
    "masked_mean": MEAN_SPEC,
}


def _only_a_little_off(got, want, at_most):
    err = (got.float() - want.float()).abs().max()
    return got.shape == want.shape and 1e-4 < float(err) <= at_most


def _first_eos_not_one(got, completion_ids, eos_token_ids):
    first = _naive_mask(completion_ids, eos_token_ids)
    is_last_one = (first == 1) & (torch.cat([first[:, 1:], torch.zeros_like(first[:, :1])], 1) == 0)
    return bool((got.float()[is_last_one] != 1).any())


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = {
    "token_logprobs": [
        symptom(
            "log 概率出现了 −inf 或 NaN（正确值是有限的）：中间先算出了概率 e^x 再取 log 或相除，"
            "比最大的 logit 低 100 多 nat 的 token 下溢成 0（或很大的 logit 上溢成 inf）",
            FORMULA,
            lambda got, **kw: bool((~torch.isfinite(got.float())).any()),
        ),
        symptom(
            "log 概率出现了正数：log p = x[y] − logsumexp(x) ≤ 0",
            FORMULA,
            lambda got, **kw: bool((got > 1e-6).any()),
        ),
        symptom(
            "结果只差一点点（bf16 的误差量级）：log_softmax / logsumexp 是在 bf16 里算的，或中间经过了 bf16",
            BF16,
            lambda got, **kw: _only_a_little_off(got, _naive_logprobs(**kw), 0.3),
        ),
    ],
    "token_entropy": [
        symptom(
            "熵出现了负数：H = −Σ p·log p ≥ 0",
            ENTROPY_SPEC,
            lambda got, **kw: bool((got < -1e-4).any()),
        ),
        symptom(
            "熵超过了 log V（均匀分布的熵是上限）：求和没沿词表那一维，或 p 没有归一化",
            ENTROPY_SPEC,
            lambda got, logits: bool((got > math.log(logits.shape[-1]) + 1e-4).any()),
        ),
        symptom(
            "结果只差一点点（bf16 的误差量级）：熵是在 bf16 里算的，或中间经过了 bf16",
            BF16,
            lambda got, **kw: _only_a_little_off(got, _naive_entropy(**kw), 0.1),
        ),
    ],
    "completion_mask": [
        symptom(
            "mask 在一行里出现了先 0 后 1：第一个 EOS 之后应全是 0",
            MASK_SPEC,
            lambda got, **kw: bool((got[:, 1:] > got[:, :-1]).any()),
        ),
        symptom(
            "到第一个 EOS 为止（含 EOS）应全是 1：EOS 本身是 1，没有 EOS 的行（被截断）全是 1",
            MASK_SPEC,
            _first_eos_not_one,
        ),
    ],
    "masked_mean": [],
}
_check = make_checker(WANT, {n: MISTAKES[n] + SYMPTOMS[n] for n in MISTAKES}, SPEC, TOL)


def _run(mod, name, inputs, **kw):
    _check(name, getattr(mod, name)(**inputs), inputs, **kw)


@pytest.mark.parametrize(
    "name, case", [(n, c) for n, cases in DIAGNOSIS_INPUTS.items() for c in cases]
)
def test_typical_mistakes_are_caught(mod, name, case):
    """这些输入让每种典型错误给出和参考答案不同、彼此也不同的结果。"""
    _run(mod, name, DIAGNOSIS_INPUTS[name][case](), where=f"{name} 在诊断输入「{case}」上的输出")


# ---------------------------------------------------------------- token_logprobs


def test_logprobs_match_naive_float32(mod):
    inputs = dict(logits=_logits(2, 10, 100), tokens=_tokens(2, 10, 100))
    got = mod.token_logprobs(**inputs)
    _run(mod, "token_logprobs", inputs)
    assert (got <= 0).all(), "token_logprobs 出现了正数：log 概率不可能为正。回看 " + FORMULA


def test_worked_example_of_the_lesson(mod):
    # 课文 3.6 节：logits [2, 0, −1] 采到 token 0 -> −0.1698；全 0 的 logits（均匀分布）-> −log 3
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])
    inputs = dict(logits=logits, tokens=torch.tensor([[0, 2]]))
    want = torch.tensor([[-0.1698, -math.log(3)]])
    _run(mod, "token_logprobs", inputs, want=want, section=EXAMPLE, atol=1e-4)
    want_h = torch.tensor([[0.5243, math.log(3)]])
    _run(mod, "token_entropy", dict(logits=logits), want=want_h, section=EXAMPLE, atol=1e-4)


def test_logprobs_bf16_logits_match_float32_log_softmax(mod):
    # 训练时 logits 是 bf16：结果必须等于「先升到 float32 再 log_softmax」，而不是 bf16 里的 log_softmax
    inputs = dict(logits=_logits(3, 50, 257, torch.bfloat16), tokens=_tokens(3, 50, 257))
    _run(mod, "token_logprobs", inputs, section=BF16)


def test_bf16_log_softmax_really_is_worse():
    """对照（不测你的代码）：直接在 bf16 里做 log_softmax 的误差要大得多，这正是要升精度的原因。"""
    logits, tokens = _logits(3, 50, 257, torch.bfloat16), _tokens(3, 50, 257)
    in_bf16 = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0].float()
    err = (in_bf16 - _naive_logprobs(logits, tokens)).abs().max().item()
    assert err > 1e-3, f"bf16 里 log_softmax 的最大误差只有 {err}，课文坑 3 的说法需要重新核对"


def test_logprobs_more_rows_than_one_chunk(mod):
    # 行数不是 CHUNK_ROWS 的整数倍，检查切块的边界没有错位
    rows = 2 * getattr(mod, "CHUNK_ROWS", 128) + 7
    inputs = dict(logits=_logits(1, rows, 33), tokens=_tokens(1, rows, 33))
    _run(
        mod,
        "token_logprobs",
        inputs,
        where=f"{rows} 行（多于两块）的 token_logprobs",
        section=CHUNKS,
    )


def test_logprobs_empty_input(mod):
    inputs = dict(logits=torch.zeros(2, 0, 11), tokens=torch.zeros(2, 0, dtype=torch.long))
    _run(mod, "token_logprobs", inputs, where="空输入（T = 0）时 token_logprobs 的输出")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_gradient_matches_naive(mod, dtype):
    # 训练脚本要对它反向传播：梯度必须和朴素写法一致（有 checkpoint 重算也一样）
    base, tokens = _logits(2, 150, 40, dtype), _tokens(2, 150, 40)
    weights = torch.randn(2, 150, generator=torch.Generator().manual_seed(2))
    a = base.clone().requires_grad_()
    out = mod.token_logprobs(a, tokens)
    require_grad(
        out, "token_logprobs", CHUNKS
    )  # 先说清「梯度被切断了」，而不是 backward 的英文报错
    (out * weights).sum().backward()
    b = base.clone().requires_grad_()
    (_naive_logprobs(b, tokens) * weights).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    check(a.grad, b.grad, where=f"{dtype} logits 的梯度", section=CHUNKS, **tol)


def test_logprobs_shape_mismatch_raises(mod):
    expect_value_error(
        lambda: mod.token_logprobs(torch.zeros(2, 5, 10), torch.zeros(2, 4, dtype=torch.long)),
        "logits (2, 5, 10) 配 tokens (2, 4)（T 对不上）",
    )


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
    probe = mod.token_logprobs(_logits(1, 4, v, torch.float32).requires_grad_(), _tokens(1, 4, v))
    require_grad(
        probe, "token_logprobs", CHUNKS
    )  # 梯度被切断时先说清楚，而不是计数脚本里的英文报错
    r = measure(mod.token_logprobs, _logits(b, t, v, torch.bfloat16), _tokens(b, t, v))
    # 1) 没有任何一个算子一次产出完整的 float32 (B,T,V)
    assert r["max_fp32_bytes"] <= full_bytes // 2, (
        f"一个算子产出了 {r['max_fp32_bytes']} 字节的 float32 张量（完整的 (B,T,V) 是 {full_bytes}，"
        f"一块 CHUNK_ROWS 行是 {getattr(mod, 'CHUNK_ROWS', 128) * v * 4}）："
        f"一次升到 float32 的远不止一块。回看 {CHUNKS}"
    )
    # 2) 为 backward 存下的 float32 加起来也不能接近完整的 (B,T,V)
    assert r["saved_fp32_bytes"] <= full_bytes // 2, (
        f"autograd 为 backward 存了共 {r['saved_fp32_bytes']} 字节的 float32（完整的 (B,T,V) 是 {full_bytes}）："
        f"单个张量都不大，每块的 float32 中间结果却都被留到了 backward，峰值只是换了个时刻。回看 {CHUNKS}"
    )


def test_memory_script_at_qwen3_shapes(impl_name, capsys, monkeypatch):
    # 脚本在 meta 设备上按 Qwen3 的真实尺寸数字节，不分配内存（规格 3.1：你的函数也会在 meta 上被调用）
    script = _load_memory_script()
    monkeypatch.setattr(
        "sys.argv", ["logprob_memory.py", "--batch", "2", "--seq", "256", "--impl", impl_name]
    )
    with explained("token_logprobs", LOGP_SPEC, CRASHES["token_logprobs"]):
        script.main()  # 在 meta 设备上调用你的函数（3.1 节第 5 条）
    out = capsys.readouterr().out
    full = 2 * 256 * 151_936 * 4 / 1e9  # 完整 float32 (B,T,V) 的 GB 数
    chunk = 128 * 151_936 * 4 / 1e9  # 一块 128 行
    for line in (
        f"朴素 log_softmax + gather | {full:.3f} GB | {full:.3f} GB",
        f"分块，不用 checkpoint | {chunk:.3f} GB | {full:.3f} GB",
    ):
        assert line in out, f"logprob_memory.py 的输出里缺这一行：{line!r}\n实际输出：\n{out}"


# ---------------------------------------------------------------- token_entropy


def test_entropy_matches_naive(mod):
    _run(mod, "token_entropy", dict(logits=_logits(2, 300, 50, torch.bfloat16)))


def test_entropy_limits(mod):
    v = 1000
    uniform = torch.zeros(1, 2, v)
    _run(
        mod,
        "token_entropy",
        dict(logits=uniform),
        want=torch.full((1, 2), math.log(v)),
        where="均匀分布（V = 1000）的熵，应为 log V",
    )
    peaked = torch.zeros(1, 1, v)
    peaked[..., 3] = 100.0  # 几乎全部概率在一个 token 上
    h = mod.token_entropy(peaked).item()
    assert 0 <= h < 1e-3, f"几乎确定的分布，熵应接近 0（且不为负），得到 {h}。回看 {ENTROPY_SPEC}"


def test_entropy_of_a_very_peaked_distribution(mod):
    """其余 token 比最大的低 200：float32 里 exp(−200) 下溢成 0。熵应是（几乎）0，不是 NaN。"""
    inputs = dict(logits=_peaked())
    _run(mod, "token_entropy", inputs, where="很尖的分布（小概率在 float32 里下溢成 0）的熵")


# ---------------------------------------------------------------- completion_mask


def test_mask_edge_cases(mod):
    ids = torch.tensor(
        [
            [2, 5, 5, 5],  # EOS 在第 0 位：只保留 EOS 本身
            [5, 6, 2, 2],  # EOS 之后是 pad（pad == eos）：第一个 EOS 算，后面的不算
            [5, 6, 7, 8],  # 没有 EOS（被截断）：全 1
            [5, 6, 7, 2],  # EOS 在最后一位：全 1
        ]
    )
    _run(mod, "completion_mask", dict(completion_ids=ids, eos_token_ids=2))


def test_mask_several_eos_ids(mod):
    # Qwen3：<|im_end|>=151645 与 <|endoftext|>=151643 都结束生成；哪个先出现就停在哪
    im_end, eot, pad = 151645, 151643, 151643
    ids = torch.tensor([[10, im_end, pad, pad], [10, 11, eot, pad], [10, 11, 12, 13]])
    for eos in ([im_end, eot], (im_end, eot), im_end):
        # 只给一个 id 时，另一个就是普通 token
        _run(
            mod,
            "completion_mask",
            dict(completion_ids=ids, eos_token_ids=eos),
            where=f"eos_token_ids={eos!r} 时的 mask",
            section=PAD_IS_EOS,
        )


def test_mask_empty_eos_list_raises(mod):
    expect_value_error(
        lambda: mod.completion_mask(torch.tensor([[1, 2]]), []), "eos_token_ids 是空列表"
    )


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
# 固定的例子：EOS 后还有 token、两个 EOS id 谁先出现都有、一行没有 EOS、EOS 在第 0 位
@example(rows=[[5, 2, 7, 2], [1, 3, 2, 4], [4, 4, 4, 4], [2, 1, 1, 1]], eos=[2, 3])
@example(rows=[[0, 1, 0], [1, 1, 1]], eos=0)
def test_mask_matches_naive_loop(mod, rows, eos):
    _run(mod, "completion_mask", dict(completion_ids=torch.tensor(rows), eos_token_ids=eos))


# ---------------------------------------------------------------- masked_mean


def test_masked_mean_all_and_per_row(mod):
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    m = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    for dim in (None, 1, 0):
        _run(mod, "masked_mean", dict(x=x, mask=m, dim=dim), where=f"dim={dim} 的 masked_mean")
    _run(
        mod, "masked_mean", dict(x=x, mask=m.bool(), dim=1), where="bool mask、dim=1 的 masked_mean"
    )


def test_masked_mean_fractional_weights(mod):
    """规格 3.5：mask 可以是非负的小数权重，结果是 Σ m·x / Σ m（3.6 节的例子：第 0 行 1.6667）。"""
    inputs = dict(x=torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]),
                  mask=torch.tensor(FRACTIONAL), dim=1)  # fmt: skip
    _run(mod, "masked_mean", inputs, where="小数权重 mask、dim=1 的 masked_mean", section=MEAN_SPEC)
    _run(
        mod, "masked_mean", {**inputs, "dim": None}, where="小数权重 mask、dim=None 的 masked_mean"
    )


def test_masked_mean_empty_slice_is_zero(mod):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    m = torch.tensor([[1.0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    _run(mod, "masked_mean", dict(x=x, mask=m, dim=1), section=EMPTY_AND_NAN)
    _run(mod, "masked_mean", dict(x=x, mask=torch.zeros_like(x)), section=EMPTY_AND_NAN)


def test_masked_positions_never_leak(mod):
    # pad 位置上的值可能是垃圾（NaN/inf）；0 * NaN = NaN，只靠乘 mask 是不够的
    x = torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]], requires_grad=True)
    m = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    _run(mod, "masked_mean", dict(x=x, mask=m), section=EMPTY_AND_NAN)
    row = mod.masked_mean(x, m, dim=1)
    _check("masked_mean", row, dict(x=x, mask=m, dim=1), section=EMPTY_AND_NAN)
    require_grad(row, "masked_mean", MEAN_SPEC)
    row.sum().backward()
    check(
        x.grad,
        torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        where="遮住的位置是 NaN/inf 时对 x 的梯度",
        section=EMPTY_AND_NAN,
    )


def test_masked_mean_gradient_with_empty_slice(mod):
    x = torch.randn(2, 3, requires_grad=True, generator=torch.Generator().manual_seed(0))
    m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out = mod.masked_mean(x, m, dim=1)
    require_grad(out, "masked_mean", MEAN_SPEC)
    out.sum().backward()
    check(
        x.grad,
        torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]),
        where="有一行 mask 全 0 时对 x 的梯度（那一行应为 0，不是 NaN）",
        section=EMPTY_AND_NAN,
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 10_000), st.booleans())
# 固定的例子：种子 0 的 3×4 mask 有一行全 0、各行有效个数不同（分母、空行、按行平均、沿错了维度都看得出）；
# 同一个 mask 换成小数权重（不加权的平均、分母数个数都看得出）
@example(b=3, t=4, seed=0, fractional=False)
@example(b=3, t=4, seed=0, fractional=True)
def test_masked_mean_matches_naive(mod, b, t, seed, fractional):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=g, dtype=torch.float64)
    m = (torch.rand(b, t, generator=g) > 0.5).double()
    if fractional:  # 规格允许非负的小数权重
        m = m * torch.rand(b, t, generator=g, dtype=torch.float64)
    for dim in (None, 0, 1):
        _run(mod, "masked_mean", dict(x=x, mask=m, dim=dim), where=f"dim={dim} 的 masked_mean")


# ---------------------------------------------------------------- 诊断本身（不依赖 --impl）


def _logp_without_keepdim(logits, tokens):
    x = logits.float()
    return (x - torch.logsumexp(x, -1)).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _entropy_without_keepdim(logits):
    p = logits.float().exp() / logits.float().exp().sum(-1)
    return -(p * p.log()).sum(-1)


@pytest.mark.parametrize(
    "name, fn, args",
    [
        ("token_logprobs", _logp_without_keepdim, lambda: (_logits(1, 3, 7), _tokens(1, 3, 7))),
        ("token_entropy", _entropy_without_keepdim, lambda: (_logits(1, 3, 7),)),
    ],
    ids=["token_logprobs", "token_entropy"],
)
def test_missing_dimension_after_a_reduction_is_named(name, fn, args):
    """诊断本身：归约（logsumexp、求和）之后少了一维、和 (…, V) 的张量广播失败时，第一行说出这一类错误。"""
    line = crash_first_line(lambda: fn(*args()), name, SPEC[name], CRASHES[name])
    assert line.startswith(f"{name}() 抛出 RuntimeError：") and "少了一维" in line, line


ALL = [(name, m) for name, ms in MISTAKES.items() for m in ms]
ALL_IDS = [f"{n}-{i}" for n, ids in MISTAKE_IDS.items() for i in ids]


@pytest.mark.parametrize("name, mistake", ALL, ids=ALL_IDS)
def test_each_typical_mistake_is_named(name, mistake):
    """把已知错误的实现按测试的顺序送进同一个检查：它第一次和正确结果不同的那组诊断输入上，
    失败信息的第一行必须只点名这个错误（学习者先看到的就是这一行）。"""
    cases = []
    for make in DIAGNOSIS_INPUTS[name].values():
        inputs = make()
        cases.append((inputs, WANT[name](**inputs), TOL[name]))
    assert_named_first(mistake, cases, MISTAKES[name], where="输出", section=SPEC[name])


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
@pytest.mark.parametrize("name", list(MISTAKES))
def test_no_two_mistakes_give_the_same_output(name):
    """诊断表本身：每组诊断输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们，会点名错的那个）。"""
    cases = []
    for make in DIAGNOSIS_INPUTS[name].values():
        inputs = make()
        cases.append((inputs, WANT[name](**inputs), TOL[name]))
    assert not (found := collisions(MISTAKES[name], cases)), "\n".join(found)


def test_each_symptom_is_absent_from_the_right_answer():
    """症状只在错的输出上成立：诊断输入的正确结果上一条都不成立。"""
    for name, cases in DIAGNOSIS_INPUTS.items():
        for make in cases.values():
            inputs = make()
            want = WANT[name](**inputs)
            assert not [s.what for s in SYMPTOMS[name] if s.fn(want, **inputs)], name


def test_diagnoses_point_at_real_sections():
    sections = {m.section for _, m in ALL} | set(SPEC.values())
    sections |= {m.section for ms in SYMPTOMS.values() for m in ms}
    assert_sections_exist(
        sections
        | {FORMULA, CHUNKS, EXAMPLE, SHIFT, BF16, PAD_IS_EOS, EMPTY_AND_NAN, HINTS, KEEP_INPUTS}
        | hint_sections(CRASHES)
    )
