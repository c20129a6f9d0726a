"""common.model.model_dir：本地模型目录（ModelScope、镜像下载的，或自己微调过的）在加载任何权重之前的检查。

每种坏目录各有一条中文报错（说出路径和毛病）；好目录（小形状的随机 Qwen3 / Qwen2 + 真实 tokenizer 文件，
见 small_qwen.py）通过检查并能加载。
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from small_qwen import SMALL, make_model_dir

from common.model.model_dir import ModelDirError, inspect_model_dir, main
from common.model.models import TINY_WARMSTART_DIR, load_model, model_spec
from common.vram.shapes import SHAPES, ModelShape


@pytest.fixture(scope="module")
def good_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {f: make_model_dir(root / f, family=f) for f in ("qwen3", "qwen2")}


def _copy(good_dirs, tmp_path, family):
    folder = tmp_path / f"{family}-small"
    shutil.copytree(good_dirs[family], folder)
    return folder


@pytest.fixture
def model_dir(good_dirs, tmp_path):
    """一份可以随便改坏的好目录（每个测试一份）：文件层面的检查两个家族一样，用 Qwen3 的。"""
    return _copy(good_dirs, tmp_path, "qwen3")


@pytest.fixture(params=["qwen3", "qwen2"])
def any_dir(request, good_dirs, tmp_path):
    """和家族有关的检查：Qwen3、Qwen2 各一次。"""
    return _copy(good_dirs, tmp_path, request.param)


def _edit(folder, name="config.json", **changes):
    path = folder / name
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def _fails(folder, *needles, expect=None):
    with pytest.raises(ModelDirError) as err:
        inspect_model_dir(folder, expect=expect)
    msg = str(err.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_good_dirs_pass(any_dir):
    found = inspect_model_dir(any_dir)
    family = any_dir.name.split("-")[0]
    assert found.family == family and found.shape.hidden == 64 and found.shape.vocab == 151936
    assert found.shape.qk_norm == (family == "qwen3") and found.shape.attention_bias == (
        family == "qwen2"
    )
    assert found.eos_token_ids == (151645, 151643) and found.pad_token_id == 151643
    assert found.warmstart is None
    shape = ModelShape.from_config_json(found.config)
    assert inspect_model_dir(str(any_dir), expect=shape).path == any_dir


def test_missing_folder_or_a_file(tmp_path):
    _fails(tmp_path / "Qwen3-0.6B", "模型目录不存在", str(tmp_path / "Qwen3-0.6B"))
    (tmp_path / "weights.safetensors").write_bytes(b"x")
    _fails(tmp_path / "weights.safetensors", "模型目录不是目录")


@pytest.mark.slow
def test_tiny_warm_start_folder(tmp_path):
    """make_warmstart.py --out 写出的目录（这里拿仓库附带的那个复制一份）：认出是 tiny 的起点。"""
    folder = tmp_path / "ws"
    shutil.copytree(TINY_WARMSTART_DIR, folder)
    found = inspect_model_dir(folder)
    assert found.warmstart is not None and found.shape.n_params() < 2_000_000
    spec = model_spec(folder)
    assert spec.tiny and not spec.needs_cuda
    model, _ = load_model(spec)
    shipped, _ = load_model("tiny")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), shipped.parameters()))


def test_missing_or_broken_config(model_dir):
    (model_dir / "config.json").write_text("{not json")
    _fails(model_dir, "config.json", "读不出来")
    (model_dir / "config.json").unlink()
    _fails(model_dir, "没有 config.json", str(model_dir))


def test_unsupported_model_types_say_what_is_supported(any_dir):
    _edit(any_dir, model_type="llama")
    _fails(any_dir, "model_type 是 'llama'", "qwen3", "qwen2")
    _edit(any_dir, model_type="qwen3_moe")
    _fails(any_dir, "model_type 是 'qwen3_moe'", "MoE", "全部专家", "32 GB")


def test_sliding_window_is_refused(model_dir):
    _edit(model_dir, use_sliding_window=True)
    _fails(model_dir, "sliding window", "use_sliding_window")


def test_wrong_shapes_are_all_listed_when_a_preset_is_given(model_dir):
    expect = SHAPES["Qwen3-0.6B"]
    msg = _fails(
        model_dir, "形状与预设要的 Qwen3-0.6B", "hidden_size = 64，应为 1024", expect=expect
    )
    assert "num_hidden_layers = 2，应为 28" in msg and "去掉 --preset" in msg


def test_shape_of_another_known_model_names_it(tmp_path):
    """真实形状：下成了 Qwen3-1.7B，却用了 Qwen3-0.6B 的预设。"""
    cfg = {"model_type": "qwen3", **SHAPES["Qwen3-1.7B"].config_dict()}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _fails(
        tmp_path,
        "hidden_size = 2048，应为 1024",
        "这是 Qwen3-1.7B 的形状",
        expect=SHAPES["Qwen3-0.6B"],
    )


def test_missing_weights(model_dir):
    (model_dir / "model.safetensors").rename(model_dir / "pytorch_model.bin")
    _fails(model_dir, "里没有权重", "model.safetensors", "pytorch_model.bin")


def test_weights_path_that_is_a_folder(model_dir):
    (model_dir / "model.safetensors").unlink()
    (model_dir / "model.safetensors").mkdir()
    _fails(model_dir, "里没有权重", "model.safetensors 不是一个文件")


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


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_sharded_weights(tmp_path):
    sharded = make_model_dir(tmp_path / "sharded", max_shard_size="4MB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2 and not (sharded / "model.safetensors").exists()
    assert inspect_model_dir(sharded).shape.layers == SMALL["num_hidden_layers"]
    (sharded / shards[-1]).unlink()
    _fails(sharded, "缺少 1 个权重分片", shards[-1])
    (sharded / "model.safetensors.index.json").write_text('{"metadata": {}}')
    _fails(sharded, "没有 weight_map")


def _edit_header(path, edit) -> None:
    """改 safetensors 文件头（8 字节长度 + JSON），后面的数据字节原样不动。"""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n :])


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_every_tensor_header_must_match_the_config(good_dirs, tmp_path, family):
    """以前：文件头里一个张量的形状转置了（同样的字节）-> 加载时 traceback；embedding 声明成 int32
    （同样的字节）-> 悄悄通过。现在每个张量的形状和 dtype 都在用任何权重之前对着 config.json 查。"""
    folder = _copy(good_dirs, tmp_path, family)
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    name = next(k for k in json.loads(good[8 : 8 + int.from_bytes(good[:8], "little")])
                if k.endswith("layers.1.mlp.down_proj.weight"))  # fmt: skip

    def transpose(h):
        h[name]["shape"] = h[name]["shape"][::-1]

    _edit_header(weights, transpose)
    _fails(folder, name, "config.json 说应为", "转置")
    weights.write_bytes(good)
    embed = name.replace("layers.1.mlp.down_proj", "embed_tokens")

    def as_int32(h):  # 同样的字节数：bf16 [V, H] -> int32 [V, H/2]
        v, hidden = h[embed]["shape"]
        h[embed] |= {"dtype": "I32", "shape": [v, hidden // 2]}

    _edit_header(weights, as_int32)
    _fails(folder, embed, "I32", "不是浮点权重")


def test_weights_must_match_the_config(model_dir):
    """config.json 说的层数、词表、是否共享 lm_head 要和权重文件头里的张量对得上。"""
    _edit(model_dir, num_hidden_layers=3)
    _fails(model_dir, "缺第 [2] 层")
    _edit(model_dir, num_hidden_layers=2, vocab_size=151_000)
    _fails(model_dir, "embed_tokens.weight", "[151000, 64]")
    _edit(model_dir, vocab_size=151936, tie_word_embeddings=False)
    _fails(model_dir, "tie_word_embeddings=false", "lm_head.weight")


@pytest.mark.slow
def test_a_resized_vocab_is_fine_while_the_tokenizer_fits(tmp_path):
    """自己微调过、词表扩到 151,680 的模型：权重和 config 一致、tokenizer 的 id 都在词表里，就接受。"""
    folder = make_model_dir(tmp_path / "resized", vocab_size=151_680)
    assert inspect_model_dir(folder).shape.vocab == 151_680
    small = make_model_dir(
        tmp_path / "too-small", vocab_size=151_000, pad_token_id=None, eos_token_id=[0]
    )
    _fails(small, "tokenizer 有 id", "vocab_size 只有 151000")


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
    assert inspect_model_dir(model_dir).path == model_dir


def test_a_chat_template_that_loops_for_ever_is_stopped(model_dir, monkeypatch):
    """以前：一个循环 10^10 次的模板让 model_dir check 一声不响地挂住。现在有时限，中文拒绝。"""
    import common.model.model_dir as M

    monkeypatch.setattr(M, "TEMPLATE_SECONDS", 0.3)
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    (model_dir / "chat_template.jinja").write_text(loop + "{{ messages }}")
    _fails(model_dir, "chat_template.jinja", "超过 0.3 秒", "循环")


def test_a_chat_template_that_doubles_a_string_is_stopped(model_dir, monkeypatch):
    """以前：每圈把字符串翻倍的模板几十圈就吃光内存（时限来不及管）。现在内存也有上限，中文拒绝。"""
    import common.model.model_dir as M

    monkeypatch.setattr(M, "TEMPLATE_MIB", 32)  # 默认 512 MiB；测试里只许多占 32 MiB
    double = "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
    (model_dir / "chat_template.jinja").write_text(double + "{% endfor %}{{ messages }}")
    _fails(model_dir, "chat_template.jinja", "超过 32 MiB 内存", "变长的字符串")


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_stop_tokens_come_from_the_folder(any_dir):
    """generation_config.json 没了也认得出 Qwen 的两个停止 token（tokenizer 里有它们）。"""
    (any_dir / "generation_config.json").unlink()
    _edit(any_dir, eos_token_id=None, pad_token_id=None)
    found = inspect_model_dir(any_dir)
    assert set(found.eos_token_ids) == {151645, 151643} and found.pad_token_id == 151643


def test_check_command(model_dir, capsys):
    assert main(["check", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert str(model_dir) in out and "python -m common.vram --model" in out
    assert main(["check", str(model_dir / "nope")]) == 2
    assert "模型目录不存在" in capsys.readouterr().err


def test_load_model_validates_before_anything_else(tmp_path):
    """坏目录在检查 CUDA、加载任何东西之前就报错。"""
    with pytest.raises(ModelDirError, match="模型目录不存在"):
        load_model("qwen3-0.6b", model_path=tmp_path / "nope")
    with pytest.raises(ValueError, match="--init random"):
        load_model("qwen3-0.6b", init="random", model_path=tmp_path)


@pytest.mark.slow
def test_good_dirs_load_on_the_cpu(any_dir):
    """≤ 50M 参数的模型在 CPU 上加载（fp32），权重就是目录里的那份。"""
    spec = model_spec(any_dir)
    model, tok = load_model(spec)
    assert model.config.hidden_size == 64 and model.training and not spec.needs_cuda
    assert next(model.parameters()).dtype == torch.float32
    assert model.config._name_or_path == str(any_dir)  # TRL 的参考模型、vLLM 都按这个路径再加载
    from safetensors.torch import load_file

    saved = load_file(any_dir / "model.safetensors")
    assert torch.equal(model.model.embed_tokens.weight, saved["model.embed_tokens.weight"].float())
    from common.gsm8k.data import build_prompt

    prompt = build_prompt(tok, "1 + 1 = ?")
    if spec.shape.family == "qwen3":  # Qwen3：关掉 thinking 的空 <think> 块
        assert prompt.endswith("<think>\n\n</think>\n\n")
    else:  # Qwen2.5：默认 system prompt，没有 thinking
        assert prompt.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
        assert "<think>" not in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert tok.padding_side == "left" and tok.pad_token_id == spec.pad_token_id
    ids = torch.tensor([tok(prompt, add_special_tokens=False).input_ids])
    assert torch.isfinite(model(ids).logits).all()


@pytest.mark.slow
def test_corrupted_weights_are_refused_at_load(any_dir):
    """safetensors 没有校验和：数据区里的随机字节能通过文件头检查，加载后查出 NaN/inf 就拒绝。"""
    path = any_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-4096:] = b"\xff" * 4096  # bf16 的 0xFFFF 是 NaN
    path.write_bytes(bytes(data))
    spec = model_spec(any_dir)  # 文件头完好：检查通过
    with pytest.raises(ValueError, match="NaN/inf"):
        load_model(spec)


@pytest.mark.parametrize(
    "data, needle",
    [(b"", "不是 GGUF 文件"), (b"<!DOCTYPE html><html>Not Found</html>", "不是 GGUF 文件"),
     (b"GGUF", "不完整或已损坏")],
    ids=["empty", "html", "magic-only"],
)  # fmt: skip
def test_from_gguf_refuses_what_is_not_a_whole_gguf(tmp_path, capsys, data, needle):
    """以前（issue 35）：空文件、网页、只有 4 个字节的 GGUF -> ValueError / IndexError 的 traceback。"""
    bad = tmp_path / "model.gguf"
    bad.write_bytes(data)
    assert main(["from-gguf", str(bad), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：") and str(bad) in err and needle in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.tmp").exists()


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_a_dtype_torch_does_not_have_is_refused(model_dir, key):
    """以前（issue 35）：config.json 的 "dtype": "bfloat17" 通过 check，训练时 AttributeError。"""
    _edit(model_dir, **{key: "bfloat17"})
    _fails(model_dir, f"{key} 是 'bfloat17'", "bfloat16")


TEMPLATES = {
    "sandbox": "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ messages[0]['content'] }}",
    "syntax": "{% for m in messages %}{{ m['content'] }}",
    "raises": "{{ raise_exception('no user role here') }}",
}


@pytest.mark.parametrize("kind", TEMPLATES)
def test_a_chat_template_that_cannot_render_is_refused(model_dir, kind):
    """以前（issue 35）：想访问 Python 内部的模板在第一次 rollout 时被沙箱拦下，留下 traceback。"""
    path = model_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**cfg, "chat_template": TEMPLATES[kind]}), encoding="utf-8")
    needle = "想访问 Python 的内部" if kind == "sandbox" else "渲染不了课程的 prompt"
    _fails(model_dir, "tokenizer_config.json 的 chat template", needle)
    path.write_text(json.dumps(cfg), encoding="utf-8")  # chat_template.jinja 也要查
    (model_dir / "chat_template.jinja").write_text(TEMPLATES[kind], encoding="utf-8")
    _fails(model_dir, "chat_template.jinja 的 chat template", needle)
