"""把我们的 grpo_loss 与 TRL 1.16 GRPOTrainer 里真正训练时跑的那段损失代码逐位对照。

怎么驱动 TRL（没有模型、没有数据集、不生成任何东西）：
1. 用真的 `trl.GRPOConfig(loss_type=..., beta=..., epsilon=..., epsilon_high=..., max_completion_length=...)` 造配置；
2. `object.__new__(GRPOTrainer)` 造一个不跑 __init__ 的 trainer，只按 GRPOTrainer.__init__ 里的写法
   （trl/trainer/grpo_trainer.py 约 782-983 行：self.loss_type = args.loss_type、
   self.epsilon_low = args.epsilon、self.epsilon_high = args.epsilon_high or args.epsilon、self.beta、
   self.max_completion_length、importance_sampling_level、top_entropy_quantile、off_policy_mask_threshold ...）
   填上 `_compute_loss` 会读的属性；use_vllm=False，没有 entropy bonus / aux loss，
   current_gradient_accumulation_steps=1，accelerator 是真的单进程 CPU `accelerate.Accelerator`；
3. 把实例上的 `_get_per_token_logps_and_entropies` 换成一个直接返回我们给的 logp 张量（requires_grad）的函数
   ——这是唯一被替换的地方，它本来是"模型前向 + 选出采样 token 的 log 概率"；
4. 调用真的 `GRPOTrainer._compute_loss(model, inputs)`，inputs 里放 completion_mask、advantages、
   old_per_token_logps、ref_per_token_logps，以及 dapo 需要的 num_items_in_batch = mask.sum()；
5. 对 TRL 的 loss 和我们的 loss 分别 backward，比较 loss 值、对 logp 的梯度（atol 1e-12），以及 TRL 记录的
   clip_ratio/region_mean、clip_ratio/low_mean、clip_ratio/high_mean、kl 指标（atol 1e-6）。

对应关系（单进程、steps_per_generation = gradient_accumulation_steps = 1）：
  TRL "grpo" = sequence_mean，"dapo"/"bnpo" = token_mean，"dr_grpo" = constant（max_completion_length 相同）。
全部用 float64；在参考实现上 loss 与梯度逐位相同。

无法完全一致的地方（及原因）：
- use_bias_correction_kl=True（TRL 1.16 的默认，PR #6503）把 k3 乘上 ratio = exp(logp - old_logp)。
  我们的 grpo_loss 按 DeepSeekMath 原式不乘。所以 beta>0 的逐位对照用 use_bias_correction_kl=False；
  另有一个测试说明 True 时的差别：on-policy（old_logp == logp）时 loss 值相同，梯度恰好多出
  beta·k3·(聚合权重)；off-policy 时连值也不同，差 beta·聚合(k3·(ratio-1))。
- token_weights（L2.09 的截断重要性采样要用）对应 TRL 用 vLLM 时的 inputs["importance_sampling_ratio"]：
  打开 use_vllm 与 vllm_importance_sampling_correction，把同一份权重传进去，loss 与梯度逐位相同。
- "dapo" 在多进程时除以全局 token 数 / 进程数（再由 DDP 平均），我们只看本进程；单进程时二者相同，这里只测单进程。
"""

from __future__ import annotations

import tempfile
from collections import defaultdict

import pytest
import torch
from diagnose import check

# 整个文件在 slow 一档：import GRPOTrainer 就要约 5 s（transformers 的 Trainer、accelerate、datasets），
# 默认一档每个课的测试文件要在 7.5 s 内跑完。CI 的 slow 一档照样跑；自己跑：pytest -m slow 这个文件
pytestmark = pytest.mark.slow

SECTION = "L2.05「5. 对应到 TRL 和 slime」"

AGG_OF = {
    "grpo": "sequence_mean",
    "dapo": "token_mean",
    "bnpo": "token_mean",
    "dr_grpo": "constant",
}
MAX_LEN = 8


@pytest.fixture(scope="module")
def trl_mods():
    # trl 是锁定的依赖：装坏了要报错，不能悄悄跳过
    from accelerate import Accelerator
    from trl import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    return GRPOConfig, GRPOTrainer, Accelerator


@pytest.fixture(scope="module")
def mod(impl):
    return impl("l2_05_grpo_loss")


