"""common.model.optim：两种 AdamW、清楚的报错，8-bit 状态的字节数与账本一致。"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.model.optim import OptimizerError, make_optimizer
from common.vram.ledger import ADAMW8BIT_STATE_BYTES

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_name_is_a_clear_error():
    with pytest.raises(OptimizerError, match="adamw8bit"):
        make_optimizer([torch.nn.Parameter(torch.zeros(2))], "sgd", lr=1e-3)


def test_plain_adamw_on_cpu_is_torch_foreach():
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], "adamw", lr=1e-3)
    assert isinstance(opt, torch.optim.AdamW) and not opt.defaults["fused"]


@pytest.mark.slow
def test_8bit_states_are_the_bytes_the_ledger_counts_and_still_descend():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 256))  # 16384 个值：>= 4096 且是 256 的倍数，会被量化
    target = torch.randn(64, 256)
    opt = make_optimizer([w], "adamw8bit", lr=1e-2)
    first = None
    for _ in range(20):
        loss = (w - target).square().mean()
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert loss.item() < 0.9 * first
    state = opt.state[w]
    nbytes = 0
    for key in ("exp_avg", "exp_avg_sq"):
        t = state[key]
        nbytes += (
            t.codes.numel() * t.codes.element_size() + t.scale.numel() * t.scale.element_size()
        )
    assert nbytes / w.numel() == ADAMW8BIT_STATE_BYTES
