"""--skip-zero-adv 1：advantage 精确为 0 的回答不进训练的 forward/backward，梯度和不跳过时相等。

直接调用 grpo_train.py 的 grpo_update（和训练用的同一个函数），在一个随机权重的小 Qwen3 上，
同一批 rollout 分别跳过 / 不跳过，比较累加出来的梯度、记下的 loss、熵和训练端的 logp。
分母的选择（L2.05 第 4 节、L2.07 第 2.7 节）：microbatch_weight 拿的仍是整批的 mask，
所以 sequence_mean 除以整批的 N 行、token_mean 除以整批的有效 token 数、constant 除以 N·L_max，
跳过的行只是少加了一堆精确为 0 的项。
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

from common.config.grpo_config import GRPOConfig, cross_errors
from common.decode.rollout_batch import finish_rollout
from common.options.choices import AGGREGATIONS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
P, G, T, V = 4, 4, 7, 48  # 4 组 × 4 条；其中 2 组 reward 全相同 -> advantage 精确为 0


@pytest.fixture(scope="module")
def setup():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = importlib.util.spec_from_file_location("grpo_train_for_skip", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # 只定义函数，不训练
    L = importlib.import_module("solutions.l2_07_grpo_train")
    config = Qwen3Config(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).float()
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, V, (P * G, 5), generator=g)
    raw = torch.randint(3, V, (P * G, T), generator=g)
    raw[torch.arange(P * G), torch.randint(1, T, (P * G,), generator=g)] = 2  # 不同长度的回答
    raw[::5] = torch.randint(3, V, (T,), generator=g)  # 几条写满 T（截断）
    ro = finish_rollout(prompt, torch.ones_like(prompt), raw, [2], 0)
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1])  # 第 2、3 组全相同
    adv = L.group_advantages(rewards, G)
    mask = L.completion_mask(ro.completion_ids, [2])
    return script, L, model, ro, rewards, adv, mask


class _Recorder(torch.optim.SGD):
    """optimizer.step() 时记下梯度，不改权重（lr = 0）。"""

    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() for p in self.param_groups[0]["params"]]


class _Run:
    def save_bad_step(self, *a, **k):
        raise AssertionError("梯度不是有限数")

    def check_finite(self, *a, **k):
        pass


def _update(setup, aggregation, skip, micro_batch, ref=None):
    script, L, model, ro, rewards, adv, mask = setup
    cfg = dataclasses.replace(
        GRPOConfig(), aggregation=aggregation, skip_zero_adv=skip, micro_batch=micro_batch,
        max_new_tokens=T + 3, grad_clip=1e9, eps_high=0.2,
    )  # fmt: skip

    def logprobs(net, ro, rows):
        h = net.model(
            input_ids=ro.sequences[rows],
            attention_mask=ro.attention_mask[rows],
            position_ids=ro.position_ids[rows],
        ).last_hidden_state
        return L.hidden_token_logprobs(h, net.lm_head.weight, ro.completion_ids[rows], 1.0)

    params = list(model.parameters())
    opt = _Recorder(params, lr=0.0)
    batch = dict(prompt_ids=torch.arange(P), rollout=ro, rewards=rewards, advantages=adv, texts=[])
    args = (L, cfg, model, ref, params, opt, batch, mask, logprobs, _Run(), 1)
    upd = script.grpo_update(*args, kl_start=ref is not None)
    loss = sum(float(s["loss"]) for s in upd["stats"]) / len(upd["stats"])
    return opt.grads, loss, upd


@pytest.mark.slow  # import transformers + 一个小模型：约 5 CPU-s（默认一档留给快的测试）
@pytest.mark.parametrize("aggregation", list(AGGREGATIONS))
@pytest.mark.parametrize("micro_batch", [3, 16])
def test_skipping_zero_advantage_rows_leaves_the_gradient_unchanged(
    setup, aggregation, micro_batch
):
    adv = setup[5]
    assert int((adv == 0).sum()) == 8 and int((adv != 0).sum()) == 8  # 一半的行被跳过
    full, loss_full, upd_full = _update(setup, aggregation, 0, micro_batch)
    skip, loss_skip, upd_skip = _update(setup, aggregation, 1, micro_batch)
    assert any(float(g.abs().max()) > 1e-4 for g in full), "梯度全是 0：这个测试没有意义"
    for name, a, b in zip([n for n, _ in setup[2].named_parameters()], full, skip):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (
            f"{aggregation}：跳过 advantage 为 0 的行之后 {name} 的梯度变了"
            f"（最大差 {float((a - b).abs().max()):.3g}）：分母要数整批，而不是只数训练的行"
        )
    assert loss_skip == pytest.approx(loss_full, rel=1e-5, abs=1e-8)
    # 跳过的行连不带梯度的 forward 也没有：熵和训练端 logp 只覆盖训练的行（seen），按 rollout 的行序
    assert upd_full["seen"].tolist() == list(range(P * G))
    assert upd_skip["seen"].tolist() == torch.nonzero(adv != 0).flatten().tolist()
    for key in ("entropy", "train_logp"):
        part = upd_full[key][upd_skip["seen"]]
        assert upd_skip[key].shape == part.shape
        assert torch.allclose(upd_skip[key], part, rtol=1e-5, atol=1e-6), key
    assert [s["clip_fraction"] for s in upd_skip["stats"]] == [0.0] * len(upd_skip["stats"])


@pytest.mark.slow
def test_the_kl_to_the_start_covers_the_skipped_rows_too(setup):
    """--eval-kl 的评估步：跳过的行做一次不带梯度的 forward，KL 和指标仍按整批算，和不跳过时相等。"""
    ref = copy.deepcopy(setup[2]).requires_grad_(False)  # 起点权重：和当前权重差一点
    with torch.no_grad():
        for w in ref.parameters():
            w.add_(0.05 * torch.randn(w.shape, generator=torch.Generator().manual_seed(w.numel())))
    full, _, upd_full = _update(setup, "token_mean", 0, 3, ref)
    skip, _, upd_skip = _update(setup, "token_mean", 1, 3, ref)
    assert upd_full["kl_start"] > 1e-4, "起点和当前权重一样：KL 是 0，这个测试没有意义"
    assert upd_skip["seen"].tolist() == list(range(P * G))
    for key in ("entropy", "train_logp"):
        assert torch.allclose(upd_skip[key], upd_full[key], rtol=1e-5, atol=1e-6), key
    assert upd_skip["kl_start"] == pytest.approx(upd_full["kl_start"], rel=1e-5, abs=1e-9)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(full, skip))


@pytest.mark.slow
def test_skipping_only_zero_rows_of_an_all_equal_batch_still_steps(setup):
    """全批 advantage 都是 0：仍留一行做 backward，梯度精确为 0，AdamW 照样走一步（和不跳过时一样）。"""
    script, L, model, ro, rewards, adv, mask = setup
    zero = (setup[0], L, model, ro, torch.zeros_like(rewards), torch.zeros_like(adv), mask)
    grads, _, _ = _update(zero, "token_mean", 1, 4)
    assert grads and all(float(g.abs().max()) == 0 for g in grads)


@pytest.mark.parametrize("change", [dict(beta=0.04), dict(num_iterations=2)])
def test_skip_needs_beta_zero_and_one_update(change):
    cfg = dataclasses.replace(GRPOConfig(), skip_zero_adv=1, **change)
    assert any("--skip-zero-adv 1 只在 --beta 0 且 --num-iterations 1 时成立" in e
               for e in cross_errors(cfg))  # fmt: skip
    assert not any("--skip-zero-adv" in e for e in cross_errors(GRPOConfig(skip_zero_adv=1)))
