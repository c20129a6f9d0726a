"""L2.09 训练–推理不一致：截断重要性采样（truncated importance sampling, TIS）的权重。

采样的是推理引擎（vLLM/SGLang），算梯度的是训练前向。同一份权重，两边给同一个 token 的概率却不完全一样，
于是 rollout 其实来自 π_rollout，而 loss 以为来自 π_train：策略梯度悄悄变成了 off-policy。
TIS 给每个 token（或每条回答）乘一个权重 w = π_train / π_rollout，并把它截断在 cap 以下控制方差。
"""

from __future__ import annotations

import torch

from common.options.choices import TIS_LEVELS

CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ACD", "Q3": "C", "Q4": "D", "Q5": "B"}

LEVELS = TIS_LEVELS[1:]  # ("token", "sequence")；"none" = 不校正，用不到 tis_weights


def tis_weights(
    logp_train: torch.Tensor,
    logp_rollout: torch.Tensor,
    mask: torch.Tensor,
    cap: float | None = 2.0,
    level: str = "token",
) -> torch.Tensor:
    """截断重要性采样的权重 -> (B, T)，dtype 同 logp_train，不带梯度。

    logp_train: (B, T) 训练前向给采样 token 的 log 概率（μ=1 时就是 old logp）；
    logp_rollout: (B, T) 推理引擎采样时给同一批 token 的 log 概率；
    mask: (B, T)，1 = 有效 token，0 = padding。padding 处的 logp 可以是任何值（包括 NaN、inf），不影响结果。
    cap: 截断上限 C（> 0）；None = 不截断（纯重要性采样）。
    level:
      "token"    w[b, t] = min(exp(logp_train[b, t] - logp_rollout[b, t]), cap)
      "sequence" w[b, t] = min(exp(Σ_t' mask·(logp_train - logp_rollout)[b, t']), cap)，整行同一个值
                 （整条回答的概率之比 = 逐 token 比值的连乘；TRL 的 sequence_* 模式同样求和，不是平均）
    padding 处的权重为 0。权重是常数：对 logp_train 不传梯度。
    """
    if level not in LEVELS:
        raise ValueError(f"未知的 level={level!r}，可选：{list(LEVELS)}")
    if cap is not None and not cap > 0:
        raise ValueError(f"cap 必须 > 0（或 None 表示不截断），得到 {cap}")
    if logp_train.dim() != 2:
        raise ValueError(f"logp_train 必须是 (B, T)，得到形状 {tuple(logp_train.shape)}")
    for name, t in (("logp_rollout", logp_rollout), ("mask", mask)):
        if t.shape != logp_train.shape:
            raise ValueError(
                f"{name} 的形状 {tuple(t.shape)} 应与 logp_train 的 {tuple(logp_train.shape)} 相同"
            )
    valid = mask != 0
    # 先把 padding 换成 0 再做任何运算：padding 上的 NaN/inf 乘以 0 还是 NaN，只能用 where 选掉
    log_ratio = torch.where(valid, logp_train.detach() - logp_rollout.detach(), 0.0)
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=1, keepdim=True).expand_as(log_ratio)
    weights = torch.exp(log_ratio)  # 比值在概率空间里截断；exp 溢出成 inf 也会被截到 cap
    if cap is not None:
        weights = weights.clamp(max=cap)
    return torch.where(valid, weights, 0.0).to(logp_train.dtype)
