"""显存账本：模型形状（common.vram.shapes）、账本的每一行（common.vram.ledger，与手算对照）、
种子表的结论（common.vram.fit）和命令行（common.vram）。测显存的辅助函数见 test_cuda_memory.py。

手算的数字直接从 config.json 的形状写出来，不调用被测函数。
「按字节数对照」的几个测试在 CPU 上数 autograd 真正存下/分配的张量字节——它们检验账本的算术，
不是显存测量（显存只认 GPU 上测的，见 L1_concepts/04_vram_ledger/measure_vram.py）。
"""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from common.vram import fit
from common.vram import ledger as ledger_module
from common.vram import report as vram
from common.vram.decode_shape import static_shape
from common.vram.fit import fit_table
from common.vram.ledger import GiB, Settings, ledger
from common.vram.shapes import MODELS, SHAPES, ModelShape, get_model

# 种子表（单卡 32 GB）：模型, 方式 -> 结论
SEED_VERDICTS = {
    ("Qwen3-0.6B", "full"): "fits",
    ("Qwen3-1.7B", "full"): "no",
    ("Qwen3-1.7B", "lora"): "fits",
    ("Qwen3-4B", "lora"): "tight",
    ("Qwen3-8B", "qlora"): "tight",
    ("Qwen3-30B-A3B", "full"): "no",
    ("Qwen3-30B-A3B", "lora"): "no",
    ("Qwen3-30B-A3B", "qlora"): "no",
}


@pytest.fixture(scope="module")
def table():
    return {(r["model"], r["method"]): r for r in fit_table(32)}


# ---------------------------------------------------------------- 形状与参数量 ---------------------------------


def _dense_params(d, layers, heads, kv, hd, inter, vocab, tied):
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    per_layer = attn + 3 * d * inter + 2 * d + 2 * hd
    return layers * per_layer + vocab * d * (1 if tied else 2) + d


def test_param_counts_from_the_config_shapes():
    # 每个数都由 config.json 的形状手算；再和公开的总参数量（模型卡：0.6B/1.7B/4B/8B/30.5B、激活 3.3B）对照
    expected = {
        "Qwen3-0.6B": _dense_params(1024, 28, 16, 8, 128, 3072, 151936, True),
        "Qwen3-1.7B": _dense_params(2048, 28, 16, 8, 128, 6144, 151936, True),
        "Qwen3-4B": _dense_params(2560, 36, 32, 8, 128, 9728, 151936, True),
        "Qwen3-8B": _dense_params(4096, 36, 32, 8, 128, 12288, 151936, False),
    }
    assert expected["Qwen3-0.6B"] == 596_049_920
    for name, n in expected.items():
        assert SHAPES[name].n_params() == n, name
    published = {
        "Qwen3-0.6B": 0.596e9,
        "Qwen3-1.7B": 1.72e9,
        "Qwen3-4B": 4.02e9,
        "Qwen3-8B": 8.19e9,
    }
    for name, n in published.items():
        assert abs(SHAPES[name].n_params() - n) / n < 0.005, name

    # MoE：每层 注意力 + 路由 2048×128 + 128 个专家（每个 3×2048×768）+ 范数；嵌入与 lm_head 不共享
    attn = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048
    expert = 3 * 2048 * 768
    norms = 2 * 2048 + 2 * 128
    emb = 2 * 151936 * 2048
    moe = SHAPES["Qwen3-30B-A3B"]
    assert moe.n_params() == 48 * (attn + 2048 * 128 + 128 * expert + norms) + emb + 2048
    assert (
        moe.n_params(active_only=True) == 48 * (attn + 2048 * 128 + 8 * expert + norms) + emb + 2048
    )
    assert abs(moe.n_params() - 30.5e9) / 30.5e9 < 0.01
    assert abs(moe.n_params(active_only=True) - 3.3e9) / 3.3e9 < 0.02


def test_config_dict_is_the_source_for_the_model_presets():
    """每个预设的模型形状都来自这里（同一份真相），transformers 的 config 也由它造出来。"""
    from common.model.models import model_spec
    from common.options.presets import get_preset, preset_names

    by_hub = {m.hub_id: m for m in SHAPES.values()}
    for name in preset_names():
        hub = get_preset(name).model
        if hub is None:
            continue
        spec = model_spec(hub)
        assert spec.shape is by_hub[hub], name
        cfg = spec.shape.hf_config(**spec.stop_tokens)
        assert cfg.model_type == spec.shape.family, name
        for key, value in spec.shape.config_dict().items():
            got = cfg.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(cfg, key)
            assert got == value, (name, key)


