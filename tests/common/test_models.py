"""common.model.models 预设 + common.model.tokenizer 的 tiny tokenizer：形状、特殊 token、出错信息。"""

from __future__ import annotations

import re

import pytest
import torch

from common.config.grpo_config import FIELDS
from common.gsm8k.data import build_prompt, reference_completion, synthetic_problems
from common.model.models import load_model, model_spec, setup_device
from common.model.tokenizer import build_tiny_tokenizer
from common.options.presets import PresetError, get_preset, gpu_recipe, preset_names


@pytest.fixture(scope="module")
def tiny_tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def meta_model():
    """`load_model(name, init="random", device="meta")`，每个预设只建一次（建 1.7B + LoRA 约 1 s CPU）。"""
    built = {}

    def get(name):
        if name not in built:
            built[name] = load_model(name, init="random", device="meta")
        return built[name]

    return get


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_preset("qwen3-7b")
    for name in preset_names():
        assert name in str(err.value)


@pytest.mark.parametrize(
    "project, needle",
    [("[tool.other]\n", "[tool.rl-course] presets"),
     ('[tool.rl-course]\npresets = "nowhere/presets.toml"\n', "读不出预设文件")],
    ids=["no-table", "missing-file"],
)  # fmt: skip
def test_the_presets_file_is_where_pyproject_says(tmp_path, monkeypatch, project, needle):
    """预设文件的位置只写在 pyproject.toml 的 [tool.rl-course]：缺了、指错了 -> 一句中文的 PresetError。"""
    from common.options import presets

    (tmp_path / "pyproject.toml").write_text(project, encoding="utf-8")
    monkeypatch.setattr(presets, "COURSE_ROOT", tmp_path)
    monkeypatch.setattr(presets, "PROJECT_FILE", tmp_path / "pyproject.toml")
    presets.presets_file.cache_clear(), presets._read.cache_clear()
    try:
        with pytest.raises(PresetError, match=re.escape(needle)):
            get_preset("tiny")
    finally:
        monkeypatch.undo()
        presets.presets_file.cache_clear(), presets._read.cache_clear()
    assert get_preset("tiny").overrides == {}  # 恢复之后照常读课程的 presets.toml


def test_unknown_init_is_an_error():
    with pytest.raises(PresetError, match="init"):
        load_model("tiny", init="warm")


def test_preset_fields():
    assert set(preset_names()) == {
        "tiny", "qwen3-0.6b", "qwen3-1.7b-lora", "qwen2.5-0.5b-instruct", "qwen2.5-math-1.5b",
    }  # fmt: skip
    assert get_preset("tiny").overrides == {} and get_preset("tiny").model is None
    assert get_preset("qwen3-0.6b").model == "Qwen/Qwen3-0.6B"
    assert get_preset("qwen3-0.6b").lora_rank == 0 and get_preset("qwen3-1.7b-lora").lora_rank > 0
    gpu = gpu_recipe()
    for name in preset_names():  # 每个 GPU 预设 = GPU 配方 + 自己的几行（都是 GRPOConfig 的字段）
        preset = get_preset(name)
        assert set(preset.overrides) <= set(FIELDS), name
        if preset.model is not None:
            for key in ("group_size", "prompts_per_step", "max_new_tokens", "lr", "beta"):
                assert key in preset.overrides, (name, key)
            assert all(
                preset.overrides[k] == v
                for k, v in gpu.items()
                if k not in ("lr", "prompts_per_step")
            )


def test_eos_and_pad_ids_name_the_right_tokens(tiny_tok, qwen3_tokenizer):
    qwen = qwen3_tokenizer
    for spec, tok in (
        (model_spec(None), tiny_tok),
        (model_spec("Qwen/Qwen3-0.6B"), qwen),
        (model_spec("Qwen/Qwen2.5-0.5B-Instruct"), qwen),
    ):
        assert tok.convert_ids_to_tokens(list(spec.eos_token_ids)) == [
            "<|im_end|>",
            "<|endoftext|>",
        ]
        assert tok.convert_ids_to_tokens(spec.pad_token_id) == "<|endoftext|>"
        assert tok.pad_token_id == spec.pad_token_id


