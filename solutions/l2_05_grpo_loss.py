"""L2.05 完整的 GRPO 损失：clipped surrogate + β·KL(k3)，再按三种方式把逐 token 损失聚合成一个标量。

它只用前面几节的积木：L2.02 的 masked_mean、L2.03 的 clipped_surrogate_loss、L2.04 的 kl_k3。
exercises/ 里的同名文件 import 的是你自己写的版本，所以训练时从头到尾跑的是你的代码。
"""

from __future__ import annotations

import torch

from common.options.choices import AGGREGATIONS  # 聚合方式 -> 对应的论文 / 框架名字（写报错信息用）
from solutions.l2_02_logprobs_and_masks import masked_mean
from solutions.l2_03_policy_loss import clipped_surrogate_loss
from solutions.l2_04_kl import kl_k3

CHECKPOINT_ANSWERS = {"Q1": "C", "Q2": "BC", "Q3": "C", "Q4": "D", "Q5": "A"}


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    aggregation: str = "sequence_mean",
    max_completion_length: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO 损失。

    logp: (B, T) 当前策略的逐 token log 概率（带梯度）；old_logp: (B, T) 采样时的，不带梯度。
    advantages: (B,)；mask: (B, T)，1 = 回答里的有效 token（到第一个 EOS 为止），0 = padding。
    ref_logp: (B, T) 参考模型的 log 概率；beta > 0 时必须给。
    逐 token 损失 = clipped surrogate（eps_low / eps_high，见 L2.03）+ beta * k3(logp, ref_logp)。
    aggregation:
      "sequence_mean" 每行先在自己的有效 token 上求平均，再对 B 行求平均
      "token_mean"    Σ(loss·mask) / Σmask：整个 batch 的有效 token 一起平均
      "constant"      Σ(loss·mask) / (B · max_completion_length)；max_completion_length=None 时用 T
    mask 全 0 的行（空回答）不产生 NaN：它在 "sequence_mean" 里贡献 0（仍计入 B），在另两种里不贡献。
    token_weights: (B, T) 非负权重（常数，不求导），乘在逐 token 的 clipped surrogate 上、加 KL 之前
      （TRL 1.16 `_compute_loss` 乘 importance_sampling_ratio 的位置）；None = 全 1。L2.09 的截断重要性采样用它。
      它不改变聚合的分母，也不影响 clip 指标。
    返回 (loss 0 维张量, metrics)。metrics["clip_fraction"] 是被裁剪 token 的比例（有效 token 上的平均），
    另有 "clip_low_fraction"（A<0、ratio<1-eps_low）和 "clip_high_fraction"（A>0、ratio>1+eps_high）；
    给了 ref_logp 时还有 metrics["kl"]（k3 在有效 token 上的平均）。
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"未知的 aggregation={aggregation!r}，可选：{list(AGGREGATIONS)}")
    if beta < 0:
        raise ValueError(f"beta 不能为负，得到 {beta}")
    if beta > 0 and ref_logp is None:
        raise ValueError(
            "beta > 0 时必须传入 ref_logp（参考模型的逐 token log 概率）；不想要 KL 项就设 beta=0"
        )
    if logp.dim() != 2:
        raise ValueError(f"logp 必须是 (B, T)，得到形状 {tuple(logp.shape)}")
    shaped = {
        "old_logp": old_logp,
        "mask": mask,
        "ref_logp": ref_logp,
        "token_weights": token_weights,
    }
    for name, t in shaped.items():
        if t is not None and t.shape != logp.shape:
            raise ValueError(
                f"{name} 的形状 {tuple(t.shape)} 应与 logp 的 {tuple(logp.shape)} 相同"
            )
    B, T = logp.shape
    if advantages.shape != (B,):
        raise ValueError(f"advantages 必须是 (B,) = ({B},)，得到形状 {tuple(advantages.shape)}")
    if aggregation == "constant":
        if max_completion_length is None:
            # 没给就用 padding 后的宽度；要和 TRL 完全一致请传 max_completion_length
            max_completion_length = T
        if max_completion_length < T:
            raise ValueError(
                f"max_completion_length={max_completion_length} 小于回答张量的长度 T={T}：回答不可能比上限还长，"
                "请传生成时用的 max_new_tokens"
            )

    valid = mask != 0
    if token_weights is not None:
        token_weights = token_weights.detach()
        if not (token_weights[valid] >= 0).all():  # 负数和 NaN 都过不了 >= 0
            raise ValueError("token_weights 在有效 token（mask=1）上必须是非负数，不能有负数或 NaN")
    mask = mask.to(logp.dtype)
    # old_logp / ref_logp 是常数：detach 一下，防止调用方忘了 no_grad（否则 ratio 的梯度会互相抵消成 0）。
    # padding 位置上它们可能是任意值（vLLM 打不了分的 token 甚至是 NaN）：换成 logp 本身（ratio = 1、k3 = 0），
    # 否则 0 * NaN 会让 loss 和梯度变成 NaN。
    old_logp = torch.where(valid, old_logp.detach(), logp.detach())
    if ref_logp is not None:
        ref_logp = torch.where(valid, ref_logp.detach(), logp.detach())

    # 1) 逐 token 的 clipped surrogate（L2.03）
    per_token, clipped = clipped_surrogate_loss(
        logp, old_logp, advantages, eps_low=eps_low, eps_high=eps_high
    )
    # 1b) 逐 token 权重（L2.09 的截断重要性采样）：只乘策略项，KL 项不乘；padding 上的值不参与
    if token_weights is not None:
        per_token = per_token * torch.where(valid, token_weights, torch.ones_like(token_weights))
    # 2) KL 惩罚：逐 token 加在损失上（DeepSeekMath 的写法），而不是减进 reward
    kl = kl_k3(logp, ref_logp) if ref_logp is not None else None
    if beta > 0:
        per_token = per_token + beta * kl

    # 3) 聚合成一个标量：三种方式只差"除以什么"
    if aggregation == "sequence_mean":
        loss = masked_mean(per_token, mask, dim=1).mean()  # (B,) 每行的平均 -> 再对行平均
    elif aggregation == "token_mean":
        loss = masked_mean(per_token, mask)  # 所有有效 token 一起平均
    else:  # "constant"
        loss = (per_token * mask).sum() / (B * max_completion_length)

    # 4) 监控指标：不参与反传
    with torch.no_grad():
        adv = advantages[:, None]
        metrics = {
            "clip_fraction": masked_mean(clipped.to(mask.dtype), mask).item(),
            "clip_low_fraction": masked_mean((clipped & (adv < 0)).to(mask.dtype), mask).item(),
            "clip_high_fraction": masked_mean((clipped & (adv > 0)).to(mask.dtype), mask).item(),
        }
        if kl is not None:
            metrics["kl"] = masked_mean(kl.detach(), mask).item()
    return loss, metrics
