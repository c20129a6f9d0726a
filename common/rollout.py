"""Rollout: batched generation from a causal LM with a KV cache, left padding and a per-row EOS stop.

    out = generate(model, prompt_ids, max_new_tokens=40, eos_token_ids=preset.eos_token_ids,
                   pad_token_id=preset.pad_token_id, temperature=1.0,
                   process_logits=process_logits, generator=gen)  # e.g. L2.06's process_logits
    out.completion_ids  # (B, T): pad after each row's first EOS
    out.completion_mask # (B, T) float: 1 up to and including the first EOS (all ones if truncated)

How it works (the "correct path"; a fast GPU path plugs into the same `generate` as another backend):
1. `left_pad`: prompts of different lengths are padded on the LEFT, so every row's last prompt token
   sits in the last column and the next token of every row is produced by the same forward step.
   The attention mask hides the pads; position ids count only real tokens (pads do not shift RoPE).
2. Prefill: one forward over the padded prompts fills the KV cache and gives the first logits.
3. Decode: each step feeds one token per row and reuses the cache (no recomputation of the prefix).
   The sampler turns logits into tokens: greedy = argmax; otherwise the caller's `process_logits`
   (temperature, top-p — the L2.06 exercise function; this library never picks one for you) then
   `torch.multinomial` with an optional seeded generator.
4. A row that emitted any EOS id is finished: it keeps emitting pad, and the loop stops as soon as
   every row is finished or `max_new_tokens` is reached (then the unfinished rows are "truncated").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
      (0 after the end) when an engine (vLLM, `common.vllm_rollout`) sampled; None when the model did.
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
        return _positions(self.attention_mask)


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


def _positions(mask: torch.Tensor) -> torch.Tensor:
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
        self.next_pos = _positions(mask)[:, -1:] + 1  # (B, 1) position of the first new token
        return self._forward(ids, _positions(mask))

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


@torch.no_grad()
def generate(
    model,
    prompt_ids: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    process_logits: Callable | None = None,
    generator: torch.Generator | None = None,
    backend: str = "auto",
) -> Rollout:
    """Sample (or greedily decode) up to `max_new_tokens` tokens for each prompt -> `Rollout`.

    prompt_ids: B lists of token ids (any lengths). Rows stop independently at any of `eos_token_ids`.
    Sampling: `process_logits(logits (B,V), temperature, top_p) -> (B,V)` (required unless greedy: the
    caller picks the L2.06 implementation, solutions' or the learner's), softmax, then `torch.multinomial(..., generator=generator)` — the same generator state gives the same
    rollout. `greedy=True` takes the argmax and ignores temperature/top_p. Runs under no_grad (not
    inference_mode: the returned ids are used later in a forward that needs autograd); the model's
    train/eval mode is restored afterwards.

    backend: "eager" (this file, any device), "fast" (`common.fast_decode`: static cache + compiled step +
    CUDA graphs, sampling on the GPU with the global CUDA RNG, so `generator` is not used), or "auto" =
    fast when `common.fast_decode.supports_fast_decode(model)` (a Qwen2 / Qwen2.5 / Qwen3 model, plain
    or peft LoRA, on CUDA, no sliding window), eager otherwise (CPU, other families). "fast" on a model
    the fast decoder cannot serve raises its reason. Both return the same `Rollout`.
    An inference engine samples through its own `generate` instead (`common.vllm_rollout.VLLMEngine`).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens 必须 >= 1，得到 {max_new_tokens}")
    eos_token_ids = [
        int(e) for e in ([eos_token_ids] if isinstance(eos_token_ids, int) else eos_token_ids)
    ]
    if not eos_token_ids:
        raise ValueError("eos_token_ids 是空的：至少给一个停止 token（如 preset.eos_token_ids）")
    if not greedy and process_logits is None:
        raise ValueError(
            "采样（greedy=False）需要传入 process_logits：L2.06 的函数，例如 "
            "`from solutions.l2_06_sampling import process_logits`（或你自己 exercises/ 里的版本）；"
            "只要 argmax 就传 greedy=True"
        )
    device = next(model.parameters()).device
    ids, mask = left_pad(prompt_ids, pad_token_id, device)
    if backend not in ("auto", "eager", "fast"):
        raise ValueError(f"未知的 backend={backend!r}；可选 auto | eager | fast")
    from common.fast_decode import fast_generate, supports_fast_decode

    fast = backend == "fast" or (backend == "auto" and supports_fast_decode(model))
    eos = torch.tensor(eos_token_ids, device=device)

    def pick(logits: torch.Tensor) -> torch.Tensor:  # (B, V) float32 -> (B,) long
        if greedy:
            return logits.argmax(-1)
        probs = process_logits(logits, temperature, top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    was_training = model.training
    model.eval()  # eval: no dropout, and HF keeps the KV cache on even with gradient checkpointing enabled
    try:
        if fast:
            out = fast_generate(
                model,
                ids,
                mask,
                max_new_tokens=max_new_tokens,
                eos_token_ids=eos_token_ids,
                pad_token_id=pad_token_id,
                temperature=temperature,
                top_p=top_p,
                greedy=greedy,
                process_logits=process_logits,
            )
            return finish_rollout(ids, mask, out, eos_token_ids, pad_token_id)
        decoder = EagerDecoder(model)
        logits = decoder.prefill(ids, mask)
        finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=device)
        tokens = []
        for t in range(max_new_tokens):
            nxt = pick(logits).masked_fill(finished, pad_token_id)  # finished rows emit pad
            tokens.append(nxt)
            finished |= torch.isin(nxt, eos)
            if t == max_new_tokens - 1 or bool(finished.all()):
                break
            logits = decoder.step(nxt)
    finally:
        model.train(was_training)
    return finish_rollout(ids, mask, torch.stack(tokens, dim=1), eos_token_ids, pad_token_id)
