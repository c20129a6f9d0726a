"""VRAM ledger for one GRPO step on one GPU: shapes x bytes, line by line and phase by phase.

The ledger is arithmetic over tensor shapes: every line is "how many bytes, and why", so a
learner can check it by hand. Nothing here is a measurement. `L1_concepts/04_vram_ledger/
measure_vram.py` prints measured against predicted, phase by phase, on a real GPU.

Units: bytes internally; printed in GiB (2**30 bytes). A card sold as "32 GB" (RTX 5090) has
32 GiB of GDDR7; `gpu_gb` is read as GiB everywhere.

One GRPO step, and the phases the ledger predicts (allocated by PyTorch, steady state, i.e.
AdamW states already exist from the previous step):

    loaded        policy weights (+ reference weights when beta > 0 and method == "full")
    rollout       + AdamW states + KV cache of the concurrent rollouts + sampling workspace
                  (rollout_backend="fast": common.decode.fast_decode keeps its static KV cache, bf16
                  weight copies and CUDA-graph pool cached on the model, so they count in every
                  later phase)
    ref_forward   + AdamW states + one no-grad forward of a micro-batch (logits, log-probs)
    backward      + AdamW states + gradients + activations + logits/log-prob tensors of a micro-batch
    optimizer     + AdamW states + gradients + the foreach temporary of torch.optim.AdamW
    after_step    loaded + AdamW states (gradients freed by zero_grad(set_to_none=True))

With `layout="colocate"` (TRL + vLLM colocate: an inference engine on the same card keeps its own
copy of the weights and the KV cache for the whole run), the engine's share is added to every
phase and the policy's own rollout phase disappears.

What the card must hold: `Ledger.total` = peak allocated + allocator slack + CUDA context, and
`Ledger.usage` = total / card. Whether that "fits" is decided in common.vram.fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.gsm8k.data import GSM8K_PROMPT_TOKENS_MAX
from common.vram.decode_shape import static_shape
from common.vram.shapes import ModelShape, get_model

GiB = 2**30
METHODS = ("full", "lora", "qlora")

# ---------------------------------------------------------------------------------------------
# Assumptions (each one a named constant, so a measurement can correct exactly one of them)
# ---------------------------------------------------------------------------------------------

# Bytes per parameter by precision: (weights, gradients, AdamW states, foreach temporary).
#   mixed: bf16 weights and grads; the optimizer keeps an fp32 master copy + fp32 m + fp32 v = 12 bytes.
#   fp32 : fp32 weights and grads, fp32 m + v = 8 bytes; compute under torch.autocast(bf16).
#   bf16 : everything bf16, AdamW states bf16 too (cheap, but lr ~1e-6 updates vanish in bf16 rounding).
# The foreach temporary: torch.optim.AdamW's default multi-tensor path builds sqrt(v) for all
# parameters at once (one more state-sized tensor list) during step(); fused=True does not.
PRECISIONS = {
    "mixed": (2, 2, 12, 4),
    "fp32": (4, 4, 8, 4),
    "bf16": (2, 2, 4, 2),
}
# LoRA adapters are fp32 (peft autocast_adapter_dtype=True), AdamW m + v fp32.
ADAPTER_BYTES = (4, 4, 8, 4)
# 4-bit NF4, double-quantized block constants (QLoRA paper).
NF4_BYTES_PER_PARAM = (4 + 8 / 64 + 32 / (64 * 256)) / 8
COMPUTE_BYTES = 2  # activations, logits and KV cache in bf16 (fp32 weights run under bf16 autocast)

# Log-prob tensors of one micro-batch, bytes per logit element (positions x vocab) at their backward
# peak, the bf16 logits included, for the course's pattern: model(..., logits_to_keep=T+1).logits[:, :-1]
# fed to token_logprobs (the shifted slice is not contiguous, so flattening it makes one bf16 copy).
# Counted with a live-tensor tracker on CPU (tests/common/test_vram.py re-counts them):
#   naive        log_softmax(logits.float()).gather(...): bf16 logits 2 + saved fp32 log_softmax 4
#                + fp32 grad from gather 4 + fp32 grad of log_softmax 4 = 14
#   chunked      logsumexp + gather over row chunks, plain autograd: every chunk's fp32 copy is saved
#                for backward (4), plus the bf16 copy, grads and slice grads: 11.5
#   chunked_ckpt the course's solutions.l2_02 token_logprobs (chunks under activation checkpointing):
#                logits 2 + bf16 copy 2 + grad buffer 2 + one full-size slice grad in flight 2
#                + out-of-place accumulation 2 = 10; no full fp32 tensor at any time
#   hidden       solutions.l2_02 hidden_token_logprobs (L2.02 section 6; grpo_train.py): no per-element
#                term at all, the (B, T, V) logits never exist; see HIDDEN_CHUNK_ROWS below
LOGPROB_BYTES = {"naive": 14, "chunked": 11.5, "chunked_ckpt": 10, "hidden": 0}
# No-grad log-probs (old/reference, and the entropy): logits 2 + bf16 copy 2 per element, plus
# fp32 temporaries of one chunk of rows (upcast, log-softmax, exp, ...: ~12 bytes per element).
NOGRAD_LOGPROB_BYTES = 4
# = solutions/l2_02_logprobs_and_masks.py CHUNK_ROWS (tests/common/test_vram.py ties the two)
LOGPROB_CHUNK_ROWS = 128
NOGRAD_CHUNK_BYTES = 12
CHUNK_BACKWARD_BYTES = 16  # chunk being recomputed in backward: fp32 upcast, x - lse, exp, grad
# The hidden-state path: rows per chunk (grpo_train.py and measure_vram.py import this one). Its backward peak is one
# recomputed chunk (CHUNK_BACKWARD_BYTES per element) plus that chunk's fp32 gradient of the lm_head
# weight (V x H x 4) before it is added to the rest.
HIDDEN_CHUNK_ROWS = 256
# torchao.optim.AdamW8bit (optimizer="adamw8bit"): m and v as 8-bit codes, one fp32 scale per block of
# 256 values each (torchao/optim/subclass_8bit.py); replaces the 8 bytes of fp32 m + v. Its step runs
# one parameter at a time and holds that tensor's m and v dequantised to fp32 meanwhile: 8 bytes per
# value of the largest trainable tensor (the embedding; measured on the H200: +2.3 GiB for Qwen3-1.7B).
ADAMW8BIT_STATE_BYTES = 2 + 2 * 4 / 256
ADAMW8BIT_TEMP_BYTES = 8

# While one decoder layer runs its backward, the gradients of its intermediates add about a quarter
# of its saved activations on top (counted on CPU with a live-tensor tracker, tests/common/test_vram.py).
LAYER_BACKWARD_EXTRA = 0.25

# Outside the tensors PyTorch reports as allocated:
# CUDA context + kernels; not in torch.cuda.memory_allocated (nvidia-smi shows it).
CUDA_CONTEXT_GIB = 0.5
# Caching allocator: reserved exceeds allocated by ~5 % of the peak (fragmentation).
ALLOCATOR_SLACK = 0.05
# Colocated vLLM: activation profile at 4096 batched tokens, sampler, CUDA graphs.
ENGINE_WORKSPACE_GIB = 1.0
# common.decode.fast_decode (static cache + CUDA graphs; its bucket sizes come from
# common.decode.fast_decode): the graph's private memory pool, estimated as the sampling working set
# (fp32 logits, processed logits, noise, log) per row.
FAST_POOL_BYTES = 16


# ---------------------------------------------------------------------------------------------
# Settings of one GRPO step
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything the ledger needs besides the model. Defaults: the course's Qwen3-0.6B recipe."""

    method: str = "full"  # full | lora | qlora
    prompts: int = 8  # P prompts per step
    group: int = 8  # G completions per prompt
    # padded prompt tokens: the longest GSM8K prompt with the chat template (measured,
    # common.gsm8k.data)
    prompt_len: int = GSM8K_PROMPT_TOKENS_MAX
    max_new_tokens: int = 512  # completion budget (the KV cache and the logits are sized by it)
    rollout_batch: int | None = None  # sequences generated at once (None: all P*G)
    micro_batch: int = 4  # sequences per forward/backward (gradient accumulation over P*G)
    beta: float = 0.04  # KL coefficient; > 0 needs reference log-probs
    lora_rank: int = 16
    precision: str = "mixed"  # mixed | fp32 | bf16 (see PRECISIONS)
    checkpointing: bool = True  # gradient checkpointing of every decoder layer
    logprobs: str = "chunked_ckpt"  # naive | chunked | chunked_ckpt (see LOGPROB_BYTES)
    logits_over: str = "completion"  # completion (logits_to_keep) | all (every position)
    optimizer: str = (
        "foreach"  # foreach (torch default) | fused | adamw8bit (torchao, 8-bit m and v)
    )
    # policy: the policy model generates (our script) | colocate: + a vLLM engine
    layout: str = "policy"
    # colocate: the engine's share in GiB (None: exactly what it needs)
    engine_gb: float | None = None
    # policy layout: eager (HF dynamic cache) | fast (common.decode.fast_decode)
    rollout_backend: str = "eager"
    # reference weights: 2 = frozen bf16 copy (grpo_train.py), 4 = fp32 (TRL: the policy's dtype)
    ref_bytes: int = 2
    # fast rollout only: gradients live in the decoder's KV buffer and weight copies between rollouts
    # (common.decode.fast_decode.host_gradients, as grpo_train.py does)
    host_grads: bool = False

    def __post_init__(self):
        checks = {
            "method": (self.method, METHODS),
            "precision": (self.precision, tuple(PRECISIONS)),
            "logprobs": (self.logprobs, tuple(LOGPROB_BYTES)),
            "logits_over": (self.logits_over, ("completion", "all")),
            "optimizer": (self.optimizer, ("foreach", "fused", "adamw8bit")),
            "layout": (self.layout, ("policy", "colocate")),
            "rollout_backend": (self.rollout_backend, ("eager", "fast")),
        }
        for name, (value, valid) in checks.items():
            if value not in valid:
                raise ValueError(f"{name}={value!r} 不合法；可选：{', '.join(valid)}")
        for name in (
            "prompts",
            "group",
            "prompt_len",
            "max_new_tokens",
            "micro_batch",
            "lora_rank",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} 必须 >= 1，得到 {getattr(self, name)}")
        if self.rollout_batch is not None and self.rollout_batch < 1:
            raise ValueError(f"rollout_batch 必须 >= 1，得到 {self.rollout_batch}")
        if not math.isfinite(self.beta) or self.beta < 0:  # NaN 曾被当成 0
            raise ValueError(f"--beta（KL 系数）要是 >= 0 的有限数，得到 {self.beta}")
        if self.engine_gb is not None and not (
            math.isfinite(self.engine_gb) and self.engine_gb > 0
        ):
            raise ValueError(
                f"--engine-gb（给推理引擎预留的 GiB）要是正的有限数，得到 {self.engine_gb}"
            )
        if self.ref_bytes not in (2, 4):
            raise ValueError(f"ref_bytes 只能是 2（bf16）或 4（fp32），得到 {self.ref_bytes}")

    @property
    def sequences(self) -> int:
        return self.prompts * self.group

    @property
    def concurrent(self) -> int:
        """Sequences whose KV cache is resident at once."""
        return min(self.rollout_batch or self.sequences, self.sequences)

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.max_new_tokens

    @property
    def mb(self) -> int:
        return min(self.micro_batch, self.sequences)

    def short(self) -> str:
        roll = f"，并发 {self.concurrent} 条" if self.concurrent < self.sequences else ""
        extras = [self.precision]
        if self.method != "full":
            extras.append(f"r={self.lora_rank}")
        extras.append("ckpt" if self.checkpointing else "no-ckpt")
        if self.layout == "colocate":
            extras.append("colocate")
        elif self.rollout_backend == "fast":
            extras.append("fast rollout" + ("+hosted grads" if self.host_grads else ""))
        if self.logprobs == "hidden":
            extras.append("hidden logp")
        if self.optimizer != "foreach":
            extras.append(self.optimizer)
        return (
            f"P{self.prompts}×G{self.group}{roll}，prompt {self.prompt_len} + 回答 {self.max_new_tokens}，"
            f"micro-batch {self.mb}，β={self.beta:g}，{'/'.join(extras)}"
        )


