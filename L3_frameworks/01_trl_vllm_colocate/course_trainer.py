"""L3.01：把你在 L2 写的 advantage 和损失插进 TRL 的 GRPOTrainer（train_trl.py --impl solutions|exercises）。

CourseGRPOTrainer 只换两块：组内 advantage 用 L2.01 的 group_advantages，损失用 L2.05 的 grpo_loss；
采样、算 logp（TRL 的 fused lm head）、vLLM、梯度累积、优化器都还是 TRL 的。

它覆盖了 TRL 1.16.0 GRPOTrainer 的三个私有方法（`_calculate_rewards`、`_generate_and_score_completions`、
`_compute_loss`）并调用第四个（`_get_per_token_logps_and_entropies`）：私有方法不保证跨版本不变，
tests/L3/test_course_trainer.py 把这些方法的签名、用到的属性钉在 trl==1.16.0 上，升级 TRL 时先看它。
"""

from __future__ import annotations

import torch
from trl import GRPOConfig, GRPOTrainer

# TRL 的 loss_type -> 我们 grpo_loss 的 aggregation（L2.05）。只支持这四种：其余（cispo/sapo/...）课程里没写。
AGGREGATION = {
    "grpo": "sequence_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "constant",
}
TRL_ADV_EPS = (
    1e-4  # TRL 在 std 分母上写死的 eps（grpo_trainer.py：advantages / (std_rewards + 1e-4)）
)


# 它调用的你写的函数（self.L.名字）；train_trl.py --impl exercises 只要求这几个（和它们用到的）写完
USES = ("group_advantages", "grpo_loss")


class CourseGRPOTrainer(GRPOTrainer):
    """GRPOTrainer，只换两块：组内 advantage 用 L2.01 的 group_advantages，损失用 L2.05 的 grpo_loss。

    采样、算 logp（TRL 的 fused lm head）、vLLM、梯度累积、优化器都还是 TRL 的。
    每步记录 course/adv_max_abs_diff_vs_trl：我们算的 advantage 与 TRL 自己算的最大差（应为 0 量级）。
    """

    def __init__(self, *args, impl, **kwargs):
        """impl: the module with your L2 functions (`exercises.l2_07_grpo_train`,
        or solutions'); `impl.group_advantages` and `impl.grpo_loss` replace TRL's."""
        unsupported = _unsupported_for_course_loss(kwargs["args"])
        if unsupported:
            raise ValueError(
                f"--impl {impl.__name__.split('.')[0]} 只实现了课程里学过的那部分 GRPO，这些设置它做不到："
                f"{'; '.join(unsupported)}。改回默认设置，或用 --impl trl 跑 TRL 自己的损失。"
            )
        self.L = impl
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL 返回 (全局 N, 奖励函数个数)，已在各进程间 gather：组内归一化要看到整组
        self._rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        rpf = self._rewards_per_func
        # 评估、或有奖励函数返回 None：保留 TRL 的处理
        if not self.model.training or torch.isnan(rpf).any():
            return out
        rewards = (rpf * self.reward_weights.to(rpf.device)).sum(dim=1)  # 与 TRL 相同的加权和
        adv = self.L.group_advantages(
            rewards, self.num_generations, eps=TRL_ADV_EPS, scale=self.scale_rewards
        )
        n = len(out["advantages"])  # 本进程那一段（TRL 同样按进程号切片）
        mine = adv[
            self.accelerator.process_index * n : (self.accelerator.process_index + 1) * n
        ].to(out["advantages"])
        self._metrics["train"]["course/adv_max_abs_diff_vs_trl"].append(
            (mine - out["advantages"]).abs().max().item()
        )
        out["advantages"] = mine
        return out

    def _compute_loss(self, model, inputs):
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        # 逐 token logp（已除以温度）和熵：TRL 的 fused lm head 分块算，不物化 (B, T, V) logits
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        mask = completion_mask.to(logp.dtype)
        old = inputs.get("old_per_token_logps")
        # μ=1 且每批 rollout 一个优化步：TRL 不单独算 old_logp
        old = logp.detach() if old is None else old
        adv = inputs["advantages"]
        if self.use_vllm and self.vllm_importance_sampling_correction:
            # vLLM 与训练前向的 logp 不完全一致，TRL 给每条回答一个 ≥0 的重要性权重 w（sequence_* 模式，形状 (B,1)）。
            # TRL 把 w 乘在逐 token 的 surrogate 上；w ≥ 0 时 -min(r·A, clip(r)·A)·w == -min(r·Aw, clip(r)·Aw)，
            # 所以把 w 乘进 advantage 完全等价（KL 项 TRL 也不乘 w）。
            adv = adv * inputs["importance_sampling_ratio"].squeeze(1)
        loss, m = self.L.grpo_loss(
            logp,
            old,
            adv,
            mask,
            ref_logp=inputs.get("ref_per_token_logps"),
            beta=self.beta,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            aggregation=AGGREGATION[self.loss_type],
            max_completion_length=self.max_completion_length,
        )
        # 梯度累积：TRL 对每个 micro-batch 的 loss 自己做归一化（HF 的自动缩放在 GRPO 里是关的），这里照做
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type == "dapo":
            # DAPO：除以整个生成批次（所有 micro-batch、所有进程）的有效 token 数，而不是本 micro-batch 的
            normalizer = (
                inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            )
            if mode == "train":
                normalizer = normalizer * accum / self.args.steps_per_generation
            loss = loss * mask.sum() / normalizer  # token_mean × 本批 token 数 = Σ(loss·mask)
        else:
            loss = loss / accum
        self._metrics[mode]["entropy"].append(
            ((entropies * mask).sum() / mask.sum().clamp(min=1.0)).item()
        )
        self._metrics[mode]["clip_ratio/region_mean"].append(m["clip_fraction"])
        if "kl" in m:
            self._metrics[mode]["kl"].append(m["kl"])
        return loss


def _unsupported_for_course_loss(cfg: GRPOConfig) -> list[str]:
    """我们的 grpo_loss 覆盖不到的 GRPOConfig 设置（每条都说明该改成什么）。"""
    checks = [
        (
            cfg.loss_type not in AGGREGATION,
            f"loss_type={cfg.loss_type!r}（只支持 {'/'.join(AGGREGATION)}）",
        ),
        (
            cfg.importance_sampling_level != "token",
            "importance_sampling_level 必须是 'token'（sequence 是 GSPO）",
        ),
        (cfg.delta is not None, "delta（双边 clip）必须为 None"),
        (cfg.top_entropy_quantile < 1.0, "top_entropy_quantile 必须是 1.0"),
        (cfg.off_policy_mask_threshold is not None, "off_policy_mask_threshold 必须为 None"),
        (
            cfg.entropy_coef != 0.0 or cfg.use_adaptive_entropy,
            "entropy_coef 必须是 0（课程只记录熵，不加熵奖励）",
        ),
        (
            cfg.beta > 0 and cfg.use_bias_correction_kl,
            "beta>0 时 use_bias_correction_kl 必须为 False（L2.04 的 k3 不乘 ratio）",
        ),
        (
            cfg.multi_objective_aggregation != "sum_then_normalize",
            "multi_objective_aggregation 必须是 'sum_then_normalize'",
        ),
        (
            cfg.use_vllm
            and cfg.vllm_importance_sampling_correction
            and not cfg.vllm_importance_sampling_mode.startswith("sequence"),
            "vllm_importance_sampling_mode 必须是 sequence_*（逐 token 的权重没法并进 (B,) 的 advantage）",
        ),
    ]
    return [msg for bad, msg in checks if bad]
