"""Model presets: `tiny` (CPU, built in code), `qwen3-0.6b` (full fine-tune) and `qwen3-1.7b-lora` (peft).

    preset = get_preset("tiny")
    model, tokenizer = load_model(preset)                  # tiny: the shipped warm-start checkpoint
    model, tokenizer = load_model(preset, init="random")   # untrained, same shapes

`init="random"` builds the exact architecture (for the GPU presets: the real Qwen3 shapes) with random
weights and no download: that is what memory and speed work needs. `preset.defaults` is the preset's
named override of the training script's config (the CONFIG at the top of L2.07's grpo_train.py, whose
defaults are the tiny CPU run): the GRPO knobs a Qwen3 model on one 32 GB GPU needs differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.tokenizer import QWEN3_EOS_IDS, TINY_EOS_IDS, TINY_PAD_ID

# Where the tiny warm-start checkpoint lives (made by L2_algorithm/07_grpo_train/make_warmstart.py).
TINY_WARMSTART_DIR = Path(__file__).resolve().parent / "assets" / "tiny_warmstart"
QWEN3_PAD_ID = 151643  # <|endoftext|>

# The tiny model: a 4-layer Qwen3 (GQA, qk-norm, RoPE, SwiGLU, tied embeddings), ~1M parameters.
TINY_ARCH = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=256,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)

LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
INITS = ("pretrained", "random")


class PresetError(ValueError):
    """An unknown preset / init, or a preset this machine cannot run; the message says what to change."""


@dataclass(frozen=True)
class Preset:
    """One model choice. `defaults` overrides grpo_train.py's CONFIG for this preset (tiny: nothing)."""

    name: str
    hub_id: str | None  # None: built in code (tiny)
    needs_cuda: bool
    lora_rank: int | None  # None: full fine-tune
    dtype: torch.dtype
    eos_token_ids: tuple[int, ...]  # stop generating at any of these
    pad_token_id: int
    description: str
    defaults: dict = field(default_factory=dict)


def _qwen3_preset(
    name: str, hub_id: str, lora_rank: int | None, description: str, **overrides
) -> Preset:
    """A Qwen3 preset for one 32 GB GPU; `overrides` change its GRPO defaults."""
    defaults = dict(
        data="gsm8k",  # the shipped GSM8K; held-out = the first n_heldout test problems
        group_size=8,
        prompts_per_step=8,
        max_new_tokens=512,
        micro_batch=8,  # 8 条 × ~640 token 一次反向；显存账本见 L1.04
        lr=1e-6,
        beta=0.04,
        temperature=1.0,
        top_p=1.0,
        n_heldout=200,
    )
    return Preset(
        name=name,
        hub_id=hub_id,
        needs_cuda=True,
        lora_rank=lora_rank,
        dtype=torch.bfloat16,
        eos_token_ids=QWEN3_EOS_IDS,
        pad_token_id=QWEN3_PAD_ID,
        description=description,
        defaults={**defaults, **overrides},
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="tiny",
            hub_id=None,
            needs_cuda=False,
            lora_rank=None,
            dtype=torch.float32,
            eos_token_ids=TINY_EOS_IDS,
            pad_token_id=TINY_PAD_ID,
            description="4 层的小 Qwen3（约 1M 参数）+ 代码里训练的小 tokenizer，CPU 几分钟就能看到学习",
            defaults={},  # tiny 的设置就是 grpo_train.py 顶部 CONFIG 的默认值
        ),
        _qwen3_preset(
            "qwen3-0.6b",
            "Qwen/Qwen3-0.6B",
            None,
            "Qwen3-0.6B 全参数微调，bf16，单卡 5090（32 GB）",
        ),
        _qwen3_preset(
            "qwen3-1.7b-lora",
            "Qwen/Qwen3-1.7B",
            32,
            "Qwen3-1.7B + LoRA（r=32），bf16，单卡 5090；全参数放不下（光 AdamW 状态就约 20 GB）",
            prompts_per_step=4,  # 显存更紧：同时 rollout 的条数减半
            lr=1e-5,  # LoRA 的常用学习率比全参数高一个量级
        ),
    )
}


def get_preset(name: str | Preset) -> Preset:
    """The preset called `name` (a Preset passes through); unknown names raise PresetError (a ValueError)."""
    if isinstance(name, Preset):
        return name
    if name not in PRESETS:
        raise PresetError(f"未知的模型预设 {name!r}；可选：{', '.join(PRESETS)}")
    return PRESETS[name]


