"""common/run/checkpoint.py：原子写入、严格恢复（模型、优化器、所有随机数状态）、坏文件给出清楚的错误。"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from common.run.checkpoint import (
    SAVE_OVERHEAD_BYTES,
    CheckpointError,
    apply_checkpoint,
    checkpoint_bytes,
    checkpoint_path,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)


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


# ---- 完整性：校验和、结构、NaN/inf、磁盘满 ---------------------------------------------------------


def _saved(tmp_path, step=1):
    model, opt = _model_and_opt()
    _train_step(model, opt, torch.Generator().manual_seed(0))
    save_checkpoint(tmp_path, model=model, optimizer=opt, step=step)
    return model, opt


def test_a_changed_tensor_fails_the_checksum(tmp_path):
    """torch.load 不查校验和：改了权重的文件照样能读进来。checkpoint 自己带的 SHA-256 要拦住它。"""
    _saved(tmp_path)
    path = checkpoint_path(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["model"]["0.weight"][0, 0] += 1e-3  # 改一个值，其余（包括旧的校验和）原样写回
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(tmp_path)
    assert "校验和对不上（model 部分）" in str(err.value) and str(path) in str(err.value)
    payload["model"]["0.weight"][0, 0] -= 1e-3
    payload["extra"] = {"config": {"lr": 1.0}}  # 元数据也在校验范围里
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="meta"):
        read_checkpoint(tmp_path)


def test_random_bytes_over_tensor_data_are_refused(tmp_path):
    """issue 里的情形：文件中间一段随机字节，torch.load 照样读得进来；校验和拦住它。"""
    model, _ = _saved(tmp_path)
    path = checkpoint_path(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.find(model[0].weight.detach().numpy().tobytes())  # 这个张量的数据在文件里的位置
    assert at > 0
    data[at : at + 64] = torch.randint(0, 256, (64,), dtype=torch.uint8).numpy().tobytes()
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=True)  # torch 自己发现不了
    with pytest.raises(CheckpointError, match="校验和对不上"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "content, needle",
    [
        ({"a": 1}, "缺少"),
        ([1, 2, 3], "不是 checkpoint 的字典"),
        ({"format_version": 1, "step": 3, "model": {}}, "格式版本是 1"),
    ],
)
def test_a_valid_pickle_of_the_wrong_structure_is_a_checkpoint_error(tmp_path, content, needle):
    """以前：KeyError: 'model' 的 traceback。"""
    torch.save(content, checkpoint_path(tmp_path))
    with pytest.raises(CheckpointError, match=needle):
        load_checkpoint(tmp_path, model=_model_and_opt()[0])


def test_directory_and_truncated_file(tmp_path):
    checkpoint_path(tmp_path).mkdir()
    with pytest.raises(CheckpointError, match="是一个目录"):
        read_checkpoint(tmp_path)
    checkpoint_path(tmp_path).rmdir()
    _saved(tmp_path)
    data = checkpoint_path(tmp_path).read_bytes()
    checkpoint_path(tmp_path).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="损坏"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("data", [b"", b"\x80\x02"], ids=["zero-bytes", "eof-without-text"])
def test_an_empty_or_cut_checkpoint_names_the_file(tmp_path, data):
    """以前（issue 35）：0 字节的 checkpoint.pt -> torch.load 的 EOFError 没有文字，拼消息时 IndexError。"""
    checkpoint_path(tmp_path).write_bytes(data)
    with pytest.raises(CheckpointError, match="读不出 checkpoint") as err:
        read_checkpoint(tmp_path)
    assert str(checkpoint_path(tmp_path)) in str(err.value) and "--out" in str(err.value)


def test_nan_in_optimizer_state_is_never_saved(tmp_path):
    model, opt = _saved(tmp_path, step=1)
    before = checkpoint_path(tmp_path).read_bytes()
    opt.state[model[0].weight]["exp_avg"][0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="不保存第 2 步.*NaN/inf"):
        save_checkpoint(tmp_path, model=model, optimizer=opt, step=2)
    assert checkpoint_path(tmp_path).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_nan_behind_a_valid_checksum_is_refused_on_load(tmp_path):
    import common.run.checkpoint as C

    _saved(tmp_path)
    path = checkpoint_path(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["model"]["2.bias"][0] = float("inf")
    payload["sha256"] = C._digests({k: v for k, v in payload.items() if k != "sha256"})
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="NaN/inf"):
        read_checkpoint(tmp_path)


def test_full_disk_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from collections import namedtuple

    import common.run.atomic_io as A
    from common.run.atomic_io import DiskFullError

    model, opt = _saved(tmp_path, step=1)
    before = checkpoint_path(tmp_path).read_bytes()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(A.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(DiskFullError, match="ENOSPC") as err:
        save_checkpoint(tmp_path, model=model, optimizer=opt, step=2)
    assert "需要约 1.0 MiB" in str(err.value) and "只剩 4.0 KiB" in str(err.value)
    assert checkpoint_path(tmp_path).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_read_then_apply_without_a_model_first(tmp_path):
    model, opt = _saved(tmp_path, step=4)
    ckpt = read_checkpoint(tmp_path)  # 续跑时在加载模型之前就验完
    assert ckpt.step == 4 and ckpt.extra == {}
    fresh, fresh_opt = _model_and_opt(seed=9)
    assert apply_checkpoint(ckpt, model=fresh, optimizer=fresh_opt)["step"] == 4
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters()))
    wrong_shape = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    with pytest.raises(CheckpointError, match="对不上"):
        apply_checkpoint(ckpt, model=wrong_shape)


@pytest.mark.slow  # torchao 的 8-bit AdamW 第一次 step 要 torch.compile：几秒 CPU
def test_8bit_adamw_checkpoint_round_trips_with_its_checksum(tmp_path):
    from common.model.optim import make_optimizer

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 64, bias=False)
    opt = make_optimizer(model.parameters(), "adamw8bit", lr=1e-3)
    model(torch.randn(4, 256)).sum().backward()
    opt.step()
    save_checkpoint(tmp_path, model=model, optimizer=opt, step=1)
    fresh = torch.nn.Linear(256, 64, bias=False)
    fresh_opt = make_optimizer(fresh.parameters(), "adamw8bit", lr=1e-3)
    load_checkpoint(tmp_path, model=fresh, optimizer=fresh_opt)
    assert torch.equal(fresh.weight, model.weight)
    assert torch.equal(
        fresh_opt.state[fresh.weight]["exp_avg"].codes, opt.state[model.weight]["exp_avg"].codes
    )


def test_checkpoint_bytes_is_the_size_on_disk(tmp_path):
    """L2.07 第 6.5 节的磁盘数字用它算：fp32 权重 + AdamW 的 m、v，每个参数 12 字节（另加不到 1 MiB）。"""
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 256)  # 131,328 个参数：张量的字节数远大于文件头
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 512)).sum().backward()
    opt.step()
    size = save_checkpoint(tmp_path, model=model, optimizer=opt, step=1).stat().st_size
    want = checkpoint_bytes(sum(p.numel() for p in model.parameters()))
    assert want <= size <= want + SAVE_OVERHEAD_BYTES, (size, want)
