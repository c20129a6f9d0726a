"""Models: which one a run trains (`ModelSpec`), on which device, and loading it.

    spec = model_spec(None)                          # the tiny model (the shipped warm start)
    spec = model_spec("Qwen/Qwen3-0.6B")             # a hub id the course knows the shape of
    spec = model_spec("./Qwen2.5-0.5B-Instruct")     # any dense Qwen2 / Qwen2.5 / Qwen3 chat folder
    model, tokenizer = load_model(spec, init="pretrained", lora_rank=0)
    model, tokenizer = load_model("qwen3-0.6b", init="random")     # a preset name works too
    t = load_for_training(spec, device, cfg)  # + reference copy, fp32 master weights, optimizer

`init="random"` builds the exact architecture with random weights and no download: what memory and
speed work needs. Which model a training config trains (and full fine-tune or LoRA) is decided
before this, by common.config.model_plan.plan_model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from common.model.model_dir import MAKE_WARMSTART, ModelFolder, inspect_model_dir
from common.model.optim import make_optimizer
from common.model.tokenizer import QWEN3_EOS_IDS, TINY_EOS_IDS, TINY_PAD_ID
from common.options.choices import INITS
from common.options.presets import PresetError, get_preset, preset_names
from common.vram.ledger import HIDDEN_CHUNK_ROWS  # noqa: F401  (offered: the log-prob head's chunk)
from common.vram.measure import cap_to_gpu_gb
from common.vram.shapes import MODELS, SHAPES, ModelShape, shape_for_hub_id

# Where the tiny warm-start checkpoint lives (made by L2_algorithm/07_grpo_train/make_warmstart.py).
TINY_WARMSTART_DIR = Path(__file__).resolve().parents[1] / "assets" / "tiny_warmstart"
QWEN_PAD_ID = 151643  # <|endoftext|> in every Qwen2.5 / Qwen3 tokenizer
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
# On a machine without CUDA, models up to this size train on the CPU (tests, curious learners);
# a bigger one is refused with the GPU memory the ledger says it needs.
CPU_MAX_PARAMS = 50_000_000
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelSpec:
    """One model to train: where it comes from, its shape and its stop tokens."""

    name: str  # what the user gave: "tiny", a hub id, or a folder
    source: str | Path | None  # hub id, local folder, or None (the shipped tiny warm start)
    shape: ModelShape
    eos_token_ids: tuple[int, ...]  # stop generating at any of these
    pad_token_id: int
    tiny: bool = False  # the course's tiny model: its own tokenizer, the CPU, fp32
    warmstart: dict | None = None  # a make_warmstart.py folder's warmstart.json

    @property
    def needs_cuda(self) -> bool:
        return not self.tiny and self.shape.n_params() > CPU_MAX_PARAMS

    @property
    def stop_tokens(self) -> dict:
        """The pad and EOS ids, as `ModelShape.hf_config` takes them."""
        return {"pad_token_id": self.pad_token_id, "eos_token_ids": self.eos_token_ids}

    @property
    def is_folder(self) -> bool:
        return isinstance(self.source, Path)


def tiny_shape() -> ModelShape:
    from common.model.tokenizer import build_tiny_tokenizer

    cfg = dict(TINY_ARCH, vocab_size=len(build_tiny_tokenizer()), model_type="qwen3")
    return ModelShape.from_config_json(cfg, name="tiny", hub_id="")


def _from_folder(folder: ModelFolder, name: str) -> ModelSpec:
    return ModelSpec(
        name=name,
        source=folder.path,
        shape=folder.shape,
        eos_token_ids=folder.eos_token_ids,
        pad_token_id=folder.pad_token_id,
        tiny=folder.warmstart is not None,
        warmstart=folder.warmstart,
    )


def model_spec(model: str | Path | None = None, expect: ModelShape | None = None) -> ModelSpec:
    """The ModelSpec of `model`: None = tiny, a known hub id, or a local folder (checked, no weights read).

    expect: the shape a named preset needs (`--preset NAME --model DIR`): the folder must match it.
    Raises ModelDirError / PresetError (Chinese) for a folder or a name the course cannot use.
    """
    if model is None or model == "tiny":
        return ModelSpec("tiny", None, tiny_shape(), TINY_EOS_IDS, TINY_PAD_ID, tiny=True)
    path = Path(model).expanduser()
    known = shape_for_hub_id(str(model))
    if known is not None and not path.exists():
        return ModelSpec(str(model), str(model), known, QWEN3_EOS_IDS, QWEN_PAD_ID)
    looks_like_hub_id = (
        "/" in str(model) and not path.exists() and not str(model).startswith((".", "/", "~"))
    )
    if looks_like_hub_id and expect is None:
        hubs = ", ".join(SHAPES[m].hub_id for m in MODELS if not SHAPES[m].is_moe)
        raise PresetError(
            f"不认识的模型 {model!r}：也不是本地目录。先把它下载到本地（见 README「权重从哪来」），"
            f"再 --model 目录；或者用课程认识形状的 hub 名字：{hubs}"
        )
    return _from_folder(inspect_model_dir(path, expect=expect), str(model))


def setup_device(
    spec: ModelSpec, cap_gb: float | None = None, device=None, *, one_cpu_thread: bool = True
) -> torch.device:
    """A trainer's device, set up (grpo_train.py and train_trl.py both call this): resolve_device(spec,
    device), then on a GPU cap PyTorch at ``cap_gb`` GiB (a bigger card playing a 5090), allow TF32
    matmuls (the fp32 log-prob chunks, L2.02) and turn cuDNN's attention off (below); on a CPU with
    ``one_cpu_thread`` one thread (tiny matrices: threads cost more than they save, and the result
    does not depend on the core count). ``device``: e.g. cuda:<local rank> for one of several
    processes; None picks the best one for ``spec``."""
    device = resolve_device(spec, device)
    cuda = device.type == "cuda"
    if cuda and cap_gb is not None:
        cap_to_gpu_gb(cap_gb, device if device.index is not None else None)  # None: current card
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    # cuDNN's attention backward returns NaN in grad_q on H100/H200 (torch >= 2.11) when a mask is
    # passed and the width is 64 mod 128 (pytorch/pytorch#196678, huggingface/trl#7181). The training
    # forward always passes a mask (left padding), so SDPA uses the memory-efficient kernel instead.
    torch.backends.cuda.enable_cudnn_sdp(False)
    if not cuda and one_cpu_thread:
        torch.set_num_threads(1)
    return device


def resolve_device(spec: ModelSpec, device=None) -> torch.device:
    """`device`, or the best one for `spec`; a model too big for a CPU on a CUDA-less machine raises PresetError.

    `device="meta"` is always allowed: it builds the shapes without memory (for inspection/tests).
    """
    if device is None:
        device = "cpu" if spec.tiny or not torch.cuda.is_available() else "cuda"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PresetError(
            "指定了 device=cuda，但这台机器上 PyTorch 看不到 CUDA GPU；去掉这个设置，或换一台有 GPU 的机器。"
        )
    if spec.needs_cuda and device.type not in ("cuda", "meta"):
        n = spec.shape.n_params() / 1e6
        raise PresetError(
            f"{spec.name}（{n:.0f}M 参数）需要 NVIDIA GPU（CUDA），但这台机器上 torch.cuda.is_available() 为 False；"
            f"CPU 上只跑 ≤ {CPU_MAX_PARAMS / 1e6:.0f}M 参数的小模型（测试和好奇的学习者用）。"
            f"在 GPU 上它需要多少显存：python -m common.vram --model {spec.name}。"
            "没有 GPU：改用 --preset tiny（CPU 上几分钟就能跑完）；有 GPU：检查驱动和装的是不是 CUDA 版 PyTorch"
            '（python -c "import torch; print(torch.cuda.is_available())"）。'
        )
    return device


def compute_dtype(spec: ModelSpec, device: torch.device) -> torch.dtype:
    """bf16 on a GPU (fp32 master weights are made by the script), fp32 on a CPU and for tiny."""
    return torch.bfloat16 if device.type in ("cuda", "meta") and not spec.tiny else torch.float32


def uses_gradient_checkpointing(spec: ModelSpec, device: torch.device) -> bool:
    """GPU runs keep only each layer's input for backward and recompute the rest (L1.04: ~10 GiB -> <1 GiB)."""
    return device.type in ("cuda", "meta") and not spec.tiny


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
def _as_spec(model, model_path) -> tuple[ModelSpec, int]:
    """(spec, the preset's LoRA rank) from a ModelSpec, a preset name, and an optional folder."""
    if isinstance(model, ModelSpec):
        return model, 0
    name = model or "tiny"
    if name in preset_names():
        preset = get_preset(name)
        expect = shape_for_hub_id(preset.model) if preset.model else None
        if model_path is not None:
            return model_spec(model_path, expect=expect), preset.lora_rank
        return model_spec(preset.model), preset.lora_rank
    return model_spec(model_path or name), 0


