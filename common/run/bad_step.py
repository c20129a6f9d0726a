"""Keep the evidence of a step whose gradients went NaN/inf, before anything is updated.

    if not math.isfinite(grad_norm):
        save_bad_step(out, step, model=model, rollout=ro, rewards=rewards, advantages=adv,
                      prompt_ids=pick, texts=texts)       # raises NonFiniteError naming the file

The gradient norm is known before ``optimizer.step()``; when it is NaN/inf the weights are still
the good pre-update ones. ``<run>/bad_step_<step>.pt`` then holds everything needed to replay the
step offline, on any machine: the trainable weights before the update, the rollout (prompt and
completion ids, masks, lengths), the rewards and advantages, which prompts were drawn and the
decoded answers. Replaying one micro-batch, then one answer, at a time finds the first non-finite
value (L2.08, "第 86 步的 NaN"). Written atomically; loading is ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.run.atomic_io import atomic_write
from common.run.checkpoint import trainable_state_dict
from common.run.finite_guard import NonFiniteError


def bad_step_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / f"bad_step_{step}.pt"


def save_bad_step(
    run_dir: str | Path,
    step: int,
    *,
    model: torch.nn.Module,
    rollout,
    rewards: torch.Tensor,
    advantages: torch.Tensor,
    prompt_ids: torch.Tensor,
    texts: list[str],
    grad_norm: float,
) -> None:
    """Write ``bad_step_<step>.pt`` and raise NonFiniteError (nothing else of the step is saved)."""
    fields = (
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "lengths",
        "truncated",
    )
    payload = {
        "step": int(step),
        "grad_norm": float(grad_norm),
        "model": trainable_state_dict(model),
        "rollout": {name: getattr(rollout, name).detach().cpu() for name in fields},
        "rewards": rewards.detach().cpu(),
        "advantages": advantages.detach().cpu(),
        "train_prompt_ids": prompt_ids.detach().cpu(),
        "texts": list(texts),
    }
    path = bad_step_path(run_dir, step)
    atomic_write(path, lambda f: torch.save(payload, f))
    raise NonFiniteError(
        f"第 {step} 步的梯度范数是 {grad_norm}（NaN/inf），在更新权重之前停了下来：权重还是好的，"
        f"上一个 checkpoint 也是好的。这一步的回答、reward 和更新前的权重存在 {path}，"
        "可以离线逐个 micro-batch、逐条回答重放，找出第一个 NaN 出在哪（L2.08「第 86 步的 NaN」）"
    )


def load_bad_step(path: str | Path) -> dict:
    """The payload of :func:`save_bad_step` (tensors on the CPU)."""
    return torch.load(Path(path), map_location="cpu", weights_only=True)
