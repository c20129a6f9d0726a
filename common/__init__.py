"""Shared library for the course, one package per job (each imports only packages further down):

    config   a training run's config, command line and pre-flight checks (GRPOConfig, model plan)
    model    which model, its folder and tokenizer, loading it, its optimizer
    decode   answers from the policy: rollout (eager, fast, vLLM) and held-out evaluation
    vram     the VRAM ledger of one GRPO step, the fit table, measuring on a GPU
    gsm8k    the task: questions, prompts, rewards, the control shuffle, paired statistics
    run      the run folder: checkpoints, metrics, atomic files, NaN guard, provenance
    options  the command lines' words: the parser, the settings' names, the presets

Importing it first (every lesson script does, before torch) makes a Ctrl-C that no code catches (the
seconds of `import torch`, before a script's own handler exists) print one Chinese line, no
traceback; the exit status stays the one of an interrupt (130). It also drops two known, harmless
start-up messages, and only those two, at the exact loggers that emit them; every other warning of
those loggers still prints:

- `torchao/__init__.py` tries to load its CUDA kernels (`torchao/_C*.so`) and logs
  "Failed to load ...: Could not load this library" for each. transformers imports torchao (a dev
  dependency, used only for --optimizer adamw8bit) from its quantizers as soon as a Trainer or a
  model class is imported. On a CPU-only torch (torch.version.cuda is None) those kernels can never
  load; with CUDA torch the message is kept, because there it may be a real installation problem.
- torchao registers two Enums with torch 2.13's pytree through a deprecated call, and
  `torch/utils/_pytree.py` logs "<enum ...> is an Enum subclass and is now natively supported ...".
  Dropped only when the Enum is torchao's; the same warning about any other class still prints.
"""

import logging
import re
import sys

_TORCHAO_KERNEL = re.compile(r"Failed to load \S*torchao\S*_C\w*\S*\.so")


def _is_torchao_cuda_kernel_on_cpu_torch(record: logging.LogRecord) -> bool:
    torch = sys.modules.get("torch")
    cpu_only = torch is not None and getattr(torch.version, "cuda", "") is None
    return cpu_only and _TORCHAO_KERNEL.match(record.getMessage()) is not None


def _is_torchao_enum_deprecation(record: logging.LogRecord) -> bool:
    args = record.args if isinstance(record.args, tuple) else ()
    owner = getattr(args[0], "__module__", "") if args else ""
    return "is an Enum subclass" in str(record.msg) and str(owner).startswith("torchao")


logging.getLogger("torchao").addFilter(lambda r: not _is_torchao_cuda_kernel_on_cpu_torch(r))
logging.getLogger("torch.utils._pytree").addFilter(lambda r: not _is_torchao_enum_deprecation(r))


def _one_line_for_ctrl_c(kind, value, tb, previous=sys.excepthook):
    """sys.excepthook: an uncaught KeyboardInterrupt is one line; any other exception as before."""
    if issubclass(kind, KeyboardInterrupt):
        print("已中断（Ctrl-C）。", file=sys.stderr)
        return
    previous(kind, value, tb)


sys.excepthook = _one_line_for_ctrl_c
