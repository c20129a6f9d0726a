"""Statistics for comparing two held-out evaluations of the same questions (L2.08).

    se = binomial_se(0.3, 500)                    # one accuracy on 500 questions: ± 0.020
    d = paired([0, 1, 1, 0], [1, 1, 0, 1])        # per question: before/after, or control/run
    d["up"], d["down"], d["diff"], d["se"], d["p"]
    signed(d["diff"])                             # "+0.028", "−0.022": a difference as the lessons print it

Paired means per question: the same questions, in the same order, measured twice. Values may be
0/1 (a greedy verdict, pass@k from k samples) or fractions (pass@1 = c/k). ``up`` counts questions
where the second value is larger, ``down`` where it is smaller; ``p`` is the exact two-sided sign
test on them (questions that did not change carry no information about the direction).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def binomial_se(p: float, n: int) -> float:
    """Standard error sqrt(p(1-p)/n) of an accuracy p measured on n questions."""
    return math.sqrt(p * (1 - p) / n)


def sign_test_p(up: int, down: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if up and down were
    equally likely (questions that did not change are left out)."""
    n = up + down
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(up, down) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(first: Sequence[float], second: Sequence[float]) -> dict:
    """{"n", "up", "down", "diff" (mean of second - first), "se" (of that mean), "p" (sign test)}."""
    if len(first) != len(second) or not first:
        raise ValueError(
            f"逐题配对要两份同样长、非空的逐题结果，得到 {len(first)} 和 {len(second)} 题"
        )
    d = [b - a for a, b in zip(first, second)]
    n = len(d)
    up = sum(x > 0 for x in d)
    down = sum(x < 0 for x in d)
    mean = sum(d) / n
    se = math.sqrt(max(sum(x * x for x in d) / n - mean * mean, 0.0) / n)  # sd of d / √n
    return {"n": n, "up": up, "down": down, "diff": mean, "se": se, "p": sign_test_p(up, down)}


def spread(values: Sequence[float]) -> dict:
    """{"mean", "min", "max", "sd"} over seeds (sd is None for a single seed)."""
    return {
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "sd": statistics.stdev(values) if len(values) > 1 else None,
    }


def signed(x: float, digits: int = 3) -> str:
    """A difference as the lessons print it: "+0.028", "−0.022" (the minus is U+2212)."""
    return f"{x:+.{digits}f}".replace("-", "\u2212")
