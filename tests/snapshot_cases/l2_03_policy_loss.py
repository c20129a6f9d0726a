import torch
from snapshots import Case


def _inputs():
    g = torch.Generator().manual_seed(3)
    logp = torch.randn(4, 6, generator=g) * 0.5 - 1.0
    old_logp = (
        logp + torch.randn(4, 6, generator=g) * 0.3
    )  # ratio 大约在 0.5 ~ 2 之间，两侧都会裁剪
    advantages = torch.tensor([1.2, -0.8, 0.0, 0.5])
    return logp, old_logp, advantages


CASES = [
    Case("pg", "policy_gradient_loss", lambda: {"logp": _inputs()[0], "advantages": _inputs()[2]}),
    Case(
        "clip_sym",
        "clipped_surrogate_loss",
        lambda: dict(zip(("logp", "old_logp", "advantages"), _inputs())),
    ),
    Case(
        "clip_higher",
        "clipped_surrogate_loss",
        lambda: {
            **dict(zip(("logp", "old_logp", "advantages"), _inputs())),
            "eps_low": 0.2,
            "eps_high": 0.28,
        },
    ),
]
