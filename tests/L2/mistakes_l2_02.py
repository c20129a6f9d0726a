"""L2.02 四个函数的典型错误：故意写错的实现，只给 tests/diagnose.py 比对用。

错误版不分块（分块不改变数值）；参数与被测函数相同。
`DIAGNOSIS_INPUTS[函数名][情形]` 是诊断输入，按测试运行的顺序排：每个错误在它第一次和正确结果不同的那组输入上，
只和它自己一致（test_each_typical_mistake_is_named 检查）。
"""

from __future__ import annotations

import torch
from diagnose import Mistake

FORMULA = "L2.02「2. 公式，以及它们从哪来」"
LOGP_SPEC = "L2.02「3.1 `token_logprobs`：规格」"
CHUNKS = "L2.02「3.2 为什么要分块，为什么分块还不够」"
ENTROPY_SPEC = "L2.02「3.3 `token_entropy`：规格」"
MASK_SPEC = "L2.02「3.4 `completion_mask`：规格」"
MEAN_SPEC = "L2.02「3.5 `masked_mean`：规格」"
EXAMPLE = "L2.02「3.6 手算例子」"
SHIFT = "L2.02「错一位：logits[t] 预测的是第 t+1 个 token」"
BF16 = "L2.02「坑 3：在 bf16 里算 log_softmax」"
PAD_IS_EOS = "L2.02「坑 4：pad == eos，把 EOS 遮掉了」"
EMPTY_AND_NAN = "L2.02「坑 6：空切片和 NaN」"
HINTS = "L2.02「3.7 提示」"


def _naive_lse(logits):
    """log Σ e^x，不先减最大值：x ≈ 100 时 e^x 在 float32 里上溢成 inf。"""
    return logits.float().exp().sum(-1).log()


def _naive_softmax(logits):
    e = logits.float().exp()
    return e / e.sum(-1, keepdim=True)


def _pick(logp, tokens):
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def _low_precision_only(logits):
    """精度类的错误只在 bf16 / fp16 的输入上谈得上：float32 的输入上不拿它比（抛错 = 跳过这个错误）。"""
    if logits.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError("只对 bf16 / fp16 的输入适用")


# 在 bf16 里算 log_softmax / logsumexp / 熵，写法不同，舍入也不同（实测彼此差到 0.125、和正确值差到 0.075，
# 数值在 −10 附近）：和错误版只在 bf16 的误差以内一致，所以认它时用宽的容差
BF16_TOL = dict(rtol=0.0, atol=0.25)


# ---------------------------------------------------------------- token_logprobs

LOGP_MISTAKES = [
    Mistake(
        "忘了减 logsumexp：取出来的是原始 logit，不是 log 概率",
        FORMULA,
        lambda logits, tokens: _pick(logits.float(), tokens),
    ),
    Mistake(
        "log_softmax 沿错了维度（沿了 T，不是词表 V 那一维）",
        FORMULA,
        lambda logits, tokens: _pick(torch.log_softmax(logits.float(), dim=1), tokens),
    ),
    Mistake(
        "取的是概率 p（softmax），不是 log p",
        FORMULA,
        lambda logits, tokens: _pick(torch.softmax(logits.float(), dim=-1), tokens),
    ),
    Mistake(
        "在函数里又错开了一位（logits[:, :-1] 配 tokens[:, 1:]）：传进来的 logits 和 tokens 已经对齐好了",
        SHIFT,
        lambda logits, tokens: _pick(torch.log_softmax(logits[:, :-1].float(), -1), tokens[:, 1:]),
    ),
    Mistake(
        "在 bf16 里算了 log_softmax（或 logsumexp）、最后才转 float32：15 万项的求和在 bf16 里误差很大",
        BF16,
        lambda logits, tokens: (
            _low_precision_only(logits),
            _pick(torch.log_softmax(logits, dim=-1), tokens).float(),
        )[1],
        **BF16_TOL,
    ),
    Mistake(
        "展平成 (B·T, V) 的块里 log_softmax 沿错了维度（dim=0：在块里不同位置之间归一化了，不是在词表上）",
        FORMULA,
        lambda logits, tokens: _pick(
            torch.log_softmax(logits.float().reshape(-1, logits.shape[-1]), dim=0),
            tokens.reshape(-1),
        ).reshape(tokens.shape),
    ),
    Mistake(
        "符号反了：算成了 logsumexp − x[y]（log 概率 ≤ 0）",
        FORMULA,
        lambda logits, tokens: -_pick(torch.log_softmax(logits.float(), dim=-1), tokens),
    ),
    Mistake(
        "把结果转回了 logits 的 dtype（bf16）：规格要 float32 的 log 概率",
        LOGP_SPEC,
        lambda logits, tokens: _pick(torch.log_softmax(logits.float(), dim=-1), tokens).to(
            logits.dtype
        ),
    ),
    Mistake(
        "log 概率是对 softmax 的结果取 log 得到的：比最大的 logit 低 100 多 nat 的 token，"
        "概率在 float32 里下溢成 0，log 0 = −inf（训练时 KL 和 loss 跟着变成 inf）",
        FORMULA,
        lambda logits, tokens: _pick(torch.softmax(logits.float(), dim=-1).log(), tokens),
    ),
    Mistake(
        "logsumexp 是手写的 log Σ e^x（没先减掉最大的 logit）：logit ≈ 100 时 e^x 在 float32 里上溢成 inf，"
        "log 概率成了 −inf",
        FORMULA,
        lambda logits, tokens: _pick(logits.float(), tokens) - _naive_lse(logits),
    ),
    Mistake(
        "概率是手写的 e^x / Σ e^x（没先减掉最大的 logit）：logit ≈ 100 时 e^x 在 float32 里上溢成 inf，"
        "inf / inf = NaN",
        FORMULA,
        lambda logits, tokens: _pick(_naive_softmax(logits).log(), tokens),
    ),
]