# ---------------------------------------------------------------------------------------------
# The ledger: lines, phases, and what the card must hold (computed once, when it is built)
# ---------------------------------------------------------------------------------------------


@dataclass
class Line:
    key: str
    label: str  # Chinese, printed
    nbytes: float
    formula: str  # how it was computed, printed


@dataclass
class Ledger:
    """Lines and phases of one model and settings; the derived totals are computed on construction."""

    model: ModelShape
    settings: Settings
    gpu_gb: float
    lines: dict[str, Line]
    phases: dict[str, float]  # allocated bytes, per phase (peak inside it)
    peak_phase: str = field(init=False)
    peak_allocated: float = field(init=False)
    slack: float = field(init=False)  # allocator slack at the peak
    context: float = field(init=False)  # CUDA context
    total: float = field(init=False)  # what the card must hold: allocated + slack + context
    usage: float = field(init=False)  # total / card

    def __post_init__(self):
        self.peak_phase = max(self.phases, key=self.phases.get)
        self.peak_allocated = self.phases[self.peak_phase]
        self.slack = ALLOCATOR_SLACK * self.peak_allocated
        self.context = CUDA_CONTEXT_GIB * GiB
        self.total = self.peak_allocated + self.slack + self.context
        self.usage = self.total / (self.gpu_gb * GiB)

    def nbytes(self, key: str) -> float:
        """Bytes of one line; 0 for a line this configuration does not have."""
        return self.lines[key].nbytes if key in self.lines else 0.0

    def gib(self, key: str) -> float:
        return self.nbytes(key) / GiB


