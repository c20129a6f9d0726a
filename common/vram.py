"""VRAM ledger for one GRPO step on one GPU, and helpers to measure the real thing.

The ledger is arithmetic over tensor shapes: every line is "how many bytes, and why", so a
learner can check it by hand. Nothing here is a measurement. `L1_concepts/04_vram_ledger/
measure_vram.py` prints measured against predicted, phase by phase, on a real GPU.

Units: bytes internally; printed in GiB (2**30 bytes). A card sold as "32 GB" (RTX 5090) has
32 GiB of GDDR7; `gpu_gb` is read as GiB everywhere in this module.

Model shapes: the config.json of each hub repo (Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B,
Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B), written out below; cross-checked against slime's Megatron
model arguments (zyzshishui/slime, a THUDM/slime fork: scripts/models/qwen3-{0.6B,1.7B,4B,8B,30B-A3B}.sh).

One GRPO step, and the phases the ledger predicts (allocated by PyTorch, steady state, i.e.
AdamW states already exist from the previous step):

    loaded        policy weights (+ reference weights when beta > 0 and method == "full")
    rollout       + AdamW states + KV cache of the concurrent rollouts + sampling workspace
                  (rollout_backend="fast": common.fast_decode keeps its static KV cache, bf16 weight
                  copies and CUDA-graph pool cached on the model, so they count in every later phase)
    ref_forward   + AdamW states + one no-grad forward of a micro-batch (logits, log-probs)
    backward      + AdamW states + gradients + activations + logits/log-prob tensors of a micro-batch
    optimizer     + AdamW states + gradients + the foreach temporary of torch.optim.AdamW
    after_step    loaded + AdamW states (gradients freed by zero_grad(set_to_none=True))

With `layout="colocate"` (TRL + vLLM colocate: an inference engine on the same card keeps its own
copy of the weights and the KV cache for the whole run), the engine's share is added to every
phase and the policy's own rollout phase disappears.

Verdict (`verdict()`): usage = (peak allocated + allocator slack + CUDA context) / gpu.
    no     usage > 1.00
    tight  usage <= 1.00, but either usage > 0.85 (less than 15 % headroom) or the answer budget
           cannot grow to 1024 tokens with the other settings unchanged (no room to tune)
    fits   usage <= 0.85 and answers can grow to 1024 tokens. 15 % headroom means the verdict
           survives a ledger that is 15 % too low.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import unicodedata
from dataclasses import dataclass, field

GiB = 2**30

# ---------------------------------------------------------------------------------------------
# Model shapes (HF config.json of each repo)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    name: str
    hub_id: str
    hidden: int  # hidden_size
    layers: int  # num_hidden_layers
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim
    intermediate: int  # intermediate_size (dense MLP)
    vocab: int  # vocab_size
    tied: bool  # tie_word_embeddings
    max_position: int  # max_position_embeddings
    experts: int = 0  # num_experts (0 = dense)
    experts_per_token: int = 0  # num_experts_per_tok
    moe_intermediate: int = 0  # moe_intermediate_size
    rope_theta: float = 1_000_000.0  # rope_theta
    rms_norm_eps: float = 1e-6  # rms_norm_eps

    @classmethod
    def from_config(cls, config, name: str = "", hub_id: str = "") -> ModelShape:
        """The shape of a transformers Qwen3Config / Qwen3MoeConfig (e.g. a preset's model.config)."""
        get = lambda key, default=0: getattr(config, key, default) or default
        return cls(
            name or get("_name_or_path", "model"),
            hub_id or get("_name_or_path", ""),
            hidden=config.hidden_size,
            layers=config.num_hidden_layers,
            heads=config.num_attention_heads,
            kv_heads=config.num_key_value_heads,
            head_dim=get("head_dim", config.hidden_size // config.num_attention_heads),
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
            tied=bool(config.tie_word_embeddings),
            max_position=config.max_position_embeddings,
            experts=get("num_experts"),
            experts_per_token=get("num_experts_per_tok"),
            moe_intermediate=get("moe_intermediate_size"),
            rope_theta=(get("rope_parameters", {}) or {}).get("rope_theta", 1_000_000.0),
            rms_norm_eps=get("rms_norm_eps", 1e-6),
        )

    def config_dict(self) -> dict:
        """The config.json fields above under their HF names (e.g. for transformers' Qwen3Config)."""
        cfg = dict(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tied,
        )
        if self.is_moe:
            cfg.update(
                num_experts=self.experts,
                num_experts_per_tok=self.experts_per_token,
                moe_intermediate_size=self.moe_intermediate,
            )
        return cfg

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # ---- parameter counts, from the shapes (Qwen3: no biases, q/k RMSNorm over head_dim) ----
    def attn_params(self) -> int:
        """q, k, v, o projections of one layer."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return d * q + 2 * d * kv + q * d

    def expert_params(self) -> int:
        """One SwiGLU expert (gate, up, down) of size moe_intermediate."""
        return 3 * self.hidden * self.moe_intermediate

    def mlp_params(self, active_only: bool = False) -> int:
        """MLP of one layer: dense SwiGLU, or router + experts (all, or the active ones)."""
        if not self.is_moe:
            return 3 * self.hidden * self.intermediate
        n = self.experts_per_token if active_only else self.experts
        return self.hidden * self.experts + n * self.expert_params()

    def norm_params(self) -> int:
        """input + post-attention RMSNorm (hidden each) + q_norm, k_norm (head_dim each)."""
        return 2 * self.hidden + 2 * self.head_dim

    def embedding_params(self) -> int:
        """embed_tokens (+ a separate lm_head when the embeddings are not tied)."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def n_params(self, active_only: bool = False) -> int:
        per_layer = self.attn_params() + self.mlp_params(active_only) + self.norm_params()
        return self.layers * per_layer + self.embedding_params() + self.hidden  # + final norm

    def n_quantized_params(self) -> int:
        """Parameters a 4-bit (QLoRA) base stores in NF4: the nn.Linear maps of the decoder layers.
        transformers 5.17's bitsandbytes integration replaces nn.Linear modules only
        (integrations/bitsandbytes.py::replace_with_bnb_linear); Qwen3-MoE keeps its experts as 3-D
        nn.Parameters (models/qwen3_moe/modeling_qwen3_moe.py::Qwen3MoeExperts), so they stay bf16.
        Embeddings, lm_head and norms stay bf16 too."""
        if self.is_moe:
            return self.layers * (
                self.attn_params() + self.hidden * self.experts
            )  # attention + router
        return self.layers * (self.attn_params() + self.mlp_params())

    def lora_params(self, rank: int) -> int:
        """LoRA on q,k,v,o,gate,up,down of every layer: rank * (in + out) per map. MoE: attention
        only (transformers 5 stores the experts as 3-D nn.Parameters, Qwen3MoeExperts, not nn.Linear)."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = (d + q) + (d + kv) * 2 + (q + d)
        mlp = 0 if self.is_moe else 3 * (d + self.intermediate)
        return rank * self.layers * (attn + mlp)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes


QWEN3: dict[str, ModelShape] = {
    m.name: m
    for m in [
        ModelShape(
            "Qwen3-0.6B",
            "Qwen/Qwen3-0.6B",
            hidden=1024,
            layers=28,
            heads=16,
            kv_heads=8,
            head_dim=128,
            intermediate=3072,
            vocab=151936,
            tied=True,
            max_position=40960,
        ),
        ModelShape(
            "Qwen3-1.7B",
            "Qwen/Qwen3-1.7B",
            hidden=2048,
            layers=28,
            heads=16,
            kv_heads=8,
            head_dim=128,
            intermediate=6144,
            vocab=151936,
            tied=True,
            max_position=40960,
        ),
        ModelShape(
            "Qwen3-4B",
            "Qwen/Qwen3-4B",
            hidden=2560,
            layers=36,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=9728,
            vocab=151936,
            tied=True,
            max_position=40960,
        ),
        ModelShape(
            "Qwen3-8B",
            "Qwen/Qwen3-8B",
            hidden=4096,
            layers=36,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=12288,
            vocab=151936,
            tied=False,
            max_position=40960,
        ),
        # MoE: every layer sparse (decoder_sparse_step 1, mlp_only_layers []); intermediate_size 6144 unused.
        ModelShape(
            "Qwen3-30B-A3B",
            "Qwen/Qwen3-30B-A3B",
            hidden=2048,
            layers=48,
            heads=32,
            kv_heads=4,
            head_dim=128,
            intermediate=6144,
            vocab=151936,
            tied=False,
            max_position=40960,
            experts=128,
            experts_per_token=8,
            moe_intermediate=768,
        ),
    ]
}
MODELS = tuple(QWEN3)
METHODS = ("full", "lora", "qlora")


def get_model(name: str) -> ModelShape:
    """Look a model up by name, case-insensitively ("qwen3-0.6b" works)."""
    for key, shape in QWEN3.items():
        if key.lower() == name.lower():
            return shape
    raise ValueError(f"未知模型 {name!r}；可选：{', '.join(MODELS)}")


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
ADAPTER_BYTES = (
    4,
    4,
    8,
    4,
)  # LoRA adapters are fp32 (peft autocast_adapter_dtype=True), AdamW m + v fp32
NF4_BYTES_PER_PARAM = (
    4 + 8 / 64 + 32 / (64 * 256)
) / 8  # 4-bit NF4, double-quantized block constants (QLoRA paper)
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
LOGPROB_CHUNK_ROWS = 128  # = solutions/l2_02_logprobs_and_masks.py CHUNK_ROWS
NOGRAD_CHUNK_BYTES = 12
CHUNK_BACKWARD_BYTES = 16  # chunk being recomputed in backward: fp32 upcast, x - lse, exp, grad
# The hidden-state path: rows per chunk on the GPU (= HIDDEN_CHUNK_ROWS in measure_vram.py and the 256
# in grpo_train.py). Its backward peak is one recomputed chunk (CHUNK_BACKWARD_BYTES per element)
# plus that chunk's fp32 gradient of the lm_head weight (V x H x 4) before it is added to the rest.
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
CUDA_CONTEXT_GIB = (
    0.5  # CUDA context + kernels; not in torch.cuda.memory_allocated (nvidia-smi shows it)
)
ALLOCATOR_SLACK = (
    0.05  # caching allocator: reserved exceeds allocated by ~5 % of the peak (fragmentation)
)
ENGINE_WORKSPACE_GIB = (
    1.0  # colocated vLLM: activation profile at 4096 batched tokens, sampler, CUDA graphs
)
# common.fast_decode (static cache + CUDA graphs): its bucket sizes, and the graph's private memory
# pool, estimated as the sampling working set (fp32 logits, processed logits, noise, log) per row.
FAST_BATCH_BUCKET, FAST_LEN_BUCKET, FAST_STEPS_PER_GRAPH = 16, 128, 16
FAST_POOL_BYTES = 16

FITS_MAX_USAGE = 0.85  # "fits": at least 15 % of the card left over ...
ANSWER_ROOM_TOKENS = (
    1024  # ... and answers can grow to 1024 tokens on the same card ("room to tune")
)
TIGHT_MAX_USAGE = 1.00  # "tight": runs, but one of the two fails; above 100 % of the card: "no"


# ---------------------------------------------------------------------------------------------
# Settings of one GRPO step
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything the ledger needs besides the model. Defaults: the course's Qwen3-0.6B recipe."""

    method: str = "full"  # full | lora | qlora
    prompts: int = 8  # P prompts per step
    group: int = 8  # G completions per prompt
    prompt_len: int = 256  # padded prompt tokens (chat template + GSM8K question)
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
    layout: str = (
        "policy"  # policy: the policy model generates (our script) | colocate: + a vLLM engine
    )
    engine_gb: float | None = (
        None  # colocate: the engine's share in GiB (None: exactly what it needs)
    )
    rollout_backend: str = (
        "eager"  # policy layout: eager (HF dynamic cache) | fast (common.fast_decode)
    )
    ref_bytes: int = 2  # reference weights: 2 = frozen bf16 copy (grpo_train.py), 4 = fp32 (TRL: the policy's dtype)
    # fast rollout only: gradients live in the decoder's KV buffer and weight copies between rollouts
    # (common.fast_decode.host_gradients, as grpo_train.py does)
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
        if self.beta < 0:
            raise ValueError(f"beta 不能为负，得到 {self.beta}")
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
            extras.append("fast rollout")
        return (
            f"P{self.prompts}×G{self.group}{roll}，prompt {self.prompt_len} + 回答 {self.max_new_tokens}，"
            f"micro-batch {self.mb}，β={self.beta:g}，{'/'.join(extras)}"
        )


# ---------------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------------


@dataclass
class Line:
    key: str
    label: str  # Chinese, printed
    nbytes: float
    formula: str  # how it was computed, printed


@dataclass
class Ledger:
    model: ModelShape
    settings: Settings
    gpu_gb: float
    lines: dict[str, Line] = field(default_factory=dict)
    phases: dict[str, float] = field(
        default_factory=dict
    )  # allocated bytes, per phase (peak inside it)

    def gib(self, key: str) -> float:
        return self.lines[key].nbytes / GiB if key in self.lines else 0.0

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def peak_allocated(self) -> float:
        return self.phases[self.peak_phase]

    @property
    def slack(self) -> float:
        return ALLOCATOR_SLACK * self.peak_allocated

    @property
    def context(self) -> float:
        return CUDA_CONTEXT_GIB * GiB

    @property
    def total(self) -> float:
        """What the card must hold at the peak: allocated + allocator slack + CUDA context."""
        return self.peak_allocated + self.slack + self.context

    @property
    def usage(self) -> float:
        return self.total / (self.gpu_gb * GiB)

    @property
    def answer_limit(self) -> int:
        """Largest max_new_tokens (multiple of 64) that still fits the card with the other settings unchanged."""
        return max_new_tokens_that_fit(self.model, self.settings, self.gpu_gb)

    @property
    def verdict(self) -> str:
        if self.usage > TIGHT_MAX_USAGE:
            return "no"
        return verdict(self.usage, self.answer_limit)


def verdict(usage: float, answer_limit: int | None = None) -> str:
    """no (> 100 % of the card) / tight (> 85 %, or answers capped below 1024 tokens) / fits."""
    if usage > TIGHT_MAX_USAGE:
        return "no"
    if usage > FITS_MAX_USAGE or (answer_limit is not None and answer_limit < ANSWER_ROOM_TOKENS):
        return "tight"
    return "fits"


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
    if (
        frozen
    ):  # under autocast (precision "fp32") lora_A keeps the bf16 recast of the fp32 input: 2 bytes
        cast = 2 if precision == "fp32" else 4
        return (
            8 * d
            + 4 * (hq + hkv)
            + rsqrt
            + attn
            + mlp
            + cast * adapter_in
            + n_adapters * 4 * lora_rank
        )
    norms = 20 * d if precision == "fp32" else 16 * d
    return norms + 6 * (hq + hkv) + rsqrt + attn + mlp


def nograd_layer_bytes_per_token(m: ModelShape) -> int:
    """Largest working set per token inside one layer when nothing is kept for backward (rollout
    prefill, reference forward): the residual input and norm output 4d plus the MLP's gate, up and
    SiLU outputs 6I (MoE: per routed expert, gathered input 2d + 6Ie)."""
    if m.is_moe:
        return 4 * m.hidden + m.experts_per_token * (2 * m.hidden + 6 * m.moe_intermediate)
    return 4 * m.hidden + 6 * m.intermediate


def _weights(m: ModelShape, s: Settings) -> tuple[float, int, str]:
    """(policy weight bytes, trainable params, formula)."""
    w, _, _, _ = PRECISIONS[s.precision]
    n = m.n_params()
    if s.method == "full":
        return n * w, n, f"{n / 1e9:.3f}B 参数 × {w} B"
    adapters = m.lora_params(s.lora_rank)
    if s.method == "lora":  # the frozen base stays bf16 (only trainable tensors get fp32 masters)
        return (
            n * COMPUTE_BYTES + adapters * ADAPTER_BYTES[0],
            adapters,
            (
                f"bf16 基座 {n / 1e9:.3f}B × {COMPUTE_BYTES} B + LoRA {adapters / 1e6:.1f}M × {ADAPTER_BYTES[0]} B"
            ),
        )
    lin = m.n_quantized_params()
    rest = n - lin
    base = lin * NF4_BYTES_PER_PARAM + rest * COMPUTE_BYTES
    rest_what = "专家/嵌入/范数" if m.is_moe else "嵌入/范数"
    return (
        base + adapters * ADAPTER_BYTES[0],
        adapters,
        (
            f"线性层 {lin / 1e9:.3f}B × {NF4_BYTES_PER_PARAM:.3f} B (NF4) + {rest_what} {rest / 1e9:.3f}B × 2 B"
            f" + LoRA {adapters / 1e6:.1f}M × 4 B"
        ),
    )


def ledger(
    model: ModelShape | str, settings: Settings | None = None, gpu_gb: float = 32.0
) -> Ledger:
    """The full breakdown for one model and one GRPO step's settings."""
    m = get_model(model) if isinstance(model, str) else model
    s = settings or Settings()
    L = Ledger(m, s, gpu_gb)
    add = lambda key, label, nbytes, formula: L.lines.__setitem__(
        key, Line(key, label, float(nbytes), formula)
    )

    w_bytes, trainable, w_formula = _weights(m, s)
    _, gb, ob, tb = ADAPTER_BYTES if s.method != "full" else PRECISIONS[s.precision]
    add("weights", "权重（策略模型）", w_bytes, w_formula)
    add("gradients", "梯度", trainable * gb, f"可训练 {trainable / 1e6:.1f}M × {gb} B")
    opt_what = {12: "fp32 主权重 + m + v", 8: "fp32 m + v", 4: "bf16 m + v"}[ob]
    if s.optimizer == "adamw8bit":  # only m and v shrink; an fp32 master copy ("mixed") stays
        ob = ob - 8 + ADAMW8BIT_STATE_BYTES
        opt_what = (
            "fp32 主权重 + 8-bit m + v" if ob > 8 else "8-bit m + v，每 256 个一个 fp32 scale"
        )
    add(
        "optimizer",
        "AdamW 状态",
        trainable * ob,
        f"可训练 {trainable / 1e6:.1f}M × {ob:g} B（{opt_what}）",
    )
    temp = trainable * tb if s.optimizer == "foreach" else 0
    temp_formula = f"foreach 一次算出全部 sqrt(v)：{trainable / 1e6:.1f}M × {tb} B"
    if s.optimizer == "fused":
        temp_formula = "fused：无"
    elif (
        s.optimizer == "adamw8bit"
    ):  # one tensor's m and v in fp32 at a time; the largest one counts
        largest = m.vocab * m.hidden if s.method == "full" else s.lora_rank * m.intermediate
        temp = largest * ADAMW8BIT_TEMP_BYTES
        temp_formula = (
            f"逐个参数反量化 m、v：最大的张量 {largest / 1e6:.1f}M × {ADAMW8BIT_TEMP_BYTES} B"
        )
    add("optimizer_temp", "AdamW step 临时量", temp, temp_formula)

    ref = 0.0
    if s.beta > 0 and s.method == "full":
        ref = m.n_params() * s.ref_bytes
        ref_formula = f"冻结的 {'bf16' if s.ref_bytes == 2 else 'fp32'} 副本：{m.n_params() / 1e9:.3f}B × {s.ref_bytes} B"
    elif s.beta > 0:
        ref_formula = "LoRA：关掉 adapter 就是参考模型，不占额外显存"
    else:
        ref_formula = "β=0：不需要参考模型"
    add("reference", "参考模型", ref, ref_formula)

    # ---- training forward/backward of one micro-batch ----
    mb, seq = s.mb, s.seq_len
    tokens = mb * seq
    per_layer = activation_bytes_per_token_layer(m, s.precision, s.method, s.lora_rank)
    resid = 4 if s.precision == "fp32" else 2
    final_norm = (8 if s.method == "full" else 4) * m.hidden  # final RMSNorm (+ lm_head input)
    layer_mask = (
        mb * seq * seq * COMPUTE_BYTES
    )  # SDPA keeps the padding mask, converted to bf16, per layer
    if s.checkpointing:
        act = tokens * (m.layers * resid * m.hidden + final_norm)
        act_formula = f"{mb}×{seq} token × ({m.layers} 层 × 检查点 {resid * m.hidden} B + 末层范数 {final_norm} B)"
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
    add("activations", "激活（一个 micro-batch 存下的）", act, act_formula)
    add("recompute", "反向时一层的工作区", recompute, re_formula)
    autocast_train = 0.0
    if s.precision == "fp32" and s.method == "full":
        # autocast caches a bf16 copy of every fp32 weight for as long as the autocast region lasts,
        # also under no_grad (rollout, old/reference log-probs). In training the matmuls keep them
        # for backward; with checkpointing only the lm_head's copy outlives the forward.
        add(
            "autocast_copies",
            "autocast 的 bf16 权重副本",
            m.n_params() * 2,
            "fp32 权重在 bf16 autocast 里的缓存副本（rollout、no_grad 前向；开检查点时反向里只剩 lm_head 那份）",
        )
        autocast_train = m.vocab * m.hidden * 2 if s.checkpointing else m.n_params() * 2

    positions = s.max_new_tokens if s.logits_over == "completion" else seq
    elems = mb * positions * m.vocab
    per = LOGPROB_BYTES[s.logprobs]
    logits = elems * per
    formula = f"{mb}×{positions} 位置 × {m.vocab} 词表 × {per:g} B（{s.logprobs}）"
    hidden_rows = min(HIDDEN_CHUNK_ROWS, mb * positions)
    if (
        s.logprobs == "hidden"
    ):  # no (B, T, V) tensor: one recomputed chunk + its lm_head weight grad
        lm_grad = m.vocab * m.hidden * 4 if s.method == "full" else 0
        logits = CHUNK_BACKWARD_BYTES * hidden_rows * m.vocab + lm_grad
        formula = (
            f"不出现 (B,T,V)：一块 {hidden_rows} 行 × {m.vocab} × {CHUNK_BACKWARD_BYTES} B"
            + (f" + 这块给 lm_head 的 fp32 梯度 {m.vocab}×{m.hidden}×4 B" if lm_grad else "")
        )
    if s.logprobs == "chunked_ckpt":
        # before the grads pile up, the first recomputed chunk's fp32 temporaries sit on top of
        # logits + copy + one slice grad (6 B per element); with few chunks that moment is the peak
        chunk = CHUNK_BACKWARD_BYTES * min(LOGPROB_CHUNK_ROWS, mb * positions) * m.vocab
        if 6 * elems + chunk > logits:
            logits, formula = 6 * elems + chunk, formula + "；块少：6 B/元素 + 一块 fp32 临时量"
    add("logits", "logits / log-prob（反向峰值）", logits, formula)

    # ---- no-grad forward for old (and reference) log-probs and the entropy, one micro-batch ----
    nograd = (
        elems * NOGRAD_LOGPROB_BYTES
        + NOGRAD_CHUNK_BYTES * min(LOGPROB_CHUNK_ROWS, mb * positions) * m.vocab
        + tokens * nograd_layer_bytes_per_token(m)
    )
    nograd_formula = f"bf16 logits + 拷贝 {mb}×{positions}×{m.vocab}×{NOGRAD_LOGPROB_BYTES} B + 一块 fp32 临时量 + 一层的中间量"
    if s.logprobs == "hidden":
        nograd = NOGRAD_CHUNK_BYTES * hidden_rows * m.vocab + tokens * nograd_layer_bytes_per_token(
            m
        )
        nograd_formula = (
            f"一块 fp32 临时量 {hidden_rows}×{m.vocab}×{NOGRAD_CHUNK_BYTES} B + 一层的中间量"
        )
    add("nograd_forward", "旧/参考 log-prob 前向（no_grad）", nograd, nograd_formula)

    # ---- rollout: the policy generates (policy), or a colocated engine holds weights + KV (colocate) ----
    kv = s.concurrent * seq * m.kv_bytes_per_token(COMPUTE_BYTES)
    kv_formula = f"{s.concurrent} 条 × {seq} token × {m.layers} 层 × 2 × {m.kv_heads} 头 × {m.head_dim} × 2 B"
    if s.layout == "policy" and s.rollout_backend == "eager":
        add("kv_cache", "rollout 的 KV cache", kv, kv_formula)
        prefill = (
            s.concurrent * s.prompt_len * nograd_layer_bytes_per_token(m)
        )  # one layer, during prefill
        sampling = (
            s.concurrent * m.vocab * (COMPUTE_BYTES + 4 * 3)
        )  # last-position logits + fp32 copies
        add(
            "rollout_workspace",
            "rollout 工作区",
            prefill + sampling,
            f"prefill 一层中间量 + 采样用 logits（{s.concurrent}×{m.vocab}，bf16 + 3 份 fp32）",
        )
    elif s.layout == "policy":
        # common.fast_decode: a StaticDecoder per shape bucket, cached on the model for the whole run:
        # static KV for the bucketed batch and length, bf16 copies of fp32 master weights, CUDA-graph pool
        rows = max(
            FAST_BATCH_BUCKET, math.ceil(s.concurrent / FAST_BATCH_BUCKET) * FAST_BATCH_BUCKET
        )
        steps = (
            1
            + math.ceil(max(s.max_new_tokens - 1, 0) / FAST_STEPS_PER_GRAPH) * FAST_STEPS_PER_GRAPH
        )
        slots = max(
            FAST_LEN_BUCKET,
            math.ceil((s.prompt_len + steps + 1) / FAST_LEN_BUCKET) * FAST_LEN_BUCKET,
        )
        static_kv = rows * slots * m.kv_bytes_per_token(COMPUTE_BYTES)
        # decode weights: fp32 master weights need bf16 copies of everything; LoRA needs merged bf16 copies
        # (W + s·B@A) of every adapted linear map (measured on the H200: 2.7 GiB for Qwen3-1.7B, see L1.04)
        if s.method == "full" and s.precision == "fp32":
            copies = m.n_params() * COMPUTE_BYTES
        elif s.method == "lora":
            copies = m.layers * (m.attn_params() + m.mlp_params()) * COMPUTE_BYTES
        else:
            copies = 0
        pool = FAST_POOL_BYTES * rows * m.vocab
        add(
            "fast_decoder",
            "快速解码器（常驻）",
            static_kv + copies + pool,
            f"静态 KV {rows} 行 × {slots} 槽 × {m.kv_bytes_per_token(COMPUTE_BYTES)} B {static_kv / GiB:.2f} GiB"
            f" + bf16 权重副本 {copies / GiB:.2f} GiB + CUDA graph 内存池 ≈ {rows}×{m.vocab}×{FAST_POOL_BYTES} B",
        )
        prefill_kv = s.concurrent * s.prompt_len * m.kv_bytes_per_token(COMPUTE_BYTES)
        prefill = s.concurrent * s.prompt_len * nograd_layer_bytes_per_token(m)
        add(
            "rollout_workspace",
            "rollout 工作区",
            prefill_kv + prefill,
            f"HF prefill 的动态 KV（{s.concurrent}×{s.prompt_len} token）+ 一层中间量",
        )
    else:
        if s.method == "full":
            engine_w = m.n_params() * COMPUTE_BYTES  # the engine serves bf16 weights
        else:
            engine_w = (
                w_bytes - m.lora_params(s.lora_rank) * ADAPTER_BYTES[0]
            )  # same base as training
        need = engine_w + kv + ENGINE_WORKSPACE_GIB * GiB
        engine = max(need, (s.engine_gb or 0) * GiB)
        note = ""
        if s.engine_gb:
            note = (
                f"；按 --engine-gb {s.engine_gb:g} 预留"
                if s.engine_gb * GiB >= need
                else f"；--engine-gb {s.engine_gb:g} 放不下全部并发，vLLM 会少跑几条（这里按所需计）"
            )
        add(
            "engine",
            "同卡推理引擎（vLLM colocate）",
            engine,
            f"权重副本 {engine_w / GiB:.2f} + KV（{kv_formula}）{kv / GiB:.2f} + 工作区 {ENGINE_WORKSPACE_GIB:g} GiB"
            + note,
        )

    # ---- phases (allocated bytes; steady state) ----
    g = L.lines
    loaded = g["weights"].nbytes + g["reference"].nbytes
    opt = g["optimizer"].nbytes
    grads = g["gradients"].nbytes
    get = lambda key: g[key].nbytes if key in g else 0.0
    autocast = get("autocast_copies")
    engine = get("engine") + get(
        "fast_decoder"
    )  # resident for the whole step (after the first rollout)
    # the fast decoder's prefill runs with the autocast weight cache off (common.fast_decode)
    rollout_autocast = 0.0 if "fast_decoder" in g else autocast
    # hosted gradients sit inside the decoder's buffers: no memory of their own
    if s.host_grads and "fast_decoder" in g:
        grads = max(0.0, grads - g["fast_decoder"].nbytes)
    L.phases = {
        "loaded": loaded + get("engine"),
        "rollout": loaded
        + opt
        + engine
        + rollout_autocast
        + get("kv_cache")
        + get("rollout_workspace"),
        "ref_forward": loaded + opt + engine + autocast + g["nograd_forward"].nbytes,
        # the logits' backward runs first and is freed before the layers' backward starts: max, not sum
        "backward": loaded
        + opt
        + engine
        + grads
        + act
        + max(g["logits"].nbytes + autocast_train, recompute),
        "optimizer": loaded + opt + engine + grads + temp,
        "after_step": loaded + opt + engine,
    }
    return L


PHASE_LABELS = {
    "loaded": "加载后",
    "rollout": "rollout 峰值",
    "ref_forward": "参考前向峰值",
    "backward": "反向峰值",
    "optimizer": "优化器 step 峰值",
    "after_step": "step 之后",
}


# ---------------------------------------------------------------------------------------------
# The fit table
# ---------------------------------------------------------------------------------------------

# The table answers the seed's question: can GRPO on this model run on one card with training and
# inference sharing it (TRL + vLLM colocate, the framework route of L3)? Every row uses the same
# course recipe; only the model and the method change. The engine keeps its own copy of the base
# weights (bf16; the 4-bit base for QLoRA) and the KV cache of all concurrent rollouts.
TABLE_BASE = Settings(layout="colocate")


def _largest(ok, hi: int) -> int:
    """Largest n in [1, hi] with ok(n) true, assuming ok is monotone (true, ..., true, false, ...); 0 if none."""
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def max_new_tokens_that_fit(
    model: ModelShape | str, settings: Settings, gpu_gb: float = 32.0, step: int = 64
) -> int:
    """Largest max_new_tokens (a multiple of `step`) that keeps the step within the card; 0 if none."""
    m = get_model(model) if isinstance(model, str) else model
    fits = lambda n: (
        ledger(m, dataclasses.replace(settings, max_new_tokens=n * step), gpu_gb).usage
        <= TIGHT_MAX_USAGE
    )
    return step * _largest(fits, (m.max_position - settings.prompt_len) // step)


def max_prompts_that_fit(
    model: ModelShape | str, settings: Settings, gpu_gb: float = 32.0, limit: int = 256
) -> int:
    """Largest number of prompts P per step (G and the rest unchanged, all P*G generated at once)
    that keeps the step within the card; 0 if none."""
    m = get_model(model) if isinstance(model, str) else model
    fits = lambda p: (
        ledger(m, dataclasses.replace(settings, prompts=p, rollout_batch=None), gpu_gb).usage
        <= TIGHT_MAX_USAGE
    )
    return _largest(fits, limit)


def _why(L: Ledger, answer_limit: int) -> str:
    if L.usage > TIGHT_MAX_USAGE:
        top = max(L.lines, key=L.gib)
        moe = "；专家全部驻留" if L.model.is_moe else ""
        return f"超出 {L.total / GiB - L.gpu_gb:.1f} GiB；最大的一项：{L.lines[top].label} {L.gib(top):.1f} GiB{moe}"
    notes = []
    if L.usage > FITS_MAX_USAGE:
        notes.append(f"余量不足 {1 - FITS_MAX_USAGE:.0%}")
    if answer_limit < ANSWER_ROOM_TOKENS:
        notes.append(f"回答最多 {answer_limit} token")
    if L.model.is_moe:
        notes.append("专家全部驻留")
    return "；".join(notes) or "有余量调参"


# L1.04's lab: Qwen3-1.7B full-parameter GRPO on 32 GB. Not the table's colocate recipe: the policy
# generates itself (fast rollout, gradients hosted in its buffers), 8-bit AdamW states, beta = 0 (no
# reference copy), log-probs from hidden states. Measured on the H200 at these settings (L1.04).
LAB_ROWS: tuple[tuple[str, Settings], ...] = (
    (
        "Qwen3-1.7B",
        Settings(
            layout="policy",
            rollout_backend="fast",
            precision="fp32",
            beta=0.0,
            micro_batch=8,
            logprobs="hidden",
            optimizer="adamw8bit",
            host_grads=True,
        ),
    ),
)


def _table_row(name: str, s: Settings, gpu_gb: float, method: str, note: str = "") -> dict:
    L = ledger(name, s, gpu_gb)
    limit = L.answer_limit
    return {
        "model": name,
        "method": method,
        "verdict": L.verdict,
        "total_gb": L.total / GiB,
        "usage": L.usage,
        "peak_phase": L.peak_phase,
        "breakdown": {k: line.nbytes / GiB for k, line in L.lines.items()},
        "overheads": {"allocator_slack": L.slack / GiB, "cuda_context": L.context / GiB},
        "settings": dataclasses.asdict(s),
        "max_new_tokens_fit": limit,
        "max_prompts_fit": max_prompts_that_fit(name, s, gpu_gb),
        "note": note + _why(L, limit),
    }


def lab_rows(gpu_gb: float = 32.0) -> list[dict]:
    """The LAB_ROWS as fit-table rows (method shown as "full8": full fine-tune, 8-bit AdamW)."""
    note = "实验：8-bit AdamW、β=0、hidden log-prob、快速 rollout（不是上面的 colocate 配方）；"
    return [_table_row(name, s, gpu_gb, "full8", note) for name, s in LAB_ROWS]


def fit_table(gpu_gb: float = 32.0, base: Settings = TABLE_BASE) -> list[dict]:
    """One row per model x method (same recipe `base` for all): verdict, breakdown in GiB, settings."""
    rows = []
    for name in MODELS:
        for method in METHODS:
            s = dataclasses.replace(base, method=method)
            L = ledger(name, s, gpu_gb)
            limit = L.answer_limit
            rows.append(
                {
                    "model": name,
                    "method": method,
                    "verdict": L.verdict,
                    "total_gb": L.total / GiB,
                    "usage": L.usage,
                    "peak_phase": L.peak_phase,
                    "breakdown": {k: line.nbytes / GiB for k, line in L.lines.items()},
                    "overheads": {
                        "allocator_slack": L.slack / GiB,
                        "cuda_context": L.context / GiB,
                    },
                    "settings": dataclasses.asdict(s),
                    "max_new_tokens_fit": limit,
                    "max_prompts_fit": max_prompts_that_fit(name, s, gpu_gb),
                    "note": _why(L, limit),
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------

MARK = {"fits": "✅ fits", "tight": "⚠️ tight", "no": "❌ no"}
COLUMNS = (
    ("weights", "权重"),
    ("gradients", "梯度"),
    ("optimizer", "优化器"),
    ("reference", "参考"),
    ("activations", "激活"),
    ("logits", "logits"),
    ("engine", "引擎"),
)


def width(text: str) -> int:
    """Terminal columns: CJK and emoji take two (the emoji variation selector after ⚠ adds one)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def cell(text: str, columns: int, right: bool = False) -> str:
    """Pad to a display width (for tables with Chinese labels)."""
    pad = " " * max(columns - width(text), 0)
    return pad + text if right else text + pad


def format_table(rows: list[dict], gpu_gb: float, base: Settings = TABLE_BASE) -> str:
    head = (
        cell("模型", 15)
        + cell("方式", 7)
        + cell("结论", 10)
        + cell("合计", 7, True)
        + cell("占比", 6, True)
        + "".join(cell(label, 8 if key == "optimizer" else 7, True) for key, label in COLUMNS)
        + cell("回答上限", 10, True)
        + cell("P 上限", 8, True)
        + "  说明"
    )
    out = [f"单卡 {gpu_gb:g} GiB 跑 GRPO：训推同卡（策略训练 + vLLM colocate），单位 GiB", head]
    for r in rows:
        b = r["breakdown"]
        line = (
            cell(r["model"], 15)
            + cell(r["method"], 7)
            + cell(MARK[r["verdict"]], 10)
            + cell(f"{r['total_gb']:.1f}", 7, True)
            + cell(f"{r['usage']:.0%}", 6, True)
            + "".join(
                cell(f"{b.get(key, 0):.1f}", 8 if key == "optimizer" else 7, True)
                for key, _ in COLUMNS
            )
            + cell(str(r["max_new_tokens_fit"] or "-"), 10, True)
            + cell(str(r["max_prompts_fit"] or "-"), 8, True)
            + "  "
            + r["note"]
        )
        out.append(line)
    out += [
        f"配方（每行相同）：{base.short()}。",
        f"合计 = 峰值阶段的 PyTorch 显存 + 分配器余量 {ALLOCATOR_SLACK:.0%} + CUDA 上下文 {CUDA_CONTEXT_GIB:g} GiB；"
        f"「回答上限」= 其余不变时 max_new_tokens 最多多少仍装得下；「P 上限」= G={base.group} 时每步最多几个 prompt。",
        f"结论：no = 超过 100%；tight = 装得下，但余量不足 {1 - FITS_MAX_USAGE:.0%} 或回答上限不到 {ANSWER_ROOM_TOKENS}；"
        "fits = 两条都满足。",
        "逐行拆开看：python -m common.vram --model Qwen3-4B --method lora",
    ]
    return "\n".join(out)


def explain(L: Ledger) -> str:
    m, s = L.model, L.settings
    out = [
        f"{m.name}（{m.hub_id}，{m.n_params() / 1e9:.3f}B 参数"
        + (f"，每 token 激活 {m.n_params(active_only=True) / 1e9:.2f}B" if m.is_moe else "")
        + f"）· {s.method}",
        f"设定：{s.short()}",
        "",
    ]
    for line in L.lines.values():
        out.append(f"  {cell(line.label, 34)}{line.nbytes / GiB:>7.2f} GiB   {line.formula}")
    out.append("")
    out.append("各阶段（PyTorch allocated，稳态：上一步的 AdamW 状态已在显存里）：")
    for ph, b in L.phases.items():
        mark = "  ← 峰值" if ph == L.peak_phase else ""
        out.append(f"  {cell(PHASE_LABELS[ph], 18)}{b / GiB:>7.2f} GiB{mark}")
    out.append(
        f"  + 分配器余量 {L.slack / GiB:.2f} GiB（{ALLOCATOR_SLACK:.0%}）+ CUDA 上下文 {L.context / GiB:.2f} GiB"
    )
    limit = L.answer_limit
    out.append(
        f"合计 {L.total / GiB:.2f} GiB / {L.gpu_gb:g} GiB = {L.usage:.0%}；回答上限 {limit or '-'} token"
        f" → {MARK[L.verdict]}（{_why(L, limit)}）"
    )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Measuring helpers (used by L1_concepts/04_vram_ledger/measure_vram.py)
# ---------------------------------------------------------------------------------------------


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


@contextlib.contextmanager
def peak_memory(label: str = "", device=None, verbose: bool = False):
    """Measure the CUDA memory of a block. Yields a dict filled on exit (bytes): peak and peak_reserved
    (max allocated / reserved inside the block), allocated and reserved (at exit), start (allocated at entry).
    On a machine without CUDA it yields {"cuda": False} and, if verbose, says so."""
    result: dict = {"label": label, "cuda": cuda_available()}
    if not result["cuda"]:
        if verbose:
            print(f"[peak_memory] {label}: 没有 CUDA，不测显存（CPU 上这一步只检查代码能跑通）")
        yield result
        return
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    result["start"] = torch.cuda.memory_allocated(device)
    try:
        yield result
    finally:
        torch.cuda.synchronize(device)
        result["peak"] = torch.cuda.max_memory_allocated(device)
        result["allocated"] = torch.cuda.memory_allocated(device)
        result["reserved"] = torch.cuda.memory_reserved(device)
        result["peak_reserved"] = torch.cuda.max_memory_reserved(device)
        if verbose:
            print(
                f"[peak_memory] {label}: peak {result['peak'] / GiB:.2f} GiB，"
                f"allocated {result['allocated'] / GiB:.2f} GiB，reserved {result['reserved'] / GiB:.2f} GiB"
            )


def cap_to_gpu_gb(gpu_gb: float = 32.0, device=None) -> float | None:
    """Emulate a smaller card: cap this process's PyTorch allocator at gpu_gb GiB via
    torch.cuda.set_per_process_memory_fraction(gpu_gb GiB / total). Returns the fraction,
    or None on a machine without CUDA. The CUDA context is outside the cap (on a real card it is not)."""
    if not cuda_available():
        print(f"[cap_to_gpu_gb] 没有 CUDA，跳过 {gpu_gb:g} GiB 显存上限的模拟")
        return None
    import torch

    total = torch.cuda.get_device_properties(device).total_memory
    if gpu_gb * GiB > total:
        raise ValueError(
            f"这张卡只有 {total / GiB:.1f} GiB，无法模拟 {gpu_gb:g} GiB；把 --cap-gb 调小或去掉"
        )
    fraction = gpu_gb * GiB / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """Flags for the fields of Settings (shared with measure_vram.py). Unset flags stay None."""
    p.add_argument("--method", choices=METHODS)
    p.add_argument("--prompts", type=int, help="每步 prompt 数 P")
    p.add_argument("--group", type=int, help="每个 prompt 采样条数 G")
    p.add_argument("--prompt-len", type=int, help="prompt 的 token 数（补齐后）")
    p.add_argument("--max-new-tokens", type=int, help="回答最多多少 token")
    p.add_argument("--rollout-batch", type=int, help="同时生成的条数（默认 P×G 全部一起）")
    p.add_argument("--micro-batch", type=int, help="每次前向/反向的序列数")
    p.add_argument("--beta", type=float, help="KL 系数；>0 需要参考模型")
    p.add_argument("--lora-rank", type=int)
    p.add_argument(
        "--precision", choices=tuple(PRECISIONS), help="mixed / fp32 / bf16，见 common/vram.py"
    )
    p.add_argument(
        "--checkpointing", action=argparse.BooleanOptionalAction, help="gradient checkpointing"
    )
    p.add_argument(
        "--logprobs",
        choices=tuple(LOGPROB_BYTES),
        help="log-prob 的算法（显存差别见 LOGPROB_BYTES）",
    )
    p.add_argument(
        "--logits-over", choices=("completion", "all"), help="只算回答位置的 logits，还是全部位置"
    )
    p.add_argument(
        "--optimizer",
        choices=("foreach", "fused", "adamw8bit"),
        help="foreach / fused：torch AdamW 的两种实现；adamw8bit：torchao 的 8-bit 状态",
    )
    p.add_argument(
        "--host-grads",
        action=argparse.BooleanOptionalAction,
        help="快速 rollout 时梯度借住解码器的 KV cache 和权重副本（grpo_train.py 的做法）",
    )
    p.add_argument(
        "--layout",
        choices=("policy", "colocate"),
        help="policy：策略模型自己生成；colocate：同卡 vLLM",
    )
    p.add_argument("--engine-gb", type=float, help="colocate 时给推理引擎预留多少 GiB")
    p.add_argument(
        "--rollout-backend",
        choices=("eager", "fast"),
        help="policy 布局的生成方式（common.rollout 的 backend）",
    )
    p.add_argument(
        "--ref-bytes",
        type=int,
        choices=(2, 4),
        help="参考模型每参数字节：2 = bf16（grpo_train.py），4 = fp32（TRL）",
    )


def settings_from_args(a: argparse.Namespace, base: Settings = Settings()) -> Settings:
    """`base` with every flag the user gave applied on top."""
    names = [f.name for f in dataclasses.fields(Settings)]
    given = {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}
    return dataclasses.replace(base, **given)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m common.vram",
        description="GRPO 显存账本。不带 --model：打印装箱表；带 --model：逐行拆开一个配置"
        "（默认就是表里那一行的设定，其余参数在它上面改）。",
    )
    p.add_argument("--model", help=f"模型：{', '.join(MODELS)}")
    p.add_argument(
        "--lab",
        action="store_true",
        help="装箱表末尾加上 L1.04 的实验行（1.7B 全参 + 8-bit AdamW）",
    )
    p.add_argument(
        "--gpu-gb", type=float, default=32.0, help="显卡显存（GiB），默认 32（RTX 5090）"
    )
    add_settings_args(p)
    a = p.parse_args(argv)
    if a.gpu_gb <= 0:
        p.error("--gpu-gb 必须为正数")
    try:
        if a.model is None:
            rows = fit_table(a.gpu_gb, settings_from_args(a, TABLE_BASE))
            print(
                format_table(
                    rows + (lab_rows(a.gpu_gb) if a.lab else []),
                    a.gpu_gb,
                    settings_from_args(a, TABLE_BASE),
                )
            )
        else:
            print(explain(ledger(get_model(a.model), settings_from_args(a, TABLE_BASE), a.gpu_gb)))
    except ValueError as e:
        print(f"错误：{e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