def load_model(
    model: ModelSpec | str | None = None,
    init: str = "pretrained",
    device=None,
    model_path=None,
    lora_rank: int | None = None,
    gradient_checkpointing: bool | None = None,
):
    """Build a model and its tokenizer -> `(model, tokenizer)`; the model is on `device`, in train mode.

    model: a ModelSpec, or a preset name (then `model_path` may name a folder of that preset's shape).
    - `init="pretrained"`: the tiny warm start, the folder, or the hub weights; weights that are not
      all finite are refused (a corrupted download);
    - `init="random"`: the same architecture, random weights (seed 0, global RNG untouched), no download;
      the offline Qwen3 tokenizer for Qwen models.
    - lora_rank > 0 returns a peft model (LoRA on every linear layer of the blocks; base frozen);
      None = the preset's rank (0 for a spec).
    - `gradient_checkpointing`: None = on for GPU runs (`uses_gradient_checkpointing`); the one place
      in the course that turns it on (non-reentrant, so it works with frozen inputs and LoRA).
    The tokenizer pads on the left (what batched generation needs).
    """
    if init not in INITS:
        raise PresetError(f"未知的 init {init!r}；可选：{', '.join(INITS)}")
    if model_path is not None and init != "pretrained":
        raise PresetError(
            f"给了模型目录 {model_path}，又要求 init={init!r}：从目录加载就是用那份权重，去掉 --init random。"
        )
    spec, preset_rank = _as_spec(model, model_path)
    lora_rank = preset_rank if lora_rank is None else lora_rank
    return _load(spec, init, resolve_device(spec, device), lora_rank, gradient_checkpointing)


