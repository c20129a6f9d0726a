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