# ---------------------------------------------------------------- token_entropy


def _entropy(logits, *, dim=-1, sign=-1.0, use_logits=False, reduce="sum", log_of_p=False):
    logp = torch.log_softmax(logits.float(), dim=dim)
    if log_of_p:  # 先 softmax 再取 log：p 下溢成 0 时 log 0 = −inf，0·(−inf) = NaN
        p = torch.softmax(logits.float(), dim=dim)
        return sign * (p * p.log()).sum(-1)
    terms = logp.exp() * (logits.float() if use_logits else logp)
    return sign * (terms.sum(-1) if reduce == "sum" else terms.mean(-1))


def _entropy_low_precision(logits):
    logp = torch.log_softmax(logits, dim=-1)
    return (-(logp.exp() * logp).sum(-1)).float()


ENTROPY_MISTAKES = [
    Mistake(
        "熵的符号反了（算成了 Σ p·log p，它 ≤ 0；H = −Σ p·log p ≥ 0）",
        ENTROPY_SPEC,
        lambda logits: _entropy(logits, sign=1.0),
    ),
    Mistake(
        "softmax 沿错了维度（沿了 T，不是词表 V 那一维）",
        ENTROPY_SPEC,
        lambda logits: _entropy(logits, dim=1),
    ),
    Mistake(
        "把 logits 当成了 log p（算成了 −Σ p·z，少了 + logsumexp）",
        FORMULA,
        lambda logits: _entropy(logits, use_logits=True),
    ),
    Mistake(
        "对词表求了平均而不是求和（−mean(p·log p) 小了 V 倍）",
        ENTROPY_SPEC,
        lambda logits: _entropy(logits, reduce="mean"),
    ),
    Mistake(
        "log p 是对 softmax 的结果取 log 得到的：分布很尖时小概率下溢成 0，log 0 = −inf，"
        "0·(−inf) = NaN",
        ENTROPY_SPEC,
        lambda logits: _entropy(logits, log_of_p=True),
    ),
    Mistake(
        "展平成 (B·T, V) 的块里 softmax 沿错了维度（dim=0：在块里不同位置之间归一化了，不是在词表上）",
        ENTROPY_SPEC,
        lambda logits: _entropy(logits.reshape(-1, logits.shape[-1]), dim=0).reshape(
            logits.shape[:-1]
        ),
    ),
    Mistake(
        "熵是在 bf16 里算的（log_softmax 和求和都在 bf16 里，最后才转 float32）",
        BF16,
        lambda logits: (_low_precision_only(logits), _entropy_low_precision(logits))[1],
        **BF16_TOL,
    ),
    Mistake(
        "logsumexp 是手写的 log Σ e^z（没先减掉最大的 logit）：logit ≈ 100 时 e^z 在 float32 里上溢成 inf，"
        "熵成了 inf",
        FORMULA,
        lambda logits: (
            _naive_lse(logits) - (torch.softmax(logits.float(), -1) * logits.float()).sum(-1)
        ),
    ),
    Mistake(
        "概率是手写的 e^z / Σ e^z（没先减掉最大的 logit）：logit ≈ 100 时 e^z 在 float32 里上溢成 inf，"
        "inf / inf = NaN",
        ENTROPY_SPEC,
        lambda logits: -(_naive_softmax(logits) * torch.log_softmax(logits.float(), -1)).sum(-1),
    ),
]

