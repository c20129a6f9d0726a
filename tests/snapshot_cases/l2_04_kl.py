import torch
from snapshots import Case


def _inputs():
    g = torch.Generator().manual_seed(4)
    logp = torch.log_softmax(torch.randn(3, 5, 8, generator=g), -1)[
        ..., 0
    ]  # (3, 5) 真实的 log 概率
    ref_logp = logp + torch.randn(3, 5, generator=g) * 0.4
    return {"logp": logp, "ref_logp": ref_logp}


CASES = [Case(name, name, _inputs) for name in ("kl_k1", "kl_k2", "kl_k3")]
