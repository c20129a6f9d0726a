"""common.decode.evaluate：pass@k 的无偏估计（对照穷举）、评估确定且不碰训练用的随机数。"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from common.decode.evaluate import evaluate, pass_at_k
from common.gsm8k.data import Problem


def _brute_force(n: int, c: int, k: int) -> float:
    """n 条里 c 条对：所有 k 条子集里「至少一条对」的比例（定义本身）。"""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 10).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_matches_the_definition(nck):
    n, c, k = nck
    assert math.isclose(pass_at_k(n, c, k), _brute_force(n, c, k), abs_tol=1e-12)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, 1, 5), (4, 1, 0), (3, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


PROBLEMS = [Problem(f"q{i}", f"#### {i}", str(i)) for i in range(5)]


def _fake_complete(problems, greedy, generator):
    """贪心：题号是偶数就答对；采样：用传进来的 generator 抛硬币决定对错。"""
    if greedy:
        return [f"\\boxed{{{p.gold if int(p.gold) % 2 == 0 else 99}}}" for p in problems]
    coins = torch.rand(len(problems), generator=generator)
    return [f"\\boxed{{{p.gold if u < 0.5 else 99}}}" for p, u in zip(problems, coins)]


def test_evaluate_is_deterministic_and_leaves_the_global_rng_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    a = evaluate(_fake_complete, PROBLEMS, k=4, batch_size=3)
    assert torch.equal(torch.get_rng_state(), before), "评估动了全局随机数：续跑就不再逐位一致"
    b = evaluate(_fake_complete, PROBLEMS, k=4, batch_size=8)  # 分批方式不同，结果也相同
    assert a == b
    assert a["accuracy"] == pytest.approx(3 / 5) and a["n"] == 5
    assert set(a["pass_at"]) == {"1", "4"} and a["pass_at"]["1"] <= a["pass_at"]["4"]
    assert a["examples"][0] == {
        "question": "q0",
        "gold": "0",
        "completion": "\\boxed{0}",
        "reward": 1.0,
    }


def test_evaluate_without_sampling_has_no_pass_at():
    ev = evaluate(_fake_complete, PROBLEMS, k=0)
    assert "pass_at" not in ev and ev["accuracy"] == pytest.approx(3 / 5)


def test_zero_std_frac_counts_problems_whose_samples_all_agree():
    """第 i 题的 4 条采样里前 right[i] 条答对：全对（4）或全错（0）的题，GRPO 的组内 std 为 0。"""
    right = {"0": 0, "1": 2, "2": 4, "3": 1, "4": 4}
    seen: dict[str, int] = {}

    def complete(problems, greedy, generator):
        texts = []
        for p in problems:
            j = seen.get(p.gold, 0) if not greedy else 0
            seen[p.gold] = j + (not greedy)
            texts.append(f"\\boxed{{{p.gold if j < right[p.gold] else 99}}}")
        return texts

    ev = evaluate(complete, PROBLEMS, k=4, batch_size=6)
    assert ev["zero_std_frac"] == pytest.approx(3 / 5)
    assert ev["pass_at"]["1"] == pytest.approx((0 + 2 + 4 + 1 + 4) / 20)
    assert "zero_std_frac" not in evaluate(_fake_complete, PROBLEMS, k=1)


def test_extra_ks_come_from_the_same_samples():
    ev = evaluate(_fake_complete, PROBLEMS, k=4, extra_ks=(2, 3))
    assert list(ev["pass_at"]) == ["1", "2", "3", "4"]
    assert ev["pass_at"]["1"] <= ev["pass_at"]["2"] <= ev["pass_at"]["3"] <= ev["pass_at"]["4"]
    assert ev["pass_at"]["4"] == evaluate(_fake_complete, PROBLEMS, k=4)["pass_at"]["4"]
    with pytest.raises(ValueError, match="extra_ks"):
        evaluate(_fake_complete, PROBLEMS, k=4, extra_ks=(8,))


def test_per_question_results_make_the_means():
    """逐题结果（配对比较靠它）：贪心的 0/1 之和 / 题数 = accuracy；每题 k 条里答对几条算出 pass@1、pass@k。"""
    ev = evaluate(_fake_complete, PROBLEMS, k=4, batch_size=3)
    pq = ev["per_question"]
    assert pq["k"] == 4 and pq["greedy"] == [1, 0, 1, 0, 1]
    assert sum(pq["greedy"]) / len(PROBLEMS) == ev["accuracy"]
    assert len(pq["correct_of_k"]) == len(PROBLEMS) and all(0 <= c <= 4 for c in pq["correct_of_k"])
    assert sum(c / 4 for c in pq["correct_of_k"]) / 5 == pytest.approx(ev["pass_at"]["1"])
    assert sum(c > 0 for c in pq["correct_of_k"]) / 5 == pytest.approx(ev["pass_at"]["4"])
    greedy_only = evaluate(_fake_complete, PROBLEMS, k=0)["per_question"]
    assert greedy_only == {"greedy": [1, 0, 1, 0, 1], "k": 0}


def test_flip_floor_counts_what_another_batch_composition_changes():
    """同样的「权重」，换一种 batch 组合再评一次：一个依赖 batch 的假模型（batch 里第一题答错）
    会在另一种题序下翻掉几题；不依赖 batch 的假模型一题也不翻。"""
    from common.decode.evaluate import flip_floor

    problems = [Problem(f"q{i}", f"#### {i}", str(i)) for i in range(12)]

    def batch_dependent(chunk, greedy, generator):
        return ["\\boxed{99}" if j == 0 else f"\\boxed{{{p.gold}}}" for j, p in enumerate(chunk)]

    first = evaluate(batch_dependent, problems, k=0, batch_size=4, answers=True)
    floor = flip_floor(batch_dependent, problems, first, batch_size=4)
    assert first["accuracy"] == pytest.approx(
        9 / 12
    )  # 第 0、4、8 题在第一次里是各自 batch 的第一题
    assert floor["n"] == 12 and floor["grade_flips"] == floor["up"] + floor["down"] > 0
    assert floor["grade_flips"] == len(floor["flipped"]) == floor["text_changes"]
    assert floor["accuracy_second"] == pytest.approx(6 / 12)  # 第二次 2 题一批，每批仍有一题答错
    steady = evaluate(_fake_complete, PROBLEMS, k=0, answers=True)
    assert flip_floor(_fake_complete, PROBLEMS, steady)["grade_flips"] == 0


def test_flip_floor_also_changes_the_batch_size():
    """issue 44 以前：第二次评估用同样的 batch 大小，量不到 batch 大小本身的影响（同样的权重，
    eval batch 64 评出 0.312、512 评出 0.290，--start-evals 2 却报 0 题翻转）。"""
    from common.decode.evaluate import flip_floor, other_batch_size

    problems = [Problem(f"q{i}", f"#### {i}", str(i)) for i in range(12)]
    sizes = []

    def size_dependent(chunk, greedy, generator):  # batch 满 4 条时全对，否则全错
        sizes.append(len(chunk))
        return [f"\\boxed{{{p.gold if len(chunk) >= 4 else 99}}}" for p in chunk]

    first = evaluate(size_dependent, problems, k=0, batch_size=4, answers=True)
    floor = flip_floor(size_dependent, problems, first, batch_size=4)
    assert sizes == [4, 4, 4, 2, 2, 2, 2, 2, 2]
    assert floor["batch_size_first"] == 4 and floor["batch_size_second"] == 2
    assert first["accuracy"] == 1.0 and floor["accuracy_second"] == 0.0
    assert floor["grade_flips"] == floor["down"] == 12
    assert [other_batch_size(b) for b in (1, 2, 64, 512)] == [2, 1, 32, 256]
