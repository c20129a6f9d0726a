"""L2.02 第 6 节 hidden_token_logprobs：从 hidden state 直接算 log-prob 和熵。

对照的「定义」是普通路径：先算出完整 logits（float32），再交给 token_logprobs / token_entropy。
要求：数值和梯度（对 hidden、对 lm_head 权重、对整个 tiny 模型）与普通路径一致；
forward 和 backward 里都没有 (B, T, V) 大小的张量；写错时给出指向课文的中文诊断。
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from diagnose import (
    Mistake,
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    crash_first_line,
    describe_mismatch,
    explained,
    guarded,
    hint_sections,
    require_grad,
    symptom,
)

ROOT = Path(__file__).resolve().parents[2]

SECTION = "L2.02「6. 再进一步：连 logits 都不要」"
SPEC = "L2.02「6.1 规格」"
WHY = "L2.02「6.2 每一部分为什么在那里」"
HINTS = "L2.02「6.5 测试会指出的错误」"
NAMES = ("logp", "entropy")  # 两个返回值的名字：失败信息写成「返回值 [1]（entropy）」
TOL = dict(
    rtol=1e-4, atol=1e-5
)  # float32：logsumexp 的求和顺序不同，误差 1e-6 量级；写错是 1e-2 以上


# hidden_token_logprobs 里抛出异常时，按异常的种类说最可能的原因
CRASHES = {
    "hidden_token_logprobs": {
        "matmul": (
            "矩阵乘两边的形状对不上：lm_head_weight 是 (V, H)，hidden 的每个位置是 H 维"
            "（乘的方向反了，或少了 / 多了一次转置）"
        ),
        "dtype": (
            "矩阵乘的两个操作数 dtype 不一致（一个 float32、一个 bf16）",
            WHY,
        ),
        "autocast_device": (
            "在 meta 设备上调用了 torch.autocast：hidden_memory.py（和测试）用 meta 设备按 Qwen3 的真实尺寸"
            '数字节，而 meta 没有 autocast，`torch.autocast("meta", ...)` 会报这个错',
            WHY,
        ),
        "meta_value": (
            "hidden_memory.py（和测试）在 meta 设备上调用它，meta 张量只有形状、没有数值："
            "函数里读了张量的数值（.item()、.tolist()、float(...) 之类）",
            WHY,
        ),
        "broadcast": "这一块的 logits、logsumexp 的结果和 gather 取出的值形状对不上：其中一个少了一维"
        "（logsumexp 归约之后那一维没了），或多了一维",
        "gather": "gather 的索引和这一块 logits 的形状对不上（索引少了一维，或除了词表那一维，其余各维大小不同）",
        "reshape": "reshape 的元素个数对不上：给回答打分的只有 T 个位置，不是整条序列的 L 个",
        "empty_cat": (
            "T = 0 时一块也没有，torch.cat 拿到了空列表（规格：这时返回两个 (B, 0) 的空 float32 张量）",
            SPEC,
        ),
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    sections = {"hidden_token_logprobs": SPEC}
    return guarded(impl("l2_02_logprobs_and_masks"), sections, CRASHES, keep_inputs=sections)


def _case(b=3, l=21, h=16, v=50, t=12, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, l, h, generator=g).to(dtype)
    weight = (torch.randn(v, h, generator=g) * 0.5).to(dtype)
    tokens = torch.randint(0, v, (b, t), generator=g)
    return hidden, weight, tokens


def _plain(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    """普通路径（定义）：完整的 float32 logits，错一位，除以温度，再逐位置 log_softmax。"""
    T, L = tokens.shape[1], hidden.shape[1]
    z = hidden[:, L - T - 1 : L - 1].float() @ lm_head_weight.float().T / temperature
    logp = torch.log_softmax(z, -1)
    picked = logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return picked, -(logp.exp() * logp).sum(-1).detach()


# ---- 典型错误：同样的参数 -> 这种错误会算出的结果 ----
def _no_temperature(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    return _plain(hidden, lm_head_weight, tokens, 1.0)


def _upcast_after_matmul(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    T, L = tokens.shape[1], hidden.shape[1]
    z = (hidden[:, L - T - 1 : L - 1] @ lm_head_weight.T).float() / temperature
    logp = torch.log_softmax(z, -1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _no_shift(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    T = tokens.shape[1]
    padded = torch.cat([hidden[:, -T:], hidden[:, -1:]], dim=1)  # 用 hidden[:, -T:] 给 tokens 打分
    return _plain(padded, lm_head_weight, tokens, temperature)


def _temperature_after_log_softmax(
    hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None
):
    logp, _ = _plain(hidden, lm_head_weight, tokens, 1.0)
    return logp / temperature, _plain(hidden, lm_head_weight, tokens, temperature)[1]


def _shift_two(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    shifted = torch.cat([hidden[:, :1], hidden[:, :-1]], dim=1)  # 打分用了 hidden[:, L-T-2 : L-2]
    return _plain(shifted, lm_head_weight, tokens, temperature)


def _first_positions(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    T = tokens.shape[1]
    return _plain(hidden[:, : T + 1], lm_head_weight, tokens, temperature)  # 打分用了 hidden[:, :T]


def _temperature_multiplied(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    return _plain(hidden, lm_head_weight, tokens, 1.0 / temperature)


def _sign_flipped(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    logp, ent = _plain(hidden, lm_head_weight, tokens, temperature)
    return -logp, ent


def _logp_without_temperature(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    return _plain(hidden, lm_head_weight, tokens, 1.0)[0], _plain(
        hidden, lm_head_weight, tokens, temperature
    )[1]


# 下面几个只错了熵（part=1：fn 只算出熵）；logp 是对的
def _entropy_without_temperature(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    return _plain(hidden, lm_head_weight, tokens, 1.0)[1]


def _logits(hidden, lm_head_weight, tokens, temperature):
    T, L = tokens.shape[1], hidden.shape[1]
    z = hidden[:, L - T - 1 : L - 1].float() @ lm_head_weight.float().T / temperature
    return z.reshape(-1, z.shape[-1])


def _entropy_over_rows(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    """一块里沿 dim=0（不同位置之间）归一化：测试的输入只有一块（B·T <= chunk_rows）。"""
    z = _logits(hidden, lm_head_weight, tokens, temperature)
    if chunk_rows is not None and chunk_rows < z.shape[0]:
        raise ValueError("不止一块：这个错误的结果和怎么分块有关")
    logp = torch.log_softmax(z, dim=0)
    return -(logp.exp() * logp).sum(-1).reshape(tokens.shape)


def _entropy_in_bf16(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    if hidden.dtype != torch.bfloat16:
        raise ValueError("只对 bf16 的输入适用")
    logp = torch.log_softmax(_logits(hidden, lm_head_weight, tokens, temperature).bfloat16(), -1)
    return (-(logp.exp() * logp).sum(-1)).float().reshape(tokens.shape)


def _log_of_softmax(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    z = _logits(hidden, lm_head_weight, tokens, temperature)
    logp = torch.softmax(z, -1).log()  # e^−150 在 float32 里下溢成 0：log 0 = −inf，0·(−inf) = NaN
    picked = logp.gather(-1, tokens.reshape(-1, 1).long()).reshape(tokens.shape)
    return picked, -(logp.exp() * logp).sum(-1).reshape(tokens.shape)


def _by_hand(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None, *, lse=True):
    """logsumexp（lse=True）或 softmax（lse=False）是手写的、没先减最大值：e^100 在 float32 里上溢成 inf。"""
    z = _logits(hidden, lm_head_weight, tokens, temperature)
    picked = z.gather(-1, tokens.reshape(-1, 1).long()).squeeze(-1)
    if lse:
        logp = picked - z.exp().sum(-1).log()
    else:
        p = z.exp() / z.exp().sum(-1, keepdim=True)
        logp = p.gather(-1, tokens.reshape(-1, 1).long()).squeeze(-1).log()
    return logp.reshape(tokens.shape), _plain(hidden, lm_head_weight, tokens, temperature)[1]


def _softmax_by_hand(hidden, lm_head_weight, tokens, temperature=1.0, chunk_rows=None):
    return _by_hand(hidden, lm_head_weight, tokens, temperature, lse=False)


def _far_below():
    """float32：第 0 行采到的 token 比最大的 logit 低 150 nat，第 1 行采到的是最大的 logit 100。
    hidden 的两个打分位置是 (1, 0) 和 (0, 1)，所以 logits 就是 lm_head_weight 的两列。"""
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    weight = torch.tensor(
        [[0.0, 100.0], [-150.0, 95.0], [-2.0, -30.0], [-1.0, 99.0], [-160.0, 90.0]]
    )
    return dict(hidden=hidden, lm_head_weight=weight, tokens=torch.tensor([[1, 0]]))


MISTAKES = [
    Mistake("忘了除以 temperature（被优化的不是采样用的分布）", SPEC, _no_temperature),
    Mistake(
        "矩阵乘实际是在 bf16 里做的（乘完才升 float32，或外层的 bf16 autocast 把它改回了 bf16），"
        "logits 已经被 bf16 舍入过一次",
        WHY,
        _upcast_after_matmul,
    ),
    Mistake(
        "往后错了一位（用最后 T 个位置的 hidden 给 tokens 打分，而最后一个位置的 hidden 预测的是回答之后的 token）",
        SPEC,
        _no_shift,
    ),
    Mistake(
        "把 log 概率除以 temperature，而不是先把 logits 除以 temperature",
        SPEC,
        _temperature_after_log_softmax,
    ),
    Mistake(
        "往前多错了一位（给每个回答 token 打分的 hidden 都比该用的早一个位置；位置 i 的 hidden 预测的是位置 i+1 的 token）",
        SPEC,
        _shift_two,
    ),
    Mistake(
        "用了最前面的 T 个位置的 hidden（那是 prompt 的位置，回答是整条序列的最后 T 个 token）",
        SPEC,
        _first_positions,
    ),
    Mistake(
        "logits 乘了 temperature（应除以 temperature：τ < 1 让分布更尖）",
        SPEC,
        _temperature_multiplied,
    ),
    Mistake("logp 的符号反了：算成了 logsumexp − z[y]（log 概率 ≤ 0）", WHY, _sign_flipped),
    Mistake(
        "算 logp 时没除以 temperature（熵那边除了）：两者要用同一个 z/τ",
        WHY,
        _logp_without_temperature,
    ),
    Mistake(
        "算熵时没除以 temperature（logp 那边除了）：两者要用同一个 z/τ，熵记的是采样分布的熵",
        WHY,
        _entropy_without_temperature,
        part=1,
    ),
    Mistake(
        "熵的 softmax 沿错了维度（dim=0：在一块里的不同位置之间归一化了，不是在词表上）",
        WHY,
        _entropy_over_rows,
        part=1,
    ),
    Mistake(
        "熵是在 bf16 里算的（log_softmax 和求和都在 bf16 里）",
        WHY,
        _entropy_in_bf16,
        part=1,
        rtol=0.0,
        atol=0.1,  # bf16 的几种写法彼此差到 0.08（熵在 0–1 之间）
    ),
    Mistake(
        "log 概率是对 softmax 的结果取 log 得到的：比最大的 logit 低 100 多 nat 的 token，"
        "概率在 float32 里下溢成 0，log 0 = −inf（训练时 KL 和 loss 跟着变成 inf）",
        WHY,
        _log_of_softmax,
    ),
    Mistake(
        "logsumexp 是手写的 log Σ e^z（没先减掉最大的 logit）：logit ≈ 100 时 e^z 在 float32 里上溢成 inf，"
        "log 概率成了 −inf",
        WHY,
        _by_hand,
    ),
    Mistake(
        "概率是手写的 e^z / Σ e^z（没先减掉最大的 logit）：logit ≈ 100 时 e^z 在 float32 里上溢成 inf，"
        "inf / inf = NaN",
        WHY,
        _softmax_by_hand,
    ),
]


# 认不出具体写法时的症状（按顺序，说第一个学习者的输出有、正确结果没有的）
SYMPTOMS = [
    symptom(
        "logp 出现了 −inf 或 NaN（正确值是有限的）：中间先算出了概率 e^z 再取 log 或相除，"
        "比最大的 logit 低 100 多 nat 的 token 下溢成 0（或很大的 logit 上溢成 inf）",
        WHY,
        lambda got, **kw: bool((~torch.isfinite(got[0].float())).any()),
    ),
    symptom(
        "logp 出现了正数：log p = z[y] − logsumexp(z) ≤ 0",
        WHY,
        lambda got, **kw: bool((got[0] > 1e-5).any()),
    ),
    symptom(
        "熵出现了负数：H = −Σ p·log p ≥ 0", WHY, lambda got, **kw: bool((got[1] < -1e-4).any())
    ),
    symptom(
        "logp 是 bf16（规格要 float32）：外层的 torch.autocast 把这一块的矩阵乘改回了 bf16",
        WHY,
        lambda got, **kw: got[0].dtype == torch.bfloat16,
    ),
]


def _wrong(got, **inputs):
    return describe_mismatch(tuple(got), _plain(**inputs), **TOL) is not None


# 同一组输入在 temperature = 1 时是对的、换一个温度就不对：错的一定是温度的用法
TEMPERATURE_ONLY = symptom(
    "temperature = 1 时是对的，换一个温度就不对：温度用错了"
    "（规格：logp 和熵都是 z/τ 这个分布的，logits 只除一次 τ，不是乘）",
    WHY,
    _wrong,
)


def _check(mod, where, extra=(), **inputs):
    got = mod.hidden_token_logprobs(**inputs)
    want = _plain(**inputs)
    check(
        tuple(got) if isinstance(got, (tuple, list)) else got,
        want,
        where=where,
        section=SECTION,
        inputs=inputs,
        mistakes=MISTAKES + SYMPTOMS + list(extra),
        names=NAMES,
        **TOL,
    )
    return got


# ---------------------------------------------------------------- 数值：与普通路径一致


def test_matches_plain_path_float32(mod):
    hidden, weight, tokens = _case()
    logp, ent = _check(
        mod, "hidden_token_logprobs 的输出", hidden=hidden, lm_head_weight=weight, tokens=tokens
    )
    assert logp.shape == ent.shape == tokens.shape
    assert logp.dtype == ent.dtype == torch.float32


def test_token_far_below_the_most_likely_one(mod):
    """采到的 token 比最大的 logit 低 150 nat、最大的 logit 是 100：log 概率仍是有限的数（−150 左右）。"""
    _check(mod, "采到的 token 远低于最可能的 token 时的输出", **_far_below())


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_temperature(mod, temperature):
    hidden, weight, tokens = _case(seed=1)
    at_one = dict(hidden=hidden, lm_head_weight=weight, tokens=tokens)
    right_at_one = not _wrong(mod.hidden_token_logprobs(**at_one), **at_one)
    _check(
        mod,
        f"temperature={temperature} 时的输出",
        extra=[TEMPERATURE_ONLY] if right_at_one else [],
        temperature=temperature,
        **at_one,
    )


@pytest.mark.parametrize("chunk_rows", [1, 5, 36, 1000])
def test_chunk_boundaries(mod, chunk_rows):
    # 3×12 = 36 行：块大小整除、不整除、大于总行数，结果都一样
    hidden, weight, tokens = _case(seed=2)
    _check(
        mod,
        f"chunk_rows={chunk_rows} 时的输出",
        hidden=hidden,
        lm_head_weight=weight,
        tokens=tokens,
        chunk_rows=chunk_rows,
    )


def test_bf16_inputs_are_multiplied_in_float32(mod):
    # bf16 的 hidden 和权重：参考是「升到 float32 再乘」，logits 不经过 bf16 舍入
    hidden, weight, tokens = _case(h=64, v=300, dtype=torch.bfloat16, seed=3)
    hidden, weight = hidden * 4, weight * 4  # logits 量级 ~30：bf16 舍入误差 ~0.1，远超容差
    logp, _ = _check(mod, "bf16 输入时的输出", hidden=hidden, lm_head_weight=weight, tokens=tokens)
    # 对照：乘完再升的误差确实远大于容差（这条测试区分得开两种写法）
    wrong, _ = _upcast_after_matmul(hidden, weight, tokens)
    assert (wrong - logp).abs().max() > 1e-2


def test_longer_hidden_than_needed(mod):
    # hidden 可以包含 prompt 的全部位置（L 远大于 T+1）：只用最后 T+1 个里的前 T 个
    hidden, weight, tokens = _case(l=40, t=5, seed=4)
    _check(mod, "L > T+1 时的输出", hidden=hidden, lm_head_weight=weight, tokens=tokens)
    hidden2 = hidden.clone()
    hidden2[:, :34] = float("nan")  # 前面的位置和最后一个位置都不该被读到
    hidden2[:, -1] = float("nan")
    got = mod.hidden_token_logprobs(hidden2, weight, tokens)
    assert torch.isfinite(got[0]).all(), (
        "读到了不该用的位置（prompt 的位置，或最后一个位置）：哪 T 个位置给回答打分，回看 " + SPEC
    )


def test_no_grad_path_and_entropy_has_no_grad(mod):
    hidden, weight, tokens = _case(seed=5)
    with torch.no_grad():
        logp, ent = mod.hidden_token_logprobs(hidden, weight, tokens)
    check(
        logp,
        _plain(hidden, weight, tokens)[0],
        where="torch.no_grad() 下调用时的 logp",
        section=WHY,
        **TOL,
    )
    w = weight.clone().requires_grad_()
    _, ent = mod.hidden_token_logprobs(hidden, w, tokens)
    assert not ent.requires_grad, (
        f"返回的 entropy 带着梯度：熵只用来记日志，带梯度会把它的中间结果留到 backward。回看 {SPEC}"
    )


def test_bad_shapes_raise(mod):
    hidden, weight, tokens = _case(l=12, t=12)
    with pytest.raises(ValueError):  # L = T：没有 T+1 个位置
        mod.hidden_token_logprobs(hidden, weight, tokens)
    hidden, weight, tokens = _case()
    with pytest.raises(ValueError):  # 权重的 H 不对
        mod.hidden_token_logprobs(hidden, weight[:, :8], tokens)
    with pytest.raises(ValueError):
        mod.hidden_token_logprobs(hidden, weight, tokens, temperature=0.0)


# ---------------------------------------------------------------- 梯度：对 hidden、对权重


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_gradients_match_plain_path(mod, temperature):
    hidden, weight, tokens = _case(seed=6)
    coef = torch.randn(tokens.shape, generator=torch.Generator().manual_seed(7))
    grads = []
    for fn in (mod.hidden_token_logprobs, _plain):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        logp, _ = fn(h, w, tokens, temperature, 7)
        require_grad(logp, "hidden_token_logprobs 的 logp", WHY)
        (logp * coef).sum().backward()
        grads.append((h.grad, w.grad))
    (gh, gw), (wh, ww) = grads
    assert gh is not None and gw is not None, "logp 要能对 hidden 和 lm_head_weight 求导"
    check(gh, wh, where="对 hidden 的梯度", section=SECTION, **TOL)
    check(gw, ww, where="对 lm_head_weight 的梯度", section=SECTION, **TOL)


@pytest.mark.slow  # 第一次 import transformers 的模型类就要约 2 秒：放进 slow，CI 照样跑
def test_tiny_model_end_to_end(mod):
    # 真实的 HF Qwen3（tiny 的结构 TINY_ARCH，随机权重，float32）：整个模型的梯度与
    # 「logits_to_keep=T+1 → token_logprobs」一致。词表大小随意：这里不需要 tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from common.model.models import TINY_ARCH

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY_ARCH, vocab_size=300)).float()
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(5, model.config.vocab_size, (3, 30), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :4] = 0  # 左 padding
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    T, temperature = 9, 0.8
    coef = torch.randn(3, T, generator=g)
    results = []
    for path in ("plain", "hidden"):
        model.zero_grad(set_to_none=True)
        if path == "plain":
            logits = model(
                input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=T + 1
            ).logits[:, :-1]
            logp = torch.log_softmax(logits / temperature, -1)
            logp = logp.gather(-1, ids[:, -T:, None]).squeeze(-1)
        else:
            h = model.model(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
            logp, _ = mod.hidden_token_logprobs(h, model.lm_head.weight, ids[:, -T:], temperature)
        (logp * coef).sum().backward()
        results.append((logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (want, want_g), (got, got_g) = results
    check(got, want, where="tiny 模型上的 log-prob", section=SECTION, **TOL)
    for name in (
        "model.embed_tokens.weight",
        "model.norm.weight",
        "model.layers.0.mlp.up_proj.weight",
    ):
        check(got_g[name], want_g[name], where=f"tiny 模型 {name} 的梯度", section=SECTION, **TOL)


# ---------------------------------------------------------------- 内存：(B, T, V) 从不出现


def _memory_script():
    path = ROOT / "L2_algorithm" / "02_logprobs_and_masks" / "hidden_memory.py"
    spec = importlib.util.spec_from_file_location("hidden_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_btv_tensor_in_forward_or_backward(mod):
    b, l, h, v, t, rows = 4, 81, 8, 512, 80, 32  # B·T = 320 行 = 10 块；H 很小，(V,H) 远小于一块
    hidden, weight, tokens = _case(b, l, h, v, t, seed=9)
    full = b * t * v
    # 对照：普通路径确实会造出 (B,T,V)，说明这个数法看得见它
    measure = _memory_script().measure  # 课上那个计数脚本的数法
    plain_max, plain_saved = measure(_plain, hidden, weight, tokens)
    assert plain_max >= full and plain_saved >= full
    biggest, saved = measure(mod.hidden_token_logprobs, hidden, weight, tokens, chunk_rows=rows)
    assert biggest <= rows * v, (
        f"出现了 {biggest} 个元素的张量（chunk_rows×V = {rows}×{v} = {rows * v}，"
        f"完整的 (B,T,V) 是 {full}）：同时存在的 logits 超过了 chunk_rows 行。回看 " + SPEC
    )
    assert saved <= full // 4, (
        f"autograd 为 backward 存了共 {saved} 个元素（完整的 (B,T,V) 是 {full}，hidden 和 W 加起来只有 "
        f"{hidden.numel() + weight.numel()}）：每块的 logits 被留到了 backward。回看 L2.02「3.2 为什么要分块，为什么分块还不够」"
        "和 6.5 的提示 2"
    )


def test_memory_script_at_qwen3_shapes(mod, impl_name, capsys, monkeypatch):
    # 脚本在 meta 设备上按 Qwen3-0.6B 的真实尺寸数：普通路径造出 (B,T,V)，第 6 节的写法最大只到 (V,H)
    mod.hidden_token_logprobs(
        *_case(b=1, l=3, t=2)
    )  # 还是空桩时在这里停下（脚本会把空桩的异常接住）
    monkeypatch.setattr("sys.argv", ["hidden_memory.py", "--batch", "2", "--impl", impl_name])
    with explained("hidden_token_logprobs", WHY, CRASHES["hidden_token_logprobs"]):
        _memory_script().main()  # 在 meta 设备上调用你的函数（6.1 节）
    out = capsys.readouterr().out
    full, weight = 2 * 512 * 151_936 * 4 / 1e9, 151_936 * 1024 * 4 / 1e9
    assert f"完整 logits（普通路径） | {full:.3f} GB |" in out
    if "还没实现" in out:
        pytest.fail(
            "还没实现：exercises/l2_02_logprobs_and_masks.py 里的 hidden_token_logprobs()，"
            "hidden_memory.py 量不了它。规格在 L2.02 第 6 节。\n" + out
        )
    assert f"256 行一块 | {weight:.3f} GB |" in out, (
        f"hidden_memory.py 量到的最大张量不是 (V,H) 那么大（应为 {weight:.3f} GB）："
        f"同时存在的 logits 超过了 256 行。回看 {SPEC}\n{out}"
    )


def test_called_inside_autocast_still_float32(mod):
    # 训练脚本在 bf16 autocast 里跑模型；这一步的矩阵乘不能被 autocast 改回 bf16
    hidden, weight, tokens = _case(h=64, v=300, seed=10)
    hidden, weight = hidden * 4, weight * 4
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = mod.hidden_token_logprobs(hidden, weight, tokens)
    check(
        tuple(got),
        _plain(hidden, weight, tokens),
        where="autocast 里调用时的输出",
        section=SECTION,
        inputs=dict(hidden=hidden.bfloat16(), lm_head_weight=weight.bfloat16(), tokens=tokens),
        mistakes=MISTAKES + SYMPTOMS,
        names=NAMES,
        **TOL,
    )


# ---------------------------------------------------------------- 诊断本身（不依赖 --impl）


def _diagnosis_cases():
    """这个文件里的测试依次用的 (inputs, 正确结果, 容差)。"""
    hidden, weight, tokens = _case()
    cases = [dict(hidden=hidden, lm_head_weight=weight, tokens=tokens)]  # test_matches_plain_path
    cases.append(_far_below())  # test_token_far_below_the_most_likely_one
    hidden, weight, tokens = _case(seed=1)
    cases += [  # test_temperature
        dict(hidden=hidden, lm_head_weight=weight, tokens=tokens, temperature=t) for t in (0.7, 1.5)
    ]
    h, w, t = _case(h=64, v=300, dtype=torch.bfloat16, seed=3)  # test_bf16_inputs_are_…
    cases.append(dict(hidden=h * 4, lm_head_weight=w * 4, tokens=t))
    return [(inputs, _plain(**inputs), TOL) for inputs in cases]


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.fn.__name__)
def test_each_typical_mistake_is_named(mistake):
    """每个典型错误按这个文件里测试的顺序送进同一个 check：它第一次和正确结果不同的那组输入上，
    第一行必须只点名它自己（CI 用 solutions 跑）。"""
    assert_named_first(
        mistake, _diagnosis_cases(), MISTAKES, where="x", section=SECTION, names=NAMES
    )


def test_missing_dimension_after_a_reduction_is_named():
    """诊断本身：logsumexp 之后少了一维、和这一块 (n, V) 的 logits 广播失败时，第一行说出这一类错误。"""

    def without_keepdim(hidden, lm_head_weight, tokens):
        z = hidden[:, :-1].reshape(-1, hidden.shape[-1]) @ lm_head_weight.T
        return (z - torch.logsumexp(z, -1)).gather(-1, tokens.reshape(-1, 1)).reshape(tokens.shape)

    hidden, weight, tokens = _case()
    line = crash_first_line(
        lambda: without_keepdim(hidden[:, -13:], weight, tokens),
        "hidden_token_logprobs",
        SPEC,
        CRASHES["hidden_token_logprobs"],
    )
    assert line.startswith("hidden_token_logprobs() 抛出 RuntimeError：") and "少了一维" in line, (
        line
    )


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每组输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们）。"""
    assert not (found := collisions(MISTAKES, _diagnosis_cases())), "\n".join(found)


def test_diagnoses_point_at_real_sections():
    assert_sections_exist(
        {m.section for m in MISTAKES + SYMPTOMS + [TEMPERATURE_ONLY]}
        | {SECTION, SPEC, WHY, HINTS}
        | hint_sections(CRASHES)
    )
