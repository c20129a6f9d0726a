"""common.gsm8k.controls：对照的 reward 打乱。组内打乱保留每组 reward 的组成（多重集合），整批打乱不保留。"""

from __future__ import annotations

import torch

from common.gsm8k.controls import shuffle_rewards


def _groups(r: torch.Tensor, g: int) -> list[list[float]]:
    return [sorted(row) for row in r.view(-1, g).tolist()]


def test_within_group_shuffle_keeps_every_groups_rewards():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0, 1, 0])
    gen = torch.Generator().manual_seed(0)
    moved = 0
    for _ in range(50):
        out = shuffle_rewards(rewards, 4, gen, within_groups=True)
        assert _groups(out, 4) == _groups(rewards, 4)  # 每组的多重集合不变
        moved += int(not torch.equal(out, rewards))
    assert moved > 40, "组内打乱几乎从不改变顺序：没有真的打乱"


def test_within_group_shuffle_keeps_the_update_statistics():
    """每组的均值、std、组内全相同的比例都不变：advantage 的取值和更新的大小与运行一样。"""
    rewards = (torch.rand(64, generator=torch.Generator().manual_seed(1)) > 0.6).float()
    out = shuffle_rewards(rewards, 8, torch.Generator().manual_seed(2), within_groups=True)
    a, b = rewards.view(-1, 8), out.view(-1, 8)
    assert torch.equal(a.mean(1), b.mean(1)) and torch.allclose(a.std(1), b.std(1))


def test_batch_shuffle_mixes_groups():
    """整批打乱：全错的组会拿到 1，每组的组成变了（旧的对照，L2.08 第 1.1 节）。"""
    rewards = torch.tensor([1.0] * 8 + [0.0] * 24)
    out = shuffle_rewards(rewards, 8, torch.Generator().manual_seed(0), within_groups=False)
    assert sorted(out.tolist()) == sorted(rewards.tolist())
    assert _groups(out, 8) != _groups(rewards, 8)


def test_a_shuffle_draws_only_from_its_own_generator():
    torch.manual_seed(3)
    state = torch.get_rng_state()
    shuffle_rewards(torch.arange(8.0), 4, torch.Generator().manual_seed(0), within_groups=True)
    assert torch.equal(torch.get_rng_state(), state)
