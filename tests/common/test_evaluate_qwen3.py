"""GPU 路线的 held-out 评估，端到端走一批（CPU）：只测管道接通，不测模型好坏。

真实的部分：课程自带 GSM8K 的测试题（GPU 配方的 held-out = test 的前 n_heldout 道）、从模型目录读出的真实
tokenizer 和 chat template（Qwen3：thinking 关；Qwen2.5：默认 system prompt）、Qwen 的 EOS/pad、
common.decode.rollout 采样、common.gsm8k.reward 打分、common.decode.evaluate 的贪心正确率与 pass@k。不真实的部分：模型是
小形状的随机 Qwen3 / Qwen2（tests/small_qwen.py），所以它的正确率没有任何意义，这里也不检查它的大小。
"""

from __future__ import annotations

import pytest
import torch
from small_qwen import make_model_dir

from common.decode.evaluate import evaluate
from common.decode.rollout import generate
from common.gsm8k import data as D
from common.gsm8k.reward import correctness_reward
from common.model.models import load_model, model_spec
from common.options.presets import gpu_recipe
from solutions.l2_06_sampling import process_logits

BATCH = 4  # 一批 held-out 题
K = 2  # pass@k 的 k
MAX_NEW_TOKENS = 8  # 只为让 CPU 上跑得快；真实运行用配方的 max_new_tokens


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_one_heldout_batch_of_the_gpu_route(tmp_path, family):
    d = gpu_recipe()
    assert d["data"] == "gsm8k" and 0 < d["n_heldout"] <= 1319  # 自带 GSM8K test 的前 n_heldout 道
    _, heldout = D.load_splits(d["data"], d["n_heldout"])
    assert heldout == D.load_gsm8k("test")[: d["n_heldout"]]

    spec = model_spec(make_model_dir(tmp_path / f"small-{family}", family=family))
    model, tok = load_model(spec)  # CPU：fp32（小模型，≤ 50M 参数）
    eos, pad = list(spec.eos_token_ids), spec.pad_token_id

    seen_prompts = []

    def complete(problems, greedy, generator):  # 与 grpo_train.py 的 rollout() 同样的几步
        prompts = [D.build_prompt(tok, p.question) for p in problems]
        seen_prompts.extend(prompts)
        ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        with torch.no_grad():
            ro = generate(
                model,
                ids,
                max_new_tokens=MAX_NEW_TOKENS,
                eos_token_ids=eos,
                pad_token_id=pad,
                greedy=greedy,
                process_logits=process_logits,
                generator=generator,
            )
        return [
            tok.decode(c[:n], skip_special_tokens=True)
            for c, n in zip(ro.completion_ids, ro.lengths)
        ]

    batch = heldout[:BATCH]
    ev = evaluate(complete, batch, k=K, batch_size=BATCH * K, device="cpu")

    # 管道接通：题目、gold、prompt 格式、打分、结果的结构。正确率本身不检查（随机权重，没有意义）。
    assert ev["n"] == BATCH and 0.0 <= ev["accuracy"] <= 1.0 and 0.0 <= ev["format_rate"] <= 1.0
    assert set(ev["pass_at"]) == {"1", str(K)}
    assert len(seen_prompts) == BATCH + BATCH * K  # 贪心每题一条 + 采样每题 K 条
    user = "<|im_start|>user\n" + batch[0].question
    if family == "qwen3":
        assert seen_prompts[0].startswith(user) and seen_prompts[0].endswith(
            "<think>\n\n</think>\n\n"
        )
    else:
        assert seen_prompts[0].startswith("<|im_start|>system\nYou are Qwen")
        assert user in seen_prompts[0] and seen_prompts[0].endswith("<|im_start|>assistant\n")
    for ex, p in zip(ev["examples"], batch):
        assert ex["question"] == p.question and ex["gold"] == p.gold
        assert isinstance(ex["completion"], str)
        assert ex["reward"] == correctness_reward(ex["completion"], p.gold)
