"""common.gsm8k.paired_stats：标准误、精确符号检验、逐题配对的差，对照手算的值。"""

from __future__ import annotations

import math

import pytest

from common.gsm8k.paired_stats import binomial_se, paired, sign_test_p, spread


def test_sign_test_against_hand_computed_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(2 / 32)  # 5 次全朝一边：2 × (1/2)^5
    assert sign_test_p(3, 3) == 1.0
    assert sign_test_p(1, 9) == pytest.approx(2 * 11 / 1024)  # 2 × (C(10,0) + C(10,1)) / 2^10


def test_binomial_se():
    assert binomial_se(0.5, 100) == pytest.approx(0.05)
    assert binomial_se(0.3, 500) == pytest.approx(math.sqrt(0.21 / 500))


def test_paired_on_verdicts_and_on_fractions():
    d = paired([0, 1, 1, 0, 0], [1, 1, 0, 1, 0])  # 翻对 2 题、翻错 1 题
    assert (d["n"], d["up"], d["down"]) == (5, 2, 1)
    assert d["diff"] == pytest.approx(1 / 5)
    # 差 = (1, 0, -1, 1, 0)：均值 0.2，总体方差 3/5 − 0.04 = 0.56，标准误 √(0.56/5)
    assert d["se"] == pytest.approx(math.sqrt(0.56 / 5))
    assert d["p"] == pytest.approx(sign_test_p(2, 1))
    f = paired([0.25, 0.5, 1.0], [0.5, 0.5, 0.75])  # pass@1 = c/k 这样的小数
    assert (f["up"], f["down"]) == (1, 1) and f["diff"] == pytest.approx(0.0)


def test_paired_refuses_lists_that_do_not_pair():
    with pytest.raises(ValueError, match="逐题配对"):
        paired([1, 0], [1])
    with pytest.raises(ValueError, match="逐题配对"):
        paired([], [])


def test_spread_over_seeds():
    s = spread([0.1, 0.3])
    assert (s["mean"], s["min"], s["max"]) == pytest.approx((0.2, 0.1, 0.3))
    assert s["sd"] == pytest.approx(math.sqrt(0.02))
    assert spread([0.4])["sd"] is None
