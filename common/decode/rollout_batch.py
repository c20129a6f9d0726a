"""The rollout batch: prompts padded on the left, completions cut at each row's first EOS.

    ids, mask = left_pad(prompt_token_lists, pad_token_id, device)
    ro = finish_rollout(ids, mask, raw_completions, eos_token_ids, pad_token_id)   # -> Rollout
    ro.sequences, ro.attention_mask, ro.position_ids   # the training forward's inputs
    ro = concat_rollouts([ro_a, ro_b], pad_token_id)   # the draws of one step, in draw order
    ro.take(rows)                                      # some rows of it (dynamic sampling, L2.10)

Every sampler returns this `Rollout`: the eager and fast paths of `common.decode.rollout.generate`
and the inference engine (`common.decode.vllm_rollout`).
"""

from __future__ import annotations

import dataclasses
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

    def take(self, rows: torch.Tensor) -> Rollout:
        """The rows `rows` (1-D int64 indices, any order), as a Rollout of their own."""
        idx = rows.to(self.completion_ids.device)
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        fields = (getattr(self, f.name) for f in dataclasses.fields(self))
        return Rollout(*(pick(t) for t in fields))

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


def concat_rollouts(rollouts: Sequence[Rollout], pad_token_id: int) -> Rollout:
    """Rollouts of the same run stacked row-wise, in order -> one Rollout.

    Prompts are left-padded and completions right-padded to the widest (pad_token_id, mask 0,
    engine_logp 0 where a row had no token), so each row's tokens, positions and masks are unchanged.
    One rollout comes back as it is. All of them have engine_logp, or none.
    """
    if len(rollouts) == 1:
        return rollouts[0]
    tp = max(r.prompt_ids.shape[1] for r in rollouts)
    t = max(r.completion_ids.shape[1] for r in rollouts)

    def stack(name, width, value, left):
        parts = []
        for r in rollouts:
            x = getattr(r, name)
            gap = width - x.shape[1]
            parts.append(torch.nn.functional.pad(x, (gap, 0) if left else (0, gap), value=value))
        return torch.cat(parts)

    logp = [r.engine_logp is None for r in rollouts]
    if any(logp) and not all(logp):
        raise ValueError(
            "有的 rollout 带 engine_logp、有的不带：不能拼在一起（同一次运行只用一种采样）"
        )
    return Rollout(
        stack("prompt_ids", tp, pad_token_id, True),
        stack("prompt_mask", tp, 0, True),
        stack("completion_ids", t, pad_token_id, False),
        stack("completion_mask", t, 0, False),
        torch.cat([r.lengths for r in rollouts]),
        torch.cat([r.truncated for r in rollouts]),
        None if all(logp) else stack("engine_logp", t, 0.0, False),
    )