def _trl_trainer(trl_mods, loss_type, beta, eps, eps_high, bias_correction):
    GRPOConfig, GRPOTrainer, Accelerator = trl_mods
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        loss_type=loss_type,
        beta=beta,
        epsilon=eps,
        epsilon_high=eps_high,
        max_completion_length=MAX_LEN,
        use_bias_correction_kl=bias_correction,
        use_cpu=True,
        bf16=False,
        report_to=[],
    )
    tr = object.__new__(GRPOTrainer)
    tr.args = args
    # 以下逐条照抄 GRPOTrainer.__init__ 的赋值
    tr.loss_type = args.loss_type
    tr.beta = args.beta
    tr.epsilon_low = args.epsilon
    tr.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    tr.max_completion_length = args.max_completion_length
    tr.importance_sampling_level = args.importance_sampling_level
    tr.top_entropy_quantile = args.top_entropy_quantile
    tr.off_policy_mask_threshold = args.off_policy_mask_threshold
    tr.use_vllm = args.use_vllm
    tr.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    tr.aux_loss_enabled = False
    tr._entropy_bonus_enabled = False
    tr._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    tr.current_gradient_accumulation_steps = 1
    tr.model = torch.nn.Linear(1, 1).train()  # 只用来让 _compute_loss 判断 mode == "train"
    tr.accelerator = Accelerator(cpu=True)  # GRPOConfig 会重置 AcceleratorState，所以在它之后创建
    return tr


def _batch(on_policy=False):
    """B=5, T=6 的 float64 张量；含一条空回答（mask 全 0）、长短不一的回答、正负 advantage。"""
    g = torch.Generator().manual_seed(7)
    B, T = 5, 6
    logp = torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = (
        logp.clone()
        if on_policy
        else logp + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.4
    )
    ref = logp + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.2
    adv = torch.tensor([1.2, -0.7, 0.5, -1.5, 0.9], dtype=torch.float64)
    lengths = torch.tensor([3, 6, 0, 1, 5])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    return logp, old, ref, adv, mask


def _run_trl(tr, logp, old, ref, adv, mask, **extra_inputs):
    lp = logp.clone().requires_grad_()
    # 唯一的替换：本该是"模型前向 -> 采样 token 的 log 概率"，这里直接给 logp（熵给 0，无 aux loss）
    tr._get_per_token_logps_and_entropies = lambda *a, **k: (lp, torch.zeros_like(lp), None)
    B, T = logp.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
        **extra_inputs,
    }
    loss = tr._compute_loss(None, inputs)
    loss.backward()
    return loss.detach(), lp.grad, {k: v[-1] for k, v in tr._metrics["train"].items()}


def _run_ours(mod, logp, old, ref, adv, mask, beta, eps, eps_high, agg, **extra):
    lp = logp.clone().requires_grad_()
    loss, metrics = mod.grpo_loss(
        lp,
        old,
        adv,
        mask,
        ref_logp=ref if beta > 0 else None,
        beta=beta,
        eps_low=eps,
        eps_high=eps_high,
        aggregation=agg,
        max_completion_length=MAX_LEN,
        **extra,
    )
    loss.backward()
    return loss.detach(), lp.grad, metrics


def _same(ours, trl, what, atol=1e-12):
    check(ours, trl, where=f"与 TRL 对照的{what}", section=SECTION, rtol=0, atol=atol)


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps_high", [None, 0.28])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
def test_matches_trl(trl_mods, mod, loss_type, beta, eps_high):
    batch = _batch()
    tr = _trl_trainer(trl_mods, loss_type, beta, 0.2, eps_high, bias_correction=False)
    trl_loss, trl_grad, trl_metrics = _run_trl(tr, *batch)
    loss, grad, metrics = _run_ours(mod, *batch, beta, 0.2, eps_high, AGG_OF[loss_type])

    _same(loss, trl_loss, " loss 值")
    _same(grad, trl_grad, "梯度（对 logp）")
    # 指标只用来看曲线：允许用 float32 统计（clipped.float()），容差放宽到 1e-6
    assert trl_metrics["clip_ratio/region_mean"] > 0  # 这组数据确实触发了裁剪，对照才有意义
    for ours, theirs in (
        ("clip_fraction", "clip_ratio/region_mean"),
        ("clip_low_fraction", "clip_ratio/low_mean"),
        ("clip_high_fraction", "clip_ratio/high_mean"),
    ) + ((("kl", "kl"),) if beta > 0 else ()):
        _same(metrics.get(ours), float(trl_metrics[theirs]), f" metrics['{ours}'] 的值", atol=1e-6)