# ---------------------------------------------------------------- completion_mask


def _eos_flags(completion_ids, eos_token_ids, first_only=False):
    ids = [eos_token_ids] if isinstance(eos_token_ids, int) else list(eos_token_ids)
    return torch.isin(completion_ids, torch.tensor(ids[:1] if first_only else ids))


def _eos_before(is_eos):
    """每个位置之前（不含它）出现过几个 EOS。"""
    return is_eos.long().cumsum(dim=1) - is_eos.long()


def _mask_through_first_eos(is_eos):
    return (_eos_before(is_eos) == 0).float()


def _one_past_eos(mask):
    return torch.maximum(mask, torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1))


def _mask_by_argmax(completion_ids, eos_token_ids):
    first = _eos_flags(completion_ids, eos_token_ids).long().argmax(dim=1, keepdim=True)
    return (torch.arange(completion_ids.shape[1]) <= first).float()


MASK_MISTAKES = [
    Mistake(
        "mask 把 EOS 自己也遮掉了（第一个 EOS 应为 1：模型靠它学会停下）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: (
            _eos_flags(completion_ids, eos_token_ids).long().cumsum(dim=1) == 0
        ).float(),
    ),
    Mistake(
        "按 token 的值推断了 mask（不是 EOS/pad 的位置就算 1）：EOS 本身和第一个 EOS 之后的普通 token 都错了",
        PAD_IS_EOS,
        lambda completion_ids, eos_token_ids: (~_eos_flags(completion_ids, eos_token_ids)).float(),
    ),
    Mistake(
        "只认了 eos_token_ids 里的第一个 id（Qwen3 有两个 EOS，哪个先出现就停在哪）",
        PAD_IS_EOS,
        lambda completion_ids, eos_token_ids: _mask_through_first_eos(
            _eos_flags(completion_ids, eos_token_ids, first_only=True)
        ),
    ),
    Mistake(
        "用了 argmax 找第一个 EOS：没有 EOS 的行 argmax 也返回 0，被截断的回答只剩第 0 个 token",
        MASK_SPEC,
        _mask_by_argmax,
    ),
    Mistake(
        "mask 在第一个 EOS 之后多留了一个 token（应到第一个 EOS 为止：EOS 是 1，它后面全是 0）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: _one_past_eos(
            _mask_through_first_eos(_eos_flags(completion_ids, eos_token_ids))
        ),
    ),
    Mistake(
        "条件反了：第一个 EOS 之前（含 EOS）成了 0、之后成了 1（「前面出现过几个 EOS」为 0 的位置才是 1）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: (
            1.0 - _mask_through_first_eos(_eos_flags(completion_ids, eos_token_ids))
        ),
    ),
    Mistake(
        "mask 一直留到了第二个 EOS（含）：第一个 EOS 之后的 token 也算进了回答（规格只看第一个 EOS）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: (
            _eos_before(_eos_flags(completion_ids, eos_token_ids)) <= 1
        ).float(),
    ),
    Mistake(
        "mask 一直留到了第二个 EOS 之前：第一个 EOS 之后的 token 也算进了回答（规格只看第一个 EOS）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: (
            _eos_flags(completion_ids, eos_token_ids).long().cumsum(dim=1) <= 1
        ).float(),
    ),
    Mistake(
        "cumsum 沿错了维度（dim=0：数的是同一位置上、前面几行出现过几个 EOS，而每条回答是一行）",
        MASK_SPEC,
        lambda completion_ids, eos_token_ids: (
            _eos_flags(completion_ids, eos_token_ids).long().cumsum(dim=0)
            - _eos_flags(completion_ids, eos_token_ids).long()
            == 0
        ).float(),
    ),
]

# ---------------------------------------------------------------- masked_mean


