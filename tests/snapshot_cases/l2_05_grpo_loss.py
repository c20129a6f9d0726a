import torch
from snapshots import Case


def _inputs(**extra):
    g = torch.Generator().manual_seed(5)
    B, T = 4, 7
    logp = torch.randn(B, T, generator=g) * 0.4 - 1.0
    old_logp = logp + torch.randn(B, T, generator=g) * 0.3
    ref_logp = logp + torch.randn(B, T, generator=g) * 0.2
    lengths = torch.tensor([7, 3, 0, 5])  # 第 3 行是空回答
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    advantages = torch.tensor([1.0, -0.5, 0.7, -1.2])
    return {
        "logp": logp,
        "old_logp": old_logp,
        "advantages": advantages,
        "mask": mask,
        "ref_logp": ref_logp,
        **extra,
    }


CASES = [
    Case("seq_mean_kl", "grpo_loss", lambda: _inputs(beta=0.04)),
    Case(
        "token_mean_clip_higher",
        "grpo_loss",
        lambda: _inputs(aggregation="token_mean", eps_high=0.28),
    ),
    Case(
        "constant_kl",
        "grpo_loss",
        lambda: _inputs(beta=0.1, aggregation="constant", max_completion_length=10),
    ),
]