def test_qwen25_counts_match_the_published_sizes():
    """Qwen2.5：q/k/v 有 bias、没有 q/k norm。0.5B 公布的是 494,032,768（0.49B），1.5B 是 1.54B。"""
    d, L, H, KV, hd, I, V = 896, 24, 14, 2, 64, 4864, 151936
    attn = d * H * hd + 2 * d * KV * hd + H * hd * d + (H * hd + 2 * KV * hd)  # 最后一项是 bias
    per_layer = attn + 3 * d * I + 2 * d
    assert SHAPES["Qwen2.5-0.5B-Instruct"].n_params() == L * per_layer + V * d + d == 494_032_768
    assert abs(SHAPES["Qwen2.5-1.5B-Instruct"].n_params() - 1.54e9) / 1.54e9 < 0.005
    assert SHAPES["Qwen2.5-Math-1.5B"].n_params() == SHAPES["Qwen2.5-1.5B-Instruct"].n_params()


def test_a_config_json_gives_the_same_shape_as_the_table():
    for shape in SHAPES.values():
        cfg = {"model_type": shape.family + ("_moe" if shape.is_moe else ""), **shape.config_dict()}
        again = ModelShape.from_config_json(cfg, name=shape.name, hub_id=shape.hub_id)
        assert again == shape, shape.name
    qwen2 = {k: v for k, v in SHAPES["Qwen2.5-0.5B-Instruct"].config_dict().items()}
    del qwen2["head_dim"]  # Qwen2 的 config.json 不写 head_dim：= hidden / heads
    again = ModelShape.from_config_json({"model_type": "qwen2", **qwen2}, "Qwen2.5-0.5B-Instruct")
    assert again.head_dim == 64 and not again.qk_norm and again.attention_bias
    with pytest.raises(ValueError, match="llama"):
        ModelShape.from_config_json({"model_type": "llama", **qwen2})


def test_unknown_model_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        get_model("Qwen3-7B")
    assert all(name in str(err.value) for name in MODELS)
    assert get_model("qwen3-0.6b") is SHAPES["Qwen3-0.6B"]


# ---------------------------------------------------------------- 种子表 -------------------------------------


def test_fit_table_has_every_model_and_method(table):
    assert set(table) == {(m, k) for m in MODELS for k in ledger_module.METHODS}
    for row in table.values():
        assert row["verdict"] in ("fits", "tight", "no")
        assert {"breakdown", "settings", "total_gb", "usage", "max_new_tokens_fit", "note"} <= set(
            row
        )
        assert row["settings"]["method"] == row["method"]


@pytest.mark.parametrize("key", sorted(SEED_VERDICTS), ids=lambda k: f"{k[0]}-{k[1]}")
def test_seed_verdicts_at_32_gb(table, key):
    assert table[key]["verdict"] == SEED_VERDICTS[key], table[key]["note"]


def test_seed_notes_hold(table):
    # 1.7B 全参：光 AdamW 状态（fp32 主权重 + m + v，12 B/参数）就 ≈ 20 GB
    opt = table["Qwen3-1.7B", "full"]["breakdown"]["optimizer"] * GiB
    assert opt == 1_720_574_976 * 12 and 19.5e9 < opt < 21e9
    assert "AdamW" in table["Qwen3-1.7B", "full"]["note"]
    # 8B QLoRA：回答长度压到 1K 以内
    assert 0 < table["Qwen3-8B", "qlora"]["max_new_tokens_fit"] < 1024
    # 0.6B 全参：留得下余量调参（≥ 15% 余量，回答还能放长到 1024）
    assert table["Qwen3-0.6B", "full"]["usage"] <= 0.85
    assert table["Qwen3-0.6B", "full"]["max_new_tokens_fit"] >= 1024
    # MoE：专家全部驻留——光权重就放不下
    moe = table["Qwen3-30B-A3B", "qlora"]
    assert "专家全部驻留" in moe["note"] and moe["breakdown"]["weights"] > 32


def test_verdict_rule():
    assert fit.verdict(0.85, 1024) == "fits"
    assert fit.verdict(0.86, 4096) == "tight"
    assert fit.verdict(0.50, 960) == "tight"
    assert fit.verdict(1.01, 4096) == "no"


