"""The control runs' reward shuffles: the same kind of update, without knowing which answer was right.

    rewards = shuffle_rewards(rewards, group_size, generator, within_groups=True)

``within_groups=True`` (``--reward shuffled``) permutes the G rewards of each group among its own
answers. Every group keeps its rewards (how many right, how many wrong), so the advantages have the
same values, the same share of all-equal groups and the same update size as in the run: only the
link between an answer and its reward is gone. Dynamic sampling (``--dynamic-sampling``, L2.10)
relies on this: the control drops its all-equal groups by the same rule and draws from the same
candidate prompts as the run. ``within_groups=False`` (``--reward shuffled_batch``)
permutes all N rewards across the batch: a group of G wrong answers can receive a 1, so the
share of all-equal groups and the size of the update change too (L2.08 section 1.1).
"""

from __future__ import annotations

import torch

from common.options.choices import CONTROLS  # noqa: F401  (offered: the control runs' --reward names)


def shuffle_rewards(
    rewards: torch.Tensor, group_size: int, generator: torch.Generator, *, within_groups: bool
) -> torch.Tensor:
    """rewards (N,), groups of `group_size` adjacent -> (N,) shuffled; draws only from `generator`."""
    n = rewards.numel()
    if within_groups:
        keys = torch.rand(n // group_size, group_size, generator=generator)
        return rewards.view(-1, group_size).gather(1, keys.argsort(dim=1)).view(-1)
    return rewards[torch.randperm(n, generator=generator)]
