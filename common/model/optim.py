"""The optimizer of the training scripts: torch AdamW, or AdamW with 8-bit states (torchao).

    opt = make_optimizer(params, "adamw8bit", lr=1e-6)

(The learning-rate warm-up is grpo_train.py's own warmup_lr, as nanoGPT's get_lr is train.py's.)

"adamw" keeps m and v in fp32 (8 bytes per trainable parameter). "adamw8bit" keeps them as 8-bit
codes with one fp32 scale per block of 256 values (torchao.optim.AdamW8bit: dynamic-tree
quantisation as in bitsandbytes; tensors under 4096 values stay fp32): about 2 bytes per parameter.
That is the term that moves when Qwen3-1.7B full fine-tuning fits a 32 GB card (L1.04's lab).
"""

from __future__ import annotations

import torch

from common.options.choices import OPTIMIZERS

TORCHAO_PIN = "torchao==0.18.0"  # the version tried here: torch 2.13 (CPU) and 2.11 (H200)


class OptimizerError(ValueError):
    """Unknown optimizer name, or its library is missing; the message says what to do."""


def make_optimizer(
    params,
    name: str = "adamw",
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.99),
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """AdamW over ``params`` with fp32 (``"adamw"``) or 8-bit (``"adamw8bit"``) states.

    On CUDA, "adamw" is torch's fused kernel (what TRL/transformers use by default): one pass per
    tensor and no temporary the size of all the states, unlike the default multi-tensor (foreach)
    path, which the CPU keeps (bit-identical resumes are tested there)."""
    params = list(params)
    if name == "adamw":
        fused = bool(params) and all(p.is_cuda for p in params)
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused)
    if name == "adamw8bit":
        try:
            from torchao.optim import AdamW8bit
        except ImportError as err:
            raise OptimizerError(
                f"--optimizer adamw8bit 需要 torchao：pip install {TORCHAO_PIN}"
                f"（导入失败：{err}）；或者改用 --optimizer adamw"
            ) from err
        return AdamW8bit(params, lr=lr, betas=betas, weight_decay=weight_decay)
    raise OptimizerError(f"未知的优化器 {name!r}；可选：{' | '.join(OPTIMIZERS)}")
