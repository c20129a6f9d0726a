import torch
from snapshots import Case


def _logits(dtype=torch.float32):
    # CS336 作业 5 的测试尺寸：B=2, T=10, V=100
    g = torch.Generator().manual_seed(42)
    return (torch.randn(2, 10, 100, generator=g) * 2).to(dtype)


def _tokens():
    return torch.randint(0, 100, (2, 10), generator=torch.Generator().manual_seed(43))


def _completion_ids():
    eos, pad = 7, 7  # pad == eos
    return torch.tensor(
        [
            [3, 4, 5, eos, pad, pad],
            [eos, pad, pad, pad, pad, pad],
            [3, 4, 5, 6, 8, 9],
            [3, 9, 5, 6, 8, eos],
        ]
    )


def _x_and_mask():
    g = torch.Generator().manual_seed(44)
    x = torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1.0] * 4 + [0.0] * 2, [1.0] + [0.0] * 5, [1.0] * 6, [0.0] * 6])
    return x, mask


CASES = [
    Case(
        "logprobs_fp32",
        "token_logprobs",
        lambda: {"logits": _logits(), "tokens": _tokens()},
        atol=1e-4,
    ),
    Case(
        "logprobs_bf16",
        "token_logprobs",
        lambda: {"logits": _logits(torch.bfloat16), "tokens": _tokens()},
        atol=1e-4,
    ),
    Case("entropy_bf16", "token_entropy", lambda: {"logits": _logits(torch.bfloat16)}, atol=1e-4),
    Case(
        "mask_one_eos",
        "completion_mask",
        lambda: {"completion_ids": _completion_ids(), "eos_token_ids": 7},
    ),
    Case(
        "mask_two_eos",
        "completion_mask",
        lambda: {"completion_ids": _completion_ids(), "eos_token_ids": [9, 7]},
    ),
    Case("masked_mean_all", "masked_mean", lambda: dict(zip(("x", "mask"), _x_and_mask()))),
    Case(
        "masked_mean_rows",
        "masked_mean",
        lambda: {**dict(zip(("x", "mask"), _x_and_mask())), "dim": 1},
    ),
]
