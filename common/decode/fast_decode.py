"""Fast GPU decoding for HF Qwen2 / Qwen2.5 / Qwen3: static KV cache + compiled layer step + CUDA graphs.

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

Two families share one layer step (`_layer_step`, `LayerWeights`): Qwen2/Qwen2.5 add biases to q/k/v;
Qwen3 has none but normalises each head's q and k (RMSNorm) before RoPE. `unsupported_reason` says
why a model is refused (other families, sliding window, DoRA, ...).

Options measured side by side by L2.06's bench_rollout.py (module defaults ATTENTION, FUSED, WINDOW):
the attention written as einsum / reduce / SDPA; ``fused``: q/k/v as one matmul and gate/up as one
(7 matmuls per layer become 4, and each is wider, which a batch of 64 rows needs to fill the GPU);
``window``: attend over the filled front of the static cache (one graph per window) instead of all
its slots.

The prefill runs through the HF model itself (variable prompt lengths, once per rollout) and its cache
is copied into the static buffers. The decoder reads the model's parameter tensors directly, so
in-place optimizer updates are visible to the next rollout with no weight copy ("weight sync" for free).
"""

from __future__ import annotations

import contextlib
import functools
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from common.vram.decode_shape import BATCH_BUCKET, LEN_BUCKET, STEPS_PER_GRAPH, static_shape
from common.vram.decode_shape import bucket as _bucket


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # Same arithmetic as HF Qwen3RMSNorm: normalise in fp32, cast back, then scale.
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LayerWeights(NamedTuple):
    """The decode weights of one decoder layer (Qwen2 or Qwen3), shapes for hidden D, H query heads,
    KV kv heads, head_dim hd, MLP width I.

    qkv: (wq (H*hd, D), wk (KV*hd, D), wv (KV*hd, D)), or one fused ((H + 2 KV)*hd, D) tensor whose rows
    are q | k | v (one matmul instead of three). qkv_bias: the same split of the biases (Qwen2), or
    None (Qwen3). q_norm / k_norm: (hd,) RMSNorm weights (Qwen3), or None (Qwen2). gate_up: (wg (I, D),
    wu (I, D)) or one fused (2I, D). down: (D, I), always last.
    """

    ln1: torch.Tensor
    qkv: tuple[torch.Tensor, ...]
    qkv_bias: tuple[torch.Tensor, ...] | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    ln2: torch.Tensor
    gate_up: tuple[torch.Tensor, ...]
    down: torch.Tensor


def _project(x, weights, biases, sizes):
    """x (B, D) through len(sizes) linear maps -> tuple of (B, size) outputs.

    One fused weight: one matmul, then a split of its output columns (views, no copy)."""
    if len(weights) == 1:
        bias = None if biases is None else biases[0]
        return F.linear(x, weights[0], bias).split(sizes, dim=-1)
    biases = biases or (None,) * len(weights)
    return tuple(F.linear(x, w, b) for w, b in zip(weights, biases))


def _layer_step(
    h,
    w: LayerWeights,
    kc,
    vc,
    slot,
    cos,
    sin,
    valid,
    eps: float,
    scale: float,
    attention: str = "einsum",
    window: int = 0,
):
    """One decoder layer (Qwen2 or Qwen3) for one new token per row.

    h (B, D); kc/vc (B, KV, S, hd) written in place at ``slot`` (a (1,) long tensor);
    cos/sin (B, 1, hd); valid (B, S) bool — which cache slots this row may attend to.
    ``window``: 0 = attend over all S slots; W > 0 = only the first W slots (the caller guarantees
    every slot this step may attend to lies below W), so the attention reads W/S of the cache.
    ``attention``: "einsum" (batched matmuls: with 2 query heads per kv head they are (2 × hd)·(hd × S)
    products that cuBLAS runs far below bandwidth), "reduce" (the same sums written as multiply +
    sum, which inductor fuses into reductions that read the cache once; fp32 accumulation either way)
    or "sdpa" (PyTorch's fused attention with a boolean mask).
    """
    B = h.shape[0]
    KV, hd = kc.shape[1], kc.shape[3]
    x = _rms(h, w.ln1, eps)
    q, k, v = _project(x, w.qkv, w.qkv_bias, (w.o.shape[1], KV * hd, KV * hd))
    q, k, v = q.reshape(B, -1, hd), k.reshape(B, KV, hd), v.reshape(B, KV, hd)
    if w.q_norm is not None:  # Qwen3: RMSNorm over each head's q and k, before RoPE
        q, k = _rms(q, w.q_norm, eps), _rms(k, w.k_norm, eps)
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    kc.index_copy_(2, slot, k.unsqueeze(2))
    vc.index_copy_(2, slot, v.unsqueeze(2))
    if window:  # views of the filled front of the cache: the slots after it are never read
        kc, vc, valid = kc[:, :, :window], vc[:, :, :window], valid[:, :window]
    if attention == "sdpa":  # PyTorch's fused attention kernel; True in the mask = may attend
        attn = F.scaled_dot_product_attention(
            q.unsqueeze(2), kc, vc, attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=True
        ).reshape(B, -1)
    else:
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
    h = h + F.linear(attn, w.o, w.o_bias)
    x = _rms(h, w.ln2, eps)
    inner = w.down.shape[1]
    gate, up = _project(x, w.gate_up, None, (inner, inner))
    return h + F.linear(F.silu(gate) * up, w.down)


