"""Shared library for the course: rewards, data, models, rollout, VRAM ledger."""

import logging

# transformers imports torchao (a dev dependency, used only for --optimizer adamw8bit) for its
# quantizers. On a CPU-only torch, torchao 0.18 logs that its CUDA kernels (.so) can't load, and it
# registers two Enums with torch 2.13's pytree, which logs a deprecation warning: harmless noise at
# the top of every run, so both loggers only speak at ERROR.
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