def _k3(logp, ref):
    """k3 的公式，直接写在这里算期望差值（不依赖被测实现）。"""
    return torch.exp(ref - logp) - (ref - logp) - 1


def _agg_weights(agg, mask):
    """d(聚合后的 loss) / d(逐 token loss)：三种聚合各自给每个 token 的权重。"""
    B = mask.shape[0]
    if agg == "sequence_mean":
        return mask / mask.sum(1, keepdim=True).clamp(min=1) / B
    if agg == "token_mean":
        return mask / mask.sum()
    return mask / (B * MAX_LEN)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_bias_corrected_kl_difference(trl_mods, mod, loss_type):
    """TRL 默认 use_bias_correction_kl=True：KL 项 = ratio·k3。这里把差别精确地算出来。"""
    beta, agg = 0.04, AGG_OF[loss_type]

    # on-policy：ratio 的值恒为 1，loss 值相同；但 ratio 对 logp 的导数是 1，梯度多出 beta·k3·权重
    logp, old, ref, adv, mask = _batch(on_policy=True)
    tr = _trl_trainer(trl_mods, loss_type, beta, 0.2, None, bias_correction=True)
    trl_loss, trl_grad, _ = _run_trl(tr, logp, old, ref, adv, mask)
    loss, grad, _ = _run_ours(mod, logp, old, ref, adv, mask, beta, 0.2, None, agg)
    _same(loss, trl_loss, " loss（on-policy，TRL 乘了 ratio·k3）")
    extra = beta * _k3(logp, ref) * _agg_weights(agg, mask)
    assert extra.abs().max() > 1e-8  # 远大于比较用的 atol=1e-12：差别确实存在
    _same(trl_grad - grad, extra, "梯度之差（应恰好是 β·k3·聚合权重）")

    # off-policy：值也不同，差 beta·聚合(k3·(ratio - 1))
    logp, old, ref, adv, mask = _batch(on_policy=False)
    tr = _trl_trainer(trl_mods, loss_type, beta, 0.2, None, bias_correction=True)
    trl_loss, _, _ = _run_trl(tr, logp, old, ref, adv, mask)
    loss, _, _ = _run_ours(mod, logp, old, ref, adv, mask, beta, 0.2, None, agg)
    ratio = torch.exp(logp - old)
    diff = (beta * _k3(logp, ref) * (ratio - 1) * _agg_weights(agg, mask)).sum()
    assert diff.abs() > 1e-8
    _same(trl_loss - loss, diff, " loss 之差（off-policy，应恰好是 β·聚合(k3·(ratio − 1))）")


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_token_weights_match_trl_importance_sampling_ratio(trl_mods, mod, loss_type, beta):
    """token_weights 就是 TRL 用 vLLM 时乘在逐 token 策略项上的 importance_sampling_ratio（grpo_trainer.py
    约第 3147 行，在第 3150 行加 beta·KL 之前）。这里把 TRL 的 use_vllm 打开，直接把权重当作 inputs 传进去。"""
    logp, old, ref, adv, mask = _batch()
    g = torch.Generator().manual_seed(11)
    weights = torch.rand(logp.shape, generator=g, dtype=torch.float64) * 2
    weights[0, 1] = 0.0  # 这个 token 只剩 KL 项
    tr = _trl_trainer(trl_mods, loss_type, beta, 0.2, None, bias_correction=False)
    tr.use_vllm = True
    tr.vllm_importance_sampling_correction = True
    trl_loss, trl_grad, _ = _run_trl(
        tr, logp, old, ref, adv, mask, importance_sampling_ratio=weights
    )
    loss, grad, _ = _run_ours(
        mod, logp, old, ref, adv, mask, beta, 0.2, None, AGG_OF[loss_type], token_weights=weights
    )
    plain, _, _ = _run_ours(mod, logp, old, ref, adv, mask, beta, 0.2, None, AGG_OF[loss_type])
    assert (loss - plain).abs() > 1e-6  # 权重确实改变了 loss，对照才有意义
    _same(loss, trl_loss, " loss（token_weights = TRL 的 importance_sampling_ratio）")
    _same(grad, trl_grad, "梯度（token_weights = TRL 的 importance_sampling_ratio）")