# The decoder's defaults, each chosen by L2.06's bench_rollout.py on the GPU (its table says why):
ATTENTION = "einsum"  # attention of the decode step (see `_layer_step`)
FUSED = False  # True: q/k/v in one matmul and gate/up in one (decode weights become copies)
WINDOW = 0  # 0: attend over the whole static cache; W > 0: only its filled front, in multiples of W
# Bucket sizes (trick 5) and tokens per captured graph (trick 3) live in common.vram.decode_shape: the VRAM
# ledger (common.vram.ledger) sizes the resident decoder with the same `static_shape`.
# Model families the decoder implements: Qwen2/Qwen2.5 (q/k/v biases) and Qwen3 (q/k RMSNorm).
FAMILIES = ("qwen2", "qwen3")
# torch.compile keeps one compiled version of `_layer_step` per shape bucket, dtype, attention and
# window; dynamo's default limit (8) would silently fall back to eager after that.
RECOMPILE_LIMIT = 64


def _base_model(model):
    """The HF causal LM inside a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _head_dim(cfg) -> int:
    # Qwen3 configs name it; Qwen2 configs derive it (as HF's Qwen2Attention does)
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def unsupported_reason(model) -> str | None:
    """Why the fast decoder cannot serve ``model`` (one Chinese sentence), or None when it can.

    Checks the config (family, activation, sliding window, RoPE type) and peft adapters (plain LoRA
    is merged into the decode weights; DoRA and LoRA biases are not implemented). Device-independent.
    """
    cfg = getattr(model, "config", None)
    family = getattr(cfg, "model_type", None)
    if family not in FAMILIES:
        return (
            f"model_type={family!r}：快速解码器只实现了 {' / '.join(FAMILIES)}"
            "（Qwen2、Qwen2.5、Qwen3 的 dense 模型）；其它模型请用 backend='eager'"
        )
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act={cfg.hidden_act!r}：快速解码器的 MLP 只实现了 silu"
    if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (
        getattr(cfg, "layer_types", None) or ()
    ):
        return (
            "这个配置打开了 sliding window attention（use_sliding_window=True）：快速解码器的静态 KV cache "
            "只实现了全长 attention。把 config.json 里的 use_sliding_window 改成 false"
            "（Qwen2.5 的官方配置就是 false），或者用 backend='eager'"
        )
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type in ("dynamic", "longrope"):  # their cos/sin depend on the sequence length
        return f"rope_type={rope_type!r}：它的 RoPE 随序列长度变化，快速解码器的 cos/sin 表只算一次"
    for module in _base_model(model).modules():
        if hasattr(module, "lora_A") and _lora_on(module):
            names = module.active_adapters
            if any(getattr(module, "use_dora", {}).get(n, False) for n in names):
                return "这个 peft 模型用了 DoRA：快速解码器只会合并普通 LoRA（W + scaling·B@A）"
            if any(n in module.lora_B and module.lora_B[n].bias is not None for n in names):
                return "这个 peft 模型的 LoRA 带 bias（lora_bias=True）：快速解码器没有实现它的合并"
    return None


def _lora_on(module) -> bool:
    """A peft LoRA layer whose adapters change its output now (active, not merged, not disabled)."""
    return (
        bool(module.active_adapters)
        and not getattr(module, "merged", False)
        and not getattr(module, "disable_adapters", False)
    )


class DecodeWeights:
    """The decode-time weights of a model in one dtype and layout, shared by all its decoders.

    A plain linear whose parameter already has the decode dtype is used as is (zero copy: in-place
    optimizer updates are seen at once). Otherwise — fp32 master weights decoded in bf16, a LoRA
    layer whose decode weight is W + scaling * B @ A, or the fused layout (``fused=True``: q/k/v and
    gate/up stacked row-wise into one matrix each, see `LayerWeights`) — a copy is made from the live
    parameters by `sync()` before every generation: a tiny "weight sync" (L3 scales this up). All
    copies live in one flat buffer; the parts of a fused matrix are adjacent in it, so the fused
    matrix is a view and each part is refreshed in place. The copies are rollout-only memory:
    `release()` frees them (the next `sync()` makes them again, same cost as a sync), and `version`
    changes whenever they move, so a CUDA graph captured on old copies is redone.
    """

    ALIGN = 64  # elements: every copy (or fused group) starts 128-byte aligned in bf16

    def __init__(self, model, dtype: torch.dtype, fused: bool = False):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(reason)
        self.dtype, self.fused, self.version = dtype, fused, 0
        self._device = next(model.parameters()).device
        self.flat: torch.Tensor | None = None  # the one buffer the copies view
        # one entry per copy, in buffer order: (source () -> tensor, shape, aligned start?)
        self._sources: list[tuple[Callable[[], torch.Tensor], torch.Size, bool]] = []
        self._copies: list[torch.Tensor] | None = None
        self._offsets: list[int] = []
        seen: dict[int, object] = {}

        def source(obj):
            """(tensor to read now, its shape) for a parameter, a linear layer or a LoRA layer."""
            if hasattr(obj, "lora_A") and _lora_on(obj):
                return (lambda m=obj: _merged_lora(m)), obj.base_layer.weight.shape
            t = getattr(obj, "base_layer", obj)
            t = getattr(t, "weight", t)
            return (lambda t=t: t.detach()), t.shape

        def copy(obj, aligned=True) -> int:
            src, shape = source(obj)
            self._sources.append((src, shape, aligned))
            return len(self._sources) - 1

        def one(obj):
            """A zero-copy tensor, or the index (int) of a copy made by `sync()`."""
            if not (hasattr(obj, "lora_A") and _lora_on(obj)):
                t = getattr(obj, "base_layer", obj)
                t = getattr(t, "weight", t)
                if t.dtype == dtype:
                    return t.detach()
            if id(obj) not in seen:  # tied embedding / lm_head: one copy
                seen[id(obj)] = copy(obj)
            return seen[id(obj)]

        def group(objs):
            """Zero-copy tensors / copies of each part, or one range of adjacent copies (fused)."""
            if not fused:
                return tuple(one(o) for o in objs)
            first = len(self._sources)
            for i, o in enumerate(objs):
                copy(o, aligned=i == 0)
            return range(first, len(self._sources))

        def biases(linears):
            found = [getattr(getattr(m, "base_layer", m), "bias", None) for m in linears]
            if all(b is None for b in found):
                return None
            if any(b is None for b in found):
                raise ValueError(
                    "q/k/v 投影只有一部分带 bias：快速解码器只支持全有（Qwen2）或全无（Qwen3）"
                )
            return group(found)

        m = _base_model(model)
        self._layers = []
        for layer in m.model.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = (att.q_proj, att.k_proj, att.v_proj)
            o_bias = getattr(getattr(att.o_proj, "base_layer", att.o_proj), "bias", None)
            qn, kn = getattr(att, "q_norm", None), getattr(att, "k_norm", None)
            self._layers.append(
                LayerWeights(
                    ln1=one(layer.input_layernorm.weight),
                    qkv=group(qkv),
                    qkv_bias=biases(qkv),
                    o=one(att.o_proj),
                    o_bias=None if o_bias is None else one(o_bias),
                    q_norm=None if qn is None else one(qn.weight),
                    k_norm=None if kn is None else one(kn.weight),
                    ln2=one(layer.post_attention_layernorm.weight),
                    gate_up=group((mlp.gate_proj, mlp.up_proj)),
                    down=one(mlp.down_proj),
                )
            )
        tied = m.lm_head.weight is m.model.embed_tokens.weight
        self._embed, self._norm = one(m.model.embed_tokens.weight), one(m.model.norm.weight)
        self._lm_head = self._embed if tied else one(m.lm_head)
        self.sync()

    def _get(self, ref):
        if ref is None or isinstance(ref, torch.Tensor):
            return ref
        if isinstance(ref, int):
            return self._copies[ref]
        if isinstance(ref, range):  # a fused group: its adjacent copies seen as one tensor
            last = self._copies[ref.stop - 1]
            begin, end = self._offsets[ref.start], self._offsets[ref.stop - 1] + last.numel()
            return (self.flat[begin:end].view(-1, *last.shape[1:]),)
        return tuple(self._get(r) for r in ref)

    @property
    def layers(self) -> list[LayerWeights]:
        return [LayerWeights(*(self._get(r) for r in layer)) for layer in self._layers]

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
            offsets, end = [], 0
            for _, shape, aligned in self._sources:
                if aligned:
                    end = -(-end // self.ALIGN) * self.ALIGN
                offsets.append(end)
                end += math.prod(shape)
            flat = torch.empty(end, dtype=self.dtype, device=self._device)
            self._copies = [
                flat[o : o + math.prod(shape)].view(shape)
                for o, (_, shape, _) in zip(offsets, self._sources)
            ]
            self.flat, self._offsets = flat, offsets
            self.version += 1
        for (src, _, _), dst in zip(self._sources, self._copies):  # one source tensor at a time
            dst.copy_(src())

    def release(self) -> None:
        """Free the copies (zero-copy weights are the model's own and stay)."""
        if self._copies:
            self._copies = self.flat = None


@torch.no_grad()
def _merged_lora(layer) -> torch.Tensor:
    """W + sum over active adapters of scaling * B @ A (what peft's merge would write), in fp32.

    Read at every sync: with the adapters disabled (peft's ``disable_adapter()``) or already merged
    into W, it is W itself."""
    w = layer.base_layer.weight.float()
    for name in layer.active_adapters if _lora_on(layer) else ():
        if name not in layer.lora_A:  # an adapter that does not touch this layer
            continue
        w = w + layer.scaling[name] * (
            layer.lora_B[name].weight.float() @ layer.lora_A[name].weight.float()
        )
    return w


# Per-model caches, kept outside the module so that copy.deepcopy(model) (e.g. a reference model) never
# copies decode buffers or CUDA graphs along with it.
_WEIGHTS: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()
_DECODERS: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()


def decode_weights(model, dtype: torch.dtype, fused: bool = False) -> DecodeWeights:
    """The model's shared `DecodeWeights` for ``dtype`` and layout (built on first use)."""
    cache = _WEIGHTS.setdefault(model, {})
    if (dtype, fused) not in cache:
        cache[(dtype, fused)] = DecodeWeights(model, dtype, fused)
    return cache[(dtype, fused)]


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked. Each distinct value gets its own captured graph (same decode state)."""

    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    # (B, V) logits, temperature, top_p -> (B, V); traceable torch
    process_logits: Callable | None = None


class StaticDecoder:
    """Decode state for one shape bucket (batch, cache length) plus CUDA graphs per `Sampling`.

    Greedy evaluation and sampled rollouts of the same bucket share the KV buffers and weight copies,
    so the cache memory is paid once. See the module docstring for the tricks.
    With ``window`` W > 0 there is one graph per (sampling, window): a replay whose steps only reach
    slot s attends over the first ``ceil(s / W) * W`` slots, not all S. All graphs of a decoder share
    one memory pool (each replay leaves nothing alive in it).
    The static KV cache is rollout-only memory: `release()` frees it together with the captured
    graphs and their pool; the next `generate` allocates it again and re-captures (no
    recompilation: the compiled layer step is kept).
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
        fused: bool | None = None,
        window: int | None = None,
        compile_mode: str | None = None,
    ):
        cfg = model.config
        dev, dt = model.device, dtype or model.dtype
        model = _base_model(model)
        self.model, self.k_steps = model, steps_per_graph
        hd = _head_dim(cfg)
        self.eps, self.scale = cfg.rms_norm_eps, hd**-0.5
        self.pad = pad_token_id
        B, S, KV = batch, cache_len, cfg.num_key_value_heads
        self.batch, self.cache_len = B, S
        self.attention = attention or ATTENTION
        if self.attention not in ("reduce", "einsum", "sdpa"):
            raise ValueError(f"attention={attention!r}：只能是 einsum、reduce 或 sdpa")
        self.fused = FUSED if fused is None else bool(fused)
        self.window = WINDOW if window is None else int(window)
        if self.window < 0:
            raise ValueError(
                f"window={window!r}：0 = 读整个 cache，正数 = 按这么多槽取整的有效前缀"
            )
        if steps_per_graph < 1:
            raise ValueError(f"steps_per_graph={steps_per_graph!r} 必须 >= 1")
        self.weights = decode_weights(model, dt, self.fused)  # checks the model is supported
        self.kv_shape, self.n_layers, self.dtype = (B, KV, S, hd), cfg.num_hidden_layers, dt
        self.k: list[torch.Tensor] | None = None  # static KV cache, made by _allocate()
        self.v: list[torch.Tensor] | None = None
        self.kv_flat: torch.Tensor | None = None  # the one buffer that self.k and self.v view
        pos = torch.arange(S, device=dev)[None]
        cos, sin = model.model.rotary_emb(torch.zeros(1, device=dev, dtype=dt), pos)
        # (S, hd), computed exactly as the HF forward does
        self.cos_table, self.sin_table = cos[0], sin[0]
        # Per-row decode state; every tensor keeps its address so a captured graph can replay on it.
        self.token = torch.full((B,), pad_token_id, device=dev, dtype=torch.long)
        self.pos = torch.zeros(B, device=dev, dtype=torch.long)  # RoPE position of `token`
        self.slot = torch.zeros(1, device=dev, dtype=torch.long)  # cache column of `token`
        self.valid = torch.zeros(B, S, device=dev, dtype=torch.bool)
        self.done = torch.zeros(B, device=dev, dtype=torch.bool)
        self.eos = torch.tensor(list(eos_token_ids) or [-1], device=dev, dtype=torch.long)
        # generated tokens by column
        self.out = torch.full((B, S), pad_token_id, device=dev, dtype=torch.long)
        if compile:
            limit = torch._dynamo.config.recompile_limit
            torch._dynamo.config.recompile_limit = max(limit, RECOMPILE_LIMIT)
        # compile_mode: torch.compile's mode, e.g. "max-autotune-no-cudagraphs" (inductor benchmarks
        # Triton matmul templates that can fuse their neighbours; slow to compile). The CUDA graphs are ours.
        self.layer_fn = (
            torch.compile(_layer_step, dynamic=False, fullgraph=True, mode=compile_mode)
            if compile
            else _layer_step
        )
        self.graphs: dict[tuple[Sampling, int], torch.cuda.CUDAGraph] = {}
        self.pool = None  # the graphs' shared memory pool
        self.compiled: set[int] = set()  # windows whose layer step has run (was compiled) already
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
        self.pool = None

    def windows(self, prompt_len: int, max_new_tokens: int) -> list[int]:
        """The attention window of each replay of a generation, in order (0 = the whole cache).

        Replay i starts at slot prompt_len + i * steps_per_graph and its last step attends to slot
        prompt_len + (i + 1) * steps_per_graph - 1, so it needs that many slots plus one."""
        replays = math.ceil(max(max_new_tokens - 1, 0) / self.k_steps)
        if not self.window:
            return [0] * replays
        need = [prompt_len + (i + 1) * self.k_steps for i in range(replays)]
        return [w if w < self.cache_len else 0 for w in (_bucket(n, self.window) for n in need)]

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

    def _step(self, how: Sampling, window: int) -> None:
        """Feed ``token`` (at column ``slot``, position ``pos``) through the model and emit the next one."""
        self.valid.index_fill_(1, self.slot, True)  # the new token attends to itself
        W = self.weights
        h = F.embedding(self.token, W.embed)
        cos, sin = self.cos_table[self.pos][:, None], self.sin_table[self.pos][:, None]
        rest = (self.slot, cos, sin, self.valid, self.eps, self.scale, self.attention, window)
        for w, kc, vc in zip(W.layers, self.k, self.v):
            h = self.layer_fn(h, w, kc, vc, *rest)
        logits = F.linear(_rms(h, W.norm, self.eps), W.lm_head).float()
        nxt = self.sample(logits, how)
        self.slot += 1
        self.pos += 1
        self._emit(nxt)

    def _run(self, how: Sampling, window: int = 0) -> None:
        # the decode dtype is explicit; autocast must not re-cast it
        with torch.autocast("cuda", enabled=False):
            for _ in range(self.k_steps):
                self._step(how, window)

    def sync_weights(self) -> None:
        self.weights.sync()

    def _rewind(self) -> None:
        """Put every row at cache column 0 and RoPE position 0, as a warm-up or capture run starts.

        The warm-ups really run ``steps_per_graph`` steps each. From the state a previous generation
        left (positions up to cache_len - 2), the steps would gather cos/sin rows past the end of the
        (cache_len, hd) tables, and each capture of a generation would push further."""
        self.slot.zero_()
        self.pos.zero_()

    def capture(self, how: Sampling, window: int = 0) -> None:
        """Warm up (this compiles) on a side stream, then capture ``steps_per_graph`` steps as one CUDA graph.

        Each run starts from slot 0 and position 0 (`_rewind`); it leaves junk in the cache, the
        outputs and the masks: call before a generation's prefill, which resets them."""
        self.valid[:, 0] = True  # the other slots hold whatever is there: keep softmax rows finite
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # a new window compiles on its first run: one more warm-up; compiled already: one is enough
            for _ in range(1 if window in self.compiled else 2):
                self._rewind()
                self._run(how, window)
        self.compiled.add(window)
        torch.cuda.current_stream().wait_stream(side)
        self._rewind()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self._run(how, window)
        self.graphs[(how, window)] = graph
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
        windows = self.windows(tp, max_new_tokens)
        if b > self.batch or tp + len(windows) * self.k_steps + 1 > self.cache_len:
            raise ValueError(
                f"{b} 行 × (prompt {tp} + {max_new_tokens} 个新 token) 装不进这个解码器的桶 "
                f"({self.batch} 行 × {self.cache_len} 槽)：用 static_shape 算桶，或者走 fast_generate"
            )
        self.sync_weights()  # after a release this makes the copies anew (new addresses, new version)
        if self.graph_version != self.weights.version:
            self.graphs.clear()  # captured on weight copies that no longer exist
            self.graph_version = self.weights.version
        if self.k is None:
            self._allocate()
        if cuda_graph:  # every graph this generation replays, captured before the prefill
            for window in sorted(set(windows)):
                if (how, window) not in self.graphs:
                    self.capture(how, window)
        mask = prompt_mask.bool()
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        # HF prefill. Under an outer autocast with fp32 master weights, autocast would cache a bf16 copy of
        # every weight until that region ends (the whole rollout): cache off, each cast lives one matmul.
        no_cache = contextlib.nullcontext()
        if torch.is_autocast_enabled("cuda"):
            no_cache = torch.autocast("cuda", torch.get_autocast_dtype("cuda"), cache_enabled=False)
        with no_cache, record_function("fast_decode.prefill"):  # the ranges name profiler events
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
        with record_function("fast_decode.decode"):
            for window in windows:
                if cuda_graph:
                    self.graphs[(how, window)].replay()
                else:
                    self._run(how, window)
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
    fused: bool | None = None,
    window: int | None = None,
    compile_mode: str | None = None,
    release: bool = False,
) -> torch.Tensor:
    """Generate with the model's cached ``StaticDecoder`` for this shape bucket.

    prompt_ids/prompt_mask: (b, Tp) left-padded on the model's CUDA device. Returns (b, max_new_tokens)
    token ids, pad after each row's first EOS. The first call of a bucket (and of a sampling setting)
    compiles and captures (seconds); later calls only replay.
    ``dtype``: decode dtype; default: the autocast dtype if CUDA autocast is on (fp32 master weights trained
    under bf16 autocast decode in bf16), else the model's dtype.
    ``attention`` ("einsum" | "reduce" | "sdpa", see `_layer_step`), ``fused`` (q/k/v and gate/up as one
    matmul each, see `LayerWeights`), ``window`` (0 = attend over the whole static cache; W > 0 = over
    its filled front rounded up to W slots): None = the module defaults ATTENTION, FUSED, WINDOW.
    ``compile_mode``: torch.compile's mode for the layer step (None = its default).
    ``release``: free the rollout-only memory (static KV caches, weight copies, CUDA graphs) before
    returning; the next call makes it again and re-captures its graph (no recompilation, but a
    warm-up and a capture: measured in L2.06). The default keeps it, and the training step borrows
    it instead (`host_gradients`).
    """
    if not prompt_ids.is_cuda:
        raise ValueError(
            "fast_generate 只在 CUDA 上可用；CPU 上请用 common.decode.rollout 的 eager 路径"
        )
    if dtype is None:
        dtype = (
            torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else model.dtype
        )
    b, tp = prompt_ids.shape
    options = (
        attention or ATTENTION,
        FUSED if fused is None else bool(fused),
        WINDOW if window is None else int(window),
        compile_mode,
    )
    key = (
        *static_shape(b, tp, max_new_tokens, steps_per_graph, batch_bucket, len_bucket),
        tuple(eos_token_ids),
        pad_token_id,
        steps_per_graph,
        compile,
        dtype,
        *options,
    )
    args = (model, *key[:2], eos_token_ids, pad_token_id, steps_per_graph, compile, dtype, *options)
    make = functools.partial(StaticDecoder, *args)
    how = Sampling(greedy, float(temperature), float(top_p), None if greedy else process_logits)
    out = resident_decoder(model, key, make).generate(
        prompt_ids, prompt_mask, max_new_tokens, how, cuda_graph
    )
    if release:
        free_rollout_memory(model)
    return out


