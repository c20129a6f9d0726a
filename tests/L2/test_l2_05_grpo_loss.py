"""L2.05 grpo_loss：三种聚合对照逐元素 Python 循环、解析梯度、空行、非法参数、指标。

期望值都由下面的 `_naive_*` 用纯 Python 浮点逐 token 计算，不依赖被测实现，也不抄输出。
"""

from __future__ import annotations

import math

import pytest
import torch

AGGS = ["sequence_mean", "token_mean", "constant"]


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_05_grpo_loss")


def _case():
    """B=3, T=4。第 3 行是空回答（mask 全 0）；ratio 有落在裁剪区间外的，advantage 有正有负。"""
    logp = [[-1.0, -0.5, -2.0, -0.3], [-0.2, -1.5, -0.7, -1.0], [-0.4, -0.4, -0.4, -0.4]]
    old = [[-1.3, -0.5, -1.6, -0.3], [-0.5, -1.2, -0.7, -1.9], [-0.1, -0.9, -0.4, -0.4]]
    ref = [[-1.1, -0.7, -1.8, -0.2], [-0.3, -1.5, -0.9, -1.2], [-0.4, -0.5, -0.6, -0.4]]
    adv = [1.5, -0.8, 0.6]
    mask = [[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    return logp, old, ref, adv, mask


def _naive_token(lp, olp, rlp, a, beta, el, eh):
    """一个 token 的损失和 d损失/dlogp（纯 Python）。"""
    r = math.exp(lp - olp)
    rc = min(max(r, 1 - el), 1 + eh)
    clipped = rc * a < r * a
    loss = -(rc if clipped else r) * a
    grad = 0.0 if clipped else -r * a  # d(-r·A)/dlogp = -r·A；被裁剪处为常数，梯度 0
    k3 = math.exp(rlp - lp) - (rlp - lp) - 1
    loss += beta * k3
    grad += beta * (1 - math.exp(rlp - lp))  # d k3 / dlogp = -e^{ref-logp} + 1
    return loss, grad, clipped, k3


def _naive(case, beta, el, eh, agg, max_len):
    """逐 token 循环：返回 (loss, grad[B][T], clip_fraction, kl)。"""
    logp, old, ref, adv, mask = case
    B, T = len(logp), len(logp[0])
    per = [
        [_naive_token(logp[i][j], old[i][j], ref[i][j], adv[i], beta, el, eh) for j in range(T)]
        for i in range(B)
    ]
    n_tok = sum(sum(row) for row in mask)
    weight = [[0.0] * T for _ in range(B)]  # d(总 loss)/d(逐 token loss)
    for i in range(B):
        n_i = sum(mask[i])
        for j in range(T):
            if mask[i][j]:
                weight[i][j] = {
                    "sequence_mean": 1 / (n_i * B),
                    "token_mean": 1 / n_tok,
                    "constant": 1 / (B * max_len),
                }[agg]
    loss = sum(per[i][j][0] * weight[i][j] for i in range(B) for j in range(T))
    grad = [[per[i][j][1] * weight[i][j] for j in range(T)] for i in range(B)]
    clip_frac = sum(per[i][j][2] for i in range(B) for j in range(T) if mask[i][j]) / n_tok
    kl = sum(per[i][j][3] for i in range(B) for j in range(T) if mask[i][j]) / n_tok
    return loss, grad, clip_frac, kl


def _tensors(case):
    logp, old, ref, adv, mask = case
    f = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return f(logp).requires_grad_(), f(old), f(ref), f(adv), f(mask)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("beta,eps_high", [(0.0, None), (0.1, None), (0.1, 0.28)])
def test_matches_naive_loop_value_and_grad(mod, agg, beta, eps_high):
    case = _case()
    logp, old, ref, adv, mask = _tensors(case)
    loss, metrics = mod.grpo_loss(
        logp,
        old,
        adv,
        mask,
        ref_logp=ref,
        beta=beta,
        eps_low=0.2,
        eps_high=eps_high,
        aggregation=agg,
        max_completion_length=6,
    )
    want_loss, want_grad, want_clip, want_kl = _naive(case, beta, 0.2, eps_high or 0.2, agg, 6)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    loss.backward()
    # autograd 的梯度 = 解析梯度（clip 分支为 0，k3 的导数 1 - e^{ref-logp}，再乘聚合权重）
    torch.testing.assert_close(
        logp.grad, torch.tensor(want_grad, dtype=torch.float64), rtol=1e-10, atol=1e-12
    )
    assert isinstance(metrics["clip_fraction"], float)
    assert metrics["clip_fraction"] == pytest.approx(want_clip)
    assert 0 < metrics["clip_fraction"] < 1  # 这个例子确实有被裁剪和没被裁剪的 token
    assert metrics["kl"] == pytest.approx(want_kl)


def test_aggregations_differ_on_unequal_lengths(mod):
    """长度不等时三种聚合给出不同的数：这正是 Dr. GRPO / DAPO 讨论的长度偏差。"""
    logp, old, ref, adv, mask = _tensors(_case())
    vals = {
        a: mod.grpo_loss(logp, old, adv, mask, aggregation=a, max_completion_length=6)[0].item()
        for a in AGGS
    }
    assert len({round(v, 9) for v in vals.values()}) == 3


def test_constant_defaults_to_T(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    a, _ = mod.grpo_loss(logp, old, adv, mask, aggregation="constant")
    b, _ = mod.grpo_loss(
        logp, old, adv, mask, aggregation="constant", max_completion_length=logp.shape[1]
    )
    assert a.item() == b.item()


def test_beta_zero_ignores_ref(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    a, ma = mod.grpo_loss(logp, old, adv, mask)
    b, mb = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.0)
    assert a.item() == b.item()
    assert ma["clip_fraction"] == mb["clip_fraction"]


@pytest.mark.parametrize("agg", AGGS)
def test_empty_rows_no_nan(mod, agg):
    logp, old, ref, adv, mask = _tensors(_case())
    loss, metrics = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation=agg)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert (logp.grad[mask == 0] == 0).all()  # padding 不接收梯度
    # 全部为空：loss 为 0，不是 NaN
    logp2 = logp.detach().clone().requires_grad_()
    loss0, m0 = mod.grpo_loss(
        logp2, old, adv, torch.zeros_like(mask), ref_logp=ref, beta=0.1, aggregation=agg
    )
    loss0.backward()
    assert loss0.item() == 0.0 and torch.isfinite(logp2.grad).all()
    assert m0["clip_fraction"] == 0.0 and m0["kl"] == 0.0


@pytest.mark.parametrize("agg", AGGS)
def test_padding_values_do_not_matter(mod, agg):
    """mask=0 的位置上放什么（这里放离谱的大数）都不影响 loss 和指标。"""
    logp, old, ref, adv, mask = _tensors(_case())
    want, want_m = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1, aggregation=agg)
    junk = mask == 0
    logp_j = torch.where(junk, torch.full_like(logp, -30.0), logp.detach())
    old_j = torch.where(junk, torch.full_like(old, 5.0), old)
    ref_j = torch.where(junk, torch.full_like(ref, -60.0), ref)
    got, got_m = mod.grpo_loss(logp_j, old_j, adv, mask, ref_logp=ref_j, beta=0.1, aggregation=agg)
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    assert got_m["clip_fraction"] == pytest.approx(want_m["clip_fraction"])
    assert got_m["kl"] == pytest.approx(want_m["kl"])


def test_sequence_mean_counts_empty_rows_in_B(mod):
    """空回答在 sequence_mean 里贡献 0，但仍算进 B（与 TRL loss_type="grpo" 相同）。"""
    logp, old, ref, adv, mask = _tensors(_case())
    full, _ = mod.grpo_loss(logp, old, adv, mask, aggregation="sequence_mean")
    two, _ = mod.grpo_loss(logp[:2], old[:2], adv[:2], mask[:2], aggregation="sequence_mean")
    assert full.item() == pytest.approx(two.item() * 2 / 3)


def test_bad_arguments(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    with pytest.raises(ValueError):
        mod.grpo_loss(logp, old, adv, mask, beta=0.04)  # beta > 0 却没有 ref_logp
    with pytest.raises(ValueError):
        mod.grpo_loss(logp, old, adv, mask, aggregation="mean")
    with pytest.raises(ValueError):
        mod.grpo_loss(
            logp, old, adv, mask, aggregation="constant", max_completion_length=2
        )  # 比 T=4 还小


def test_metrics_keys(mod):
    logp, old, ref, adv, mask = _tensors(_case())
    _, m = mod.grpo_loss(logp, old, adv, mask)
    assert "clip_fraction" in m and "kl" not in m
    _, m = mod.grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=0.04)
    assert isinstance(m["kl"], float) and m["kl"] > 0
