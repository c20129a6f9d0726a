"""common/run/finite_guard.py：loss、梯度范数、更新后的权重、优化器状态里任何一个 NaN/inf 都让这一步停下。"""

from __future__ import annotations

import math

import pytest
import torch

from common.run.finite_guard import NonFiniteError, guard_finite, named_tensors, non_finite


def _stepped(lr=1e-2):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model(torch.randn(5, 4)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def test_a_finite_step_passes():
    model, opt = _stepped()
    guard_finite(1, loss=[0.5, 0.25], grad_norm=1.0, params=model.parameters(), optimizer=opt)
    guard_finite(1, loss=torch.tensor(0.1), grad_norm=None, params=dict(model.named_parameters()))


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(loss=[0.1, math.nan]), "loss"),
        (dict(loss=torch.tensor(math.inf)), "loss"),
        (dict(grad_norm=math.inf), "梯度范数"),
        (dict(grad_norm=torch.tensor(math.nan)), "梯度范数"),
    ],
)
def test_non_finite_loss_or_grad_norm_stops_the_step(kwargs, named):
    with pytest.raises(NonFiniteError) as err:
        guard_finite(7, **kwargs)
    msg = str(err.value)
    assert msg.startswith("第 7 步出现了 NaN/inf") and named in msg
    assert "--lr" in msg and "--eps-low" in msg and "--data" in msg and "什么都没保存" in msg


def test_a_nan_weight_is_named():
    model, opt = _stepped()
    with torch.no_grad():
        model.bias[1] = math.nan
    with pytest.raises(NonFiniteError, match=r"更新后的权重（1 个张量，如 参数 bias）"):
        guard_finite(2, params=dict(model.named_parameters()))
    with pytest.raises(NonFiniteError, match=r"如 参数 bias"):
        guard_finite(2, params=model)  # 一个模型：按名字查它可训练的参数
    model.bias.requires_grad_(False)
    guard_finite(2, params=model)  # 冻结的参数不归这一步管


def test_nan_in_adamw_exp_avg_is_caught_before_it_reaches_the_weights():
    """issue 里的情形：exp_avg 里的 7 个 NaN 在下一步才进权重；守卫在它们还只在优化器状态里时就停。"""
    model, opt = _stepped()
    opt.state[model.weight]["exp_avg"].view(-1)[:7] = math.nan
    guard_finite(3, params=model.parameters())  # 权重本身还是好的
    with pytest.raises(NonFiniteError, match="优化器状态.*exp_avg"):
        guard_finite(3, params=model.parameters(), optimizer=opt)


@pytest.mark.slow  # torchao 的 8-bit AdamW 第一次 step 要 torch.compile：几秒 CPU
def test_torchao_8bit_state_is_opened_up():
    from common.model.optim import make_optimizer

    torch.manual_seed(0)
    model = torch.nn.Linear(
        256, 64, bias=False
    )  # 16384 个值（>= 4096）：状态真的是 8 bit（codes + scale）
    opt = make_optimizer(model.parameters(), "adamw8bit", lr=1e-3)
    model(torch.randn(4, 256)).sum().backward()
    opt.step()
    state = opt.state[model.weight]["exp_avg"]
    assert type(state) is not torch.Tensor
    names = [n for n, _ in named_tensors({"exp_avg": state})]
    assert "exp_avg.scale" in names and "exp_avg.codes" in names
    guard_finite(1, optimizer=opt)
    state.scale[0] = math.inf
    with pytest.raises(NonFiniteError, match="exp_avg.scale"):
        guard_finite(1, optimizer=opt)


def test_non_finite_ignores_integer_and_empty_tensors():
    tensors = [("i", torch.tensor([1, 2])), ("e", torch.empty(0)), ("f", torch.tensor([1.0]))]
    assert non_finite(tensors) == []
    assert non_finite([("f", torch.tensor([1.0, math.nan]))]) == ["f"]
