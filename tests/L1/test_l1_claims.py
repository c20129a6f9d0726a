"""L1.03 / L1.05 里关于本课程自己行为的几句话，在这里用参考实现逐条验证。

- 课程默认 μ = 1：old_logp 就是当前 logp 的 detach，ratio 恒为 1，clip 不触发，`--eps-high` 什么也不改；
- `grpo_loss` 的 KL 项是不乘比值、不夹的 k3（DeepSeekMath 式 (4)）；π_θ ≪ π_ref 时它的值和梯度都很大；
- 组均值 baseline 含自己的 reward：advantage = (G−1)/G × 留一法（leave-one-out）的 advantage；
- DAPO 的软超长惩罚（TRL `get_soft_overlong_punishment`）在课文例子里的三个值。
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from common.options.presets import get_preset, preset_names
from solutions.l2_01_advantages import group_advantages
from solutions.l2_02_logprobs_and_masks import masked_mean
from solutions.l2_04_kl import kl_k3
from solutions.l2_05_grpo_loss import grpo_loss

ROOT = Path(__file__).resolve().parents[2]


def _grpo_train_defaults():
    """grpo_train.py 的默认配置（common/config/grpo_config.py 的 GRPOConfig：tiny 在 CPU 上）。"""
    from common.config.config_cli import preset_config

    return preset_config("tiny")


def _batch(seed=0, B=4, T=6):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g) * 4).requires_grad_()
    adv = torch.tensor([1.5, -1.5, 0.8, -0.8])
    mask = torch.ones(B, T)
    mask[1, 4:] = 0
    return logp, adv, mask


def _grad(logp, old, adv, mask, **kw):
    logp.grad = None
    loss, metrics = grpo_loss(logp, old, adv, mask, **kw)
    loss.backward()
    return logp.grad.clone(), metrics


def test_course_default_is_one_update_per_rollout():
    assert _grpo_train_defaults().num_iterations == 1, "L1.05 说课程默认 μ = 1"
    overrides = {
        n: get_preset(n).overrides["num_iterations"]
        for n in preset_names()
        if "num_iterations" in get_preset(n).overrides
    }
    assert all(v == 1 for v in overrides.values()), f"有预设改了 μ：{overrides}"


def test_at_mu_1_clip_never_fires_and_eps_high_changes_nothing():
    logp, adv, mask = _batch()
    # grpo_train.py 在 μ = 1 时把当前 logp 的 detach 当 old_logp（见它的第 6 步）
    g_02, m_02 = _grad(logp, logp.detach(), adv, mask, eps_low=0.2, eps_high=0.2)
    g_28, m_28 = _grad(logp, logp.detach(), adv, mask, eps_low=0.2, eps_high=0.28)
    assert m_02["clip_fraction"] == 0.0 and m_28["clip_fraction"] == 0.0
    assert torch.equal(g_02, g_28), "μ = 1 时 eps_high 不应改变梯度"
    # 梯度就是朴素的 policy gradient：-A / |y_i| / B（sequence_mean）
    want = -adv[:, None] * mask / mask.sum(1, keepdim=True) / len(adv)
    torch.testing.assert_close(g_02, want)


def test_once_the_ratio_moves_eps_high_matters():
    """对照组：第二次更新时（old ≠ 当前），同一批数据上 eps_high 0.2 与 0.28 给出不同的梯度。"""
    logp, adv, mask = _batch()
    old = (
        logp.detach() - 0.24 * torch.sign(adv)[:, None]
    )  # 好回答的概率已涨到 1.27 倍，坏回答的降了
    g_02, m_02 = _grad(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    g_28, m_28 = _grad(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    assert m_02["clip_high_fraction"] > 0 and m_28["clip_high_fraction"] == 0.0
    assert not torch.equal(g_02, g_28)


def test_the_loss_uses_plain_k3():
    logp, adv, mask = _batch(seed=1)
    ref = logp.detach() + torch.randn(logp.shape, generator=torch.Generator().manual_seed(2))
    beta = 0.3
    with torch.no_grad():
        without, _ = grpo_loss(logp, logp, adv, mask)
        with_kl, metrics = grpo_loss(logp, logp, adv, mask, ref_logp=ref, beta=beta)
    k3 = kl_k3(logp.detach(), ref)  # 不乘 π_θ/π_old，不夹到 [-10, 10]
    torch.testing.assert_close(with_kl - without, beta * masked_mean(k3, mask, dim=1).mean())
    assert metrics["kl"] == pytest.approx(masked_mean(k3, mask).item())


def test_k3_tail_when_policy_is_far_below_reference():
    """L1.05 第 4 节的数：log π_ref − log π_θ = 5 时 k3 ≈ 142.4，它对 log π_θ 的导数 ≈ −147.4。"""
    logp = torch.tensor([-6.0], requires_grad=True)
    k = kl_k3(logp, torch.tensor([-1.0]))
    k.sum().backward()
    assert k.item() == pytest.approx(math.exp(5) - 1 - 5) and round(k.item(), 1) == 142.4
    assert (
        logp.grad.item() == pytest.approx(1 - math.exp(5)) and round(logp.grad.item(), 1) == -147.4
    )


@pytest.mark.parametrize(
    "rewards", [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]]
)
def test_group_mean_baseline_is_scaled_leave_one_out(rewards):
    r = torch.tensor(rewards)
    G = len(rewards)
    leave_one_out = r - (r.sum() - r) / (G - 1)
    torch.testing.assert_close(group_advantages(r, G, scale="none"), (G - 1) / G * leave_one_out)


def test_worked_example_of_the_baseline():
    """L1.03 第 6 节：rewards (1, 1, 0, 0)，第 1 条的组均值 advantage 0.5，留一法 2/3，比值 3/4。"""
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert group_advantages(r, 4, scale="none")[0].item() == pytest.approx(0.5)
    assert (r[0] - r[1:].mean()).item() == pytest.approx(2 / 3)


def test_soft_overlong_punishment_example():
    """L1.05 第 3 节：L_max = 512、L_cache = 64 时，长度 448 / 480 / 512 的惩罚是 0 / −0.5 / −1。"""
    from trl.rewards import get_soft_overlong_punishment

    punish = get_soft_overlong_punishment(max_completion_len=512, soft_punish_cache=64)
    assert punish(completion_ids=[[1] * 448, [1] * 480, [1] * 512]) == [0.0, -0.5, -1.0]


def test_l1_02_reward_table_is_what_the_functions_print():
    """L1.02 第 4 节那张表：每一行（回答、抽出的答案、correctness、format）都由 common.gsm8k.reward 算出来。"""
    import re

    from common.gsm8k.reward import correctness_reward, extract_answer, format_reward

    text = (ROOT / "L1_concepts/02_llm_as_policy/README.md").read_text(encoding="utf-8")
    block = text.split("回答                                                    抽出的答案")[1]
    block = block.split("```")[0]
    rows = [line for line in block.splitlines()[1:] if line.strip()]
    assert len(rows) == 7
    for line in rows:
        m = re.fullmatch(r"(['\"].*['\"])\s+(\S+)\s+(\S+)\s+(\S+)", line.strip())
        assert m, f"L1.02 第 4 节的表里这一行读不出来：{line}"
        completion = m[1][1:-1].replace("\\n", "\n")  # 反斜杠照原样，\n 是换行
        answer = None if m[2] == "None" else m[2]
        assert extract_answer(completion) == answer, line
        assert correctness_reward(completion, "55") == float(m[3]), line
        assert format_reward(completion) == float(m[4]), line
