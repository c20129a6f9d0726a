"""Atomic training checkpoints: model + optimizer + every RNG + step, so a resume is bit-identical.

One file, ``<run>/checkpoint.pt``. It is written to ``checkpoint.pt.tmp``, fsync'ed, then renamed over
the old one (``os.replace`` is atomic on POSIX and Windows): a run killed at any moment leaves either
the previous complete checkpoint or the new complete one, never a half-written file.

Only trainable parameters are stored (for a full fine-tune that is the whole model; for LoRA only
the adapters), because the frozen rest is rebuilt by ``common.models.load_model``.
Loading uses ``torch.load(weights_only=True)``: a checkpoint cannot run code.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable or does not fit the model; the message says what to do."""


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


def save_checkpoint(
    run_dir: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    generators: dict[str, torch.Generator] | None = None,
    extra: dict | None = None,
) -> Path:
    """Atomically write ``run_dir/checkpoint.pt`` for the state *after* optimizer step ``step``."""
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
    tmp = run_dir / (CHECKPOINT_NAME + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before the rename makes them "the" checkpoint
    os.replace(tmp, final)
    try:  # persist the rename itself (directory entry); not possible on every OS/filesystem
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return final


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_NAME


def load_checkpoint(
    run_dir: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: dict[str, torch.Generator] | None = None,
    restore_rngs: bool = True,
) -> dict:
    """Load ``run_dir/checkpoint.pt`` into ``model`` (and ``optimizer``, RNGs); returns ``{"step", "extra"}``."""
    path = checkpoint_path(run_dir)
    if not path.is_file():
        raise CheckpointError(f"{path} 不存在：--resume 要指向一个已经保存过 checkpoint 的运行目录")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated / corrupted / not a checkpoint
        raise CheckpointError(
            f"读不出 {path}（{type(err).__name__}: {err}）。这个文件损坏了，无法续跑"
        ) from err
    if payload.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} 的格式版本 {payload.get('format_version')} 与当前代码的 {FORMAT_VERSION} 不同"
        )
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
    result = model.load_state_dict(payload["model"], strict=False)
    if result.unexpected_keys:
        raise CheckpointError(f"{path} 里有模型没有的参数：{result.unexpected_keys[:3]}")
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if restore_rngs:
        restore_rng(payload["rng"], generators)
    return {"step": payload["step"], "extra": payload["extra"]}
