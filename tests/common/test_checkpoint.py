"""common/checkpoint.py：原子写入、严格恢复（模型、优化器、所有随机数状态）、坏文件给出清楚的错误。"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from common.checkpoint import CheckpointError, checkpoint_path, load_checkpoint, save_checkpoint


def _model_and_opt(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def _train_step(model, opt, gen):
    x = torch.randn(16, 4, generator=gen)
    noise = torch.randn(16, 2) + float(np.random.rand()) + random.random()  # 用到全部三种全局 RNG
    loss = ((model(x) - noise) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_resume_is_bit_identical(tmp_path):
    """连续跑 6 步 == 跑 3 步、存盘、在新对象里读回、再跑 3 步（逐位相同）。"""

    def fresh():
        random.seed(1), np.random.seed(1), torch.manual_seed(1)
        model, opt = _model_and_opt()
        return model, opt, torch.Generator().manual_seed(7)

    model, opt, gen = fresh()
    straight = [_train_step(model, opt, gen) for _ in range(6)]

    model, opt, gen = fresh()
    first = [_train_step(model, opt, gen) for _ in range(3)]
    save_checkpoint(
        tmp_path,
        model=model,
        optimizer=opt,
        step=3,
        generators={"sample": gen},
        extra={"note": "x"},
    )
    # 打乱所有状态，证明下面的结果只来自 checkpoint
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    model, opt = _model_and_opt(seed=5)
    gen = torch.Generator().manual_seed(123)
    info = load_checkpoint(tmp_path, model=model, optimizer=opt, generators={"sample": gen})
    assert info == {"step": 3, "extra": {"note": "x"}}
    second = [_train_step(model, opt, gen) for _ in range(3)]
    assert first + second == straight


def test_only_trainable_params_are_saved(tmp_path):
    model, opt = _model_and_opt()
    model[0].weight.requires_grad_(False)
    save_checkpoint(tmp_path, model=model, optimizer=opt, step=1)
    saved = torch.load(checkpoint_path(tmp_path), weights_only=True)["model"]
    assert set(saved) == {"0.bias", "2.weight", "2.bias"}


def test_interrupted_write_leaves_last_good_checkpoint(tmp_path, monkeypatch):
    model, opt = _model_and_opt()
    save_checkpoint(tmp_path, model=model, optimizer=opt, step=1)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # 模拟写到一半被杀

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, model=model, optimizer=opt, step=2)
    monkeypatch.undo()
    model2, opt2 = _model_and_opt(seed=3)
    assert load_checkpoint(tmp_path, model=model2, optimizer=opt2)["step"] == 1
    assert torch.equal(model2[0].weight, model[0].weight)


def test_missing_corrupt_and_mismatched_checkpoints(tmp_path):
    model, opt = _model_and_opt()
    with pytest.raises(CheckpointError, match="不存在"):
        load_checkpoint(tmp_path, model=model)
    checkpoint_path(tmp_path).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="损坏"):
        load_checkpoint(tmp_path, model=model)
    save_checkpoint(tmp_path, model=model, optimizer=opt, step=1)
    other = torch.nn.Sequential(torch.nn.Linear(4, 8))
    with pytest.raises(CheckpointError, match="对不上"):
        load_checkpoint(tmp_path, model=other)
