"""测试用的小 Qwen3 模型目录：形状像 Qwen3、层数和宽度都很小，随机权重，配真实的 Qwen3 tokenizer 文件。

布局与 `modelscope download --model Qwen/Qwen3-0.6B --local_dir ...` 下载到的目录相同：
config.json、generation_config.json、model.safetensors（或分片 + index）、tokenizer.json、
tokenizer_config.json（含 chat template）、vocab.json、merges.txt。
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

# 小形状：vocab 与真实 Qwen3 相同（tokenizer 的每个 id 都有 embedding），其余都很小
SMALL_QWEN3 = dict(
    vocab_size=151936,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    tie_word_embeddings=True,
)


def small_config(preset_name: str = "qwen3-0.6b"):
    """`model_config(preset)` 的小号：特殊 token、dtype、RoPE 等与预设相同，只有形状变小。"""
    from transformers import Qwen3Config

    from common.models import model_config

    fields = model_config(preset_name).to_dict()
    for derived in ("layer_types", "max_window_layers", "transformers_version", "architectures"):
        fields.pop(derived, None)  # 由层数推出来的字段：按新层数重新生成
    return Qwen3Config(**{**fields, **SMALL_QWEN3})


def patch_small_shapes(monkeypatch, preset_name: str = "qwen3-0.6b") -> None:
    """让 common.models 以为预设 `preset_name` 的形状就是 SMALL_QWEN3（其它预设不变）。"""
    import common.models as M

    real, small = M.model_config, small_config(preset_name)
    monkeypatch.setattr(
        M, "model_config", lambda p: small if M.get_preset(p).name == preset_name else real(p)
    )


def make_model_dir(folder: Path, preset_name: str = "qwen3-0.6b", max_shard_size=None) -> Path:
    """随机权重（seed 0）的小 Qwen3 + 离线的 Qwen3 tokenizer 文件，存成一个模型目录。"""
    from transformers import AutoModelForCausalLM

    from common.tokenizer import qwen3_tokenizer_dir

    cfg = small_config(preset_name)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, **kwargs)
    for f in qwen3_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    return folder
