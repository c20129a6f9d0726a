"""Fast GPU decoding for a HF Qwen3 model: static KV cache + compiled layer step + CUDA graphs.

This is the "why vLLM exists" path of L2.06. Each trick removes one kind of waste from the eager loop:

1. **Static KV cache** (``StaticDecoder.k/v``: one ``(B, kv_heads, S, head_dim)`` buffer per layer). The
   eager path grows a cache with ``torch.cat`` every token (allocation + copy); here the new key is
   written in place at slot ``t`` and every tensor keeps one address for the whole generation.
2. **One compiled layer step** (``torch.compile`` of ``_layer_step``). All 28 layers have the same shapes,
   so one compilation serves them all; inductor fuses RMSNorm, RoPE, the masked softmax and SiLU·up
   into a handful of kernels instead of dozens of tiny ones.
3. **CUDA graphs over several tokens.** ``steps_per_graph`` whole decode steps (all layers, lm_head,
   sampling, EOS bookkeeping) are captured once and replayed with one launch; Python and kernel-launch
   overhead, which dominates a 0.6B model at batch 64, disappears.
4. **Sampling on the GPU, inside the graph.** Gumbel-max (``argmax(logits - log(Exp(1)))``) samples
   exactly from ``softmax(logits)`` without ``torch.multinomial``'s host sync.
5. **Bucketed shapes.** Batch and cache length are rounded up to buckets, so a run compiles and
   captures once per bucket rather than once per step; the host checks "all rows finished" once per
   graph replay and exits early.
6. **Rollout-only memory is not held.** The static KV cache, the bf16 weight copies and the graphs'
   memory pools are needed only while generating. ``fast_generate`` frees them before it returns
   (``release=True``), so the training step that follows has that memory; the next rollout allocates
   them again and re-captures its graph (one warm-up plus a capture, no recompilation).

The prefill runs through the HF model itself (variable prompt lengths, once per rollout) and its cache
is copied into the static buffers. The decoder reads the model's parameter tensors directly, so
in-place optimizer updates are visible to the next rollout with no weight copy ("weight sync" for free).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from common.decode_shape import BATCH_BUCKET, LEN_BUCKET, STEPS_PER_GRAPH, static_shape


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # Same arithmetic as HF Qwen3RMSNorm: normalise in fp32, cast back, then scale.
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _layer_step(
    h,
    ln1,
    wq,
    wk,
    wv,
    wo,
    qn,
    kn,
    ln2,
    wg,
    wu,
    wd,
    kc,
    vc,
    slot,
    cos,
    sin,
    valid,
    eps: float,
    scale: float,
    attention: str = "reduce",
):
    """One decoder layer for one new token per row.

    h (B, D); kc/vc (B, KV, S, hd) written in place at ``slot`` (a (1,) long tensor);
    cos/sin (B, 1, hd); valid (B, S) bool — which cache slots this row may attend to.
    ``attention``: "einsum" (batched matmuls: with 2 query heads per kv head they are (2 × hd)·(hd × S)
    products that cuBLAS runs far below bandwidth) or "reduce" (the same sums written as multiply +
    sum, which inductor fuses into reductions that read the cache once; fp32 accumulation either way).
    """
    B = h.shape[0]
    KV, hd = kc.shape[1], kc.shape[3]
    x = _rms(h, ln1, eps)
    q = _rms(F.linear(x, wq).view(B, -1, hd), qn, eps)  # (B, H, hd)
    k = _rms(F.linear(x, wk).view(B, KV, hd), kn, eps)  # (B, KV, hd)
    v = F.linear(x, wv).view(B, KV, hd)
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    kc.index_copy_(2, slot, k.unsqueeze(2))
    vc.index_copy_(2, slot, v.unsqueeze(2))
    if attention == "sdpa":  # PyTorch's fused attention kernel; True in the mask = may attend
        attn = F.scaled_dot_product_attention(
            q.unsqueeze(2), kc, vc, attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=True
        ).reshape(B, -1)
        h = h + F.linear(attn, wo)
        x = _rms(h, ln2, eps)
        return h + F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
    qg = q.view(B, KV, -1, hd)  # grouped-query attention: G query heads share one kv head
    if attention == "einsum":
        scores = torch.einsum("bkgd,bksd->bkgs", qg, kc).float() * scale
    else:  # (B, KV, G, 1, hd) * (B, KV, 1, S, hd) summed over hd, in fp32
        scores = (qg.float().unsqueeze(3) * kc.float().unsqueeze(2)).sum(-1) * scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if attention == "einsum":
        attn = torch.einsum("bkgs,bksd->bkgd", probs.to(h.dtype), vc)
    else:  # (B, KV, G, S, 1) * (B, KV, 1, S, hd) summed over S, in fp32
        attn = (probs.unsqueeze(-1) * vc.float().unsqueeze(2)).sum(3).to(h.dtype)
    attn = attn.reshape(B, -1)
    h = h + F.linear(attn, wo)
    x = _rms(h, ln2, eps)
    return h + F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)


# Default attention of the decode step (see `_layer_step`), chosen by L2.06's bench_rollout.py on the H200.
ATTENTION = "einsum"
# Bucket sizes (trick 5) and tokens per captured graph (trick 3) live in common.decode_shape: the VRAM
# ledger (common.vram.ledger) sizes the resident decoder with the same `static_shape`.


def _base_model(model):
    """The HF Qwen3ForCausalLM inside a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class DecodeWeights:
    """The decode-time weights of a model in one dtype, shared by all decoders of that model.

    A plain linear whose parameter already has the decode dtype is used as is (zero copy: in-place
    optimizer updates are seen at once). Otherwise — fp32 master weights decoded in bf16, or a LoRA
    layer whose decode weight is W + scaling * B @ A — a copy is made from the live parameters by
    `sync()` before every generation: a tiny "weight sync" (L3 scales this up). The copies are
    rollout-only memory: `release()` frees them (the next `sync()` makes them again, same cost as a
    sync), and `version` changes whenever they move, so a CUDA graph captured on old copies is redone.
    """

    def __init__(self, model, dtype: torch.dtype):
        self.dtype, self.version = dtype, 0
        self._device = next(model.parameters()).device
        self.flat: torch.Tensor | None = None  # the one buffer the copies view
        self._sources: list[Callable[[], torch.Tensor]] = []  # one per copy, in creation order
        self._copies: list[torch.Tensor] | None = None
        seen: dict[int, object] = {}

        def w(module_or_param):
            """A zero-copy tensor, or the index (int) of a copy made by `sync()`."""
            lora = hasattr(module_or_param, "lora_A") and module_or_param.active_adapters
            t = (
                module_or_param.base_layer.weight
                if lora
                else getattr(module_or_param, "weight", module_or_param)
            )
            if not lora and t.dtype == dtype:
                return t.detach()
            if id(module_or_param) not in seen:  # tied embedding / lm_head: one copy
                src = (
                    (lambda m=module_or_param: _merged_lora(m))
                    if lora
                    else (lambda t=t: t.detach())
                )
                seen[id(module_or_param)] = len(self._sources)
                self._sources.append(src)
            return seen[id(module_or_param)]

        m = _base_model(model)
        self._layers = [
            tuple(
                w(x)
                for x in (
                    l.input_layernorm.weight,
                    l.self_attn.q_proj,
                    l.self_attn.k_proj,
                    l.self_attn.v_proj,
                    l.self_attn.o_proj,
                    l.self_attn.q_norm.weight,
                    l.self_attn.k_norm.weight,
                    l.post_attention_layernorm.weight,
                    l.mlp.gate_proj,
                    l.mlp.up_proj,
                    l.mlp.down_proj,
                )
            )
            for l in m.model.layers
        ]
        tied = m.lm_head.weight is m.model.embed_tokens.weight
        self._embed, self._norm = w(m.model.embed_tokens.weight), w(m.model.norm.weight)
        self._lm_head = self._embed if tied else w(m.lm_head)
        self.sync()

    def _get(self, ref) -> torch.Tensor:
        return self._copies[ref] if isinstance(ref, int) else ref

    @property
    def layers(self) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(self._get(r) for r in layer) for layer in self._layers]

    @property
    def embed(self) -> torch.Tensor:
        return self._get(self._embed)

    @property
    def norm(self) -> torch.Tensor:
        return self._get(self._norm)

    @property
    def lm_head(self) -> torch.Tensor:
        return self._get(self._lm_head)

    @property
    def nbytes(self) -> int:
        """Bytes held by the copies right now (0 after `release()` or when every weight is zero-copy)."""
        return 0 if self.flat is None else self.flat.numel() * self.flat.element_size()

    @torch.no_grad()
    def sync(self) -> None:
        """Refresh the copies from the live parameters (in place, same addresses), or make them anew."""
        if self._copies is None:
            # one buffer for all copies (like the KV cache): between rollouts it can host large gradients
            srcs = [src() for src in self._sources]
            flat = torch.empty(sum(t.numel() for t in srcs), dtype=self.dtype, device=self._device)
            self._copies, offset = [], 0
            for t in srcs:
                self._copies.append(flat[offset : offset + t.numel()].view(t.shape).copy_(t))
                offset += t.numel()
            self.flat = flat
            self.version += 1
        else:
            for src, dst in zip(self._sources, self._copies):
                dst.copy_(src())

    def release(self) -> None:
        """Free the copies (zero-copy weights are the model's own and stay)."""
        if self._copies:
            self._copies = self.flat = None


