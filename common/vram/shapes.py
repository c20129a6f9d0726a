"""Model shapes: one source of truth for the models (common.model.models) and the VRAM ledger (common.vram).

Two dense families are supported end to end: Qwen3 (q/k RMSNorm, no biases) and Qwen2 / Qwen2.5
(q/k/v biases, no q/k norm). A shape comes either from the named table below or from any model
folder's config.json (`ModelShape.from_config_json`), so the ledger can price a folder it has never
seen. MoE shapes (Qwen3-30B-A3B) are in the table for the fit verdict only: no script trains them.

The numbers are each hub repo's config.json, written out below. Qwen3: Qwen/Qwen3-0.6B, -1.7B, -4B,
-8B, -30B-A3B; cross-checked against slime's Megatron model arguments (zyzshishui/slime, a THUDM/slime
fork: scripts/models/qwen3-{0.6B,1.7B,4B,8B,30B-A3B}.sh). Qwen2.5: Qwen/Qwen2.5-0.5B-Instruct,
Qwen/Qwen2.5-1.5B-Instruct, Qwen/Qwen2.5-Math-1.5B (hub configs as published; the Math model keeps
rope_theta 10000 and a 4096-token context). Parameter counts are derived from the shapes (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

# model_type values of config.json, by what the course can do with them
DENSE_FAMILIES = ("qwen3", "qwen2")  # trained by every script (HF, fast decoder, vLLM, TRL)
MOE_TYPES = ("qwen3_moe", "qwen2_moe")  # priced by the ledger's table only: experts stay resident
# the supported families, as the refusals name them
SUPPORTED_FAMILIES = "稠密的 Qwen3（model_type qwen3）和 Qwen2 / Qwen2.5（model_type qwen2）"


class ShapeError(ValueError):
    """A config.json the shapes cannot be read from; the message (Chinese) says what is wrong."""


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
    family: str = "qwen3"  # model_type: qwen3 (q/k norm, no biases) | qwen2 (q/k/v biases)

    @property
    def qk_norm(self) -> bool:
        """Qwen3 normalises q and k per head (RMSNorm over head_dim); Qwen2 does not."""
        return self.family.startswith("qwen3")

    @property
    def attention_bias(self) -> bool:
        """Qwen2 / Qwen2.5 have biases on q, k and v (not on o); Qwen3 has none."""
        return self.family.startswith("qwen2")

    @classmethod
    def from_config_json(cls, cfg: dict, name: str = "", hub_id: str = "") -> ModelShape:
        """The shape of a model folder's config.json (a dict), for Qwen2 / Qwen2.5 / Qwen3 (dense or MoE).

        Raises ShapeError (Chinese) for another model_type or a missing field.
        """
        kind = cfg.get("model_type")
        if kind not in DENSE_FAMILIES + MOE_TYPES:
            raise ShapeError(
                f"model_type {kind!r} 不是账本认识的 Qwen 家族（{', '.join(DENSE_FAMILIES)}）"
            )
        need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        missing = [k for k in need + ("vocab_size",) if not isinstance(cfg.get(k), int)]
        if missing:
            raise ShapeError(f"config.json 缺少（或不是整数）：{', '.join(missing)}")
        rope = cfg.get("rope_parameters") or {}
        heads = cfg["num_attention_heads"]
        return cls(
            name or cfg.get("_name_or_path") or "model",
            hub_id or cfg.get("_name_or_path") or "",
            hidden=cfg["hidden_size"],
            layers=cfg["num_hidden_layers"],
            heads=heads,
            kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate=cfg["intermediate_size"],
            vocab=cfg["vocab_size"],
            tied=bool(cfg.get("tie_word_embeddings", False)),
            max_position=cfg.get("max_position_embeddings") or 32768,
            experts=cfg.get("num_experts") or 0,
            experts_per_token=cfg.get("num_experts_per_tok") or 0,
            moe_intermediate=cfg.get("moe_intermediate_size") or 0,
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 1_000_000.0))),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            family=kind.removesuffix("_moe"),
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

    def hf_config(self, *, pad_token_id: int, eos_token_ids, dtype=None):
        """The transformers config (Qwen3Config / Qwen2Config) of this exact shape: `config_dict`
        plus the fixed parts of the family (activation, rope type, no attention dropout) and the
        stop tokens. dtype: a torch dtype (default bfloat16)."""
        import torch
        from transformers import Qwen2Config, Qwen3Config

        arch = self.config_dict()
        rope_theta = arch.pop("rope_theta")
        kind = Qwen3Config if self.family == "qwen3" else Qwen2Config
        extra = (
            {"attention_bias": False} if self.family == "qwen3" else {"use_sliding_window": False}
        )
        return kind(
            **arch,
            **extra,
            rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
            attention_dropout=0.0,
            hidden_act="silu",
            pad_token_id=pad_token_id,
            eos_token_id=list(eos_token_ids),
            bos_token_id=None,
            dtype=torch.bfloat16 if dtype is None else dtype,
        )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # ---- parameter counts, from the shapes (Qwen3: q/k RMSNorm; Qwen2: q/k/v biases) ----
    def attn_params(self) -> int:
        """q, k, v, o projections of one layer (with Qwen2's q/k/v biases)."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        bias = q + 2 * kv if self.attention_bias else 0
        return d * q + 2 * d * kv + q * d + bias

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
        """input + post-attention RMSNorm (hidden each) + Qwen3's q_norm, k_norm (head_dim each)."""
        return 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)

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
            # attention + router
            return self.layers * (self.attn_params() + self.hidden * self.experts)
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


SHAPES: dict[str, ModelShape] = {
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
        # Qwen2.5: q/k/v biases, no q/k norm, two KV heads (a small KV cache per token).
        ModelShape(
            "Qwen2.5-0.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            hidden=896,
            layers=24,
            heads=14,
            kv_heads=2,
            head_dim=64,
            intermediate=4864,
            vocab=151936,
            tied=True,
            max_position=32768,
            family="qwen2",
        ),
        ModelShape(
            "Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-1.5B-Instruct",
            hidden=1536,
            layers=28,
            heads=12,
            kv_heads=2,
            head_dim=128,
            intermediate=8960,
            vocab=151936,
            tied=True,
            max_position=32768,
            family="qwen2",
        ),
        # the model of Stanford CS336 assignment 5: a base model, rope_theta 10000, 4096-token context
        ModelShape(
            "Qwen2.5-Math-1.5B",
            "Qwen/Qwen2.5-Math-1.5B",
            hidden=1536,
            layers=28,
            heads=12,
            kv_heads=2,
            head_dim=128,
            intermediate=8960,
            vocab=151936,
            tied=True,
            max_position=4096,
            rope_theta=10000.0,
            family="qwen2",
        ),
    ]
}
MODELS = tuple(SHAPES)


def get_model(name: str) -> ModelShape:
    """Look a model up by name, case-insensitively ("qwen3-0.6b" works)."""
    for key, shape in SHAPES.items():
        if key.lower() == name.lower():
            return shape
    raise ValueError(f"未知模型 {name!r}；可选：{', '.join(MODELS)}")


def shape_for_hub_id(hub_id: str) -> ModelShape | None:
    """The shape of a hub repo ("Qwen/Qwen3-0.6B"), or None if it is not in SHAPES."""
    return next((m for m in SHAPES.values() if m.hub_id == hub_id), None)