def _masked_mean(
    x,
    mask,
    dim=None,
    *,
    zero_first=True,
    guard=True,
    denominator="mask",
    where_swapped=False,
    unweighted=False,
):
    m = mask.to(x.dtype)
    if unweighted:  # 小数权重被当成了 0/1：被选中的元素一律算 1
        m = (mask != 0).to(x.dtype)
    num = torch.where(mask != 0, x * m, torch.zeros_like(x)) if zero_first else x * m
    if where_swapped:  # 有效位置被置 0，被遮住的位置留下 x·0（NaN·0 仍是 NaN）
        num = torch.where(mask != 0, torch.zeros_like(x), x * m)
    num = num.sum() if dim is None else num.sum(dim)
    if denominator == "selected":  # 分子按权重加权，分母却是被选中的个数
        den = (mask != 0).to(x.dtype).sum() if dim is None else (mask != 0).to(x.dtype).sum(dim)
    elif denominator == "count":
        den = torch.tensor(float(x.numel() if dim is None else x.shape[dim]), dtype=x.dtype)
    elif denominator == "all":  # dim=k 时分母也对整个 mask 求和
        den = m.sum()
    else:
        den = m.sum() if dim is None else m.sum(dim)
    if not guard:
        return num / den
    if guard == "clamp":  # TRL 的 .clamp(min=1)：对 0/1 的 mask 对，对小数权重的 mask 不对
        return num / den.clamp(min=1)
    has = den != 0
    return torch.where(has, num / torch.where(has, den, torch.ones_like(den)), 0.0)


def _mean_of_row_means(x, mask, dim=None):
    if dim is not None:
        return _masked_mean(x, mask, dim)
    return _masked_mean(x, mask, dim=-1).mean()


MEAN_MISTAKES = [
    Mistake(
        "分母数进了 padding（除以全部位置数，而不是 mask 之和）",
        MEAN_SPEC,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, denominator="count"),
    ),
    Mistake(
        "mask 全 0 的切片得到 NaN（0/0）：这种切片的结果应为 0",
        EMPTY_AND_NAN,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, guard=False),
    ),
    Mistake(
        "被遮住位置上的 NaN/inf 漏进了结果（只乘了 mask，而 0·NaN = NaN）",
        EMPTY_AND_NAN,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, zero_first=False),
    ),
    Mistake(
        "dim=None 时算成了每行平均值的平均（规格：所有被选中的元素一起平均）",
        EXAMPLE,
        _mean_of_row_means,
    ),
    Mistake(
        "分母用了 clamp(min=1) 挡 0：mask 是小数权重、一行的和小于 1 时分母被改成了 1"
        "（规格允许非负权重的 mask）",
        EMPTY_AND_NAN,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, guard="clamp"),
    ),
    Mistake(
        "torch.where 的两个分支写反了：有效位置被置成了 0，留下的是被遮住的位置",
        EMPTY_AND_NAN,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, where_swapped=True),
    ),
    Mistake(
        "dim=k 时分母没沿 dim 求和（除以了整个 mask 的和）",
        MEAN_SPEC,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, denominator="all"),
    ),
    Mistake(
        "忽略了 dim：dim=k 时也对全部元素求了一个平均（规格：沿第 k 维平均，返回去掉那一维的张量）",
        MEAN_SPEC,
        lambda x, mask, dim=None: _masked_mean(x, mask),
    ),
]

MEAN_MISTAKES += [
    Mistake(
        "小数权重被当成了 0/1：对被选中的元素求了不加权的平均（规格：mask 是小数时按权重加权平均）",
        MEAN_SPEC,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, unweighted=True),
    ),
    Mistake(
        "分子按小数权重加权了，分母却数的是被选中的元素个数，不是权重之和",
        MEAN_SPEC,
        lambda x, mask, dim=None: _masked_mean(x, mask, dim, denominator="selected"),
    ),
]

MISTAKES = {
    "token_logprobs": LOGP_MISTAKES,
    "token_entropy": ENTROPY_MISTAKES,
    "completion_mask": MASK_MISTAKES,
    "masked_mean": MEAN_MISTAKES,
}


def _logits(b, t, v, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, v, generator=g) * scale).to(dtype)


def _tokens(b, t, v, seed=1):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