@torch.no_grad()
def _merged_lora(layer) -> torch.Tensor:
    """W + sum over active adapters of scaling * B @ A (what peft's merge would write), in W's dtype."""
    w = layer.base_layer.weight.float()
    for name in layer.active_adapters:
        w = w + layer.scaling[name] * (
            layer.lora_B[name].weight.float() @ layer.lora_A[name].weight.float()
        )
    return w


# Per-model caches, kept outside the module so that copy.deepcopy(model) (e.g. a reference model) never
# copies decode buffers or CUDA graphs along with it.
_WEIGHTS: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()
_DECODERS: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()


def decode_weights(model, dtype: torch.dtype) -> DecodeWeights:
    """The model's shared `DecodeWeights` for ``dtype`` (built on first use)."""
    cache = _WEIGHTS.setdefault(model, {})
    if dtype not in cache:
        cache[dtype] = DecodeWeights(model, dtype)
    return cache[dtype]


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked. Each distinct value gets its own captured graph (same decode state)."""

    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    # (B, V) logits, temperature, top_p -> (B, V); traceable torch
    process_logits: Callable | None = None


class StaticDecoder:
    """Decode state for one shape bucket (batch, cache length) plus one CUDA graph per `Sampling`.

    Greedy evaluation and sampled rollouts of the same bucket share the KV buffers and weight copies,
    so the cache memory is paid once. See the module docstring for the tricks.
    The static KV cache is rollout-only memory: `release()` frees it together with the captured
    graphs (their private memory pools too); the next `generate` allocates it again and re-captures
    (no recompilation: the compiled layer step is kept).
    """

    def __init__(
        self,
        model,
        batch: int,
        cache_len: int,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        steps_per_graph: int = STEPS_PER_GRAPH,
        compile: bool = True,
        dtype: torch.dtype | None = None,
        attention: str | None = None,
    ):
        cfg = model.config
        dev, dt = model.device, dtype or model.dtype
        model = _base_model(model)
        self.model, self.k_steps = model, steps_per_graph
        self.eps, self.scale = cfg.rms_norm_eps, cfg.head_dim**-0.5
        self.pad = pad_token_id
        B, S, KV, hd = batch, cache_len, cfg.num_key_value_heads, cfg.head_dim
        self.batch, self.cache_len = B, S
        self.weights = decode_weights(model, dt)
        self.kv_shape, self.n_layers, self.dtype = (B, KV, S, hd), cfg.num_hidden_layers, dt
        self.k: list[torch.Tensor] | None = None  # static KV cache, made by _allocate()
        self.v: list[torch.Tensor] | None = None
        self.kv_flat: torch.Tensor | None = None  # the one buffer that self.k and self.v view
        pos = torch.arange(S, device=dev)[None]
        cos, sin = model.model.rotary_emb(torch.zeros(1, device=dev, dtype=dt), pos)
        # (S, hd), computed exactly as the HF forward does
        self.cos_table, self.sin_table = (
            cos[0],
            sin[0],
        )
        # Per-row decode state; every tensor keeps its address so a captured graph can replay on it.
        self.token = torch.full((B,), pad_token_id, device=dev, dtype=torch.long)
        self.pos = torch.zeros(B, device=dev, dtype=torch.long)  # RoPE position of `token`
        self.slot = torch.zeros(1, device=dev, dtype=torch.long)  # cache column of `token`
        self.valid = torch.zeros(B, S, device=dev, dtype=torch.bool)
        self.done = torch.zeros(B, device=dev, dtype=torch.bool)
        self.eos = torch.tensor(list(eos_token_ids) or [-1], device=dev, dtype=torch.long)
        # generated tokens by column
        self.out = torch.full((B, S), pad_token_id, device=dev, dtype=torch.long)
        self.attention = attention or ATTENTION
        if self.attention not in ("reduce", "einsum", "sdpa"):
            raise ValueError(f"attention={attention!r}：只能是 einsum、reduce 或 sdpa")
        self.layer_fn = (
            torch.compile(_layer_step, dynamic=False, fullgraph=True) if compile else _layer_step
        )
        self.graphs: dict[Sampling, torch.cuda.CUDAGraph] = {}
        self.graph_version = None  # DecodeWeights.version the graphs were captured on
        self.captures = 0  # how many graphs were captured so far (re-captures after release() too)

    # the decode weights (shared `DecodeWeights`; copies may be re-made after a release)
    layers = property(lambda self: self.weights.layers)
    embed = property(lambda self: self.weights.embed)
    norm = property(lambda self: self.weights.norm)
    lm_head = property(lambda self: self.weights.lm_head)

    def _allocate(self) -> None:
        # One allocation for the whole cache, viewed per layer: a single contiguous buffer can later
        # host even the largest gradient (the embedding's) while no rollout is running.
        n, layers = math.prod(self.kv_shape), self.n_layers
        self.kv_flat = torch.zeros(2 * layers * n, device=self.token.device, dtype=self.dtype)
        views = [self.kv_flat[i * n : (i + 1) * n].view(self.kv_shape) for i in range(2 * layers)]
        self.k, self.v = views[:layers], views[layers:]

    @property
    def nbytes(self) -> int:
        """Bytes of the static KV cache right now (0 after `release()`)."""
        kv = self.kv_flat
        return 0 if kv is None else kv.numel() * kv.element_size()

    def release(self) -> None:
        """Free the static KV cache and the CUDA graphs (graphs point at the freed addresses)."""
        self.k = self.v = self.kv_flat = None
        self.graphs.clear()

    # -- one token for every row ------------------------------------------------------------------
    @staticmethod
    def sample(logits: torch.Tensor, how: Sampling) -> torch.Tensor:
        """(B, V) logits -> (B,) token ids. Greedy, or Gumbel-max over the processed logits."""
        if how.greedy:
            return logits.argmax(-1)
        if how.process_logits is not None:
            logits = how.process_logits(logits, how.temperature, how.top_p)
        else:
            logits = logits / how.temperature
        noise = torch.empty_like(logits).exponential_(1.0)
        return (logits - noise.log()).argmax(-1)

    def _emit(self, nxt: torch.Tensor) -> None:
        """Record ``nxt`` as the token at cache column ``slot``; finished rows emit pad; mark EOS rows done."""
        nxt = torch.where(self.done, torch.full_like(nxt, self.pad), nxt)
        self.out.index_copy_(1, self.slot, nxt[:, None])
        self.done |= torch.isin(nxt, self.eos)
        self.token.copy_(nxt)

    def _step(self, how: Sampling) -> None:
        """Feed ``token`` (at column ``slot``, position ``pos``) through the model and emit the next one."""
        self.valid.index_fill_(1, self.slot, True)  # the new token attends to itself
        W = self.weights
        h = F.embedding(self.token, W.embed)
        cos, sin = self.cos_table[self.pos][:, None], self.sin_table[self.pos][:, None]
        for w, kc, vc in zip(W.layers, self.k, self.v):
            h = self.layer_fn(
                h, *w, kc, vc, self.slot, cos, sin, self.valid, self.eps, self.scale, self.attention
            )
        logits = F.linear(_rms(h, W.norm, self.eps), W.lm_head).float()
        nxt = self.sample(logits, how)
        self.slot += 1
        self.pos += 1
        self._emit(nxt)

    def _run(self, how: Sampling) -> None:
        # the decode dtype is explicit; autocast must not re-cast it
        with torch.autocast("cuda", enabled=False):
            for _ in range(self.k_steps):
                self._step(how)

    def sync_weights(self) -> None:
        self.weights.sync()

    def capture(self, how: Sampling) -> None:
        """Warm up (this compiles) on a side stream, then capture ``steps_per_graph`` steps as one CUDA graph."""
        self.valid[:, 0] = True  # capture runs on whatever state is there: keep softmax rows finite
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(
                2 if self.captures == 0 else 1
            ):  # compiled already: one warm-up is enough
                self.slot.zero_()
                self._run(how)
        torch.cuda.current_stream().wait_stream(side)
        self.slot.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._run(how)
        self.graphs[how] = graph
        self.captures += 1

    # -- a whole generation -------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        max_new_tokens: int,
        how: Sampling,
        cuda_graph: bool = True,
    ) -> torch.Tensor:
        """prompt_ids/prompt_mask (b, Tp) left-padded, b <= bucket batch -> (b, max_new_tokens), pad after EOS."""
        b, tp = prompt_ids.shape
        self.sync_weights()  # after a release this makes the copies anew (new addresses, new version)
        if self.graph_version != self.weights.version:
            self.graphs.clear()  # captured on weight copies that no longer exist
            self.graph_version = self.weights.version
        if self.k is None:
            self._allocate()
        if cuda_graph and how not in self.graphs:
            self.capture(how)
        mask = prompt_mask.bool()
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        # HF prefill. Under an outer autocast with fp32 master weights, autocast would cache a bf16 copy of
        # every weight until that region ends (the whole rollout): cache off, each cast lives one matmul.
        no_cache = contextlib.nullcontext()
        if torch.is_autocast_enabled("cuda"):
            no_cache = torch.autocast("cuda", torch.get_autocast_dtype("cuda"), cache_enabled=False)
        with no_cache:
            out = self.model(
                input_ids=prompt_ids,
                attention_mask=mask.long(),
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
            )
        for i, (kc, vc) in enumerate(zip(self.k, self.v)):
            kc.zero_()
            vc.zero_()
            kc[:b, :, :tp].copy_(out.past_key_values.layers[i].keys)
            vc[:b, :, :tp].copy_(out.past_key_values.layers[i].values)
        first = self.sample(out.logits[:, -1].float(), how)
        del out
        self.valid.zero_()
        self.valid[:b, :tp] = mask
        # filler rows of the bucket attend to one dummy slot (no NaN) and are done
        self.valid[b:, 0] = True
        self.done.zero_()
        self.done[b:] = True
        self.pos.zero_()
        self.pos[:b] = positions[:, -1] + 1
        self.slot.fill_(tp)
        self.out.fill_(self.pad)
        self.token.fill_(self.pad)
        self.token[:b] = first
        self._emit(self.token.clone())
        emitted = 1
        while emitted < max_new_tokens:
            if cuda_graph:
                self.graphs[how].replay()
            else:
                self._run(how)
            emitted += self.k_steps
            # one host sync per replay: early exit once every row hit EOS
            if bool(self.done[:b].all()):
                break
        return self.out[:b, tp : tp + max_new_tokens].clone()


def fast_generate(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    process_logits: Callable | None = None,
    steps_per_graph: int = STEPS_PER_GRAPH,
    cuda_graph: bool = True,
    compile: bool = True,
    batch_bucket: int = BATCH_BUCKET,
    len_bucket: int = LEN_BUCKET,
    dtype: torch.dtype | None = None,
    attention: str | None = None,
    release: bool = False,
) -> torch.Tensor:
    """Generate with the model's cached ``StaticDecoder`` for this shape bucket.

    prompt_ids/prompt_mask: (b, Tp) left-padded on the model's CUDA device. Returns (b, max_new_tokens)
    token ids, pad after each row's first EOS. The first call of a bucket (and of a sampling setting)
    compiles and captures (seconds); later calls only replay.
    ``dtype``: decode dtype; default: the autocast dtype if CUDA autocast is on (fp32 master weights trained
    under bf16 autocast decode in bf16), else the model's dtype.
    ``attention``: "reduce" (default when compiled) or "einsum" (see `_layer_step`).
    ``release``: free the rollout-only memory (static KV caches, weight copies, CUDA graphs) before
    returning; the next call makes it again and re-captures its graph (no recompilation, but a
    warm-up and a capture: measured in L2.06). The default keeps it, and the training step borrows
    it instead (`host_gradients`).
    """
    if not prompt_ids.is_cuda:
        raise ValueError("fast_generate 只在 CUDA 上可用；CPU 上请用 common.rollout 的 eager 路径")
    if dtype is None:
        dtype = (
            torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else model.dtype
        )
    b, tp = prompt_ids.shape
    key = (
        *static_shape(b, tp, max_new_tokens, steps_per_graph, batch_bucket, len_bucket),
        tuple(eos_token_ids),
        pad_token_id,
        steps_per_graph,
        compile,
        dtype,
        attention,
    )
    cache = _DECODERS.setdefault(model, {})
    if key not in cache:
        cache[key] = StaticDecoder(
            model,
            key[0],
            key[1],
            eos_token_ids,
            pad_token_id,
            steps_per_graph,
            compile,
            dtype,
            attention,
        )
    how = Sampling(greedy, float(temperature), float(top_p), None if greedy else process_logits)
    out = cache[key].generate(prompt_ids, prompt_mask, max_new_tokens, how, cuda_graph)
    if release:
        free_rollout_memory(model)
    return out


def free_rollout_memory(model) -> None:
    """Free what only the rollout uses: every decoder's static KV cache and graphs, and the decode-weight
    copies. Compiled code and the small per-row state stay, so the next generation only re-allocates."""
    for decoder in _DECODERS.get(model, {}).values():
        decoder.release()
    for weights in _WEIGHTS.get(_base_model(model), {}).values():
        weights.release()


def rollout_buffers(model) -> list[torch.Tensor]:
    """The tensors that only the rollout needs, at fixed addresses: every decoder's static KV cache and
    the decode-weight copies (empty before the first fast generation and after `free_rollout_memory`)."""
    kv = [d.kv_flat for d in _DECODERS.get(model, {}).values() if d.kv_flat is not None]
    copies = [w.flat for w in _WEIGHTS.get(_base_model(model), {}).values() if w.flat is not None]
    return kv + copies


def host_gradients(params, buffers: Sequence[torch.Tensor], align: int = 256) -> int:
    """Lend rollout-only memory to the gradients: give each parameter (in order, as long as room is
    left) a zeroed ``.grad`` that is a view into ``buffers``; backward then accumulates into it in place.

    Between the end of a rollout and the next one, the KV cache and the decode-weight copies hold
    nothing anyone reads (the next generation rewrites the cache from the prompt and re-syncs the
    copies), yet they must keep their addresses for the captured CUDA graphs. Gradients live exactly
    in that window (created by backward, dropped by ``zero_grad(set_to_none=True)``), so they can use
    it. Call after the rollout, before the first backward of the step; never generate while these
    gradients are still needed. Parameters that get no room keep ordinary gradients. Returns the bytes
    hosted.
    """
    pools = [b.view(-1).view(torch.uint8) for b in buffers if b.is_contiguous() and b.numel()]
    used = [0] * len(pools)  # bytes handed out from each buffer so far
    hosted = 0
    for p in params:
        if not p.requires_grad or p.grad is not None:
            continue
        need = p.numel() * p.element_size()
        for i, pool in enumerate(pools):  # first fit
            if pool.device == p.device and used[i] + need <= pool.numel():
                view = pool[used[i] : used[i] + need].view(p.dtype).view(p.shape)
                p.grad = view.zero_()
                used[i] += -(-need // align) * align
                hosted += need
                break
    return hosted


def rollout_memory_bytes(model) -> int:
    """Bytes the fast decoders of ``model`` hold right now (static KV caches + decode-weight copies)."""
    kv = sum(d.nbytes for d in _DECODERS.get(model, {}).values())
    return kv + sum(w.nbytes for w in _WEIGHTS.get(_base_model(model), {}).values())


def supports_fast_decode(model) -> bool:
    """True for a HF Qwen3 causal LM (plain or peft LoRA: adapters are merged into the decode weights) on CUDA."""
    return (
        getattr(getattr(model, "config", None), "model_type", None) == "qwen3"
        and next(model.parameters()).is_cuda
    )


def release_fast_decoders(model) -> None:
    """Drop cached decoders (their KV buffers, weight copies and graph pools), e.g. before loading another model."""
    _DECODERS.pop(model, None)
    _WEIGHTS.pop(_base_model(model), None)
    torch.cuda.empty_cache()