def ledger(
    model: ModelShape | str, settings: Settings | None = None, gpu_gb: float = 32.0
) -> Ledger:
    """The full breakdown for one model and one GRPO step's settings."""
    m = get_model(model) if isinstance(model, str) else model
    s = settings or Settings()
    lines = [
        *_training_state_lines(m, s),
        _reference_line(m, s),
        *_activation_lines(m, s),
        _autocast_line(m, s),
        _logits_line(m, s),
        _nograd_forward_line(m, s),
        *_rollout_lines(m, s),
    ]
    by_key = {line.key: line for line in lines if line is not None}
    return Ledger(m, s, gpu_gb, by_key, _phases(m, s, by_key))


# ---- per-activation-layer arithmetic (also used on its own by the tests and the lesson) -------


def activation_bytes_per_token_layer(
    m: ModelShape, precision: str = "mixed", method: str = "full", lora_rank: int = 16
) -> int:
    """Bytes autograd keeps per token for one Qwen3 decoder layer (HF modeling_qwen3, SDPA attention
    with a padding mask, bf16 compute, no dropout). Each term is a tensor saved for backward; the
    list was read off the autograd graph of a small Qwen3 (tests/common/test_vram.py walks it):

      full fine-tune (d hidden, I intermediate, H heads, hq = H*hd, hkv = Hkv*hd)
        2 RMSNorms    fp32 input (pow) 4d + normalized bf16 (norm weight) 2d + output (next matmul) 2d
                      = 16d; fp32 weights (autocast) make the residual stream fp32: 20d
        q/k_norm      (fp32 input 4 + normalized bf16 2) * (hq + hkv)
        attention     q after RoPE, K and V repeated to H heads (repeat_kv: a mask is present),
                      output (also o_proj's input: transpose + contiguous is free) -> 8 * hq;
                      logsumexp fp32 4H
        MLP           gate out (SiLU), SiLU out, up out (mul), mul out (down_proj) = 8I
      LoRA / QLoRA (frozen base and norms, fp32 adapters)
        norms keep only their fp32 input (8d, q/k: 4 * (hq + hkv)); the frozen down_proj keeps no
        input (MLP 6I); every adapter casts its input to fp32 for lora_A: 4 * (5d + hq + I) (under
        bf16 autocast lora_A keeps the bf16 recast instead: 2 * (5d + hq + I)), and lora_B keeps
        lora_A's fp32 output: 7 * 4r
      MoE (not read off a graph): per routed expert gathered input 2d, gate_up out 4Ie, SiLU out 2Ie,
        mul out 2Ie, down out 2d -> k * (4d + 8Ie), + fp32 router softmax 4E; adapters on attention only
      every RMSNorm also keeps its fp32 rsqrt per row: 4 * (2 + H + Hkv)
    RoPE's multiplications by cos/sin keep nothing per token (cos/sin need no grad).
    """
    d, hq, hkv, H = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.heads
    rsqrt = 4 * (2 + H + m.kv_heads)
    frozen = method != "full"
    attn = 8 * hq + 4 * H
    if m.is_moe:
        k = m.experts_per_token
        mlp = k * (4 * d + 8 * m.moe_intermediate) + 4 * m.experts
        adapter_in, n_adapters = 4 * d + hq, 4  # q, k, v, o
    else:
        mlp = (6 if frozen else 8) * m.intermediate
        adapter_in, n_adapters = 5 * d + hq + m.intermediate, 7
    if frozen:
        # under autocast (precision "fp32") lora_A keeps the bf16 recast of the fp32 input: 2 bytes
        cast = 2 if precision == "fp32" else 4
        adapters = cast * adapter_in + n_adapters * 4 * lora_rank
        return 8 * d + 4 * (hq + hkv) + rsqrt + attn + mlp + adapters
    norms = 20 * d if precision == "fp32" else 16 * d
    return norms + 6 * (hq + hkv) + rsqrt + attn + mlp


