"""The Qwen3 model shapes: one source of truth for the model presets (common.models) and the VRAM
ledger (common.ledger).

The numbers are the config.json of each hub repo (Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B,
Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B), written out below; cross-checked against slime's Megatron model
arguments (zyzshishui/slime, a THUDM/slime fork: scripts/models/qwen3-{0.6B,1.7B,4B,8B,30B-A3B}.sh).
Parameter counts are derived from the shapes (no torch needed).
"""

from __future__ import annotations

from dataclasses import dataclass


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


def get_model(name: str) -> ModelShape:
    """Look a model up by name, case-insensitively ("qwen3-0.6b" works)."""
    for key, shape in QWEN3.items():
        if key.lower() == name.lower():
            return shape
    raise ValueError(f"未知模型 {name!r}；可选：{', '.join(MODELS)}")


def shape_for_hub_id(hub_id: str) -> ModelShape | None:
    """The shape of a hub repo ("Qwen/Qwen3-0.6B"), or None if it is not in QWEN3."""
    return next((m for m in QWEN3.values() if m.hub_id == hub_id), None)