# ---------------------------------------------------------------- 账本的每一行，与手算对照 -----------------------


def test_lines_full_finetune_by_hand():
    s = Settings(
        method="full",
        prompts=8,
        group=8,
        prompt_len=256,
        max_new_tokens=512,
        micro_batch=4,
        beta=0.04,
        precision="mixed",
        layout="policy",
    )
    L = ledger("Qwen3-0.6B", s)
    n = 596_049_920
    assert L.lines["weights"].nbytes == n * 2
    assert L.lines["gradients"].nbytes == n * 2
    assert L.lines["optimizer"].nbytes == n * 12
    assert L.lines["optimizer_temp"].nbytes == n * 4
    assert L.lines["reference"].nbytes == n * 2
    # KV：64 条 × (256+512) token × 28 层 × (K,V) × 8 个 KV 头 × 128 × bf16
    assert L.lines["kv_cache"].nbytes == 64 * 768 * 28 * 2 * 8 * 128 * 2
    # logits：micro-batch 4 × 512 个回答位置 × 151,936 × 10 B（课程的 token_logprobs，见 LOGPROB_BYTES）
    assert L.lines["logits"].nbytes == 4 * 512 * 151936 * 10
    # 每层每 token：范数 16d + q/k 范数 6(hq+hkv) + rsqrt 4(2+H+Hkv) + 注意力 8hq + 4H + MLP 8I
    per_layer = 16 * 1024 + 6 * (2048 + 1024) + 4 * (2 + 16 + 8) + 8 * 2048 + 4 * 16 + 8 * 3072
    assert ledger_module.activation_bytes_per_token_layer(SHAPES["Qwen3-0.6B"]) == per_layer
    tokens = 4 * 768
    assert L.lines["activations"].nbytes == tokens * (28 * 2 * 1024 + 8 * 1024)
    assert L.lines["recompute"].nbytes == tokens * per_layer * 1.25 + 4 * 768 * 768 * 2
    # 阶段：反向峰值 = 权重 + 参考 + AdamW + 梯度 + 激活 + max(logits, 重算一层)
    static = n * (2 + 2 + 12)  # 权重 + 参考模型 + AdamW
    assert (
        L.phases["backward"]
        == static + n * 2 + L.lines["activations"].nbytes + L.lines["logits"].nbytes
    )
    assert L.phases["optimizer"] == static + n * 2 + n * 4
    assert L.phases["after_step"] == static  # zero_grad(set_to_none=True)：梯度已释放
    assert L.total == L.peak_allocated * 1.05 + 0.5 * GiB


def test_lines_precisions():
    n = 596_049_920
    fp32 = ledger("Qwen3-0.6B", Settings(precision="fp32", layout="policy"))
    assert (
        fp32.lines["weights"].nbytes,
        fp32.lines["gradients"].nbytes,
        fp32.lines["optimizer"].nbytes,
    ) == (n * 4, n * 4, n * 8)
    assert fp32.lines["autocast_copies"].nbytes == n * 2 and fp32.lines["reference"].nbytes == n * 2
    bf16 = ledger("Qwen3-0.6B", Settings(precision="bf16", layout="policy", optimizer="fused"))
    assert bf16.lines["optimizer"].nbytes == n * 4 and bf16.lines["optimizer_temp"].nbytes == 0


def test_lines_lora_and_qlora_by_hand():
    d, hq, hkv, inter, layers, r = 4096, 4096, 1024, 12288, 36, 16
    adapters = r * layers * ((d + hq) + 2 * (d + hkv) + (hq + d) + 3 * (d + inter))
    n = 8_190_735_360
    lora = ledger(
        "Qwen3-8B", Settings(method="lora", lora_rank=r, layout="colocate", prompt_len=256)
    )
    assert lora.lines["weights"].nbytes == n * 2 + adapters * 4
    assert lora.lines["gradients"].nbytes == adapters * 4
    assert lora.lines["optimizer"].nbytes == adapters * 8
    assert lora.lines["reference"].nbytes == 0  # 关掉 adapter 就是参考模型
    qlora = ledger(
        "Qwen3-8B", Settings(method="qlora", lora_rank=r, layout="colocate", prompt_len=256)
    )
    linear = layers * (d * hq + 2 * d * hkv + hq * d + 3 * d * inter)
    nf4 = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # QLoRA 论文：4 bit + 双重量化的块常数
    assert qlora.lines["weights"].nbytes == pytest.approx(
        linear * nf4 + (n - linear) * 2 + adapters * 4
    )
    # 同卡引擎：4-bit 基座副本 + 全部并发的 KV + 工作区
    kv = 64 * 768 * 36 * 2 * 8 * 128 * 2
    assert qlora.lines["engine"].nbytes == pytest.approx(linear * nf4 + (n - linear) * 2 + kv + GiB)


