import torch
from snapshots import Case


def _rewards(seed, n_groups, group_size=8):
    """0/1 的正确率 reward，约四成的组全相同（和真模型运行的 zero_std_frac 差不多）；有几组全是 0.5。"""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n_groups, 1, generator=g)
    rewards = (torch.rand(n_groups, group_size, generator=g) < p).float()
    rewards[::7] = 0.5
    return rewards.flatten()


CASES = [
    Case("one_draw", "select_groups", lambda: {"rewards": _rewards(0, 16), "group_size": 8,
                                              "target": 16}),
    Case("two_draws", "select_groups", lambda: {"rewards": _rewards(1, 32), "group_size": 8,
                                               "target": 16, "last": True}),
    Case("none_last", "select_groups", lambda: {"rewards": torch.zeros(24), "group_size": 4,
                                               "target": 4, "last": True}),
]  # fmt: skip
