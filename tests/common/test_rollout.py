"""common.decode.rollout：贪心输出与 HF generate 逐 token 相同；逐行 EOS 停止；mask/长度/截断一致；采样可复现。"""

from __future__ import annotations

import pytest
import torch

from common.decode.rollout import generate
from common.decode.rollout_batch import finish_rollout, left_pad
from common.gsm8k.data import build_prompt, synthetic_problems
from common.model.models import load_model, model_spec

PRESET = model_spec(None)  # the tiny model
PAD = PRESET.pad_token_id


def _ref_process_logits(logits, temperature=1.0, top_p=1.0):
    """本测试自己的 temperature + top-p（与 L2.06 的语义相同），不依赖被测的练习模块。"""
    scaled = logits / temperature
    probs = scaled.softmax(-1)
    sorted_p, idx = probs.sort(-1, descending=True)
    drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))


@pytest.fixture(scope="module")
def model_and_prompts():
    """tiny 结构、权重放大的随机模型（输出足够多样，能测出逐行停止），和长短不一的真实 prompt。"""
    model, tok = load_model(PRESET, init="random")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.25)
    model.eval()
    problems = synthetic_problems(6, seed=7, difficulty=3)
    prompts = [
        tok(build_prompt(tok, p.question), add_special_tokens=False).input_ids for p in problems
    ]
    prompts = [ids[: 12 + 7 * i] for i, ids in enumerate(prompts)]  # 6 different lengths
    return model, prompts


def _hf_greedy(model, prompts, max_new_tokens, eos):
    ids, mask = left_pad(prompts, PAD)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=list(eos),
        pad_token_id=PAD,
    )
    return out[:, ids.shape[1] :]


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_token_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    with pytest.raises(ValueError):
        left_pad([], 0)
    with pytest.raises(ValueError):
        left_pad([[1], []], 0)


def test_greedy_matches_hf_generate_without_eos(model_and_prompts):
    model, prompts = model_and_prompts
    never = [model.config.vocab_size + 5]  # an id the model can never emit
    hf = _hf_greedy(model, prompts, 24, never)
    ours = generate(
        model, prompts, max_new_tokens=24, eos_token_ids=never, pad_token_id=PAD, greedy=True
    )
    assert torch.equal(ours.completion_ids, hf)
    assert ours.truncated.all() and ours.lengths.tolist() == [24] * len(prompts)
    assert (ours.completion_mask == 1).all()
    # non-trivial output
    assert len({tuple(r) for r in hf.tolist()}) > 1 and len(set(hf.flatten().tolist())) > 5


def test_greedy_matches_hf_generate_with_several_eos_ids(model_and_prompts):
    model, prompts = model_and_prompts
    free = _hf_greedy(model, prompts, 24, [10_000])
    # two stop ids taken from the free-running output, so rows stop at different steps (and some never)
    eos = [int(free[0, 3]), int(free[2, 9])]
    hf = _hf_greedy(model, prompts, 24, eos)
    ours = generate(
        model, prompts, max_new_tokens=24, eos_token_ids=eos, pad_token_id=PAD, greedy=True
    )
    T = ours.completion_ids.shape[1]
    assert torch.equal(ours.completion_ids, hf[:, :T])
    assert (hf[:, T:] == PAD).all()  # HF only kept padding after our last column
    # per row: expected length = first stop position + 1 in the free-running output, or 24
    for i, row in enumerate(free.tolist()):
        first = next((t for t, tok in enumerate(row) if tok in eos), None)
        expect = 24 if first is None else first + 1
        assert int(ours.lengths[i]) == expect
        assert bool(ours.truncated[i]) == (first is None)
    assert not ours.truncated.all() and len(set(ours.lengths.tolist())) > 1


