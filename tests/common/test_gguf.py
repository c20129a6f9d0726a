"""GGUF -> 模型目录（common/model/gguf_convert.py；命令 python -m common.model.model_dir from-gguf）：测试自己用 gguf.GGUFWriter 写一个小 GGUF 文件。

小 Qwen2（有 q/k/v bias、lm_head 不共享，和 Qwen2.5-Coder-0.5B-Instruct 的 GGUF 一样）+ 课程 tiny 的
字节级 BPE tokenizer（gpt2 型、qwen2 预分词，带 chat template）。转换出来的目录要通过 inspect_model_dir，
logits 与源模型相同（float32 存、float32 转：逐位相同；bf16 转：bf16 舍入以内），tokenizer 切分相同。
"""

from __future__ import annotations

import json

import gguf
import pytest
import torch

from common.model.gguf_convert import GGUFError, from_gguf
from common.model.model_dir import inspect_model_dir, main
from common.model.tokenizer import build_tiny_tokenizer

pytestmark = pytest.mark.slow  # 造一个 GGUF、转换两次：几秒到十几秒

LAYERS = 2
HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_name(hf: str) -> str:
    """HF 的张量名 -> llama.cpp 的 GGUF 名（gguf-py 的 tensor_mapping 里 qwen2 的那几个）。"""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}  # fmt: skip
    if hf in top:
        return top[hf]
    _, _, i, rest = hf.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    norms = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    return f"blk.{i}.{norms.get(module) or HF_TO_GGUF[module]}.{kind}"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(源模型, tokenizer, GGUF 文件)。"""
    from transformers import AutoModelForCausalLM, Qwen2Config

    tok = build_tiny_tokenizer()
    spec = json.loads(tok.backend_tokenizer.to_str())
    ids = {**spec["model"]["vocab"], **{t["content"]: t["id"] for t in spec["added_tokens"]}}
    tokens = [t for t, _ in sorted(ids.items(), key=lambda kv: kv[1])]
    special = {t["content"] for t in spec["added_tokens"]}
    cfg = Qwen2Config(
        vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, rms_norm_eps=1e-6,
        tie_word_embeddings=False, pad_token_id=0, eos_token_id=[2, 0], bos_token_id=None,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        with torch.no_grad():  # q/k/v bias 初始化为 0：给随机值，转换里漏了 bias 才看得出来
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(std=0.5)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("course tiny qwen2")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])  # 3 = control token
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_bos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(tok.chat_template)
    for name, tensor in model.state_dict().items():
        w.add_tensor(_gguf_name(name), tensor.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, tok, path


def _logits(model, tok):
    ids = torch.tensor([tok("Tom has 3 apples. He buys 5 more.").input_ids])
    with torch.no_grad():
        return model(ids).logits


def test_round_trip_gives_the_same_model(source, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, path = source
    out = from_gguf(path, tmp_path / "fp32", dtype="float32")
    folder = inspect_model_dir(out)  # --model 认这个目录
    assert folder.family == "qwen2" and not folder.shape.tied and folder.shape.vocab == len(tok)
    assert folder.eos_token_ids == (2, 0) and folder.pad_token_id == 0  # 两个 Qwen 停止 token
    again = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert torch.equal(_logits(again, tok), _logits(model, tok))
    text = "Tom has 3 apples.<|im_end|>"
    assert AutoTokenizer.from_pretrained(out)(text).input_ids == tok(text).input_ids
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in cfg  # 存下来的是普通权重，不再是「gguf 量化」
    bf16 = AutoModelForCausalLM.from_pretrained(
        from_gguf(path, tmp_path / "bf16"), dtype=torch.float32
    )
    assert next(bf16.parameters()).dtype == torch.float32
    assert torch.allclose(_logits(bf16.eval(), tok), _logits(model, tok), atol=0.15, rtol=0.05)


def test_refusals_leave_nothing_behind(source, tmp_path, capsys):
    _, _, path = source
    with pytest.raises(GGUFError, match="GGUF 文件不存在"):
        from_gguf(tmp_path / "nope.gguf", tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(GGUFError, match="不是空目录"):
        from_gguf(path, tmp_path / "full")
    with pytest.raises(GGUFError, match="bfloat16 或 float32"):
        from_gguf(path, tmp_path / "out", dtype="int4")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.converting").exists()
    with pytest.raises(GGUFError, match="是一个目录，不是 GGUF 文件"):  # 以前：「GGUF 文件不存在」
        from_gguf(path.parent, tmp_path / "out")
    (tmp_path / ".mine.converting").mkdir()  # 同名、但不是转换留下的：不删
    (tmp_path / ".mine.converting" / "notes.txt").write_text("mine")
    with pytest.raises(GGUFError, match="不是课程写的"):
        from_gguf(path, tmp_path / "mine")
    assert (tmp_path / ".mine.converting" / "notes.txt").read_text() == "mine"
    assert main(["from-gguf", str(tmp_path / "nope.gguf"), str(tmp_path / "o")]) == 2
    err = capsys.readouterr()
    assert "近似" in err.out and "GGUF 文件不存在" in err.err  # 先说清楚：反量化的不是原版权重


@pytest.mark.parametrize("keep", [4, 100, 20_000, 0.5, -640], ids=lambda k: f"keep-{k}")
def test_a_cut_download_is_refused_and_leaves_nothing(source, tmp_path, capsys, keep):
    """以前（issue 35）：下载中断的 GGUF -> gguf 包里的 ValueError / IndexError traceback。"""
    _, _, path = source
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:n])
    assert main(["from-gguf", str(cut), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：") and str(cut) in err and "重新下载" in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.converting").exists()
