"""Atomic, checksummed training checkpoints: model + optimizer + every RNG + step (bit-identical resume).

One file, ``<run>/checkpoint.pt``, written through :func:`common.run.atomic_io.atomic_write`
(``checkpoint.pt.tmp``, fsync, ``os.replace``): a run killed at any moment leaves either the previous
complete checkpoint or the new complete one, never a half-written file; a full disk is refused
before writing (ENOSPC, with the bytes needed) and leaves no ``.tmp``.

Integrity: the payload carries a SHA-256 of each of its parts (``model``, ``optimizer``, ``rng``,
``meta`` = format version, step and ``extra``), computed over every tensor's dtype, shape and raw
bytes and every plain value. :func:`read_checkpoint` recomputes them, so bytes changed after the
save (disk corruption, a bad copy, an edit) are refused, not trained on. torch.load itself checks no
checksum. A save refuses NaN/inf in the weights or the optimizer state; a load refuses them too.

Only trainable parameters are stored (for a full fine-tune that is the whole model; for LoRA only
the adapters), because the frozen rest is rebuilt by ``common.model.models.load_model``.
Loading uses ``torch.load(weights_only=True)``: a checkpoint cannot run code.

    ckpt = read_checkpoint(run_dir)            # verify (no model needed): step, extra, checksums
    apply_checkpoint(ckpt, model=model, optimizer=opt, generators={"sample": gen})
    load_checkpoint(run_dir, model=model, ...)  # both in one call
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.run.atomic_io import atomic_write
from common.run.finite_guard import named_tensors, non_finite

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 2  # 2: per-part SHA-256 checksums (version 1 had none)
PARTS = ("model", "optimizer", "rng", "meta")  # what the checksums cover
SAVE_OVERHEAD_BYTES = 1 << 20  # pickle, zip headers and RNG states on top of the tensors' bytes
# per trainable parameter: its fp32 weight + AdamW's fp32 m and v (the course's optimizer, "adamw")
BYTES_PER_TRAINABLE_PARAM = 4 + 4 + 4


def checkpoint_bytes(trainable_params: int) -> int:
    """About how big ``checkpoint.pt`` is for a run that trains ``trainable_params`` with fp32 AdamW
    (at most SAVE_OVERHEAD_BYTES more). A save writes a ``.tmp`` of this size beside the old file,
    so a run folder briefly needs twice this much disk."""
    return trainable_params * BYTES_PER_TRAINABLE_PARAM


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable, altered or does not fit the model; says what to do."""