_X = [[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]
_M = [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
# 小数权重的 mask（规格允许）：两行的和 0.75、0.6 都小于 1
FRACTIONAL = [[0.25, 0.5, 0.0, 0.0], [0.1, 0.2, 0.3, 0.0]]
NAN, INF = float("nan"), float("inf")


def _peaked():
    """几乎确定的分布（float32）：第 0 个位置其余 token 比最大的低 200，exp(−200) 下溢成 0；其余位置不那么尖。
    B = 2：沿 T 归一化和在展平的块里沿 dim=0 归一化（B = 1 时是一回事）给出不同的结果。"""
    logits = torch.full((2, 2, 50), -200.0)
    logits[0, 0, 3] = 0.0
    logits[0, 1] = torch.linspace(-3.0, 3.0, 50)
    logits[1, 0] = torch.linspace(2.0, -1.0, 50)
    logits[1, 1, :5] = torch.tensor([1.0, 0.0, -1.0, 4.0, 0.5])
    return logits


def far_below():
    """float32：第 0 行采到的 token 比最大的 logit 低 150 nat（e^−150 在 float32 里下溢成 0）；
    第 1 行最大的 logit 是 100（e^100 在 float32 里上溢成 inf），采到的就是它。正确的 log 概率都是有限的。"""
    logits = torch.tensor(
        [
            [[0.0, -150.0, -2.0, -1.0, -160.0], [1.0, 0.5, -0.5, 2.0, 0.0]],
            [[100.0, 95.0, -30.0, 99.0, 90.0], [3.0, -120.0, 2.0, 0.0, 1.0]],
        ]
    )
    return dict(logits=logits, tokens=torch.tensor([[1, 3], [0, 1]]))


def _large():
    """float32：第 0 个位置的 logits 在 100 附近（e^100 上溢成 inf），但彼此只差几个 nat（没有下溢成 0 的概率）。"""
    return torch.tensor(
        [
            [[100.0, 99.0, 98.0, 97.0, 96.0], [1.0, 0.5, -0.5, 2.0, 0.0]],
            [[3.0, 2.0, 1.0, 0.0, -1.0], [0.5, 0.5, 0.0, 0.0, 1.0]],
        ]
    )


DIAGNOSIS_INPUTS = {
    "token_logprobs": {
        "fp32": lambda: dict(logits=_logits(2, 5, 7), tokens=_tokens(2, 5, 7)),
        "far_below": far_below,
        "bf16": lambda: dict(logits=_logits(2, 6, 257, torch.bfloat16), tokens=_tokens(2, 6, 257)),
    },
    "token_entropy": {
        "fp32": lambda: dict(logits=_logits(2, 5, 7)),
        "peaked": lambda: dict(logits=_peaked()),
        "large": lambda: dict(logits=_large()),
        "bf16": lambda: dict(logits=_logits(2, 6, 257, torch.bfloat16)),
    },
    "completion_mask": {
        # EOS 是 2 和 3（pad 也是 2）：pad 跟在 EOS 后面 / EOS 后还有普通 token / 3 先出现 / 被截断
        "rows": lambda: dict(
            completion_ids=torch.tensor(
                [[5, 6, 2, 2, 2], [5, 2, 7, 8, 2], [5, 6, 3, 2, 2], [5, 6, 7, 8, 9]]
            ),
            eos_token_ids=[2, 3],
        ),
    },
    "masked_mean": {
        "rows": lambda: dict(x=torch.tensor(_X), mask=torch.tensor(_M), dim=1),
        "all": lambda: dict(x=torch.tensor(_X), mask=torch.tensor(_M)),
        "empty_row": lambda: dict(
            x=torch.tensor(_X + [[5.0, 6.0, 7.0, 8.0]]), mask=torch.tensor(_M + [[0.0] * 4]), dim=1
        ),
        "garbage": lambda: dict(  # 第 2 行被遮住的位置是有限的数：NaN 漏进来和 where 写反分得开
            x=torch.tensor([[1.0, 2.0, NAN, INF], [10.0, 20.0, 30.0, -INF], [5.0, 6.0, 7.0, 8.0]]),
            mask=torch.tensor(_M + [[1.0, 0.0, 1.0, 0.0]]),
            dim=1,
        ),
        "fractional": lambda: dict(x=torch.tensor(_X), mask=torch.tensor(FRACTIONAL), dim=1),
    },
}

# 参数化测试的 id（ASCII：pytest 把中文 id 显示成 \uXXXX 转义），和 MISTAKES 里的顺序一一对应
MISTAKE_IDS = {
    "token_logprobs": [
        "raw_logit",
        "dim_T",
        "prob",
        "shift",
        "bf16",
        "chunk_dim0",
        "sign",
        "to_bf16",
        "log_of_softmax",
        "naive_lse",
        "naive_softmax",
    ],
    "token_entropy": [
        "sign",
        "dim_T",
        "logits_as_logp",
        "mean",
        "log_of_p",
        "chunk_dim0",
        "bf16",
        "naive_lse",
        "naive_softmax",
    ],
    "completion_mask": [
        "eos_masked",
        "by_value",
        "first_id",
        "argmax",
        "one_past",
        "inverted",
        "through_second_eos",
        "before_second_eos",
        "cumsum_dim0",
    ],
    "masked_mean": [
        "count",
        "nan_empty",
        "nan_leak",
        "row_means",
        "clamp",
        "where_swapped",
        "den_all",
        "dim_ignored",
        "unweighted",
        "count_selected",
    ],
}
assert all(len(MISTAKE_IDS[n]) == len(ms) for n, ms in MISTAKES.items())

# 函数里抛出异常时，按异常的种类（tests/pytest_plugin.py 的 EXCEPTION_KINDS）说最可能的原因
_FLOAT_FIRST = "在整数张量上做了 log_softmax / logsumexp / softmax（它们只对浮点有定义）"
_EMPTY = (
    "B·T = 0 时一块也没有，torch.cat 拿到了空列表（规格：这时返回 (B, T) 的空 float32 张量）",
    LOGP_SPEC,
)
_META = (
    "logprob_memory.py（和测试）在 meta 设备上调用它，meta 张量只有形状、没有数值："
    "函数里读了张量的数值（.item()、.tolist()、float(...) 之类），或新建的张量没放在输入的 device 上",
    CHUNKS,
)
CRASHES = {
    "token_logprobs": {
        "gather": (
            "gather 的索引和这一块 logits 的形状对不上（索引少了一维，或除了词表那一维，其余各维大小不同）",
            HINTS,
        ),
        "index": "tokens 里的 id 没有落在 [0, V) 里，或者 gather 沿错了维度（不是词表那一维）",
        "int_dtype": _FLOAT_FIRST,
        "dtype": "dtype 不对：gather 的索引不是 int64，或两个操作数一个 bf16、一个 float32；"
        "也检查 logits、tokens 有没有在哪次调用里传反了位置",
        "broadcast": "logits、logsumexp 的结果和 gather 取出的值形状对不上：其中一个少了一维"
        "（logsumexp 归约之后那一维没了），或多了一维",
        "empty_cat": _EMPTY,
        "meta_value": _META,
        "device": _META,
    },
    "token_entropy": {
        "reshape": "熵沿错了维度求和：每块得到的不是 (n,)（沿 dim=0 求和得到的是 (V,)），拼不回 (B, T)",
        "int_dtype": _FLOAT_FIRST,
        "empty_cat": _EMPTY,
        "broadcast": "logits、p、log p 的形状对不上：logsumexp 或求和之后少了一维（归约之后那一维没了），"
        "或求和沿错了维度",
    },
    "completion_mask": {
        "bad_args": (
            "参数类型不对：eos_token_ids 可能是一个 int，也可能是 list / tuple（规格两种都允许），"
            "函数只顾到了其中一种，或把 Python 的 int / list 直接交给了只收张量的函数",
            MASK_SPEC,
        ),
        "device": "由 EOS id 造出的张量和 completion_ids 不在同一个 device 上",
        "dim_range": (
            "沿 dim=1 的运算越界了：「哪些位置是 EOS」的标记不是 (B, T)"
            "（比如 isin 的两个参数位置反了，得到的是 EOS 张量那么长的一维张量）",
            MASK_SPEC,
        ),
        "broadcast": "和 completion_ids 比较或做累加的张量不是 (B, T)（少了一维）",
    },
    "masked_mean": {
        "dtype": "dtype 不对：mask 可能是 0/1 浮点，也可能是 bool（规格两种都允许），函数只按其中一种用了它",
        "broadcast": "分子和分母的形状不同（dim=k 时有一个没沿第 k 维求和）",
        "dim_range": "维度越界：dim=None（所有元素一起）被当成了某一维，或 dim=k 超出了 x 的维数",
    },
}
