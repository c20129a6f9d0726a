"""The rollout batch: prompts padded on the left, completions cut at each row's first EOS.

    ids, mask = left_pad(prompt_token_lists, pad_token_id, device)
    ro = finish_rollout(ids, mask, raw_completions, eos_token_ids, pad_token_id)   # -> Rollout
    ro.sequences, ro.attention_mask, ro.position_ids   # the training forward's inputs

Every sampler returns this `Rollout`: the eager and fast paths of `common.decode.rollout.generate`
and the inference engine (`common.decode.vllm_rollout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """The result of `generate`; all tensors on the model's device.

    prompt_ids (B, Tp) long, left-padded with pad_token_id; prompt_mask (B, Tp) long (1 = real token).
    completion_ids (B, T) long: sampled tokens, pad after the first EOS; T = the longest row (<= max_new_tokens).
    completion_mask (B, T) float32: 1 up to and including the first EOS, 0 after; all ones if truncated
      (same semantics as L2.02 `completion_mask`, never inferred from the pad id).
    lengths (B,) long = completion_mask.sum(1); truncated (B,) bool: no EOS within max_new_tokens.
    engine_logp (B, T) float32 or None: the sampling engine's own log-probs of the sampled tokens
      (0 after the end) when an engine (vLLM, `common.decode.vllm_rollout`) sampled; None when the model did.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    engine_logp: torch.Tensor | None = None

    @property
    def sequences(self) -> torch.Tensor:
        """(B, Tp+T) prompt and completion side by side: the input of the training forward pass."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """(B, Tp+T) long: real prompt tokens and completion tokens up to the first EOS."""
        return torch.cat([self.prompt_mask, self.completion_mask.long()], dim=1)

    @property
    def position_ids(self) -> torch.Tensor:
        """(B, Tp+T) the positions generation used (pads do not count), for an exactly matching forward."""
        return token_positions(self.attention_mask)


def left_pad(
    prompt_ids: Sequence[Sequence[int]], pad_token_id: int, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists of different lengths -> `(ids (B, Tp) long, mask (B, Tp) long)`, padded on the left."""
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids 是空的：至少要有一个 prompt")
    rows = [list(map(int, p)) for p in prompt_ids]
    if any(len(r) == 0 for r in rows):
        raise ValueError("prompt_ids 里有空的 prompt（0 个 token）：每个 prompt 至少要有一个 token")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def token_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token counting only real ones; pads get 1 (as HF generate does; they are masked anyway)."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def finish_rollout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
) -> Rollout:
    """Masks, lengths and truncation from raw completions (B, T') of any backend; trims all-pad tail columns.

    Everything after a row's first EOS is overwritten with pad, so backends may leave anything there.
    """
    eos = torch.tensor(list(eos_token_ids), device=completion_ids.device)
    is_eos = torch.isin(completion_ids, eos)
    # eos_before[t] = some EOS strictly before t  ->  the token at t is past the end of the row
    eos_before = (is_eos.long().cumsum(1) - is_eos.long()) > 0
    completion_mask = (~eos_before).float()
    completion_ids = completion_ids.masked_fill(eos_before, pad_token_id)
    lengths = completion_mask.sum(1).long()
    truncated = ~is_eos.any(1)
    width = max(int(lengths.max()), 1)
    return Rollout(
        prompt_ids,
        prompt_mask,
        completion_ids[:, :width].contiguous(),
        completion_mask[:, :width].contiguous(),
        lengths,
        truncated,
    )