def test_moe_experts_stay_bf16_under_4bit():
    """transformers 5.17 的 bnb 4-bit 只替换 nn.Linear；Qwen3-MoE 的专家是 3 维 nn.Parameter，留在 bf16。"""
    from transformers.models.qwen3_moe import modeling_qwen3_moe

    experts = modeling_qwen3_moe.Qwen3MoeExperts
    assert not issubclass(experts, torch.nn.Linear)
    moe = SHAPES["Qwen3-30B-A3B"]
    qlora = ledger(moe, Settings(method="qlora", layout="policy"))
    expert_bytes = 48 * 128 * 3 * 2048 * 768 * 2
    assert qlora.lines["weights"].nbytes > expert_bytes > 32 * GiB


def test_ledger_is_monotone_in_the_obvious_knobs():
    base = Settings(method="lora", layout="policy")
    total = lambda **kw: ledger("Qwen3-1.7B", dataclasses.replace(base, **kw)).peak_allocated
    assert total(prompts=16) > total() > total(prompts=4)
    assert total(max_new_tokens=1024) > total()
    assert total(checkpointing=False) > total()
    assert total(micro_batch=8) > total()
    logits = lambda kind: (
        ledger("Qwen3-1.7B", dataclasses.replace(base, logprobs=kind)).lines["logits"].nbytes
    )
    assert logits("naive") > logits("chunked") > logits("chunked_ckpt")
    assert total(optimizer="fused") <= total()
    assert (
        ledger("Qwen3-1.7B", Settings(layout="policy", prompts=4)).phases["rollout"]
        < ledger("Qwen3-1.7B", Settings(layout="policy")).phases["rollout"]
    )
    assert ledger("Qwen3-0.6B", dataclasses.replace(base, beta=0.0)).lines["reference"].nbytes == 0


def test_answer_limit_is_the_boundary():
    s = dataclasses.replace(fit.TABLE_BASE, method="lora")
    limit = fit.max_new_tokens_that_fit("Qwen3-4B", s)
    assert limit % 64 == 0 and limit > 0
    assert ledger("Qwen3-4B", dataclasses.replace(s, max_new_tokens=limit)).usage <= 1.0
    assert ledger("Qwen3-4B", dataclasses.replace(s, max_new_tokens=limit + 64)).usage > 1.0
    assert fit.max_new_tokens_that_fit("Qwen3-1.7B", dataclasses.replace(s, method="full")) == 0


def test_bad_settings_say_what_to_change():
    with pytest.raises(ValueError, match="method"):
        Settings(method="dora")
    with pytest.raises(ValueError, match="micro_batch"):
        Settings(micro_batch=0)
    with pytest.raises(ValueError, match="beta"):
        Settings(beta=-1)
    with pytest.raises(ValueError, match="--beta（KL 系数）要是 >= 0 的有限数"):
        Settings(beta=float("nan"))  # 以前（issue 35）：NaN 不小于 0，悄悄当成没有 KL
    for gb in (-5.0, 0.0, float("inf")):
        with pytest.raises(ValueError, match="--engine-gb"):
            Settings(engine_gb=gb)


def test_logprob_chunk_rows_match_the_l2_solution():
    # 账本对 log-prob 显存的记法对应课程自己的 token_logprobs（参考实现）
    from solutions import l2_02_logprobs_and_masks as lm

    assert ledger_module.LOGPROB_CHUNK_ROWS == lm.CHUNK_ROWS


# ---------------------------------------------------------------- 与 autograd 真正存下的字节对照（CPU） ----------


def _tiny_qwen3(layers, method, hidden=96, inter=320, heads=4, kv=2, hd=32, vocab=300, lora_rank=4):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=hd,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    if method != "full":
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(
            model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules=targets)
        )
    shape = ModelShape("t", "t", hidden, layers, heads, kv, hd, inter, vocab, True, 1024)
    return model, shape