def _load(spec: ModelSpec, init: str, device: torch.device, lora_rank: int, gradient_checkpointing):
    """load_model once the spec, the device and the LoRA rank are known."""
    dtype = compute_dtype(spec, device)
    if init == "pretrained":
        net, tokenizer = _load_tiny(spec) if spec.tiny else _load_pretrained(spec, dtype)
        _refuse_nonfinite(net, spec)
    else:  # "random": seed-0 weights of the exact shape; tiny's are made on the CPU
        tokenizer = _tokenizer(spec)
        where = torch.device("cpu") if spec.tiny else device
        net = _random_model(spec.shape.hf_config(**spec.stop_tokens, dtype=dtype), where)
    if lora_rank:  # LoRA on every linear layer of the blocks; the base is frozen
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=lora_rank,
            lora_alpha=2 * lora_rank,
            lora_dropout=0.0,
            target_modules=list(LORA_TARGET_MODULES),
            task_type="CAUSAL_LM",
        )
        net = get_peft_model(net, lora)
    net.to(device)
    if gradient_checkpointing is None:
        gradient_checkpointing = uses_gradient_checkpointing(spec, device)
    if gradient_checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    tokenizer.padding_side = "left"
    return net, tokenizer


class TrainingModel(NamedTuple):
    """What a training script trains with (`load_for_training`)."""

    model: torch.nn.Module  # the policy, in train mode; its trainable weights in fp32
    tokenizer: object
    ref: (
        torch.nn.Module | None
    )  # frozen copy of the start (beta > 0 or eval_kl, full FT), else None
    params: list  # the trainable parameters (fp32 master weights)
    dtype: torch.dtype  # the compute dtype of autocast: bf16 on a GPU, fp32 on a CPU and for tiny
    optimizer: torch.optim.Optimizer


