"""Rollout: batched generation from a causal LM with a KV cache, left padding and a per-row EOS stop.

    out = generate(model, prompt_ids, max_new_tokens=40, eos_token_ids=preset.eos_token_ids,
                   pad_token_id=preset.pad_token_id, temperature=1.0,
                   process_logits=process_logits, generator=gen)  # e.g. L2.06's process_logits
    out.completion_ids  # (B, T): pad after each row's first EOS
    out.completion_mask # (B, T) float: 1 up to and including the first EOS (all ones if truncated)

How it works: `left_pad`, a decoder, `finish_rollout` (both from common.decode.rollout_batch).
The decoder is the "correct path" (`common.decode.eager_decode`, steps 2-4) or the fast GPU path
(`common.decode.fast_decode`), the same `generate` with another backend:
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

import torch

from common.decode.eager_decode import eager_generate
from common.decode.fast_decode import (
    fast_generate,
    host_gradients,
    rollout_buffers,
    supports_fast_decode,
)
from common.decode.rollout_batch import (  # noqa: F401  concat_rollouts: handed on, so the
    Rollout,  # training script takes all of decoding from this one module
    concat_rollouts,
    finish_rollout,
    left_pad,
)
from common.decode.vllm_rollout import training_engine


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

    backend: "eager" (this file, any device), "fast" (`common.decode.fast_decode`: static cache + compiled step +
    CUDA graphs, sampling on the GPU with the global CUDA RNG, so `generator` is not used), or "auto" =
    fast when `common.decode.fast_decode.supports_fast_decode(model)` (a Qwen2 / Qwen2.5 / Qwen3 model, plain
    or peft LoRA, on CUDA, no sliding window), eager otherwise (CPU, other families). "fast" on a model
    the fast decoder cannot serve raises its reason. Both return the same `Rollout`.
    An inference engine samples through its own `generate` instead (`common.decode.vllm_rollout.VLLMEngine`).
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
    fast = backend == "fast" or (backend == "auto" and supports_fast_decode(model))

    def pick(logits: torch.Tensor) -> torch.Tensor:  # (B, V) float32 -> (B,) long
        if greedy:
            return logits.argmax(-1)
        probs = process_logits(logits, temperature, top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    was_training = model.training
    model.eval()  # eval: no dropout, and HF keeps the KV cache on even with gradient checkpointing enabled
    try:
        if fast:
            tokens = fast_generate(
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
        else:
            tokens = eager_generate(
                model,
                ids,
                mask,
                max_new_tokens=max_new_tokens,
                eos_token_ids=eos_token_ids,
                pad_token_id=pad_token_id,
                pick=pick,
            )
    finally:
        model.train(was_training)
    return finish_rollout(ids, mask, tokens, eos_token_ids, pad_token_id)


def rollout_engine(kind: str, model, **settings):
    """The inference engine that samples the training rollouts -> an engine, or None.

    kind: the config's ``rollout``. "vllm": a vLLM engine
    (`common.decode.vllm_rollout.training_engine`, with ``settings``), which samples with its own
    ``generate`` and reports its own log-probs; the others (auto / eager / fast): None, the policy
    samples with `generate`. Evaluation always samples with the policy.
    """
    if kind != "vllm":
        return None
    return training_engine(model, **settings)


def lend_rollout_memory_to_gradients(model, params) -> int:
    """On a GPU, put the gradients of ``params`` into the fast decoder's KV cache and weight copies,
    which lie unused between two rollouts (`common.decode.fast_decode.host_gradients`): the training
    step needs no memory of its own for them, and they are gone before the next rollout. Bytes lent;
    0 on a CPU."""
    if not params[0].is_cuda:
        return 0
    return host_gradients(params, rollout_buffers(model))
