"""common.config.model_plan：只给 --model 目录时，显存账本决定全参数还是 LoRA；换成 LoRA 时学习率跟着换（issue 44）。"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from small_qwen import header_only_dir

import common.config.model_plan
from common.config.config_cli import base_config
from common.options.presets import get_preset, gpu_recipe, lora_recipe
from common.vram.shapes import SHAPES


@pytest.fixture
def qwen3_06b(tmp_path, monkeypatch):
    """一个只有文件头、形状和 Qwen3-0.6B 相同的目录；假装有一张 CUDA 卡（只到加载权重之前）。"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return str(header_only_dir(tmp_path / "Qwen3-0.6B", SHAPES["Qwen3-0.6B"]))


def _plan(folder, gib, monkeypatch, **changes):
    monkeypatch.setattr(common.config.model_plan, "gpu_gib", lambda cap_gb: gib)
    cfg = dataclasses.replace(base_config(None, folder), **changes)
    return common.config.model_plan.plan_model(cfg)


@pytest.mark.slow  # 造一个 Qwen3-0.6B 形状的目录、查它的文件头：约 0.5 s
def test_on_a_24_gb_card_lora_gets_loras_lr(qwen3_06b, monkeypatch):
    """issue 44 以前：24 GB 的卡上账本悄悄换成 LoRA，学习率还是全参数配方的 2e-6。"""
    cfg, _, notes = _plan(qwen3_06b, 24.0, monkeypatch)
    assert cfg.lora_rank > 0, notes
    assert cfg.lr == lora_recipe()["lr"] != gpu_recipe()["lr"]
    assert any("学习率：LoRA 用" in n and "[recipe.lora]" in n for n in notes), notes


@pytest.mark.slow  # 造一个 Qwen3-0.6B 形状的目录、查它的文件头：约 0.5 s
def test_a_given_lr_is_kept_and_said(qwen3_06b, monkeypatch):
    cfg, _, notes = _plan(qwen3_06b, 24.0, monkeypatch, lr=3e-5)
    assert cfg.lora_rank > 0 and cfg.lr == 3e-5
    assert any("保留命令行给的 --lr 3e-05" in n for n in notes), notes


@pytest.mark.slow  # 造一个 Qwen3-0.6B 形状的目录、查它的文件头：约 0.5 s
def test_full_parameters_keep_the_recipes_lr(qwen3_06b, monkeypatch):
    cfg, _, notes = _plan(qwen3_06b, 32.0, monkeypatch)
    assert cfg.lora_rank == 0 and cfg.lr == gpu_recipe()["lr"]
    assert not any("学习率" in n for n in notes), notes


def test_lora_presets_take_the_lora_recipe():
    """LoRA 预设的 lr 来自 [recipe.lora]（一个地方），全参数预设的来自 [recipe.gpu]。"""
    assert get_preset("qwen3-1.7b-lora").overrides["lr"] == lora_recipe()["lr"]
    assert get_preset("qwen2.5-math-1.5b").overrides["lr"] == lora_recipe()["lr"]
    assert get_preset("qwen3-0.6b").overrides["lr"] == gpu_recipe()["lr"]