def _saved_bytes(out: torch.Tensor, params) -> int:
    """Walk the autograd graph from `out` and add up the distinct storages it saved (parameters excluded)."""
    skip = {p.untyped_storage().data_ptr() for p in params}
    seen, stack, visited = {}, [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        for attr in dir(fn):
            if attr.startswith("_saved_"):
                try:
                    val = getattr(fn, attr)
                except Exception:  # noqa: BLE001 - some saved slots cannot be read back
                    continue
                if isinstance(val, torch.Tensor) and val.numel():
                    st = val.untyped_storage()
                    if st.data_ptr() not in skip:
                        seen[st.data_ptr()] = st.nbytes()
        stack += [nxt for nxt, _ in fn.next_functions]
    return sum(seen.values())


@pytest.mark.parametrize("method", ["full", "lora"])
def test_per_layer_formula_equals_what_autograd_saves(method):
    """每层每 token 的公式 == 从 autograd 图里读出的、一层多存下的字节（两层模型减一层模型）。"""
    B, L = 2, 24
    ids = torch.randint(0, 300, (B, L), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, L, dtype=torch.long)
    mask[0, :3] = 0  # 左填充：和 rollout 之后的训练 batch 一样有 padding mask
    saved = []
    for layers in (1, 2):
        model, shape = _tiny_qwen3(layers, method)
        model.train()
        if method != "full":
            model.enable_input_require_grads()
        out = model(input_ids=ids, attention_mask=mask).logits
        saved.append(_saved_bytes(out, list(model.parameters())))
    per_layer = ledger_module.activation_bytes_per_token_layer(shape, "bf16", method, lora_rank=4)
    padding_mask = B * L * L * 2  # SDPA 每层存一份转成 bf16 的 mask
    # rel 1e-3：peft 每个 adapter 还存一个 float64 的 scaling 标量（8 字节，与 token 数无关）
    assert saved[1] - saved[0] == pytest.approx(per_layer * B * L + padding_mask, rel=1e-3)


class _LiveBytes(TorchDispatchMode):
    """Peak of the bytes held by storages that ops created inside the mode (CPU tensors)."""

    def __init__(self, existing):
        super().__init__()
        self.keep = [t.untyped_storage() for t in existing]
        self.live = {id(st): 0 for st in self.keep}
        self.cur = self.peak = 0

    def _free(self, key):
        self.cur -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                if st.nbytes() and id(st) not in self.live:
                    self.live[id(st)] = st.nbytes()
                    self.cur += st.nbytes()
                    self.peak = max(self.peak, self.cur)
                    weakref.finalize(st, self._free, id(st))
        return out


def _count_logprob_peak(fn, B=4, T=512, V=3000):
    logits = torch.randn(B, T + 1, V, dtype=torch.bfloat16).requires_grad_()
    tokens = torch.randint(0, V, (B, T))
    counter = _LiveBytes([logits])
    with counter:
        fn(
            logits[:, :-1], tokens
        ).sum().backward()  # 和 grpo_train 一样：logits_to_keep=T+1 再去掉最后一位
    return counter.peak / (B * T * V) + 2  # + 2：logits 本身（bf16）


def test_logprob_bytes_per_element():
    from solutions.l2_02_logprobs_and_masks import token_logprobs

    naive = lambda x, t: torch.log_softmax(x.float(), -1).gather(-1, t[..., None])[..., 0]
    assert _count_logprob_peak(naive) == pytest.approx(
        ledger_module.LOGPROB_BYTES["naive"], rel=0.02
    )
    assert _count_logprob_peak(token_logprobs) == pytest.approx(
        ledger_module.LOGPROB_BYTES["chunked_ckpt"], rel=0.02
    )


def _count_train_peak(method, checkpointing, precision, B=4, L=256, V=3000, layers=2):
    model, shape = _tiny_qwen3(layers, method, vocab=V)
    from solutions.l2_02_logprobs_and_masks import token_logprobs

    if checkpointing:
        model.gradient_checkpointing_enable()
    if precision == "fp32":  # 与 grpo_train.py 相同：可训练参数用 fp32，计算走 bf16 autocast
        for p in model.parameters():
            p.data = p.data.float() if p.requires_grad else p.data
    model.train()
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)  # 稳态：梯度已经在（账本把它记在「梯度」一行）
    T = L // 2
    ids = torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, L, dtype=torch.long)
    mask[0, :3] = 0
    counter = _LiveBytes(
        list(model.parameters()) + [p.grad for p in model.parameters() if p.grad is not None]
    )
    with counter:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "fp32"):
            logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=T + 1).logits[:, :-1]
        token_logprobs(logits, ids[:, -T:]).mean().backward()
    s = Settings(
        method=method,
        prompts=1,
        group=B,
        prompt_len=L - T,
        max_new_tokens=T,
        micro_batch=B,
        checkpointing=checkpointing,
        precision=precision,
        lora_rank=4,
        layout="policy",
    )
    led = ledger(shape, s)
    g = led.lines
    # 反向峰值减去静态部分（权重、梯度都是事先就在的）= 账本里 micro-batch 相关的那几行
    return counter.peak, led.phases["backward"] - led.phases["after_step"] - g["gradients"].nbytes