def nograd_layer_bytes_per_token(m: ModelShape) -> int:
    """Largest working set per token inside one layer when nothing is kept for backward (rollout
    prefill, reference forward): the residual input and norm output 4d plus the MLP's gate, up and
    SiLU outputs 6I (MoE: per routed expert, gathered input 2d + 6Ie)."""
    if m.is_moe:
        return 4 * m.hidden + m.experts_per_token * (2 * m.hidden + 6 * m.moe_intermediate)
    return 4 * m.hidden + 6 * m.intermediate


# ---- one helper per group of lines ------------------------------------------------------------


def _trainable_params(m: ModelShape, s: Settings) -> int:
    return m.n_params() if s.method == "full" else m.lora_params(s.lora_rank)


def _frozen_base_bytes(m: ModelShape, s: Settings) -> float:
    """LoRA / QLoRA: bytes of the frozen base (bf16; QLoRA: the linear maps in NF4)."""
    n = m.n_params()
    if s.method == "lora":  # the frozen base stays bf16 (only trainable tensors get fp32 masters)
        return n * COMPUTE_BYTES
    lin = m.n_quantized_params()
    return lin * NF4_BYTES_PER_PARAM + (n - lin) * COMPUTE_BYTES


def _weights_line(m: ModelShape, s: Settings) -> Line:
    w, _, _, _ = PRECISIONS[s.precision]
    n = m.n_params()
    if s.method == "full":
        return Line("weights", "权重（策略模型）", float(n * w), f"{n / 1e9:.3f}B 参数 × {w} B")
    adapters = m.lora_params(s.lora_rank)
    nbytes = _frozen_base_bytes(m, s) + adapters * ADAPTER_BYTES[0]
    if s.method == "lora":
        formula = (
            f"bf16 基座 {n / 1e9:.3f}B × {COMPUTE_BYTES} B"
            f" + LoRA {adapters / 1e6:.1f}M × {ADAPTER_BYTES[0]} B"
        )
    else:
        lin = m.n_quantized_params()
        rest_what = "专家/嵌入/范数" if m.is_moe else "嵌入/范数"
        formula = (
            f"线性层 {lin / 1e9:.3f}B × {NF4_BYTES_PER_PARAM:.3f} B (NF4)"
            f" + {rest_what} {(n - lin) / 1e9:.3f}B × 2 B + LoRA {adapters / 1e6:.1f}M × 4 B"
        )
    return Line("weights", "权重（策略模型）", float(nbytes), formula)


