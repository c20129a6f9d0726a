"""Held-out evaluation: greedy accuracy, and pass@k from k sampled answers per question.

    ev = evaluate(complete, problems, k=8, device=device)
    ev["accuracy"]        # greedy decoding: what the model answers when it must commit to one answer
    ev["pass_at"]["8"]    # chance that at least one of 8 samples (T = the run's temperature) is right
    ev["zero_std_frac"]   # problems whose 8 samples are all right or all wrong: a GRPO group of 8
                          # on such a problem has reward std 0, so it carries no gradient
    ev["per_question"]    # {"greedy": [0/1 per problem], "correct_of_k": [c per problem], "k": k}:
                          # what paired comparisons (run vs control, before vs after) are made of
    floor = flip_floor(complete, problems, ev)   # the same weights again, other batch compositions

`complete(problems, greedy, generator) -> list[str]` is the caller's generation function (it owns the
model, tokenizer, prompt format and rollout backend). Evaluation is deterministic and never touches the
training RNG: sampling uses its own generator seeded with `seed`, and the global RNGs (the CUDA fast
path samples with the global CUDA generator) are forked and restored, so evaluating or not does not
change the training trajectory and a resumed run stays bit-identical.

pass@k uses the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on
Code" (the HumanEval paper), section 2.1: with c of n samples correct, pass@k = 1 - C(n-c, k) / C(n, k).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from common.gsm8k.data import Problem
from common.gsm8k.reward import correctness_reward, format_reward

EVAL_SEED = 1234  # the sampling generator's seed: the same k samples at every evaluation of a run
N_EXAMPLES = 4  # greedy (question, gold, completion, reward) examples kept in the eval result

Complete = Callable[[list[Problem], bool, "torch.Generator | None"], list[str]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from c correct out of n samples (n >= k): 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k 需要 0 <= c <= n 且 1 <= k <= n，得到 n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _in_batches(problems: Sequence[Problem], size: int):
    for i in range(0, len(problems), size):
        yield list(problems[i : i + size])


@torch.no_grad()
def evaluate(
    complete: Complete,
    problems: Sequence[Problem],
    *,
    k: int = 8,
    batch_size: int = 128,
    device: torch.device | str = "cpu",
    seed: int = EVAL_SEED,
    extra_ks: Sequence[int] = (),
    answers: bool = False,
) -> dict:
    """Greedy accuracy / format rate and, when k >= 1, pass@1 and pass@k from k samples per problem.

    extra_ks: more pass@k values (each <= k) estimated from the same k samples per problem.
    Returns {"accuracy", "format_rate", "n", "pass_at": {"1": ..., str(k): ...} (absent when k == 0),
    "zero_std_frac" (k >= 2: share of problems whose k samples all got the same correctness),
    "per_question": {"greedy": [int], "correct_of_k": [int] (k >= 1), "k": k}, one entry per problem,
    "examples": the first N_EXAMPLES greedy answers with their reward, and with answers=True
    "answers": every greedy answer the same way (what a reader checks the reward against)}.
    """
    if not problems:
        raise ValueError("evaluate 需要至少一道题")
    if any(not 1 <= kk <= k for kk in extra_ks):
        raise ValueError(f"extra_ks 里的每个 k 都要在 1 到 k={k} 之间，得到 {list(extra_ks)}")
    device = torch.device(device)
    greedy = [t for chunk in _in_batches(problems, batch_size) for t in complete(chunk, True, None)]
    right = [correctness_reward(t, p.gold) for t, p in zip(greedy, problems)]
    result = {
        "accuracy": sum(right) / len(problems),
        "format_rate": sum(format_reward(t) for t in greedy) / len(problems),
        "n": len(problems),
        "per_question": {"greedy": [int(r) for r in right], "k": k},
    }
    if k >= 1:
        cuda = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):  # the fast CUDA path samples with the global RNG
            torch.manual_seed(seed)
            gen = torch.Generator(device=device).manual_seed(seed)
            repeated = [p for p in problems for _ in range(k)]  # k copies of each problem, adjacent
            per_batch = max(1, batch_size // k) * k
            texts = [t for ch in _in_batches(repeated, per_batch) for t in complete(ch, False, gen)]
        correct = [
            int(sum(correctness_reward(texts[i * k + j], p.gold) for j in range(k)))
            for i, p in enumerate(problems)
        ]
        result["per_question"]["correct_of_k"] = correct
        result["pass_at"] = {
            str(kk): sum(pass_at_k(k, int(c), kk) for c in correct) / len(problems)
            for kk in sorted({1, k, *extra_ks})
        }
        if k >= 2:
            result["zero_std_frac"] = sum(c in (0, k) for c in correct) / len(problems)
    graded = [
        {"question": p.question, "gold": p.gold, "completion": t, "reward": r}
        for p, t, r in zip(problems, greedy, right)
    ]
    result["examples"] = graded[:N_EXAMPLES]
    if answers:
        result["answers"] = graded
    return result


def other_batch_size(batch_size: int) -> int:
    """The flip floor's second batch size: half (never more memory than the first), 2 for 1."""
    return batch_size // 2 if batch_size > 1 else 2