def test_masks_lengths_truncation_consistent(model_and_prompts):
    model, prompts = model_and_prompts
    g = torch.Generator().manual_seed(3)
    free = generate(
        model,
        prompts,
        max_new_tokens=16,
        eos_token_ids=[10_000],
        pad_token_id=PAD,
        generator=g,
        process_logits=_ref_process_logits,
    )
    eos = [int(free.completion_ids[1, 2]), int(free.completion_ids[4, 5])]
    r = generate(
        model,
        prompts,
        max_new_tokens=16,
        eos_token_ids=eos,
        pad_token_id=PAD,
        generator=torch.Generator().manual_seed(3),
        process_logits=_ref_process_logits,
    )
    B, T = r.completion_ids.shape
    assert r.prompt_ids.shape == r.prompt_mask.shape == (B, max(map(len, prompts)))
    assert r.completion_mask.shape == (B, T) and r.completion_mask.dtype == torch.float32
    assert T == int(r.lengths.max()) <= 16
    assert torch.equal(r.lengths, r.completion_mask.sum(1).long())
    for i in range(B):
        n = int(r.lengths[i])
        row = r.completion_ids[i].tolist()
        assert r.completion_mask[i, :n].eq(1).all() and r.completion_mask[i, n:].eq(0).all()
        assert all(t == PAD for t in row[n:])
        if r.truncated[i]:
            assert n == 16 and not any(t in eos for t in row)
        else:
            assert row[n - 1] in eos and not any(t in eos for t in row[: n - 1])
    # sequences / attention_mask / position_ids line up with the prompt and completion
    assert torch.equal(r.sequences, torch.cat([r.prompt_ids, r.completion_ids], 1))
    assert torch.equal(r.attention_mask.sum(1), r.prompt_mask.sum(1) + r.lengths)
    assert r.position_ids[r.attention_mask.bool()].max() < r.attention_mask.sum(1).max()
    # the same mask as the L2.02 completion_mask function would give
    from solutions.l2_02_logprobs_and_masks import completion_mask

    assert torch.equal(r.completion_mask, completion_mask(r.completion_ids, eos))


def test_sampling_is_reproducible_with_a_seeded_generator(model_and_prompts):
    model, prompts = model_and_prompts
    kw = dict(
        max_new_tokens=12,
        eos_token_ids=[10_000],
        pad_token_id=PAD,
        process_logits=_ref_process_logits,
    )
    a = generate(model, prompts, generator=torch.Generator().manual_seed(11), **kw)
    b = generate(model, prompts, generator=torch.Generator().manual_seed(11), **kw)
    c = generate(model, prompts, generator=torch.Generator().manual_seed(12), **kw)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert not torch.equal(a.completion_ids, c.completion_ids)
    # one generator continued across calls: also reproducible (what a resumed run relies on)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    seq1 = [generate(model, prompts, generator=g1, **kw).completion_ids for _ in range(2)]
    seq2 = [generate(model, prompts, generator=g2, **kw).completion_ids for _ in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(seq1, seq2))


def test_temperature_and_top_p_go_through_process_logits(model_and_prompts):
    model, prompts = model_and_prompts
    calls = []

    def spy(logits, temperature, top_p):
        calls.append((tuple(logits.shape), logits.dtype, temperature, top_p))
        return _ref_process_logits(logits, temperature, top_p)

    r = generate(
        model,
        prompts,
        max_new_tokens=5,
        eos_token_ids=[10_000],
        pad_token_id=PAD,
        temperature=0.7,
        top_p=0.9,
        process_logits=spy,
        generator=torch.Generator().manual_seed(0),
    )
    assert len(calls) == r.completion_ids.shape[1] == 5
    assert all(
        c == ((len(prompts), model.config.vocab_size), torch.float32, 0.7, 0.9) for c in calls
    )

    # what process_logits returns is what gets sampled: keep only token 42 -> every token is 42
    def only_42(logits, temperature, top_p):
        out = torch.full_like(logits, float("-inf"))
        out[:, 42] = 0.0
        return out

    r = generate(
        model,
        prompts,
        max_new_tokens=4,
        eos_token_ids=[10_000],
        pad_token_id=PAD,
        process_logits=only_42,
    )
    assert (r.completion_ids == 42).all()
    # top_p -> 0 keeps only the top token: sampling equals greedy
    tiny_p = generate(
        model,
        prompts,
        max_new_tokens=8,
        eos_token_ids=[10_000],
        pad_token_id=PAD,
        top_p=1e-6,
        process_logits=_ref_process_logits,
        generator=torch.Generator().manual_seed(1),
    )
    greedy = generate(
        model, prompts, max_new_tokens=8, eos_token_ids=[10_000], pad_token_id=PAD, greedy=True
    )
    assert torch.equal(tiny_p.completion_ids, greedy.completion_ids)


