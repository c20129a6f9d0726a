import torch
from snapshots import Case


def _logits():
    g = torch.Generator().manual_seed(6)
    return torch.randn(4, 50, generator=g) * 3


CASES = [
    Case("temperature_only", "process_logits", lambda: {"logits": _logits(), "temperature": 0.7}),
    Case("top_p_0.9", "process_logits", lambda: {"logits": _logits(), "top_p": 0.9}),
    Case(
        "t1.3_top_p_0.5",
        "process_logits",
        lambda: {"logits": _logits(), "temperature": 1.3, "top_p": 0.5},
    ),
]
