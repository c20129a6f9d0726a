"""common.fast_decode 的解码逻辑（静态 KV cache、逐行 EOS、左 padding）在 CPU 上与 HF generate 逐 token 一致。

torch.compile 和 CUDA graph 只在 GPU 上有意义，由 L2_algorithm/06_sampling/bench_rollout.py 在 GPU 上检查；
这里关掉它们，检查的是同一份解码代码。
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from common.fast_decode import Sampling, StaticDecoder, fast_generate


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

    from common.fast_decode import decode_weights

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


def test_gradients_hosted_in_rollout_memory_are_exact_and_generation_is_unchanged(model):
    """梯度借用 KV cache 和权重副本的显存：梯度与普通 backward 逐位相同，之后的生成也不受影响。"""
    import copy

    from common import fast_decode as fd

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
    from common.fast_decode import DecodeWeights

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
    from common.fast_decode import DecodeWeights

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

    from common.fast_decode import DecodeWeights

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

    from common.fast_decode import supports_fast_decode, unsupported_reason

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