def load_for_training(spec: ModelSpec, device: torch.device, cfg) -> TrainingModel:
    """The model of a training config (``cfg.init``, ``cfg.lora_rank``, ``cfg.beta``, ``cfg.eval_kl``,
    ``cfg.optimizer``, ``cfg.lr``, ``cfg.weight_decay``) ready for its first step.

    The reference model is a frozen copy of the start, made before the weights turn fp32 (a bf16
    copy on a GPU); with LoRA no copy is needed: the base with its adapter off is the start. The
    trainable weights become fp32 master weights: bf16 keeps 8 significant bits, so an update of
    lr = 1e-6 would round to 0; the forward still runs under bf16 autocast (``dtype``).
    """
    device = resolve_device(spec, device)
    model, tokenizer = _load(spec, cfg.init, device, cfg.lora_rank, None)
    frozen_copy = (cfg.beta > 0 or bool(cfg.eval_kl)) and not cfg.lora_rank
    ref = copy.deepcopy(model).eval().requires_grad_(False) if frozen_copy else None
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    dtype = compute_dtype(spec, device)
    opt = make_optimizer(params, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return TrainingModel(model, tokenizer, ref, params, dtype, opt)


def _random_model(config, device: torch.device):
    """Random weights (seed 0; the global RNG is left untouched), built directly on `device` in `config.dtype`."""
    from transformers import AutoModelForCausalLM

    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=config.dtype)


def _quiet_from_pretrained(cls, folder, **kwargs):
    """from_pretrained without the "Loading weights" bar (a few MB from a local file need none)."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return cls.from_pretrained(folder, **kwargs)
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def _tokenizer(spec: ModelSpec):
    """The tokenizer of a randomly initialised model (no folder to read one from)."""
    from common.model.tokenizer import build_tiny_tokenizer, load_qwen3_tokenizer

    return build_tiny_tokenizer() if spec.tiny else load_qwen3_tokenizer(offline=True)


def _load_tiny(spec: ModelSpec):
    """The shipped tiny warm start (or ``spec.source``, a folder made by make_warmstart.py), in fp32."""
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    folder = spec.source or TINY_WARMSTART_DIR
    if not (Path(folder) / "model.safetensors").is_file():
        raise PresetError(
            f"找不到 tiny 的 warm-start checkpoint：{folder}。"
            f"运行 `python {MAKE_WARMSTART}` 重新生成，或用 init='random'。"
        )
    model = _quiet_from_pretrained(Qwen3ForCausalLM, folder, dtype=torch.float32)
    return model, PreTrainedTokenizerFast.from_pretrained(folder)


def _load_pretrained(spec: ModelSpec, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = str(spec.source)
    local = {"local_files_only": True} if spec.is_folder else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **local)
        model = _quiet_from_pretrained(AutoModelForCausalLM, where, dtype=dtype, **local)
    except OSError as err:
        if spec.is_folder:
            raise PresetError(
                f"从 {where} 加载失败（{type(err).__name__}: {err}）。文件可能损坏：删掉这个目录重新下载"
                "（做法见 README「权重从哪来」）。"
            ) from None
        raise PresetError(
            f"无法从 Hugging Face 下载 {where}（{err}）。检查网络；国内可设 HF_ENDPOINT=https://hf-mirror.com，"
            f"或用 ModelScope 下载到本地目录再加 --model 目录（见 README「权重从哪来」）；"
            "只想测显存/速度不需要权重：用 --init random。"
        ) from None
    except (ValueError, RuntimeError) as err:
        raise PresetError(
            f"从 {where} 加载失败（{type(err).__name__}: {err}）。文件可能损坏：删掉这个目录重新下载。"
        ) from None
    return model, tokenizer


def _refuse_nonfinite(model, spec: ModelSpec) -> None:
    """A weight that is NaN or inf (random bytes in a safetensors file pass every header check)."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise PresetError(
            f"{spec.name} 的权重里有 NaN/inf（{', '.join(bad[:3])}{'…' if len(bad) > 3 else ''}）："
            "权重文件损坏了。删掉它重新下载（或重新生成）。"
        )