def _training_state_lines(m: ModelShape, s: Settings) -> list[Line]:
    """Policy weights, gradients, AdamW states and the AdamW step's temporary."""
    trainable = _trainable_params(m, s)
    _, gb, ob, tb = ADAPTER_BYTES if s.method != "full" else PRECISIONS[s.precision]
    million = f"{trainable / 1e6:.1f}M"
    opt_what = {12: "fp32 主权重 + m + v", 8: "fp32 m + v", 4: "bf16 m + v"}[ob]
    temp = trainable * tb if s.optimizer == "foreach" else 0
    temp_what = f"foreach 一次算出全部 sqrt(v)：{million} × {tb} B" if temp else "fused：无"
    if s.optimizer == "adamw8bit":  # only m and v shrink; an fp32 master copy ("mixed") stays
        ob = ob - 8 + ADAMW8BIT_STATE_BYTES
        opt_what = (
            "fp32 主权重 + 8-bit m + v" if ob > 8 else "8-bit m + v，每 256 个一个 fp32 scale"
        )
        # one tensor's m and v in fp32 at a time; the largest one counts
        largest = m.vocab * m.hidden if s.method == "full" else s.lora_rank * m.intermediate
        temp = largest * ADAMW8BIT_TEMP_BYTES
        temp_what = (
            f"逐个参数反量化 m、v：最大的张量 {largest / 1e6:.1f}M × {ADAMW8BIT_TEMP_BYTES} B"
        )
    return [
        _weights_line(m, s),
        Line("gradients", "梯度", float(trainable * gb), f"可训练 {million} × {gb} B"),
        Line(
            "optimizer",
            "AdamW 状态",
            float(trainable * ob),
            f"可训练 {million} × {ob:g} B（{opt_what}）",
        ),
        Line(
            "optimizer_temp",
            "AdamW step 临时量",
            float(temp),
            temp_what,
        ),
    ]


