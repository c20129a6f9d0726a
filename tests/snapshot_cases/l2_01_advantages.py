import torch
from snapshots import Case


def _rewards():
    g = torch.Generator().manual_seed(1)
    binary = (torch.rand(32, generator=g) > 0.6).float()  # 0/1 正确率 reward，8 组 × 4
    return binary


CASES = [
    Case("group_binary", "group_advantages", lambda: {"rewards": _rewards(), "group_size": 4}),
    Case(
        "batch_binary",
        "group_advantages",
        lambda: {"rewards": _rewards(), "group_size": 4, "scale": "batch"},
    ),
    Case(
        "none_g8",
        "group_advantages",
        lambda: {"rewards": _rewards(), "group_size": 8, "scale": "none"},
    ),
]