def flip_floor(
    complete: Complete, problems: Sequence[Problem], first: dict, *, batch_size: int = 128
) -> dict:
    """Evaluate the same weights again, greedy, with the problems in another order and another
    batch size (so every batch holds other problems, other padding and another number of rows),
    and count what changed against ``first``.

    ``first`` is an :func:`evaluate` result with ``answers=True`` on ``problems`` in their order,
    made with ``batch_size``; the second one uses :func:`other_batch_size`. On a GPU, bf16 greedy
    decoding depends on the batch (its padding, and the kernels chosen for its size: the same
    weights gave 0.290 at eval batch 512 and 0.312 at 64 on the course's stand-in model): this is
    the run's own noise floor, below which a change of held-out accuracy means nothing. Returns
    {"n", "batch_size_first", "batch_size_second", "accuracy_first", "accuracy_second",
    "grade_flips", "up", "down", "text_changes", "flipped": [indices whose verdict changed]}.
    """
    n = len(problems)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(EVAL_SEED)).tolist()
    second_size = other_batch_size(batch_size)
    again = evaluate(
        complete, [problems[i] for i in order], k=0, batch_size=second_size, answers=True
    )
    second = [None] * n
    for pos, i in enumerate(order):
        second[i] = again["answers"][pos]
    before = first["answers"]
    flipped = [i for i in range(n) if before[i]["reward"] != second[i]["reward"]]
    return {
        "n": n,
        "batch_size_first": batch_size,
        "batch_size_second": second_size,
        "accuracy_first": first["accuracy"],
        "accuracy_second": again["accuracy"],
        "grade_flips": len(flipped),
        "up": sum(second[i]["reward"] > before[i]["reward"] for i in flipped),
        "down": sum(second[i]["reward"] < before[i]["reward"] for i in flipped),
        "text_changes": sum(before[i]["completion"] != second[i]["completion"] for i in range(n)),
        "flipped": flipped,
    }


def completer(
    model,
    tokenizer,
    spec,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    process_logits=None,
    dtype: torch.dtype | None = None,
) -> Complete:
    """A `complete` function for :func:`evaluate` from a model: the course prompt, the course rollout
    (`common.decode.rollout.generate`, backend auto: the fast decoder on a GPU, eager on a CPU).

    Scripts that only evaluate (make_warmstart.py, L2.08's before_after.py) and L3.01's train_trl.py
    use it; it decodes like grpo_train.py's rollout, so their numbers equal eval_before.json's.
    process_logits: the sampling transform (L2.06's; common/ does not import solutions/).
    dtype: an autocast dtype (bf16 on a GPU, as grpo_train.py decodes fp32 master weights); None: none.
    """
    from contextlib import nullcontext

    from common.decode.rollout import generate
    from common.gsm8k.data import build_prompt

    eos, pad = list(spec.eos_token_ids), spec.pad_token_id
    device_type = next(model.parameters()).device.type
    amp = lambda: torch.autocast(device_type, dtype=dtype) if dtype is not None else nullcontext()

    def complete(problems, greedy, generator):
        prompts = [tokenizer(build_prompt(tokenizer, p.question), add_special_tokens=False)["input_ids"]
                   for p in problems]  # fmt: skip
        with amp():
            ro = generate(model, prompts, max_new_tokens=max_new_tokens, eos_token_ids=eos,
                          pad_token_id=pad, temperature=temperature, top_p=top_p, greedy=greedy,
                          process_logits=process_logits, generator=generator)  # fmt: skip
        ids = zip(ro.completion_ids, ro.lengths)
        return [tokenizer.decode(c[:n], skip_special_tokens=True) for c, n in ids]

    return complete