def _reference_line(m: ModelShape, s: Settings) -> Line:
    ref = 0.0
    if s.beta > 0 and s.method == "full":
        ref = m.n_params() * s.ref_bytes
        kind = "bf16" if s.ref_bytes == 2 else "fp32"
        formula = f"冻结的 {kind} 副本：{m.n_params() / 1e9:.3f}B × {s.ref_bytes} B"
    elif s.beta > 0:
        formula = "LoRA：关掉 adapter 就是参考模型，不占额外显存"
    else:
        formula = "β=0：不需要参考模型"
    return Line("reference", "参考模型", float(ref), formula)


def _activation_lines(m: ModelShape, s: Settings) -> list[Line]:
    """What one micro-batch keeps for backward, and the working set of one layer's backward."""
    mb, seq = s.mb, s.seq_len
    tokens = mb * seq
    per_layer = activation_bytes_per_token_layer(m, s.precision, s.method, s.lora_rank)
    resid = 4 if s.precision == "fp32" else 2
    final_norm = (8 if s.method == "full" else 4) * m.hidden  # final RMSNorm (+ lm_head input)
    # SDPA keeps the padding mask, converted to bf16, per layer
    layer_mask = mb * seq * seq * COMPUTE_BYTES
    if s.checkpointing:
        act = tokens * (m.layers * resid * m.hidden + final_norm)
        act_formula = (
            f"{mb}×{seq} token × ({m.layers} 层 × 检查点 {resid * m.hidden} B"
            f" + 末层范数 {final_norm} B)"
        )
        recompute = tokens * per_layer * (1 + LAYER_BACKWARD_EXTRA) + layer_mask
        re_formula = (
            f"重算一层：{mb}×{seq} token × {per_layer} B × {1 + LAYER_BACKWARD_EXTRA:g} + mask"
        )
    else:
        act = tokens * (m.layers * per_layer + final_norm) + m.layers * layer_mask
        act_formula = f"{mb}×{seq} token × ({m.layers} 层 × {per_layer} B + 末层范数 {final_norm} B) + 每层 mask"
        recompute = tokens * per_layer * LAYER_BACKWARD_EXTRA
        re_formula = (
            f"一层反向的临时梯度：{mb}×{seq} token × {per_layer} B × {LAYER_BACKWARD_EXTRA:g}"
        )
    return [
        Line("activations", "激活（一个 micro-batch 存下的）", float(act), act_formula),
        Line("recompute", "反向时一层的工作区", float(recompute), re_formula),
    ]


def _autocast_line(m: ModelShape, s: Settings) -> Line | None:
    """fp32 master weights under bf16 autocast: autocast caches a bf16 copy of every weight for as
    long as the autocast region lasts, also under no_grad (rollout, old/reference log-probs)."""
    if not (s.precision == "fp32" and s.method == "full"):
        return None
    return Line(
        "autocast_copies",
        "autocast 的 bf16 权重副本",
        float(m.n_params() * 2),
        "fp32 权重在 bf16 autocast 里的缓存副本（rollout、no_grad 前向；开检查点时反向里只剩 lm_head 那份）",
    )


def _autocast_in_backward(m: ModelShape, s: Settings) -> float:
    """Autocast copies alive during backward: the matmuls keep them for backward; with
    checkpointing only the lm_head's copy outlives the forward."""
    if not (s.precision == "fp32" and s.method == "full"):
        return 0.0
    return m.vocab * m.hidden * 2 if s.checkpointing else m.n_params() * 2


def _logit_positions(s: Settings) -> int:
    return s.max_new_tokens if s.logits_over == "completion" else s.seq_len


