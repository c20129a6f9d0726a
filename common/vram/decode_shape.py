"""The fast decoder's static shapes: how many rows and cache slots a rollout's decoder holds.

Plain arithmetic (no torch), shared by the decoder itself (common.decode.fast_decode allocates exactly this)
and the VRAM ledger (common.vram.ledger counts it), so the two can never disagree.
"""

from __future__ import annotations

import math

BATCH_BUCKET = 16  # rows are padded up to a multiple of this
LEN_BUCKET = 128  # cache slots are padded up to a multiple of this
STEPS_PER_GRAPH = 16  # decode steps captured in one CUDA graph


def bucket(n: int, size: int) -> int:
    """n rounded up to a multiple of size (at least one bucket)."""
    return max(size, math.ceil(n / size) * size)


def static_shape(
    batch: int,
    prompt_len: int,
    max_new_tokens: int,
    steps_per_graph: int = STEPS_PER_GRAPH,
    batch_bucket: int = BATCH_BUCKET,
    len_bucket: int = LEN_BUCKET,
) -> tuple[int, int]:
    """(rows, cache slots) of the StaticDecoder that serves `batch` prompts of `prompt_len` tokens.

    The decoder runs whole graphs of `steps_per_graph` steps after the prefill token, so the cache
    must hold prompt + 1 + ceil((max_new_tokens - 1) / steps_per_graph) * steps_per_graph + 1 slots.
    """
    steps = 1 + math.ceil(max(max_new_tokens - 1, 0) / steps_per_graph) * steps_per_graph
    return bucket(batch, batch_bucket), bucket(prompt_len + steps + 1, len_bucket)