@pytest.mark.parametrize(
    "method,checkpointing,precision",
    [
        ("full", True, "fp32"),
        ("lora", True, "fp32"),
    ],
)
def test_training_peak_matches_counted_bytes(method, checkpointing, precision):
    """一个 micro-batch 前向 + 反向的峰值字节（激活 + logits + autocast 副本）与账本相差 < 6%。"""
    counted, predicted = _count_train_peak(method, checkpointing, precision)
    assert predicted == pytest.approx(counted, rel=0.06)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("checkpointing", [True, False])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_training_peak_matches_counted_bytes_grid(method, checkpointing, precision):
    counted, predicted = _count_train_peak(
        method, checkpointing, precision, L=512, V=6000, layers=4
    )
    assert predicted == pytest.approx(counted, rel=0.06)


# ---------------------------------------------------------------- CLI ---------------------------------------


def test_cli_prints_the_table(capsys):
    assert vram.main([]) == 0
    out = capsys.readouterr().out
    for name in MODELS:
        assert name in out
    assert "tight" in out and "fits" in out and "no" in out


def test_cli_explains_one_configuration(capsys):
    assert vram.main(["--model", "Qwen3-4B", "--method", "lora"]) == 0
    out = capsys.readouterr().out
    assert "tight" in out and "KV" in out and "峰值" in out
    assert (
        vram.main(
            ["--model", "qwen3-0.6b", "--layout", "policy", "--prompts", "4", "--gpu-gb", "24"]
        )
        == 0
    )
    assert "P4×G8" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [(["--gpu-gb", "nan"], "--gpu-gb 要是正的有限数"), (["--gpu-gb", "inf"], "--gpu-gb 要是正的有限数"),
     (["--model", "Qwen3-0.6B", "--beta", "nan"], "--beta（KL 系数）"),
     (["--model", "Qwen3-0.6B", "--layout", "colocate", "--engine-gb", "-5"], "--engine-gb")],
)  # fmt: skip
def test_cli_refuses_values_it_used_to_print(capsys, argv, needle):
    """以前（issue 35）：nan GiB 打印 nan%，inf GiB 说「装得下」，--beta nan 当成 0，--engine-gb -5 照算。"""
    try:
        code = vram.main(argv)
    except SystemExit as exc:  # argparse 的 p.error
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and needle in err and "错误" in err and not out, (code, out, err)