def test_tiny_tokenizer_chat_template_and_round_trip(tiny_tok):
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tiny_tok, PreTrainedTokenizerFast)
    p = synthetic_problems(1, seed=3, difficulty=3)[0]
    prompt = build_prompt(tiny_tok, p.question)
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith(
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    text = prompt + reference_completion(p) + "<|im_end|>"
    ids = tiny_tok(text, add_special_tokens=False).input_ids
    assert tiny_tok.decode(ids) == text
    assert len(ids) < 100  # short sequences keep the CPU preset fast
    # every digit is its own token, so numbers are spelled digit by digit
    digits = tiny_tok("1234567890", add_special_tokens=False).input_ids
    assert tiny_tok.convert_ids_to_tokens(digits) == list("1234567890")
    # text outside the synthetic vocabulary never crashes and round-trips (byte-level fallback)
    odd = "Unknown wörds, 中文 and émojis 🙂 cost 1,234.50$"
    assert tiny_tok.decode(tiny_tok(odd, add_special_tokens=False).input_ids) == odd


def test_tiny_tokenizer_is_deterministic(tiny_tok):
    import json

    from common.model.tokenizer import TINY_VOCAB_SIZE, _train_tiny_bpe

    # retrain, bypassing the cache
    fresh = json.loads(_train_tiny_bpe.__wrapped__(TINY_VOCAB_SIZE))["model"]
    # same vocab and merges
    assert fresh == json.loads(tiny_tok.backend_tokenizer.to_str())["model"]


def _count_params(cfg) -> int:
    """Parameter count of a dense Qwen3 / Qwen2 from its config (tied embeddings counted once)."""
    h, i, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    if cfg.model_type == "qwen3":
        attn = h * q + 2 * h * kv + q * h + 2 * hd  # q,k,v,o projections + q_norm, k_norm
    else:
        attn = h * q + 2 * h * kv + q * h + q + 2 * kv  # q,k,v,o projections + q/k/v biases
    mlp = 3 * h * i
    per_layer = attn + mlp + 2 * h  # two RMSNorms
    emb = cfg.vocab_size * h * (1 if cfg.tie_word_embeddings else 2)
    return emb + L * per_layer + h  # final norm


@pytest.mark.parametrize(
    "name, hidden, inter, layers, n_params",
    [
        ("qwen3-0.6b", 1024, 3072, 28, 596_049_920),
        ("qwen3-1.7b-lora", 2048, 6144, 28, None),
        ("qwen2.5-0.5b-instruct", 896, 4864, 24, 494_032_768),
    ],
)
@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_random_init_builds_exact_shapes(name, hidden, inter, layers, n_params, meta_model):
    spec = model_spec(get_preset(name).model)
    cfg = spec.shape.hf_config(**spec.stop_tokens)
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (
        hidden,
        inter,
        layers,
    )
    assert cfg.vocab_size == 151936 and cfg.tie_word_embeddings and cfg.rms_norm_eps == 1e-6
    assert cfg.model_type == spec.shape.family
    if spec.shape.family == "qwen3":
        assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (16, 8, 128)
        assert cfg.max_position_embeddings == 40960 and cfg.rope_parameters["rope_theta"] == 1e6
    # shapes only, no memory, no download
    model, tok = meta_model(name)
    assert len(tok) == 151669
    lora = get_preset(name).lora_rank
    base = model.get_base_model() if lora else model
    n_base = sum(p.numel() for n_, p in base.named_parameters() if "lora_" not in n_)
    assert n_base == _count_params(cfg) == spec.shape.n_params()
    if n_params is not None:  # the hub model cards: 0.6B (Qwen3, tied), 0.49B (Qwen2.5)
        assert n_base == n_params
    if lora:
        trainable = [n_ for n_, p in model.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n_ for n_ in trainable)
    assert next(base.parameters()).dtype == torch.bfloat16


@pytest.mark.skipif(torch.cuda.is_available(), reason="这台机器有 GPU")
@pytest.mark.parametrize("name", ["qwen3-0.6b", "qwen3-1.7b-lora"])
def test_gpu_preset_without_cuda_says_what_to_do(name):
    with pytest.raises(PresetError) as err:
        load_model(name, init="random")
    assert "--preset tiny" in str(err.value) and "GPU" in str(err.value)
    with pytest.raises(PresetError):
        load_model("tiny", init="random", device="cuda")


def test_tiny_random_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    m1, tok = load_model("tiny", init="random")
    assert torch.equal(torch.get_rng_state(), state)
    m2, _ = load_model("tiny", init="random")
    for (n, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), n
    assert m1.training and m1.dtype == torch.float32 and m1.config.vocab_size == len(tok)
    assert type(m1).__name__ == "Qwen3ForCausalLM" and tok.padding_side == "left"
    assert sum(p.numel() for p in m1.parameters()) == _count_params(m1.config)
    ids = torch.tensor(
        [tok(build_prompt(tok, "Tom has 3 apples."), add_special_tokens=False).input_ids]
    )
    logits = m1(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()


def test_ledger_settings_follow_the_presets():
    """显存账本对每个 GPU 预设的设定来自 presets.toml 的值（common.vram.plan.training_settings）。"""
    from common.config.config_cli import preset_config
    from common.vram.plan import training_settings
    from common.vram.shapes import SHAPES

    for name, shape_name, method in (
        ("qwen3-0.6b", "Qwen3-0.6B", "full"),
        ("qwen3-1.7b-lora", "Qwen3-1.7B", "lora"),
        ("qwen2.5-math-1.5b", "Qwen2.5-Math-1.5B", "lora"),
    ):
        o = get_preset(name).overrides
        shape, s = training_settings(preset_config(name))
        assert shape is SHAPES[shape_name] and s.method == method, name
        assert (s.prompts, s.group, s.max_new_tokens, s.beta) == (
            o["prompts_per_step"], o["group_size"], o["max_new_tokens"], o["beta"],
        ), name  # fmt: skip
        # 训练脚本在 GPU 上走 fast_decode，开检查点（load_model 在 GPU 上的做法）
        assert s.layout == "policy" and s.rollout_backend == "fast" and s.checkpointing, name
    assert (
        training_settings(preset_config("qwen3-1.7b-lora"))[1].lora_rank
        == get_preset("qwen3-1.7b-lora").lora_rank
    )
    assert training_settings(preset_config("tiny")) is None  # tiny 在 CPU 上跑，账本没有它的形状


def _checkpointing_kwargs(model):
    """load_model 打开的 gradient checkpointing 的参数（关着时为 None）。"""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not base.is_gradient_checkpointing:
        return None
    return base.model.layers[0]._gradient_checkpointing_func.keywords


def test_load_model_turns_on_gradient_checkpointing(meta_model):
    """库里打开 gradient checkpointing 的唯一地方是 load_model：GPU 预设默认开，非 reentrant（LoRA 冻结的输入也能反向）。"""
    model, _ = meta_model("qwen3-1.7b-lora")
    assert _checkpointing_kwargs(model) == {"use_reentrant": False}
    tiny, _ = load_model("tiny", init="random")
    assert _checkpointing_kwargs(tiny) is None  # tiny 默认不开（CPU 上激活很小）
    tiny, _ = load_model("tiny", init="random", gradient_checkpointing=True)
    assert _checkpointing_kwargs(tiny) == {"use_reentrant": False}


def test_setup_device_turns_off_cudnn_attention():
    """第 86 步的 NaN（L2.08 第 6.2 节）：cuDNN 的 attention 反向在带 mask、宽度 ≡ 64 (mod 128) 时给出
    NaN 的 grad_q。训练 forward 总带 mask，所以 setup_device 必须把 cuDNN SDPA 关掉（CPU 上也能查这个开关）。"""
    threads = torch.get_num_threads()  # setup_device 在 CPU 上改成单线程：测完还原
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        setup_device(model_spec("tiny"))
        assert not torch.backends.cuda.cudnn_sdp_enabled(), (
            "setup_device 之后 cuDNN 的 SDPA 还开着：训练会在宽度 ≡ 64 (mod 128) 的那一步得到 NaN 梯度"
            "（L2.08 第 6.2 节；common/model/models.py 的 setup_device）"
        )
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
        torch.set_num_threads(threads)
