"""The training run's independent random streams: which prompts, how answers are sampled, the control.

    streams = random_streams(seed, device)   # {"prompts": ..., "sample": ..., "control": ...}
    torch.randperm(n, generator=streams["prompts"])

A run and its control (``--reward shuffled``) must see the same prompts at every step, whatever
their answers were. With one generator for everything, the number of random draws spent on sampling
(which depends on the answers) would shift every later prompt draw. So each job gets its own
generator, each seeded from ``seed`` through numpy's ``SeedSequence`` (independent streams, not
``seed``, ``seed + 1``, ...):

* ``prompts``: a CPU generator, so the prompt order is also the same on a CPU and on a GPU;
* ``sample``: on the model's device, for sampling on paths that take a generator (the eager path;
  the CUDA fast path samples with the global CUDA generator, seeded by ``torch.manual_seed``);
* ``control``: a CPU generator for the control's reward shuffle; the run itself never draws from it.

The checkpoint stores all three (``common.run.checkpoint``), so a resumed run keeps every stream.
"""

from __future__ import annotations

import numpy as np
import torch

STREAMS = ("prompts", "sample", "control")
_ON_DEVICE = {"sample"}  # the others stay on the CPU whatever the device


def stream_seeds(seed: int) -> dict[str, int]:
    """One 64-bit seed per stream, derived from ``seed`` (deterministic, independent streams)."""
    states = np.random.SeedSequence(seed).generate_state(len(STREAMS), dtype=np.uint64)
    return {name: int(s) for name, s in zip(STREAMS, states)}


def random_streams(seed: int, device: torch.device | str = "cpu") -> dict[str, torch.Generator]:
    """``{"prompts", "sample", "control"}``: seeded generators (see the module docstring)."""
    return {
        name: torch.Generator(device=device if name in _ON_DEVICE else "cpu").manual_seed(s)
        for name, s in stream_seeds(seed).items()
    }
