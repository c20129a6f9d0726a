import torch
from snapshots import Case


def _inputs(**extra):
    """有被截断的 token 和行、有 padding（上面放大数：参考实现必须不受影响；快照比对不收 NaN）、有一行全是 padding。"""
    g = torch.Generator().manual_seed(9)
    B, T = 4, 6
    logp_rollout = -torch.rand(B, T, generator=g) * 2
    logp_train = logp_rollout + torch.randn(B, T, generator=g) * 0.5
    logp_train[0, 2] = logp_rollout[0, 2] + 1.2  # e^1.2 ≈ 3.3 > cap
    logp_train[0, 4] = logp_rollout[0, 4] + 0.8  # 第 0 行的 Σδ 超过 log 3：sequence 级也被截断
    lengths = torch.tensor([6, 4, 0, 2])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return {
        "logp_train": torch.where(mask != 0, logp_train, 1e4),
        "logp_rollout": torch.where(mask != 0, logp_rollout, -1e4),
        "mask": mask,
        **extra,
    }


CASES = [
    Case("token_cap2", "tis_weights", lambda: _inputs(cap=2.0, level="token")),
    Case("sequence_cap3", "tis_weights", lambda: _inputs(cap=3.0, level="sequence")),
    Case("sequence_no_cap", "tis_weights", lambda: _inputs(cap=None, level="sequence")),
]
