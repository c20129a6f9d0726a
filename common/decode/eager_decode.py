"""Eager decoding: one token at a time with the HF model and its dynamic KV cache (any device).

    tokens = eager_generate(model, ids, mask, max_new_tokens=40, eos_token_ids=[...],
                            pad_token_id=0, pick=sampler)   # (B, T): pad after each row's first EOS

The "correct path" of `common.decode.rollout.generate` (its fast GPU twin:
`common.decode.fast_decode`):
1. Prefill: one forward over the left-padded prompts fills the KV cache and gives the first logits.
2. Decode: each step feeds one token per row and reuses the cache (no recomputation of the prefix).
   ``pick`` turns the logits (B, V) into tokens (B,): greedy or sampled, the caller decides.
3. A row that emitted any EOS id is finished: it keeps emitting pad, and the loop stops as soon as
   every row is finished or ``max_new_tokens`` is reached (then the unfinished rows are "truncated").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from common.decode.rollout_batch import token_positions


class EagerDecoder:
    """One decode step at a time with the HF model and its dynamic KV cache (works on any device).

    `prefill(ids, mask)` and `step(tokens)` both return the next-token logits (B, V) in float32.
    A faster decoder (static cache, compiled step, CUDA graphs) exposes the same two methods.
    """

    def __init__(self, model):
        self.model = model

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.mask = mask
        self.next_pos = token_positions(mask)[:, -1:] + 1  # (B, 1) position of the first new token
        return self._forward(ids, token_positions(mask))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], 1)], dim=1)
        logits = self._forward(tokens[:, None], self.next_pos)
        self.next_pos = self.next_pos + 1
        return logits

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :].float()


def eager_generate(
    model,
    ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    pick: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Up to ``max_new_tokens`` tokens for each left-padded prompt -> (B, T) token ids, T <= max_new_tokens.

    ``pick(logits (B, V) float32) -> (B,) long`` chooses each step's tokens. Call it under no_grad
    with the model in eval mode (`common.decode.rollout.generate` does both).
    """
    eos = torch.tensor(list(eos_token_ids), device=ids.device)
    decoder = EagerDecoder(model)
    logits = decoder.prefill(ids, mask)
    finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    tokens = []
    for t in range(max_new_tokens):
        nxt = pick(logits).masked_fill(finished, pad_token_id)  # finished rows emit pad
        tokens.append(nxt)
        finished |= torch.isin(nxt, eos)
        if t == max_new_tokens - 1 or bool(finished.all()):
            break
        logits = decoder.step(nxt)
    return torch.stack(tokens, dim=1)