def model_config(preset: str | Preset):
    """The `Qwen3Config` of a preset (exact shapes; for `tiny` the vocab is the tiny tokenizer's)."""
    from transformers import Qwen3Config

    preset = get_preset(preset)
    if preset.hub_id is None:
        arch = dict(TINY_ARCH, vocab_size=_tiny_vocab_size())
    else:  # exact shapes: the hub's config.json values, kept once in common.vram
        from common.vram import QWEN3

        arch = next(
            shape for shape in QWEN3.values() if shape.hub_id == preset.hub_id
        ).config_dict()
    rope_theta = arch.pop("rope_theta")
    return Qwen3Config(
        **arch,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        attention_bias=False,
        attention_dropout=0.0,
        hidden_act="silu",
        pad_token_id=preset.pad_token_id,
        eos_token_id=list(preset.eos_token_ids),
        bos_token_id=None,
        dtype=preset.dtype,
    )


def _tiny_vocab_size() -> int:
    from common.tokenizer import build_tiny_tokenizer

    return len(build_tiny_tokenizer())  # cached: cheap after the first call


def resolve_device(preset: str | Preset, device=None) -> torch.device:
    """`device`, or the best one for the preset; a GPU preset without CUDA raises PresetError in Chinese.

    `device="meta"` is allowed for every preset: it builds the shapes without memory (for inspection/tests).
    """
    preset = get_preset(preset)
    if device is None:
        device = "cuda" if (preset.needs_cuda and torch.cuda.is_available()) else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PresetError(
            "指定了 device=cuda，但这台机器上 PyTorch 看不到 CUDA GPU；去掉这个设置，或换一台有 GPU 的机器。"
        )
    if preset.needs_cuda and device.type not in ("cuda", "meta"):
        raise PresetError(
            f"预设 {preset.name} 需要 NVIDIA GPU（CUDA），但这台机器上 torch.cuda.is_available() 为 False。"
            "没有 GPU：改用 --preset tiny（CPU 上几分钟就能跑完）；有 GPU：检查驱动和装的是不是 CUDA 版 PyTorch"
            '（python -c "import torch; print(torch.cuda.is_available())"）。'
        )
    return device


def load_model(preset: str | Preset, init: str = "pretrained", device=None):
    """Build the preset's model and tokenizer -> `(model, tokenizer)`; the model is on `device`, in train mode.

    - `init="pretrained"`: tiny = the warm-start checkpoint (TINY_WARMSTART_DIR); GPU presets = the hub weights.
    - `init="random"`: the same architecture, random weights (seed 0, global RNG untouched), no download;
      GPU presets use the offline Qwen3 tokenizer.
    - `qwen3-1.7b-lora` returns a peft model (LoRA on every linear layer of the blocks; base weights frozen).
    The tokenizer pads on the left (what batched generation needs).
    """
    preset = get_preset(preset)
    if init not in INITS:
        raise PresetError(f"未知的 init {init!r}；可选：{', '.join(INITS)}")
    device = resolve_device(preset, device)

    if preset.hub_id is None:
        model, tokenizer = _load_tiny(preset, init)
    else:
        model, tokenizer = _load_qwen3(preset, init, device)
    if preset.lora_rank is not None:
        model = _add_lora(model, preset.lora_rank)
    model.to(device)
    if (
        preset.needs_cuda
    ):  # keep only each layer's input for backward, recompute the rest (L1.04: ~10 GiB -> <1 GiB)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    tokenizer.padding_side = "left"
    return model, tokenizer


def _random_model(config, device: torch.device):
    """Random weights (seed 0; the global RNG is left untouched), built directly on `device` in `config.dtype`."""
    from transformers import AutoModelForCausalLM

    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=config.dtype)


def _load_tiny(preset: Preset, init: str):
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    from common.tokenizer import build_tiny_tokenizer

    if init == "random":
        return _random_model(model_config(preset), torch.device("cpu")), build_tiny_tokenizer()
    if not (TINY_WARMSTART_DIR / "model.safetensors").is_file():
        raise PresetError(
            f"找不到 tiny 的 warm-start checkpoint：{TINY_WARMSTART_DIR}。"
            "运行 `python L2_algorithm/07_grpo_train/make_warmstart.py` 重新生成（CPU 上几分钟），或用 init='random'。"
        )
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a 3 MB local file needs no "Loading weights" bar
    try:
        model = Qwen3ForCausalLM.from_pretrained(TINY_WARMSTART_DIR, dtype=preset.dtype)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(TINY_WARMSTART_DIR)
    return model, tokenizer


def _load_qwen3(preset: Preset, init: str, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.tokenizer import load_qwen3_tokenizer

    if init == "random":
        return _random_model(model_config(preset), device), load_qwen3_tokenizer(offline=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(preset.hub_id)
        model = AutoModelForCausalLM.from_pretrained(preset.hub_id, dtype=preset.dtype)
    except OSError as err:
        raise PresetError(
            f"无法从 Hugging Face 下载 {preset.hub_id}（{err}）。检查网络；国内可设 HF_ENDPOINT=https://hf-mirror.com；"
            "只想测显存/速度不需要权重：用 --init random。"
        ) from err
    return model, tokenizer


def _add_lora(model, rank: int):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=list(LORA_TARGET_MODULES),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
