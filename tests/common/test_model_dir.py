"""common.models.validate_model_dir / load_model(model_path=...)：从本地目录加载 Qwen3（ModelScope、镜像下载的）。

每种坏目录各有一条中文报错（说出路径和毛病），而且都在加载任何权重之前；好目录能加载。
目录都是测试自己造的：小形状的随机 Qwen3（save_pretrained）+ 离线的真实 Qwen3 tokenizer 文件，
预设的期望形状用 monkeypatch 换成同样的小形状（见 small_qwen3.py）。
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from small_qwen3 import SMALL_QWEN3, make_model_dir, patch_small_shapes

from common.models import PRESETS, PresetError, load_model, model_config, validate_model_dir

PRESET = "qwen3-0.6b"


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("qwen3") / "Qwen3-0.6B")


@pytest.fixture
def model_dir(good_dir, tmp_path, monkeypatch):
    """一份可以随便改坏的好目录（每个测试一份）；预设的期望形状 = 小形状。"""
    patch_small_shapes(monkeypatch)
    folder = tmp_path / "Qwen3-0.6B"
    shutil.copytree(good_dir, folder)
    return folder


def _edit_config(folder, **changes):
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def _fails(folder, *needles, preset=PRESET):
    with pytest.raises(PresetError) as err:
        validate_model_dir(folder, preset)
    msg = str(err.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


def test_good_dir_passes(model_dir):
    assert validate_model_dir(model_dir, PRESET) == model_dir
    assert validate_model_dir(str(model_dir), PRESETS[PRESET]) == model_dir


def test_missing_folder_or_a_file(tmp_path):
    _fails(
        tmp_path / "Qwen3-0.6B", "模型目录不存在", str(tmp_path / "Qwen3-0.6B"), "Qwen/Qwen3-0.6B"
    )
    (tmp_path / "weights.safetensors").write_bytes(b"x")
    _fails(tmp_path / "weights.safetensors", "模型目录不是目录")


def test_tiny_loads_a_warm_start_folder(model_dir, tmp_path):
    """tiny 的 --model：make_warmstart.py --out 写出的目录（这里拿仓库附带的那个复制一份）。"""
    from common.models import MAKE_WARMSTART, TINY_WARMSTART_DIR

    folder = tmp_path / "ws"
    shutil.copytree(TINY_WARMSTART_DIR, folder)
    assert validate_model_dir(folder, "tiny") == folder
    model, _ = load_model("tiny", model_path=folder)
    shipped, _ = load_model("tiny")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), shipped.parameters()))
    _fails(tmp_path / "nope", "模型目录不存在", MAKE_WARMSTART, preset="tiny")
    _fails(model_dir, "形状与预设 tiny", "make_warmstart.py", preset="tiny")  # 一个 Qwen3 目录


def test_missing_or_broken_config(model_dir):
    (model_dir / "config.json").write_text("{not json")
    _fails(model_dir, "config.json", "读不出来")
    (model_dir / "config.json").unlink()
    _fails(model_dir, "没有 config.json", str(model_dir))


def test_wrong_model_type(model_dir):
    _edit_config(model_dir, model_type="llama")
    _fails(model_dir, "model_type 是 'llama'", "qwen3")
    _edit_config(model_dir, model_type="qwen3_moe")
    _fails(model_dir, "model_type 是 'qwen3_moe'")


def test_wrong_shapes_are_all_listed(model_dir):
    _edit_config(model_dir, hidden_size=64, num_hidden_layers=3)
    msg = _fails(model_dir, "形状与预设 qwen3-0.6b", "hidden_size = 64，应为 32")
    assert "num_hidden_layers = 3，应为 2" in msg
    _edit_config(model_dir, hidden_size=32, num_hidden_layers=2, vocab_size=None)
    _fails(model_dir, "vocab_size = None，应为 151936")


def test_shape_of_another_preset_names_it(tmp_path):
    """真实形状（不 monkeypatch）：下成了 Qwen3-1.7B，却用 --preset qwen3-0.6b。"""
    cfg = model_config("qwen3-1.7b-lora").to_dict()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _fails(tmp_path, "hidden_size = 2048，应为 1024", "改用 --preset qwen3-1.7b-lora")


def test_missing_weights(model_dir):
    (model_dir / "model.safetensors").rename(model_dir / "pytorch_model.bin")
    _fails(model_dir, "里没有权重", "model.safetensors", "pytorch_model.bin")


def test_truncated_weights(model_dir):
    path = model_dir / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _fails(model_dir, "不完整", f"{len(data):,}", f"{len(data) // 2:,}")
    path.write_bytes(data[:100])  # 连文件头都不全
    _fails(model_dir, "不是完整的 safetensors")
    path.write_bytes((3).to_bytes(8, "little") + b"[1]")  # 文件头是 JSON，但不是张量表
    _fails(model_dir, "不是完整的 safetensors")


def test_git_lfs_pointer(model_dir):
    (model_dir / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1503300328\n"
    )
    _fails(model_dir, "Git LFS", "git lfs pull")


def test_sharded_weights(model_dir, tmp_path, monkeypatch):
    sharded = make_model_dir(tmp_path / "sharded", max_shard_size="4MB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2 and not (sharded / "model.safetensors").exists()
    assert validate_model_dir(sharded, PRESET) == sharded
    (sharded / shards[-1]).unlink()
    _fails(sharded, "缺少 1 个权重分片", shards[-1])
    (sharded / "model.safetensors.index.json").write_text('{"metadata": {}}')
    _fails(sharded, "没有 weight_map")


def test_missing_tokenizer(model_dir):
    for name in ("tokenizer.json", "vocab.json"):
        (model_dir / name).unlink()
    _fails(model_dir, "没有完整的 tokenizer", str(model_dir))


def test_missing_chat_template(model_dir):
    path = model_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    del cfg["chat_template"]
    path.write_text(json.dumps(cfg))
    _fails(model_dir, "chat template")
    (model_dir / "chat_template.jinja").write_text("{{ messages }}")  # transformers 5 的另一种存法
    assert validate_model_dir(model_dir, PRESET) == model_dir


def test_load_model_validates_before_anything_else(tmp_path):
    """坏目录在检查 CUDA、加载任何东西之前就报错（这台机器没有 GPU 也一样看到的是目录的问题）。"""
    with pytest.raises(PresetError, match="模型目录不存在"):
        load_model(PRESET, model_path=tmp_path / "nope")
    with pytest.raises(PresetError, match="--init random"):
        load_model(PRESET, init="random", model_path=tmp_path)


def test_good_dir_loads(model_dir):
    cpu_preset = dataclasses.replace(PRESETS[PRESET], needs_cuda=False)  # 这台机器只有 CPU
    model, tok = load_model(cpu_preset, model_path=model_dir)
    assert model.config.hidden_size == SMALL_QWEN3["hidden_size"] and model.training
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._name_or_path == str(model_dir)  # TRL 的参考模型、vLLM 都按这个路径再加载
    # 权重就是目录里的那份
    from safetensors.torch import load_file

    saved = load_file(model_dir / "model.safetensors")
    assert torch.equal(model.model.embed_tokens.weight, saved["model.embed_tokens.weight"])
    # tokenizer 是目录里的真实 Qwen3 tokenizer：chat template、EOS、左侧 padding
    from common.data import build_prompt

    assert build_prompt(tok, "1 + 1 = ?").endswith("<think>\n\n</think>\n\n")
    assert tok.padding_side == "left" and tok.pad_token_id == PRESETS[PRESET].pad_token_id
    ids = torch.tensor([tok(build_prompt(tok, "1 + 1 = ?"), add_special_tokens=False).input_ids])
    assert torch.isfinite(model(ids).logits.float()).all()