def resident_decoder(model, key, make: Callable[[], StaticDecoder]) -> StaticDecoder:
    """The cached decoder of ``model`` for ``key`` (``make()`` on first use), after every OTHER cached
    decoder of ``model`` has released its static KV cache and graphs.

    One bucket's KV cache is resident at a time, which is what the VRAM ledger counts. Without this,
    each (rows, slots) bucket a run ever met kept its cache: GSM8K prompts straddle the 640/768-slot
    buckets and the held-out evaluation uses other row counts, so a Qwen3-0.6B run at 32 GiB held
    2-4 caches of 5-10.5 GiB and ran out of memory at step 2 (H100, 2026-12-07, L1.04). Switching
    back to a released decoder re-allocates its cache and re-captures its graphs (no recompilation).
    """
    cache = _DECODERS.setdefault(model, {})
    for other, decoder in cache.items():
        if other != key:
            decoder.release()
    if key not in cache:
        cache[key] = make()
    return cache[key]


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


def decoders_of(model) -> list[StaticDecoder]:
    """The decoders `fast_generate` has cached for ``model`` (one per shape bucket and option set)."""
    return list(_DECODERS.get(model, {}).values())


def rollout_memory_bytes(model) -> int:
    """Bytes the fast decoders of ``model`` hold right now (static KV caches + decode-weight copies)."""
    kv = sum(d.nbytes for d in _DECODERS.get(model, {}).values())
    return kv + sum(w.nbytes for w in _WEIGHTS.get(_base_model(model), {}).values())


def supports_fast_decode(model) -> bool:
    """True for a HF Qwen2/Qwen2.5/Qwen3 causal LM (plain or peft LoRA: adapters are merged into the
    decode weights) on CUDA that `unsupported_reason` accepts (no sliding window, ...)."""
    params = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return params is not None and params.is_cuda and unsupported_reason(model) is None


def release_fast_decoders(model) -> None:
    """Drop cached decoders (their KV buffers, weight copies and graph pools), e.g. before loading another model."""
    _DECODERS.pop(model, None)
    _WEIGHTS.pop(_base_model(model), None)
    torch.cuda.empty_cache()
