"""Which model a training config trains, and how: before anything heavy is loaded.

    cfg = parse_config(argv)            # common.config.config_cli: the command line, model as given
    cfg, spec, notes = plan_model(cfg)  # the preset's model, full fine-tune or LoRA, or a refusal
    cfg, spec = plan_or_exit(cfg)       # the same for a script: notes printed, a refusal exits 1

plan_model fills in `cfg.model` from the preset, checks a folder (strictly against the preset's
shape when both are given), decides `cfg.lora_rank` with the VRAM ledger (common.vram.plan) when it
was left open, and refuses (PresetError, ModelDirError: a ValueError with a Chinese message) what
this machine cannot run. Nothing is loaded but the folder's config.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from common.config.config_cli import refuse
from common.model.model_dir import MAKE_WARMSTART, ModelDirError
from common.model.models import model_spec, resolve_device
from common.options.presets import PresetError, get_preset, gpu_recipe, lora_recipe
from common.vram.plan import (
    LORA_RANK,
    choose_method,
    generation_problem,
    host_memory_gib,
    run_settings,
)
from common.vram.shapes import shape_for_hub_id


def gpu_gib(cap_gb: float | None) -> float | None:
    """The memory the ledger plans with: --cap-gb, else the card's total; None without CUDA."""
    if cap_gb is not None:
        return cap_gb
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def plan_model(cfg):
    """Resolve the model of a training config before anything heavy -> (cfg, spec, lines to print).

    Fills in `cfg.model` from the preset, checks a folder (strictly against the preset's shape when
    both are given), decides `cfg.lora_rank` with the VRAM ledger when it was left open (`--model DIR`
    alone: full fine-tuning if it fits the card or --cap-gb, else LoRA, else a refusal), and checks
    that this machine can run it and that the answers fit the model's context. ``spec`` is the
    planned model's ModelSpec (common.model.models.model_spec): the folder is read once, here.
    """
    notes = []
    preset = get_preset(cfg.preset) if cfg.preset else None
    expect = None
    if preset is not None and preset.model is not None:
        if cfg.model is None or cfg.model == preset.model:
            cfg = dataclasses.replace(cfg, model=preset.model)
        else:  # --preset NAME --model DIR: the folder must have the preset's exact shape
            expect = shape_for_hub_id(preset.model)
    elif preset is not None and cfg.model is not None and not Path(cfg.model).is_dir():
        raise ModelDirError(
            f"模型目录不存在：{cfg.model}。tiny 的 --model 要一个 make_warmstart.py 造的目录："
            f"先用 `python {MAKE_WARMSTART} --out 目录` 生成；不给 --model 就用仓库附带的那个。"
        )
    spec = model_spec(cfg.model, expect=expect)
    if preset is not None and preset.name == "tiny" and cfg.model is not None and not spec.tiny:
        raise ModelDirError(
            f"{cfg.model} 不是 tiny 的 warm start（没有 warmstart.json）：tiny 的 --model 要一个 "
            f"`python {MAKE_WARMSTART} --out 目录` 造的目录；训练这个模型就去掉 --preset tiny。"
        )
    if spec.warmstart is not None and preset is None:
        notes.append(
            f"{cfg.model} 是 make_warmstart.py 造的 tiny 起点：用 tiny 的配方（GRPOConfig 的默认值）。"
        )
    settings = run_settings(
        prompts=cfg.prompts_per_step, group=cfg.group_size, max_new_tokens=cfg.max_new_tokens,
        beta=cfg.beta, micro_batch=cfg.micro_batch, optimizer=cfg.optimizer,
    )  # fmt: skip
    if spec.needs_cuda and not torch.cuda.is_available():  # name the memory it would need
        decision = choose_method(spec.shape, settings, cfg.cap_gb or 32.0)
        try:
            resolve_device(spec)
        except PresetError as err:
            raise PresetError(f"{err} {decision.explain()}") from None
    device = resolve_device(spec)
    cuda = device.type == "cuda"
    memory = gpu_gib(cfg.cap_gb) if cuda else host_memory_gib()  # 巨大的 P、G、k：在加载前拒绝
    too_big = generation_problem(spec.shape, cfg, memory, "显存" if cuda else "内存")
    if too_big:
        raise PresetError(too_big)
    if cfg.lora_rank is None:
        cfg = dataclasses.replace(cfg, lora_rank=0)
        gib = gpu_gib(cfg.cap_gb) if device.type == "cuda" else None
        if gib is not None:
            decision = choose_method(spec.shape, settings, gib)
            notes.append(decision.explain())
            if decision.method is None:
                raise PresetError(decision.explain())
            cfg = dataclasses.replace(cfg, lora_rank=LORA_RANK if decision.method == "lora" else 0)
            if decision.method == "lora":
                cfg, note = _lora_lr(cfg)
                notes.append(note)
    room = spec.shape.max_position - cfg.max_new_tokens
    if room < 16:
        raise PresetError(
            f"--max-new-tokens {cfg.max_new_tokens} 超出了 {spec.name} 的上下文"
            f"（max_position_embeddings = {spec.shape.max_position}，还要放 prompt）：改小它"
        )
    return cfg, spec, notes


def _lora_lr(cfg):
    """The ledger switched a full-parameter recipe to LoRA: LoRA's lr ([recipe.lora]) unless the
    command line gave another one than the full-parameter recipe's -> (cfg, the line to print)."""
    full, lora = gpu_recipe()["lr"], lora_recipe()["lr"]
    if cfg.lr == full:
        return dataclasses.replace(cfg, lr=lora), (
            f"学习率：LoRA 用 presets.toml [recipe.lora] 的 lr {lora:g}，不是全参数配方的 {full:g}"
            f"（LoRA 的常用学习率高一个量级；这个值本课程没有实测过）。要别的值就给 --lr。"
        )
    return cfg, (
        f"学习率：保留命令行给的 --lr {cfg.lr:g}（LoRA 在 presets.toml [recipe.lora] 里是 {lora:g}，"
        f"全参数配方是 {full:g}）。"
    )


def plan_or_exit(cfg):
    """plan_model for a script's command line -> (planned config, its model's ModelSpec); prints the
    notes, and a refusal exits like every bad setting (common.config.config_cli.refuse). A resumed
    run was planned when it started (its config.json says which model and rank): its config is
    returned as it is, with the spec of that model."""
    try:
        if cfg.resume is not None:
            return cfg, model_spec(cfg.model)
        cfg, spec, notes = plan_model(cfg)
    except ValueError as err:  # ModelDirError, PresetError: a model this machine cannot run
        refuse([str(err)])
    for line in notes:
        print(line)
    return cfg, spec
