"""The NaN/inf guard of a training step: stop before a non-finite number reaches a checkpoint.

    guard_finite(step, loss=losses, grad_norm=grad_norm, params=model, optimizer=opt)

Call it after ``optimizer.step()``. It raises :class:`NonFiniteError` (a Chinese message naming the
step, what went non-finite and the likely causes) when the loss, the gradient norm, any updated
weight or any optimizer state tensor (AdamW's ``exp_avg`` / ``exp_avg_sq``, also inside torchao's
8-bit states) holds NaN or inf. One NaN in the weights makes every later rollout garbage (an
all-NaN model samples token 0 forever), so the run must stop before it saves anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch


class NonFiniteError(RuntimeError):
    """A NaN/inf in the loss, the gradient norm, the weights or the optimizer state."""


LIKELY_CAUSES = (
    "学习率太大（--lr）、clip 的 eps 不合理（--eps-low / --eps-high）、"
    "或数据里有异常的题目/答案（--data）"
)


def named_tensors(obj, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every plain tensor inside nested dicts/lists/tuples, as (dotted name, tensor).

    Tensor subclasses that store their data in inner tensors (torchao's 8-bit optimizer states:
    ``codes``, ``scale``, ``qmap``) are opened up through ``__tensor_flatten__``.
    """
    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor and hasattr(obj, "__tensor_flatten__"):
            names, _ = obj.__tensor_flatten__()
            for name in names:
                yield from named_tensors(getattr(obj, name), f"{prefix}.{name}")
        else:
            yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from named_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from named_tensors(value, f"{prefix}[{i}]")


def non_finite(tensors: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of the floating-point tensors that hold a NaN or inf (one device sync in all)."""
    floats = [(name, t) for name, t in tensors if t.is_floating_point() and t.numel()]
    if not floats:
        return []
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, t) in enumerate(floats):
        by_device.setdefault(t.device, []).append(i)
    bad = [False] * len(floats)
    for indices in by_device.values():  # one stack (and one sync) per device
        finite = torch.stack([torch.isfinite(floats[i][1].detach()).all() for i in indices])
        for i, ok in zip(indices, finite.tolist()):
            bad[i] = not ok
    return [name for (name, _), b in zip(floats, bad) if b]


def _numbers(value) -> list[float]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return value.detach().float().reshape(-1).tolist()
    if isinstance(value, (int, float)):
        return [float(value)]
    return [x for v in value for x in _numbers(v)]


def guard_finite(
    step: int,
    *,
    loss=None,
    grad_norm=None,
    params: torch.nn.Module | Iterable[torch.nn.Parameter] | dict | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> None:
    """Raise NonFiniteError if anything of this step is NaN/inf; otherwise return None.

    loss, grad_norm: a float, a tensor, or a list of them (e.g. one loss per micro-batch);
    params: a model (its trainable parameters, by name), an iterable of parameters, or a
        ``{name: tensor}`` dict;
    optimizer: its state (``exp_avg``, ``exp_avg_sq``, ...) is checked too.
    """
    problems = []
    if any(not math.isfinite(x) for x in _numbers(loss)):
        problems.append("loss")
    if any(not math.isfinite(x) for x in _numbers(grad_norm)):
        problems.append("梯度范数 grad_norm")
    if params is not None:
        if isinstance(params, torch.nn.Module):
            named = [(n, p) for n, p in params.named_parameters() if p.requires_grad]
        else:
            named = params.items() if isinstance(params, dict) else enumerate(params)
        bad = non_finite((f"参数 {name}", p) for name, p in named)
        if bad:
            problems.append(f"更新后的权重（{len(bad)} 个张量，如 {bad[0]}）")
    if optimizer is not None:
        bad = non_finite(named_tensors(optimizer.state_dict()["state"], "optimizer.state"))
        if bad:
            problems.append(f"优化器状态（{len(bad)} 个张量，如 {bad[0]}）")
    if problems:
        raise NonFiniteError(
            f"第 {step} 步出现了 NaN/inf：{'、'.join(problems)}。训练停在这一步，这一步什么都没保存，"
            f"上一个 checkpoint 还是好的。常见原因：{LIKELY_CAUSES}。"
            "改好设置后用新的 --out 重新开始（续跑不能改这些设置）"
        )