@pytest.mark.parametrize("argv", [[], ["--model", "Qwen3-30B-A3B"], ["--model", "Qwen3-4B"]])
def test_cli_output_survives_a_gbk_console(argv):
    """以前（issue 35）：中文 Windows 上 `python -m common.vram > 表.txt`（stdout 是 GBK）在 ✅ 上
    UnicodeEncodeError，整张表丢了。现在换成 [v] / [!] / [x]，其余中文照常写出。"""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "gbk"}
    proc = subprocess.run(
        [sys.executable, "-m", "common.vram", *argv], capture_output=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode("gbk", "replace")
    out = proc.stdout.decode("gbk")  # 能按 GBK 解码 = 写出来的就是 GBK
    assert any(mark in out for mark in vram.TEXT_MARK.values()) and "GiB" in out, out


def test_cli_bad_input_exits_nonzero(capsys):
    assert vram.main(["--model", "Qwen3-7B"]) == 2
    assert "Qwen3-0.6B" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        vram.main(["--gpu-gb", "0"])
    assert err.value.code != 0


# ---------------------------------------------------------------- 与其他模块对齐 --------------------------------


def test_fast_decoder_line_uses_the_decoders_own_buckets():
    # common.decode.fast_decode 的桶：行数按 16 取整；槽数 = prompt + 1 + ⌈(回答-1)/16⌉·16 + 1，按 128 取整
    assert static_shape(64, 256, 512) == (64, 896)  # 256 + 1 + 32·16 + 1 = 770 -> 896
    assert static_shape(5, 10, 1) == (16, 128)
    L = ledger(
        "Qwen3-0.6B",
        Settings(layout="policy", rollout_backend="fast", precision="fp32", prompt_len=256),
    )
    kv = 64 * 896 * 28 * 2 * 8 * 128 * 2  # 64 行 × 896 槽 × 28 层 × (K,V) × 8 头 × 128 × bf16
    copies = 596_049_920 * 2  # fp32 主权重的 bf16 解码副本
    pool = 16 * 64 * 151936  # CUDA graph 内存池的估计
    assert L.lines["fast_decoder"].nbytes == kv + copies + pool


def test_verdict_is_an_explicit_assessment():
    """账本只做算术（合计在构造时算好）；结论和「回答上限」的搜索由 common.vram.fit.assess 显式完成。"""
    L = ledger("Qwen3-4B", dataclasses.replace(fit.TABLE_BASE, method="lora"))
    assert L.total == L.peak_allocated + L.slack + L.context
    assert L.usage == L.total / (32 * GiB)
    a = fit.assess(L)
    assert a.answer_limit == fit.max_new_tokens_that_fit(L.model, L.settings, L.gpu_gb)
    assert a.verdict == fit.verdict(L.usage, a.answer_limit) == "tight"


def test_printing_the_fit_table_imports_no_torch():
    """`python -m common.vram` 只是算术：不 import torch（在一台很忙的机器上那要 20 s）。"""
    import subprocess
    import sys

    code = (
        "import sys; from common.vram.report import main; main([]); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout[-500:]


def test_a_model_folder_is_priced_from_its_config_json(tmp_path, capsys):
    """--model 目录：形状从它的 config.json 读（不读权重），打印逐项、各阶段、结论和 grpo_train.py 的选择。"""
    import json

    cfg = {"model_type": "qwen2", **SHAPES["Qwen2.5-1.5B-Instruct"].config_dict()}
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    assert vram.main(["--model", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "各阶段" in out and "合计" in out and "grpo_train.py --model" in out
    assert "改用 LoRA" in out  # 1.5B 全参数 96%：余量不到 15%，账本选 LoRA
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    assert vram.main(["--model", str(tmp_path)]) == 2
    assert "llama" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_prefill_cache_is_fp32_under_autocast(family):
    """L1.04 第 7.2 节：fp32 主权重在 bf16 autocast 下，快速解码器那次 HF prefill 的动态 KV 是 fp32。

    K 经过 fp32 的 k_norm 权重（Qwen3）或 fp32 的 cos/sin（RoPE 按 fp32 的 embedding 取 dtype）升成 fp32，
    动态 cache 按第一次收到的 K 建，V 也跟着存成 fp32。账本（_fast_rollout_lines 的 prefill_kv）按 bf16 记：
    这条测试把这个差别钉住，账本改了记法时要跟着改课文。autocast 的类型提升在 CPU 和 CUDA 上相同。"""
    from transformers import AutoModelForCausalLM

    from tests.small_qwen import small_config

    model = AutoModelForCausalLM.from_config(small_config(family)).float().eval()
    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, cache_enabled=False):
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    layer = out.past_key_values.layers[0]
    assert out.logits.dtype == torch.bfloat16  # autocast 确实开着
    assert layer.keys.dtype == layer.values.dtype == torch.float32
    # 账本现在的记法：prefill 的动态 KV 按 bf16（每 token 112 KiB），比真实的少一半
    s = Settings(prompts=16, beta=0.0, prompt_len=52, rollout_backend="fast", precision="fp32")
    m = get_model("Qwen3-0.6B")
    work = ledger(m, s).nbytes("rollout_workspace")
    bf16_kv = 128 * 52 * m.kv_bytes_per_token(2)
    assert work - bf16_kv == 128 * 52 * ledger_module.nograd_layer_bytes_per_token(m)