def _why(err: BaseException) -> str:
    """``Type: first line`` of an exception, for a message (EOFError and friends have no text)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200]}" if lines else type(err).__name__


def capture_rng(generators: dict[str, torch.Generator] | None = None) -> dict:
    """State of python ``random``, numpy, torch (CPU and CUDA) and the given named generators."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, generators: dict[str, torch.Generator] | None = None) -> None:
    """Inverse of :func:`capture_rng`. Every generator passed in must have a saved state."""
    random.setstate(_as_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, g in (generators or {}).items():
        if name not in state["generators"]:
            raise CheckpointError(
                f"checkpoint 里没有随机数发生器 {name!r} 的状态；它来自不同版本的脚本，无法严格续跑"
            )
        g.set_state(state["generators"][name])


def _as_tuple(x):
    """``random.setstate`` needs nested tuples; a round trip through torch.save may hand back lists."""
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` for parameters with ``requires_grad`` (tied weights appear once)."""
    return {
        name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad
    }


def _feed(h, obj) -> None:
    """Hash ``obj`` canonically: type tags, tensors by dtype/shape/bytes, dicts in sorted key order."""
    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor and hasattr(obj, "__tensor_flatten__"):
            names, ctx = obj.__tensor_flatten__()  # torchao 8-bit states: codes, scale, qmap
            h.update(f"T{type(obj).__name__}{list(obj.shape)}{ctx!r}".encode())
            for name in names:
                _feed(h, getattr(obj, name))
            return
        t = obj.detach().cpu().contiguous()
        h.update(f"t{t.dtype}{list(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(obj, dict):
        h.update(b"d%d" % len(obj))
        for key in sorted(obj, key=lambda k: (type(k).__name__, repr(k))):
            _feed(h, key)
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):  # a round trip may turn tuples into lists
        h.update(b"l%d" % len(obj))
        for value in obj:
            _feed(h, value)
    elif obj is None or isinstance(obj, (bool, int, float, str)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    else:
        raise TypeError(f"checkpoint 里不能放 {type(obj).__name__} 类型的值")


def _digests(payload: dict) -> dict[str, str]:
    """SHA-256 of each part of a payload (see :data:`PARTS`)."""
    meta = {k: payload.get(k) for k in ("format_version", "step", "extra")}
    out = {}
    for part in PARTS:
        h = hashlib.sha256()
        _feed(h, meta if part == "meta" else payload.get(part))
        out[part] = h.hexdigest()
    return out


def save_checkpoint(
    run_dir: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    generators: dict[str, torch.Generator] | None = None,
    extra: dict | None = None,
) -> Path:
    """Atomically write ``run_dir/checkpoint.pt`` for the state *after* optimizer step ``step``.

    Raises CheckpointError (nothing written) when a weight or an optimizer state holds NaN/inf,
    and common.run.atomic_io.WriteError / DiskFullError when the disk refuses the bytes.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "model": trainable_state_dict(model),
        "optimizer": optimizer.state_dict(),
        "rng": capture_rng(generators),
        "extra": extra or {},
    }
    final = run_dir / CHECKPOINT_NAME
    bad = non_finite(named_tensors({"model": payload["model"], "optimizer": payload["optimizer"]}))
    if bad:
        raise CheckpointError(
            f"不保存第 {step} 步的 checkpoint：{len(bad)} 个张量里有 NaN/inf（如 {bad[0]}）。"
            f"{final} 还是上一次保存的那个"
        )
    payload["sha256"] = _digests(payload)
    size = sum(t.numel() * t.element_size() for _, t in named_tensors(payload))
    return atomic_write(
        final, lambda f: torch.save(payload, f), size_hint=size + SAVE_OVERHEAD_BYTES
    )


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_NAME


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: read by :func:`read_checkpoint`, applied by :func:`apply_checkpoint`."""

    path: Path
    step: int
    extra: dict
    payload: dict


def _structure_problem(payload) -> str | None:
    """What is wrong with the shape of a loaded payload (None: it has every part, of the right type)."""
    if not isinstance(payload, dict):
        return f"内容是一个 {type(payload).__name__}，不是 checkpoint 的字典"
    if "format_version" in payload and payload["format_version"] != FORMAT_VERSION:
        return (
            f"格式版本是 {payload['format_version']!r}，当前代码要 {FORMAT_VERSION}"
            "（旧版本的 checkpoint 没有校验和）"
        )
    kinds = {
        "format_version": int,
        "step": int,
        "model": dict,
        "optimizer": dict,
        "rng": dict,
        "extra": dict,
        "sha256": dict,
    }
    missing = [k for k in kinds if k not in payload]
    if missing:
        return f"缺少 {', '.join(missing)}（不是 save_checkpoint 写的文件）"
    wrong = [k for k, kind in kinds.items() if not isinstance(payload[k], kind)]
    if wrong:
        return f"{', '.join(wrong)} 的类型不对"
    if payload["step"] < 0 or isinstance(payload["step"], bool):
        return f"step = {payload['step']!r} 不是一个步数"
    if not all(isinstance(v, torch.Tensor) for v in payload["model"].values()):
        return "model 里有不是张量的值"
    if not {"state", "param_groups"} <= set(payload["optimizer"]):
        return "optimizer 不是优化器的 state_dict"
    if not {"python", "numpy", "torch", "generators"} <= set(payload["rng"]):
        return "rng 里缺随机数状态"
    return None


def read_checkpoint(run_dir: str | Path) -> Checkpoint:
    """Load and verify ``run_dir/checkpoint.pt`` without touching any model.

    Raises CheckpointError (Chinese, names the file) when it is missing, a directory, unreadable or
    truncated, of the wrong structure or format version, fails its checksums, or holds NaN/inf.
    """
    path = checkpoint_path(run_dir)
    if path.is_dir():
        raise CheckpointError(f"{path} 是一个目录，不是 checkpoint 文件：无法续跑")
    if not path.is_file():
        raise CheckpointError(f"{path} 不存在：--resume 要指向一个已经保存过 checkpoint 的运行目录")
    if path.stat().st_size == 0:  # a copy or a disk that lost it: torch.load says only EOFError
        raise CheckpointError(
            f"读不出 checkpoint：{path} 是 0 字节的空文件（不是 save_checkpoint 写的：它先写 .tmp，"
            "写完才改名）。找回完好的 checkpoint.pt 再续跑，或换一个 --out 重新开始"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated / corrupted / not a checkpoint / unreadable
        raise CheckpointError(
            f"读不出 checkpoint {path}（{_why(err)}）。这个文件损坏了，无法续跑：找回完好的 "
            "checkpoint.pt，或换一个 --out 重新开始"
        ) from None
    problem = _structure_problem(payload)
    if problem:
        raise CheckpointError(f"{path} 不是一个能续跑的 checkpoint：{problem}")
    try:
        actual = _digests(payload)
    except TypeError as err:
        raise CheckpointError(f"{path} 不是一个能续跑的 checkpoint：{err}") from None
    broken = [part for part in PARTS if payload["sha256"].get(part) != actual[part]]
    if broken:
        raise CheckpointError(
            f"{path} 的校验和对不上（{', '.join(broken)} 部分）：文件在保存之后被改动或损坏了，"
            "不能拿它续跑"
        )
    bad = non_finite(named_tensors({"model": payload["model"], "optimizer": payload["optimizer"]}))
    if bad:
        raise CheckpointError(
            f"{path} 里有 NaN/inf（{len(bad)} 个张量，如 {bad[0]}）：不能拿它续跑"
        )
    return Checkpoint(path, payload["step"], payload["extra"], payload)


def apply_checkpoint(
    ckpt: Checkpoint,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: dict[str, torch.Generator] | None = None,
    restore_rngs: bool = True,
) -> dict:
    """Load a verified checkpoint into ``model`` (and ``optimizer``, RNGs); returns ``{"step", "extra"}``."""
    path, payload = ckpt.path, ckpt.payload
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    if set(payload["model"]) != trainable:
        missing, unexpected = (
            sorted(trainable - set(payload["model"])),
            sorted(set(payload["model"]) - trainable),
        )
        raise CheckpointError(
            f"{path} 与当前模型的可训练参数对不上（缺 {missing[:3]}…，多 {unexpected[:3]}…）："
            "续跑时的 preset / LoRA 设置必须和原来的运行一致"
        )
    try:
        result = model.load_state_dict(payload["model"], strict=False)
        if optimizer is not None:
            optimizer.load_state_dict(payload["optimizer"])
    except (RuntimeError, ValueError, KeyError) as err:  # shapes / param groups that do not fit
        raise CheckpointError(
            f"{path} 与当前的模型或优化器对不上（{_why(err)}）："
            "续跑时的 preset、--optimizer 必须和原来的运行一致"
        ) from None
    if result.unexpected_keys:
        raise CheckpointError(f"{path} 里有模型没有的参数：{result.unexpected_keys[:3]}")
    if restore_rngs:
        try:
            restore_rng(payload["rng"], generators)
        except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as err:
            if isinstance(err, CheckpointError):
                raise
            raise CheckpointError(
                f"{path} 里的随机数状态读不回来（{type(err).__name__}: {err}）：无法逐位一致地续跑"
            ) from None
    return {"step": ckpt.step, "extra": ckpt.extra}


def load_checkpoint(
    run_dir: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: dict[str, torch.Generator] | None = None,
    restore_rngs: bool = True,
) -> dict:
    """:func:`read_checkpoint` + :func:`apply_checkpoint`; returns ``{"step", "extra"}``."""
    return apply_checkpoint(
        read_checkpoint(run_dir),
        model=model,
        optimizer=optimizer,
        generators=generators,
        restore_rngs=restore_rngs,
    )