def _logits_line(m: ModelShape, s: Settings) -> Line:
    mb, positions = s.mb, _logit_positions(s)
    elems = mb * positions * m.vocab
    per = LOGPROB_BYTES[s.logprobs]
    logits = elems * per
    formula = f"{mb}×{positions} 位置 × {m.vocab} 词表 × {per:g} B（{s.logprobs}）"
    if (
        s.logprobs == "hidden"
    ):  # no (B, T, V) tensor: one recomputed chunk + its lm_head weight grad
        rows = min(HIDDEN_CHUNK_ROWS, mb * positions)
        lm_grad = m.vocab * m.hidden * 4 if s.method == "full" else 0
        logits = CHUNK_BACKWARD_BYTES * rows * m.vocab + lm_grad
        formula = f"不出现 (B,T,V)：一块 {rows} 行 × {m.vocab} × {CHUNK_BACKWARD_BYTES} B" + (
            f" + 这块给 lm_head 的 fp32 梯度 {m.vocab}×{m.hidden}×4 B" if lm_grad else ""
        )
    if s.logprobs == "chunked_ckpt":
        # before the grads pile up, the first recomputed chunk's fp32 temporaries sit on top of
        # logits + copy + one slice grad (6 B per element); with few chunks that moment is the peak
        chunk = CHUNK_BACKWARD_BYTES * min(LOGPROB_CHUNK_ROWS, mb * positions) * m.vocab
        if 6 * elems + chunk > logits:
            logits, formula = 6 * elems + chunk, formula + "；块少：6 B/元素 + 一块 fp32 临时量"
    return Line("logits", "logits / log-prob（反向峰值）", float(logits), formula)


def _nograd_forward_line(m: ModelShape, s: Settings) -> Line:
    """No-grad forward of one micro-batch for old (and reference) log-probs and the entropy."""
    mb, positions = s.mb, _logit_positions(s)
    layer = mb * s.seq_len * nograd_layer_bytes_per_token(m)
    if s.logprobs == "hidden":
        rows = min(HIDDEN_CHUNK_ROWS, mb * positions)
        return Line(
            "nograd_forward",
            "旧/参考 log-prob 前向（no_grad）",
            float(NOGRAD_CHUNK_BYTES * rows * m.vocab + layer),
            f"一块 fp32 临时量 {rows}×{m.vocab}×{NOGRAD_CHUNK_BYTES} B + 一层的中间量",
        )
    nograd = (
        mb * positions * m.vocab * NOGRAD_LOGPROB_BYTES
        + NOGRAD_CHUNK_BYTES * min(LOGPROB_CHUNK_ROWS, mb * positions) * m.vocab
        + layer
    )
    return Line(
        "nograd_forward",
        "旧/参考 log-prob 前向（no_grad）",
        float(nograd),
        f"bf16 logits + 拷贝 {mb}×{positions}×{m.vocab}×{NOGRAD_LOGPROB_BYTES} B"
        " + 一块 fp32 临时量 + 一层的中间量",
    )


def _rollout_lines(m: ModelShape, s: Settings) -> list[Line]:
    """The policy generates (eager or fast), or a colocated engine holds weights + KV (colocate)."""
    if s.layout == "colocate":
        return [_engine_line(m, s)]
    if s.rollout_backend == "fast":
        return _fast_rollout_lines(m, s)
    return _eager_rollout_lines(m, s)


def _kv_cache(m: ModelShape, s: Settings) -> tuple[float, str]:
    """K and V of every concurrent rollout at full length, and the formula."""
    kv = s.concurrent * s.seq_len * m.kv_bytes_per_token(COMPUTE_BYTES)
    formula = (
        f"{s.concurrent} 条 × {s.seq_len} token × {m.layers} 层 × 2 × {m.kv_heads} 头"
        f" × {m.head_dim} × 2 B"
    )
    return kv, formula


def _eager_rollout_lines(m: ModelShape, s: Settings) -> list[Line]:
    kv, kv_formula = _kv_cache(m, s)
    # one layer's intermediates during prefill
    prefill = s.concurrent * s.prompt_len * nograd_layer_bytes_per_token(m)
    # last-position logits + fp32 copies
    sampling = s.concurrent * m.vocab * (COMPUTE_BYTES + 4 * 3)
    return [
        Line("kv_cache", "rollout 的 KV cache", float(kv), kv_formula),
        Line(
            "rollout_workspace",
            "rollout 工作区",
            float(prefill + sampling),
            f"prefill 一层中间量 + 采样用 logits（{s.concurrent}×{m.vocab}，bf16 + 3 份 fp32）",
        ),
    ]