def test_sampling_without_process_logits_says_what_to_pass(model_and_prompts):
    """common/ 不替调用者挑 L2.06 的实现（它不 import solutions/exercises）：采样必须显式传 process_logits。"""
    model, prompts = model_and_prompts
    kw = dict(max_new_tokens=3, eos_token_ids=[10_000], pad_token_id=PAD)
    with pytest.raises(ValueError, match="process_logits") as err:
        generate(model, prompts, temperature=1.3, **kw)
    assert "greedy=True" in str(err.value)
    assert generate(model, prompts, greedy=True, **kw).completion_ids.shape[0] == len(prompts)


def test_stops_early_and_restores_train_mode(model_and_prompts):
    model, prompts = model_and_prompts
    calls = []

    def all_eos(logits, temperature, top_p):
        calls.append(1)
        out = torch.full_like(logits, float("-inf"))
        out[:, 7] = 0.0
        return out

    model.train()
    r = generate(
        model,
        prompts,
        max_new_tokens=50,
        eos_token_ids=[7],
        pad_token_id=PAD,
        process_logits=all_eos,
    )
    assert model.training
    model.eval()
    assert len(calls) == 1 and r.completion_ids.shape == (len(prompts), 1)
    assert r.lengths.tolist() == [1] * len(prompts) and not r.truncated.any()
    with pytest.raises(ValueError):
        generate(model, prompts, max_new_tokens=0, eos_token_ids=[7], pad_token_id=PAD)
    with pytest.raises(ValueError):
        generate(model, prompts, max_new_tokens=3, eos_token_ids=[], pad_token_id=PAD)


def test_finish_rollout_overwrites_tokens_after_eos():
    ids, mask = left_pad([[1, 2], [3]], pad_token_id=0)
    # backend left junk after EOS 9 / pad equals a real token
    raw = torch.tensor([[5, 9, 6, 6], [9, 9, 9, 0]])
    r = finish_rollout(ids, mask, raw, eos_token_ids=[9], pad_token_id=0)
    assert r.completion_ids.tolist() == [[5, 9], [9, 0]]
    assert r.completion_mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert r.lengths.tolist() == [2, 1] and r.truncated.tolist() == [False, False]


def test_greedy_matches_hf_generate_on_the_warm_start_model():
    """The shipped tiny checkpoint stops on its real EOS ids (<|im_end|>, <|endoftext|>) at different lengths."""
    model, tok = load_model(PRESET)  # the warm-start checkpoint
    model.eval()
    problems = synthetic_problems(8, seed=21, difficulty=2)
    prompts = [
        tok(build_prompt(tok, p.question), add_special_tokens=False).input_ids for p in problems
    ]
    hf = _hf_greedy(model, prompts, 40, PRESET.eos_token_ids)
    ours = generate(
        model,
        prompts,
        max_new_tokens=40,
        eos_token_ids=PRESET.eos_token_ids,
        pad_token_id=PAD,
        greedy=True,
    )
    T = ours.completion_ids.shape[1]
    assert torch.equal(ours.completion_ids, hf[:, :T]) and (hf[:, T:] == PAD).all()
    assert not ours.truncated.any()  # the SFT taught it to stop
    for ids, n in zip(ours.completion_ids, ours.lengths):
        assert tok.decode(ids[:n]).endswith("<|im_end|>")


