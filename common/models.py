"""Model presets: `tiny` (CPU, built in code), `qwen3-0.6b` (full fine-tune) and `qwen3-1.7b-lora` (peft).

    preset = get_preset("tiny")
    model, tokenizer = load_model(preset)                  # tiny: the shipped warm-start checkpoint
    model, tokenizer = load_model(preset, init="random")   # untrained, same shapes
    model, tokenizer = load_model("qwen3-0.6b", model_path="./Qwen3-0.6B")  # a downloaded folder

`init="random"` builds the exact architecture (for the GPU presets: the real Qwen3 shapes) with random
weights and no download: that is what memory and speed work needs. `preset.defaults` is the preset's
named override of the training script's config (the CONFIG at the top of L2.07's grpo_train.py, whose
defaults are the tiny CPU run): the GRPO knobs a Qwen3 model on one 32 GB GPU needs differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.data import GSM8K_PROMPT_TOKENS_MAX
from common.ledger import Settings
from common.qwen3_shapes import ModelShape, shape_for_hub_id
from common.tokenizer import QWEN3_EOS_IDS, TINY_EOS_IDS, TINY_PAD_ID

# Where the tiny warm-start checkpoint lives (made by L2_algorithm/07_grpo_train/make_warmstart.py).
TINY_WARMSTART_DIR = Path(__file__).resolve().parent / "assets" / "tiny_warmstart"
MAKE_WARMSTART = "L2_algorithm/07_grpo_train/make_warmstart.py"
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
    else:  # exact shapes: the hub's config.json values, kept once in common.qwen3_shapes
        arch = shape_for_hub_id(preset.hub_id).config_dict()
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


def ledger_settings(preset: str | Preset) -> tuple[ModelShape, Settings] | None:
    """The VRAM ledger's (model shape, settings) for a preset as the training script runs it on a GPU.

    The policy generates its own rollouts (common.fast_decode; LoRA adapters are merged into its
    decode weights, gradients borrow its buffers between rollouts), fp32 master weights under bf16
    autocast, log-probs from the hidden states, checkpointing as `load_model` sets it, prompts as long
    as the longest GSM8K prompt (measured, common.data.GSM8K_PROMPT_TOKENS_MAX);
    P, G, answer length, beta and micro-batch from `preset.defaults` (else the ledger's defaults).
    None for a preset the ledger has no shape for (tiny: it is built in code and runs on the CPU).
    """
    preset = get_preset(preset)
    shape = shape_for_hub_id(preset.hub_id) if preset.hub_id else None
    if shape is None:
        return None
    d, base = preset.defaults, Settings()
    return shape, Settings(
        method="lora" if preset.lora_rank else "full",
        lora_rank=preset.lora_rank or base.lora_rank,
        prompts=d.get("prompts_per_step", base.prompts),
        group=d.get("group_size", base.group),
        max_new_tokens=d.get("max_new_tokens", base.max_new_tokens),
        beta=d.get("beta", base.beta),
        micro_batch=d.get("micro_batch", base.micro_batch),
        checkpointing=uses_gradient_checkpointing(preset),
        precision="fp32",
        layout="policy",
        rollout_backend="fast",
        prompt_len=GSM8K_PROMPT_TOKENS_MAX,  # the longest GSM8K prompt: the batch is padded to it
        logprobs="hidden",  # log-probs straight from the hidden states (L2.02 section 6)
        optimizer="fused",  # common.optim: torch's fused AdamW on CUDA
        host_grads=True,  # gradients live in the rollout buffers between rollouts
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


def uses_gradient_checkpointing(preset: str | Preset) -> bool:
    """Whether `load_model` turns gradient checkpointing on for this preset by default: the GPU presets
    keep only each layer's input for backward and recompute the rest (L1.04: ~10 GiB -> <1 GiB)."""
    return get_preset(preset).needs_cuda


def load_model(
    preset: str | Preset,
    init: str = "pretrained",
    device=None,
    model_path=None,
    gradient_checkpointing: bool | None = None,
):
    """Build the preset's model and tokenizer -> `(model, tokenizer)`; the model is on `device`, in train mode.

    - `init="pretrained"`: tiny = the warm-start checkpoint (TINY_WARMSTART_DIR); GPU presets = the hub
      weights, or the local folder `model_path` (checked first with `validate_model_dir`).
    - `init="random"`: the same architecture, random weights (seed 0, global RNG untouched), no download;
      GPU presets use the offline Qwen3 tokenizer.
    - `qwen3-1.7b-lora` returns a peft model (LoRA on every linear layer of the blocks; base weights frozen).
    - `gradient_checkpointing`: None = the preset's default (`uses_gradient_checkpointing`); the one
      place in the course that turns it on (non-reentrant, so it works with frozen inputs and LoRA).
    The tokenizer pads on the left (what batched generation needs).
    """
    preset = get_preset(preset)
    if gradient_checkpointing is None:
        gradient_checkpointing = uses_gradient_checkpointing(preset)
    if init not in INITS:
        raise PresetError(f"未知的 init {init!r}；可选：{', '.join(INITS)}")
    if model_path is not None:
        if init != "pretrained":
            raise PresetError(
                f"给了模型目录 {model_path}，又要求 init={init!r}：从目录加载就是用那份权重，去掉 --init random。"
            )
        model_path = validate_model_dir(model_path, preset)
    device = resolve_device(preset, device)

    if preset.hub_id is None:
        model, tokenizer = _load_tiny(preset, init, model_path)
    else:
        model, tokenizer = _load_qwen3(preset, init, device, model_path)
    if preset.lora_rank is not None:
        model = _add_lora(model, preset.lora_rank)
    model.to(device)
    if gradient_checkpointing:
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


def _load_tiny(preset: Preset, init: str, model_path: Path | None = None):
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    from common.tokenizer import build_tiny_tokenizer

    if init == "random":
        return _random_model(model_config(preset), torch.device("cpu")), build_tiny_tokenizer()
    folder = model_path or TINY_WARMSTART_DIR  # a folder given with --model was validated already
    if not (folder / "model.safetensors").is_file():
        raise PresetError(
            f"找不到 tiny 的 warm-start checkpoint：{folder}。"
            f"运行 `python {MAKE_WARMSTART}` 重新生成，或用 init='random'。"
        )
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a 3 MB local file needs no "Loading weights" bar
    try:
        model = Qwen3ForCausalLM.from_pretrained(folder, dtype=preset.dtype)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    return model, tokenizer


def _load_qwen3(preset: Preset, init: str, device: torch.device, model_path: Path | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.tokenizer import load_qwen3_tokenizer

    if init == "random":
        return _random_model(model_config(preset), device), load_qwen3_tokenizer(offline=True)
    if model_path is not None:  # already validated: only a broken file can fail here
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=preset.dtype, local_files_only=True
            )
        except (OSError, ValueError, RuntimeError) as err:
            raise PresetError(
                f"从 {model_path} 加载 {preset.hub_id} 失败（{type(err).__name__}: {err}）。"
                "文件可能损坏：删掉这个目录重新下载（做法见 README「权重从哪来」）。"
            ) from err
        return model, tokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(preset.hub_id)
        model = AutoModelForCausalLM.from_pretrained(preset.hub_id, dtype=preset.dtype)
    except OSError as err:
        raise PresetError(
            f"无法从 Hugging Face 下载 {preset.hub_id}（{err}）。检查网络；国内可设 HF_ENDPOINT=https://hf-mirror.com，"
            f"或用 ModelScope 下载到本地目录再加 --model 目录（见 README「权重从哪来」）；"
            "只想测显存/速度不需要权重：用 --init random。"
        ) from err
    return model, tokenizer


# ---------------------------------------------------------------------------------------------
# A local model folder (modelscope download / hf download): checked before loading
# ---------------------------------------------------------------------------------------------
# config.json fields that must equal the preset's (common.models.model_config): the weights' shapes.
SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
_SAFETENSORS_MAX_HEADER = 100_000_000  # sanity bound on the JSON header (real ones: tens of KB)


def _read_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PresetError(
            f"{path} 读不出来（{type(err).__name__}: {err}）：{what}。重新下载这个文件。"
        ) from None
    if not isinstance(value, dict):
        raise PresetError(f"{path} 应该是一个 JSON 对象：{what}。重新下载这个文件。")
    return value


def _check_safetensors(path: Path) -> None:
    """The file is a whole safetensors file: its header says how long it must be (reads the header only)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if head.startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
            raise PresetError(
                f"{path} 是 Git LFS 的指针文件（{size} 字节），不是权重：用 git clone 下载时没装 git-lfs。"
                "装好 git-lfs 后在目录里运行 git lfs pull，或改用 modelscope download / hf download 下载。"
            )
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        header = f.read(n) if 0 < n <= _SAFETENSORS_MAX_HEADER else b""
    try:
        tensors = json.loads(header)
        end = max(
            (t["data_offsets"][1] for k, t in tensors.items() if k != "__metadata__"), default=0
        )
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise PresetError(
            f"{path} 不是完整的 safetensors 文件（文件头读不出来，{size} 字节）：下载多半中断了，删掉它重新下载。"
        ) from None
    if size != 8 + n + end:
        raise PresetError(
            f"{path} 不完整：文件头说应有 {8 + n + end:,} 字节，实际是 {size:,} 字节。"
            "下载中断了：删掉这个文件，重新运行下载命令。"
        )


def _weight_files(folder: Path) -> list[Path]:
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        weight_map = _read_json(index, "分片权重的索引").get("weight_map")
        names = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if not names or not all(isinstance(name, str) for name in names):
            raise PresetError(f"{index} 里没有 weight_map：索引文件不完整，重新下载。")
        files = [folder / name for name in sorted(set(names))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise PresetError(
                f"{folder} 缺少 {len(missing)} 个权重分片：{', '.join(missing)}（{WEIGHTS_INDEX} 里列了它们）。"
                "下载没完成：重新运行下载命令。"
            )
        return files
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    others = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt"))
    raise PresetError(
        f"{folder} 里没有权重：要有 {WEIGHTS_FILE}，或分片的 {WEIGHTS_INDEX} + 各分片"
        + (f"（只找到 {', '.join(others)}）" if others else "")
        + "。下载没完成，或下载的不是完整的模型仓库。"
    )


def _check_tokenizer(folder: Path) -> None:
    has_fast = (folder / "tokenizer.json").is_file()
    has_bpe = (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()
    config = folder / "tokenizer_config.json"
    if not (has_fast or has_bpe) or not config.is_file():
        raise PresetError(
            f"{folder} 里没有完整的 tokenizer：要有 tokenizer_config.json，以及 tokenizer.json"
            "（或 vocab.json + merges.txt）。下载整个模型仓库，不要只下权重。"
        )
    if (
        "chat_template" not in _read_json(config, "tokenizer 的设置")
        and not (folder / "chat_template.jinja").is_file()
    ):
        raise PresetError(
            f"{folder} 的 tokenizer 没有 chat template（tokenizer_config.json 里没有 chat_template，"
            "也没有 chat_template.jinja）：这不是对话模型 Qwen3 的原版文件，重新下载。"
        )


def validate_model_dir(path, preset: str | Preset) -> Path:
    """Check a local folder for `preset` without loading any weights; return it as a Path.

    Reads config.json, tokenizer_config.json and each safetensors header (a few KB) and lists files.
    For `tiny` the folder is a warm start written by make_warmstart.py (`--out DIR`).
    Raises PresetError (Chinese, names the path and what is wrong) for: a missing folder, a
    missing/unreadable config.json, `model_type` other than qwen3, shapes other than `model_config(preset)`'s (all mismatches listed), missing or truncated weights (single file
    or sharded with an index; a Git LFS pointer), a missing tokenizer or chat template.
    """
    preset = get_preset(preset)
    folder = Path(path).expanduser()
    # where a right folder comes from: the hub / a mirror, or (tiny) make_warmstart.py
    source = preset.hub_id or f"tiny 的 warm start（`python {MAKE_WARMSTART} --out 目录` 生成）"
    if not folder.is_dir():
        what = "不是目录" if folder.exists() else "不存在"
        how = (
            f"先下载 {preset.hub_id}（见 README「权重从哪来」），再把 --model 指向下载到的目录。"
            if preset.hub_id
            else f"先用 `python {MAKE_WARMSTART} --out 目录` 生成；不给 --model 就用仓库附带的那个。"
        )
        raise PresetError(f"模型目录{what}：{folder}。{how}")
    if not (folder / "config.json").is_file():
        raise PresetError(
            f"{folder} 里没有 config.json：这不是一个 Hugging Face 格式的模型目录"
            f"（{source} 的目录里有 config.json、model.safetensors、tokenizer.json 等）。"
        )
    config = _read_json(folder / "config.json", "模型的结构设置")
    if config.get("model_type") != "qwen3":
        raise PresetError(
            f"{folder / 'config.json'} 的 model_type 是 {config.get('model_type')!r}，不是 'qwen3'："
            f"预设 {preset.name} 要的是 {source}（稠密的 Qwen3）。"
        )
    expected = model_config(preset)
    wrong = [
        f"{key} = {config.get(key, '（缺）')}，应为 {getattr(expected, key)}"
        for key in SHAPE_FIELDS
        if config.get(key) != getattr(expected, key)
    ]
    if wrong:
        match = [
            other.name
            for other in PRESETS.values()
            if other.hub_id is not None
            and other.name != preset.name
            and all(config.get(k) == getattr(model_config(other), k) for k in SHAPE_FIELDS)
        ]
        hint = f"这是 {match[0]} 的形状：改用 --preset {match[0]}，" if match else ""
        raise PresetError(
            f"{folder / 'config.json'} 的形状与预设 {preset.name}（{source}）不符："
            + "；".join(wrong)
            + f"。{hint}或者换成 {source}。"
        )
    for weights in _weight_files(folder):
        _check_safetensors(weights)
    _check_tokenizer(folder)
    return folder


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
