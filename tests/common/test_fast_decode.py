"""common.decode.fast_decode 的解码逻辑（静态 KV cache、逐行 EOS、左 padding）在 CPU 上与 HF generate 逐 token 一致。

torch.compile 和 CUDA graph 只在 GPU 上有意义，由 L2_algorithm/06_sampling/bench_rollout.py 在 GPU 上检查；
这里关掉它们，检查的是同一份解码代码。录 graph、重放 graph 的顺序（哪次生成要新录哪些 graph、录之前的预热
从什么状态开始）用 `cpu_graphs` 这个 CPU 替身来测（见文件末尾）。
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from common.decode.fast_decode import Sampling, StaticDecoder, fast_generate


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
    )
    m = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(
            20
        )  # 让分布更尖，贪心路径更有区分度（随机初始化的 logits 几乎一样大）
    return m


def _prompts(batch=5, tp=9):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 300, (batch, tp), generator=g)
    mask = torch.ones(batch, tp, dtype=torch.long)
    for i in range(batch):  # 第 i 行左边 i 个 pad
        mask[i, :i] = 0
        ids[i, :i] = 0
    return ids, mask


def _hf_greedy(model, ids, mask, n, eos):
    """HF generate 的贪心输出（参照），补齐到 n 列。"""
    ref = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=0,
    )[:, ids.shape[1] :]
    return torch.nn.functional.pad(ref, (0, n - ref.shape[1]), value=0)


@pytest.mark.parametrize("steps_per_graph", [1, 4, 7])
def test_greedy_matches_hf_generate(model, steps_per_graph):
    ids, mask = _prompts()
    n, eos = 40, [7, 11]
    ref = _hf_greedy(model, ids, mask, n, eos)
    dec = StaticDecoder(model, 8, 128, eos, 0, steps_per_graph, compile=False)
    got = dec.generate(ids, mask, n, Sampling(greedy=True), cuda_graph=False)
    assert torch.equal(got, ref)
    assert (got == 7).any() or (got == 11).any(), "测试用例里至少要有一行遇到 EOS"


def test_sampling_respects_process_logits(model):
    ids, mask = _prompts(3)
    only = torch.full((300,), float("-inf"))
    only[42] = 0.0

    def force_42(logits, temperature, top_p):  # 一个只留下 token 42 的 "process_logits"
        return logits * 0 + only

    dec = StaticDecoder(model, 8, 128, [7], 0, 4, compile=False)
    got = dec.generate(
        ids,
        mask,
        10,
        Sampling(temperature=0.7, top_p=0.9, process_logits=force_42),
        cuda_graph=False,
    )
    assert torch.equal(got, torch.full((3, 10), 42))


def test_fast_generate_refuses_cpu(model):
    ids, mask = _prompts(2)
    with pytest.raises(ValueError, match="CUDA"):
        fast_generate(model, ids, mask, max_new_tokens=4, eos_token_ids=[7], pad_token_id=0)


def test_bf16_decode_of_fp32_master_weights_syncs_after_updates(model):
    """fp32 主权重 + bf16 解码：解码器持有 bf16 副本，每次生成前从主权重同步（一次微型的 weight sync）。"""
    dec = StaticDecoder(model, 8, 128, [7], 0, 4, compile=False, dtype=torch.bfloat16)
    assert (
        dec.embed.dtype == torch.bfloat16
        and dec.lm_head.data_ptr() != model.lm_head.weight.data_ptr()
    )
    w = model.model.layers[0].mlp.down_proj.weight
    old = w.detach().clone()
    with torch.no_grad():
        w.add_(1.0)  # 优化器原地更新主权重
    try:
        dec.sync_weights()
        assert torch.equal(dec.layers[0][-1], w.detach().to(torch.bfloat16))
    finally:
        with torch.no_grad():
            w.copy_(old)


def test_lora_adapters_are_merged_into_the_decode_weights(model):
    """peft LoRA 模型：解码权重 = W + scaling·B@A，贪心输出与 HF generate（逐层走 LoRA）逐 token 相同。"""
    import copy

    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"])
    )
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # 初始化时 B=0，LoRA 不起作用；随机化后才测得出合并
    peft_model.eval()
    ids, mask = _prompts()
    n, eos = 30, [7, 11]
    ref = _hf_greedy(peft_model, ids, mask, n, eos)
    base_ref = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=0,
    )[:, ids.shape[1] :]
    assert not torch.equal(ref[:, : base_ref.shape[1]], base_ref), (
        "LoRA 应当改变输出，否则这个测试测不到合并"
    )
    dec = StaticDecoder(peft_model, 8, 128, eos, 0, 4, compile=False)
    assert torch.equal(dec.generate(ids, mask, n, Sampling(greedy=True), cuda_graph=False), ref)


def test_release_frees_rollout_memory_and_the_next_generation_is_unchanged(model):
    """KV cache 和 bf16 权重副本只在生成时需要：release 之后释放，下一次生成重新分配，结果不变。"""
    import copy

    from common.decode.fast_decode import decode_weights

    m = copy.deepcopy(model)  # 自己的一份：不和别的测试共用解码器缓存
    ids, mask = _prompts()
    dec = StaticDecoder(m, 8, 128, [7, 11], 0, 4, compile=False, dtype=torch.bfloat16)
    first = dec.generate(ids, mask, 20, Sampling(greedy=True), cuda_graph=False)
    weights = decode_weights(m, torch.bfloat16)
    kv = 2 * 3 * 8 * 2 * 128 * 16 * 2  # k 和 v × 3 层 × (8 行, 2 个 kv 头, 128 槽, 16 维) × 2 B
    assert dec.nbytes == kv and weights.nbytes > 0
    version = weights.version
    dec.release()
    weights.release()
    assert dec.nbytes == 0 and weights.nbytes == 0, "release 之后不应再持有 KV cache 和权重副本"
    again = dec.generate(ids, mask, 20, Sampling(greedy=True), cuda_graph=False)
    assert torch.equal(again, first)
    assert weights.version == version + 1, (
        "副本重新分配后地址变了：version 要变，CUDA graph 才会重新捕获"
    )
    assert dec.nbytes == kv


def test_only_one_buckets_kv_cache_stays_resident(model):
    """GSM8K 的 prompt 跨 640/768 两个槽数的桶，held-out 评估又是别的行数：每个桶的解码器以前都一直占着自己的
    KV cache，Qwen3-0.6B 在 32 GiB 上第 2 步就显存不够（H100 上实测，L1.04）。用到一个桶时，别的桶先释放；
    再回到释放过的桶，重新分配、结果不变。"""
    import copy

    from common.decode import fast_decode as fd

    m = copy.deepcopy(model)  # 自己的一份：不和别的测试共用解码器缓存
    ids, mask = _prompts()
    greedy = Sampling(greedy=True)

    def make(slots):
        return lambda: StaticDecoder(m, 8, slots, [7, 11], 0, 4, compile=False)

    small = fd.resident_decoder(m, "640", make(64))
    first = small.generate(ids, mask, 20, greedy, cuda_graph=False)
    assert small.nbytes > 0
    large = fd.resident_decoder(m, "768", make(96))
    assert small.nbytes == 0, "换到另一个桶时，上一个桶的 KV cache 要先释放"
    large.generate(ids, mask, 20, greedy, cuda_graph=False)
    assert fd.rollout_memory_bytes(m) == large.nbytes + sum(
        w.nbytes for w in fd._WEIGHTS.get(m, {}).values()
    ), "同一时刻只应有一个桶的 KV cache"
    again = fd.resident_decoder(m, "640", make(64))
    assert again is small and large.nbytes == 0
    assert torch.equal(again.generate(ids, mask, 20, greedy, cuda_graph=False), first)


def test_gradients_hosted_in_rollout_memory_are_exact_and_generation_is_unchanged(model):
    """梯度借用 KV cache 和权重副本的显存：梯度与普通 backward 逐位相同，之后的生成也不受影响。"""
    import copy

    from common.decode import fast_decode as fd

    m = copy.deepcopy(model).float()
    ids, mask = _prompts()
    dec = StaticDecoder(m, 8, 128, [7, 11], 0, 4, compile=False, dtype=torch.bfloat16)
    fd._DECODERS.setdefault(m, {})["test"] = dec  # fast_generate 在 CPU 上不可用：手动登记
    first = dec.generate(ids, mask, 20, Sampling(greedy=True), cuda_graph=False)
    buffers = fd.rollout_buffers(m)
    assert sum(b.numel() * b.element_size() for b in buffers) == fd.rollout_memory_bytes(m) > 0

    def backward():
        m.zero_grad(set_to_none=True)
        logits = m(input_ids=ids, attention_mask=mask).logits
        (logits.float().logsumexp(-1).mean() + logits[..., 3].mean()).backward()
        m(input_ids=ids, attention_mask=mask).logits.square().mean().backward()  # 第二次累加
        return {n: p.grad.clone() for n, p in m.named_parameters()}

    plain = backward()
    m.zero_grad(set_to_none=True)
    params = list(m.parameters())
    hosted = fd.host_gradients(params, buffers)
    inside = [p for p in params if p.grad is not None]
    assert hosted > 0 and inside, "至少要有参数的梯度放进了 rollout 的显存"
    storages = {b.untyped_storage().data_ptr() for b in buffers}
    assert all(p.grad.untyped_storage().data_ptr() in storages for p in inside)
    logits = m(input_ids=ids, attention_mask=mask).logits
    (logits.float().logsumexp(-1).mean() + logits[..., 3].mean()).backward()
    m(input_ids=ids, attention_mask=mask).logits.square().mean().backward()
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, plain[n]), f"{n} 的梯度与普通 backward 不同"
    assert all(p.grad.untyped_storage().data_ptr() in storages for p in inside), "梯度被换了地方"
    m.zero_grad(set_to_none=True)
    assert torch.equal(dec.generate(ids, mask, 20, Sampling(greedy=True), cuda_graph=False), first)


@pytest.mark.parametrize("attention", ["reduce", "sdpa"])
def test_other_attention_variants_match_hf_generate(model, attention):
    """L2.06 bench_rollout.py 比较的另外两种 attention 写法，在 CPU 上不编译地跑：贪心输出与 HF generate 逐 token 相同。"""
    ids, mask = _prompts()
    n, eos = 40, [7, 11]
    ref = _hf_greedy(model, ids, mask, n, eos)
    dec = StaticDecoder(model, 8, 128, eos, 0, 4, compile=False, attention=attention)
    assert torch.equal(dec.generate(ids, mask, n, Sampling(greedy=True), cuda_graph=False), ref)


# ---------------------------------------------------------------- Qwen2 / Qwen3、融合布局、attention 窗口 -----------
# 解码器的同一份 layer step 在 CPU 上不编译、不录 CUDA graph 地跑：Qwen2（q/k/v 有 bias、没有 q/k norm，
# lm_head 绑定或独立）和 Qwen3（q/k norm、没有 bias），逐层分开的权重或融合的 qkv / gate_up，读整个 cache
# 或只读已填的前缀（window），贪心输出都要与 HF generate 逐 token 相同。


def _sharpen(m, norm=20.0, weight_std=0.0, bias_std=0.0):
    """让随机模型的输出有区分度：末层 norm 放大 ``norm`` 倍（logits 更尖；放大 lm_head 会连绑定的 embedding
    一起放大），weight_std > 0 时矩阵权重重抽为 N(0, weight_std²)，bias_std > 0 时 q/k/v 的 bias 重抽
    （HF 把它们初始化成 0，测不到）。"""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if weight_std and p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * weight_std)
            if bias_std and name.endswith("_proj.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * bias_std)
        m.model.norm.weight.mul_(norm)
    return m.eval()


def _qwen2(tied: bool):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(2)
    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=128,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim = 128 / 4 = 32（Qwen2 的配置里没有 head_dim，由它推出）
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        tie_word_embeddings=tied,
    )
    return _sharpen(Qwen2ForCausalLM(cfg), norm=2.0, weight_std=0.15, bias_std=0.2)


def _qwen3_hd64():
    torch.manual_seed(3)
    cfg = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
    )
    return _sharpen(Qwen3ForCausalLM(cfg))


FAMILY_MODELS = {
    "qwen2-untied": lambda: _qwen2(tied=False),
    "qwen2-tied": lambda: _qwen2(tied=True),
    "qwen3-hd64": _qwen3_hd64,
}
N_NEW, EOS = 24, [7, 11]


@pytest.fixture(scope="module")
def family_refs():
    """每个模型建一次、HF generate 的参照只算一次：{名字: (模型, ids, mask, 参照)}。"""
    out = {}
    for name, build in FAMILY_MODELS.items():
        m = build()
        ids, mask = _prompts(4, 9)
        out[name] = (m, ids, mask, _hf_greedy(m, ids, mask, N_NEW, EOS))
    return out


@pytest.mark.parametrize("name", list(FAMILY_MODELS))
@pytest.mark.parametrize(
    "fused, window, attention",
    [(False, 0, "einsum"), (True, 0, "einsum"), (True, 16, "einsum"), (False, 16, "sdpa")],
)
def test_families_layouts_and_windows_match_hf_generate(
    family_refs, name, fused, window, attention
):
    m, ids, mask, ref = family_refs[name]
    dec = StaticDecoder(
        m, 4, 128, EOS, 0, 4, compile=False, fused=fused, window=window, attention=attention
    )
    got = dec.generate(ids, mask, N_NEW, Sampling(greedy=True), cuda_graph=False)
    assert torch.equal(got, ref), (
        f"{name}（fused={fused}，window={window}，{attention}）的贪心输出与 HF generate 不同："
        f"第 {int((got != ref).any(0).nonzero()[0])} 步开始"
    )


def test_hf_reference_is_not_trivial(family_refs):
    """参照本身要有区分度：每个模型的各行输出不同，且 Qwen2 的 bias 确实改变了输出。"""
    for name, (*_, ref) in family_refs.items():
        assert len({tuple(r.tolist()) for r in ref}) == len(ref), (
            f"{name}：各行输出一样，测不出东西"
        )
    m, ids, mask, ref = family_refs["qwen2-untied"]
    import copy

    no_bias = copy.deepcopy(m)
    with torch.no_grad():
        for n, p in no_bias.named_parameters():
            if n.endswith("_proj.bias"):
                p.zero_()
    assert not torch.equal(_hf_greedy(no_bias, ids, mask, N_NEW, EOS), ref), "bias 应当改变输出"


def test_windows_cover_every_slot_a_replay_attends_to():
    """第 i 次 replay 最后一步读到第 prompt + (i+1)·k - 1 个槽：窗口要盖住它，到了 cache 长度就读整个 cache（0）。"""
    m = FAMILY_MODELS["qwen3-hd64"]()
    dec = StaticDecoder(m, 4, 128, EOS, 0, 4, compile=False, window=16)
    assert dec.windows(9, 24) == [16, 32, 32, 32, 32, 48]  # 需要 13, 17, 21, 25, 29, 33 个槽
    assert dec.windows(100, 24)[-1] == 0  # 需要 124 个槽 -> 128 = 整个 cache
    assert StaticDecoder(m, 4, 128, EOS, 0, 4, compile=False).windows(9, 24) == [0] * 6
    with pytest.raises(ValueError, match="装不进"):
        dec.generate(*_prompts(4, 9), 200, Sampling(greedy=True), cuda_graph=False)


def test_fused_layout_stacks_q_k_v_and_gate_up_rows_in_one_buffer(family_refs):
    """融合布局：qkv 是 [Wq; Wk; Wv] 按行叠起来（bias 同样），gate_up 是 [Wg; Wu]，都是同一块缓冲区的视图。"""
    from common.decode.fast_decode import DecodeWeights

    m = family_refs["qwen2-untied"][0]
    w = DecodeWeights(m, torch.float32, fused=True)
    layer, att, mlp = w.layers[1], m.model.layers[1].self_attn, m.model.layers[1].mlp
    (qkv,), (qkv_bias,), (gate_up,) = layer.qkv, layer.qkv_bias, layer.gate_up
    assert torch.equal(qkv, torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]))
    assert torch.equal(qkv_bias, torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]))
    assert torch.equal(gate_up, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
    flat = w.flat.untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == flat for t in (qkv, qkv_bias, gate_up))
    assert layer.q_norm is None and layer.o_bias is None  # Qwen2：没有 q/k norm，o_proj 没有 bias
    # 不融合、dtype 相同：全部零拷贝，包括 bias；lm_head 独立（untied）
    plain = DecodeWeights(m, torch.float32)
    assert plain.nbytes == 0
    assert plain.layers[1].qkv_bias[0].data_ptr() == att.q_proj.bias.data_ptr()
    assert plain.lm_head.data_ptr() == m.lm_head.weight.data_ptr() != plain.embed.data_ptr()
    # 原地更新主权重：融合副本在下一次 sync 后跟上（就地刷新，地址不变）
    old = att.k_proj.weight.detach().clone()
    with torch.no_grad():
        att.k_proj.weight.add_(1.0)
    try:
        ptr = qkv.data_ptr()
        w.sync()
        (qkv,) = w.layers[1].qkv
        assert qkv.data_ptr() == ptr and torch.equal(qkv[128:192], att.k_proj.weight)
    finally:
        with torch.no_grad():
            att.k_proj.weight.copy_(old)


def test_tied_lm_head_is_one_copy(family_refs):
    from common.decode.fast_decode import DecodeWeights

    m = family_refs["qwen2-tied"][0]
    w = DecodeWeights(m, torch.bfloat16)
    assert w.lm_head.data_ptr() == w.embed.data_ptr()
    assert (
        w.nbytes >= sum(p.numel() for p in m.parameters()) * 2
    )  # 每个参数一份 bf16 副本，嵌入只一份


def test_lora_merge_on_qwen2_equals_peft_merge_and_follows_disable_adapter(family_refs):
    """LoRA（q_proj、v_proj、up_proj）合并进融合的解码权重：与 peft 自己 merge_and_unload 的权重相同；
    disable_adapter() 里同步出来的是底座权重；贪心输出与 HF generate（逐层走 LoRA）相同。"""
    import copy

    from peft import LoraConfig, get_peft_model

    from common.decode.fast_decode import DecodeWeights

    base, ids, mask, _ = family_refs["qwen2-untied"]
    pm = get_peft_model(
        copy.deepcopy(base),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]),
    )
    torch.manual_seed(4)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    pm.eval()
    merged = copy.deepcopy(pm).merge_and_unload()  # 参照：peft 自己的合并
    w = DecodeWeights(pm, torch.float32, fused=True)
    for got, ref in zip(w.layers, merged.model.layers):
        att, mlp = ref.self_attn, ref.mlp
        want = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])
        torch.testing.assert_close(got.qkv[0], want, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(
            got.qkv_bias[0], torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias])
        )
        torch.testing.assert_close(
            got.gate_up[0],
            torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
            rtol=1e-6,
            atol=1e-6,
        )
    with pm.disable_adapter():
        w.sync()
        q = base.model.layers[0].self_attn.q_proj.weight
        assert torch.equal(w.layers[0].qkv[0][: q.shape[0]], q), "关掉 adapter 时应当是底座权重"
    w.sync()
    ref = _hf_greedy(pm, ids, mask, N_NEW, EOS)
    assert not torch.equal(ref, family_refs["qwen2-untied"][3]), "LoRA 应当改变输出"
    dec = StaticDecoder(pm, 4, 128, EOS, 0, 4, compile=False, fused=True, window=16)
    assert torch.equal(dec.generate(ids, mask, N_NEW, Sampling(greedy=True), cuda_graph=False), ref)


def test_unsupported_models_are_refused_with_the_reason():
    """sliding window、别的 model_type、DoRA：说清原因；auto 不选快速路径，显式构造解码器报 ValueError。"""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from common.decode.fast_decode import supports_fast_decode, unsupported_reason

    small = dict(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    sliding = Qwen2ForCausalLM(
        Qwen2Config(**small, use_sliding_window=True, sliding_window=16, max_window_layers=1)
    )
    assert "use_sliding_window" in unsupported_reason(sliding)
    with pytest.raises(ValueError, match="sliding window"):
        StaticDecoder(sliding, 4, 128, [1], 0, 4, compile=False)
    llama = LlamaForCausalLM(LlamaConfig(**small))
    assert "'llama'" in unsupported_reason(llama) and "qwen2" in unsupported_reason(llama)
    dora = get_peft_model(
        Qwen2ForCausalLM(Qwen2Config(**small)),
        LoraConfig(r=2, target_modules=["q_proj"], use_dora=True),
    )
    assert "DoRA" in unsupported_reason(dora)
    plain = Qwen2ForCausalLM(Qwen2Config(**small))
    assert unsupported_reason(plain) is None
    assert not supports_fast_decode(plain)  # 支持的结构，但在 CPU 上


# ---------------------------------------------------------------- CUDA graph 的录制与重放（CPU 替身）-----------
# StaticDecoder.capture 先预热（真的执行：GPU 上在 side stream 上跑），再在 torch.cuda.graph 里录制（只记下
# kernel，什么也不执行），generate 之后 replay()（在当时的状态上重跑录下的步）。`cpu_graphs` 照这三条在 CPU 上
# 替换 torch.cuda 的这几个接口，generate(cuda_graph=True) 的录制与重放顺序就能在 CPU 上测。


class _RecordedGraph:
    """录制时记下「哪个解码器、哪种采样、哪个窗口」的那几步；replay() 才真的跑。"""

    def replay(self):
        self.run()


@pytest.fixture
def cpu_graphs(monkeypatch):
    real_run = StaticDecoder._run

    @contextlib.contextmanager
    def graph(g, pool=None):
        def record(dec, how, window=0):  # 录制：不执行
            g.run = lambda: real_run(dec, how, window)

        monkeypatch.setattr(StaticDecoder, "_run", record)
        try:
            yield
        finally:
            monkeypatch.setattr(StaticDecoder, "_run", real_run)

    stream = SimpleNamespace(wait_stream=lambda other: None)
    fakes = dict(
        Stream=lambda: stream,
        current_stream=lambda: stream,
        stream=lambda s: contextlib.nullcontext(),
        graph_pool_handle=object,
        CUDAGraph=_RecordedGraph,
        graph=graph,
    )
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake)


def _never(eos):
    """一个从不采到 ``eos`` 的 process_logits：每一行都跑满 max_new_tokens。"""

    def process(logits, temperature, top_p):
        return (
            logits.index_fill(-1, torch.tensor(eos, dtype=torch.long), float("-inf")) / temperature
        )

    return process


@pytest.mark.parametrize("fused, window, attention", [(False, 0, "einsum"), (True, 16, "sdpa")])
def test_graphs_captured_after_a_generation_that_reached_the_end_of_the_cache(
    family_refs, cpu_graphs, fused, window, attention
):
    """grpo_train.py 的 held-out 评估在 GPU 上崩过（IndexKernel 越界）：一次生成跑满、停在 cache 末尾附近，
    下一次生成换了采样方式（贪心 -> 采样）或用到新的窗口，就要新录 graph。录之前的预热是真的执行的，
    以前它从上一次生成停下的 RoPE 位置接着走，cos/sin 表越界。它必须从位置 0 开始。"""
    m, ids, mask, ref = family_refs["qwen2-untied"]
    tp = ids.shape[1]
    S = tp + N_NEW + 3  # 装得下的最小 cache：9 + 1 + 6 次 replay × 4 步 + 1 <= 36
    dec = StaticDecoder(
        m, 4, S, EOS, 0, 4, compile=False, fused=fused, window=window, attention=attention
    )
    first = dec.generate(ids, mask, N_NEW, Sampling(process_logits=_never(EOS)))
    assert not torch.isin(first, torch.tensor(EOS)).any()
    assert int(dec.pos.max()) == S - 3, (
        "第一次生成应当跑满，停在离 cache 末尾不到 4 步（一个 graph）的位置"
    )
    got = dec.generate(ids, mask, N_NEW, Sampling(greedy=True))  # 贪心：新录 graph，再重放
    windows = len(set(dec.windows(tp, N_NEW)))
    assert dec.captures == 2 * windows, f"两种采样、{windows} 个窗口，应当各录一个 graph"
    assert torch.equal(got, ref), (
        f"（fused={fused}，window={window}，{attention}）重放 graph 的贪心输出与 HF generate 不同"
    )


@pytest.mark.slow
def test_the_heldout_evaluation_schedule_of_grpo_train(cpu_graphs):
    """GPU 上崩掉的那一串生成，形状照搬（只是行数少）：Qwen2.5 的 chat template 下 GSM8K 前 500 道 test 题的
    prompt 最长 186 token，贪心两批（最长 179、186）、再采样（第一批最长 156），都进 (行, 768 槽) 这个桶，
    max_new_tokens 512，window 128 有 5 个窗口。贪心的最后一批跑满，停在位置 186 + 512 = 698；采样要新录
    5 个 graph，每个预热 16 步，698 + 5 × 16 > 768。贪心的输出要与不录 graph 的解码器逐 token 相同，采样不越界。"""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from common.vram.decode_shape import static_shape

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=300, hidden_size=128, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )  # fmt: skip
    m = _sharpen(Qwen2ForCausalLM(cfg), norm=2.0, weight_std=0.15, bias_std=0.2)
    n, never = 512, [300]  # 300 不是任何 token：每一行都跑满 512 步

    def prompts(longest, rows=4):
        g = torch.Generator().manual_seed(longest)
        ids = torch.randint(3, 300, (rows, longest), generator=g)
        mask = torch.ones_like(ids)
        for i in range(rows):  # 第 i 行左边 i·20 个 pad
            mask[i, : 20 * i] = 0
        return ids.masked_fill(mask == 0, 0), mask

    opts = dict(compile=False, fused=True, window=128, attention="sdpa")
    shape = static_shape(4, 186, n)
    assert shape[1] == 768 and static_shape(4, 156, n) == shape
    dec = StaticDecoder(m, *shape, never, 0, 16, **opts)
    plain = StaticDecoder(m, *shape, never, 0, 16, **opts)
    assert len(set(dec.windows(186, n))) == 5
    greedy = Sampling(greedy=True)
    ids, mask = prompts(186)  # 贪心的最后一批（第一批 179 个 token 的也在这个桶里，对这里没有影响）
    got = dec.generate(ids, mask, n, greedy)
    assert torch.equal(got, plain.generate(ids, mask, n, greedy, cuda_graph=False))
    assert int(dec.pos.max()) == 186 + n
    ids, mask = prompts(156)
    out = dec.generate(ids, mask, n, Sampling(process_logits=_never([])))
    assert out.shape == (4, n) and bool(((out >= 0) & (out < 300)).all())
    assert dec.captures == 10, "贪心和采样各 5 个窗口"