def test_auto_backend_is_picked_by_supports_fast_decode(model_and_prompts, monkeypatch):
    """backend="auto" 走快速路径与否只由 common.decode.fast_decode.supports_fast_decode 决定（Qwen2 / Qwen3、CUDA），
    不在 rollout 里另写一份 model_type 判断；CPU 上的真实判断是 False，显式的 "fast" 在 CPU 上报错。"""
    from common.decode import fast_decode, rollout

    model, prompts = model_and_prompts
    kw = dict(max_new_tokens=3, eos_token_ids=[9], pad_token_id=PAD, greedy=True)
    assert not fast_decode.supports_fast_decode(model)
    calls = []

    def fake_fast(
        model, ids, mask, **options
    ):  # 代替 GPU 上的 fast_generate：每行第一个 token 就是 EOS
        calls.append(options)
        return torch.full((ids.shape[0], options["max_new_tokens"]), 9)

    monkeypatch.setattr(rollout, "fast_generate", fake_fast)  # generate 用的是 rollout 里的名字
    monkeypatch.setattr(rollout, "supports_fast_decode", lambda m: True)
    r = generate(model, prompts, **kw)
    assert len(calls) == 1 and calls[0]["greedy"] and r.lengths.tolist() == [1] * len(prompts)
    monkeypatch.setattr(rollout, "supports_fast_decode", lambda m: False)
    eager = generate(model, prompts, **kw)
    assert len(calls) == 1, "supports_fast_decode 为 False 时 auto 应当走 eager 路径"
    T = eager.completion_ids.shape[1]
    assert torch.equal(eager.completion_ids, _hf_greedy(model, prompts, 3, [9])[:, :T])
    monkeypatch.undo()
    with pytest.raises(ValueError, match="CUDA"):
        generate(model, prompts, backend="fast", **kw)


def _small_rollout(prompts, completions, engine=False):
    ids, mask = left_pad(prompts, PAD)
    ro = finish_rollout(ids, mask, torch.tensor(completions), [2], PAD)
    if engine:
        ro.engine_logp = -torch.rand(ro.completion_ids.shape) * ro.completion_mask
    return ro


def test_concat_rollouts_keeps_every_row_and_take_picks_rows():
    """dynamic sampling 把一步里的几批拼起来（L2.10）：每行的 token、mask、位置、引擎 logp 都不变；
    宽度不同的批在 prompt 左边、回答右边补 pad。take(rows) 取出的行和原来的那几行逐位相同。"""
    from common.decode.rollout_batch import concat_rollouts

    a = _small_rollout([[5, 6, 7], [8]], [[9, 2, 4, 4], [9, 9, 9, 9]], engine=True)
    b = _small_rollout([[5, 6, 7, 8, 9]], [[2, 4]], engine=True)
    ro = concat_rollouts([a, b], PAD)
    assert ro.prompt_ids.shape == (3, 5) and ro.completion_ids.shape == (3, 4)
    for i, (src, j) in enumerate([(a, 0), (a, 1), (b, 0)]):
        n = int(src.lengths[j])
        assert ro.completion_ids[i, :n].tolist() == src.completion_ids[j, :n].tolist()
        assert ro.completion_mask[i].sum() == n and ro.lengths[i] == n
        assert ro.truncated[i] == src.truncated[j]
        assert torch.equal(ro.engine_logp[i, :n], src.engine_logp[j, :n])
        real = ro.attention_mask[i] == 1  # 真 token 的位置编号不变（左边补的 pad 不占位置）
        src_real = src.attention_mask[j] == 1
        assert ro.sequences[i][real].tolist() == src.sequences[j][src_real].tolist()
        assert ro.position_ids[i][real].tolist() == src.position_ids[j][src_real].tolist()
    picked = ro.take(torch.tensor([2, 0]))
    assert torch.equal(picked.completion_ids, ro.completion_ids[[2, 0]])
    assert torch.equal(picked.engine_logp, ro.engine_logp[[2, 0]])
    assert concat_rollouts([a], PAD) is a
    with pytest.raises(ValueError, match="engine_logp"):
        concat_rollouts([a, _small_rollout([[5]], [[2]])], PAD)