def _fast_rollout_lines(m: ModelShape, s: Settings) -> list[Line]:
    """common.decode.fast_decode: a StaticDecoder per shape bucket, cached on the model for the
    whole run: static KV for the bucketed batch and length, bf16 copies of fp32 master weights,
    CUDA-graph pool."""
    rows, slots = static_shape(s.concurrent, s.prompt_len, s.max_new_tokens)
    per_token = m.kv_bytes_per_token(COMPUTE_BYTES)
    static_kv = rows * slots * per_token
    # decode weights: fp32 master weights need bf16 copies of everything; LoRA needs merged bf16
    # copies (W + s·B@A) of every adapted linear map (measured on the H200: 2.7 GiB for Qwen3-1.7B,
    # see L1.04)
    if s.method == "full" and s.precision == "fp32":
        copies = m.n_params() * COMPUTE_BYTES
    elif s.method == "lora":
        copies = m.layers * (m.attn_params() + m.mlp_params()) * COMPUTE_BYTES
    else:
        copies = 0
    pool = FAST_POOL_BYTES * rows * m.vocab
    prefill_kv = s.concurrent * s.prompt_len * per_token
    prefill = s.concurrent * s.prompt_len * nograd_layer_bytes_per_token(m)
    return [
        Line(
            "fast_decoder",
            "快速解码器（常驻）",
            float(static_kv + copies + pool),
            f"静态 KV {rows} 行 × {slots} 槽 × {per_token} B {static_kv / GiB:.2f} GiB"
            f" + bf16 权重副本 {copies / GiB:.2f} GiB"
            f" + CUDA graph 内存池 ≈ {rows}×{m.vocab}×{FAST_POOL_BYTES} B",
        ),
        Line(
            "rollout_workspace",
            "rollout 工作区",
            float(prefill_kv + prefill),
            f"HF prefill 的动态 KV（{s.concurrent}×{s.prompt_len} token）+ 一层中间量",
        ),
    ]


def _engine_line(m: ModelShape, s: Settings) -> Line:
    """Colocated vLLM: its own weight copy (bf16; the same frozen base as training for LoRA/QLoRA),
    the KV cache of all concurrent rollouts and its workspace, or `engine_gb` if that is larger."""
    kv, kv_formula = _kv_cache(m, s)
    engine_w = m.n_params() * COMPUTE_BYTES if s.method == "full" else _frozen_base_bytes(m, s)
    need = engine_w + kv + ENGINE_WORKSPACE_GIB * GiB
    engine = max(need, (s.engine_gb or 0) * GiB)
    note = ""
    if s.engine_gb:
        note = (
            f"；按 --engine-gb {s.engine_gb:g} 预留"
            if s.engine_gb * GiB >= need
            else f"；--engine-gb {s.engine_gb:g} 放不下全部并发，vLLM 会少跑几条（这里按所需计）"
        )
    return Line(
        "engine",
        "同卡推理引擎（vLLM colocate）",
        float(engine),
        f"权重副本 {engine_w / GiB:.2f} + KV（{kv_formula}）{kv / GiB:.2f} + 工作区"
        f" {ENGINE_WORKSPACE_GIB:g} GiB" + note,
    )


def _phases(m: ModelShape, s: Settings, lines: dict[str, Line]) -> dict[str, float]:
    """Allocated bytes per phase of the step (steady state)."""
    get = lambda key: lines[key].nbytes if key in lines else 0.0
    loaded = get("weights") + get("reference")
    opt, grads = get("optimizer"), get("gradients")
    autocast = get("autocast_copies")
    # resident for the whole step (after the first rollout)
    engine = get("engine") + get("fast_decoder")
    # the fast decoder's prefill runs with the autocast weight cache off (common.decode.fast_decode)
    rollout_autocast = 0.0 if "fast_decoder" in lines else autocast
    # hosted gradients sit inside the decoder's buffers: no memory of their own
    if s.host_grads and "fast_decoder" in lines:
        grads = max(0.0, grads - get("fast_decoder"))
    # the logits' backward runs first and is freed before the layers' backward starts: max, not sum
    backward_top = max(get("logits") + _autocast_in_backward(m, s), get("recompute"))
    return {
        "loaded": loaded + get("engine"),
        "rollout": loaded
        + opt
        + engine
        + rollout_autocast
        + get("kv_cache")
        + get("rollout_workspace"),
        "ref_forward": loaded + opt + engine + autocast + get("nograd_forward"),
        "backward": loaded + opt + engine + grads + get("activations") + backward_top,
        "optimizer": loaded + opt + engine + grads + get("optimizer_temp"),
        "after_step": loaded + opt + engine,
    }
