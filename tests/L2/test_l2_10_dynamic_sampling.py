"""L2.10 select_groups：课文的手算例子、典型错误的诊断、边界、性质；第 1 节的数字由附带的运行重算。"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
from diagnose import (
    Mistake,
    assert_named_first,
    assert_sections_exist,
    check,
    collisions,
    diagnosis_line,
    guarded,
    hint_sections,
    symptom,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "L2_algorithm" / "10_dynamic_sampling"
SECTION = "L2.10「2. 规格」"
CRASHES = {
    "select_groups": {
        "reshape": "把 reward 分成 (组数, G) 时形状不对：长度不是 G 的整数倍要先抛 ValueError",
        "bool_ambiguous": "对多个元素的张量用了 Python 的 if / and / or（每组的判断是逐组的）",
    }
}


@pytest.fixture(scope="module")
def mod(impl):
    """被测模块：函数里抛出的异常带上一句中文（最可能的原因）；原地改了输入直接点名。"""
    sections = {"select_groups": SECTION}
    return guarded(impl("l2_10_dynamic_sampling"), sections, CRASHES, keep_inputs=sections)


def _spec_variant(
    only_all_wrong=False,
    by_mean=False,
    no_cap=False,
    newest_first=False,
    empty_on_last=False,
    fallback_early=False,
    rows=False,
    top_up_with_equal=False,
    bool_mask=False,
    std_threshold=None,
    keep_all=False,
    strided=False,
    std_batched=False,
):
    """按规格用 Python 列表算一遍（和 solutions/ 的写法不同），但带上某一个典型错误。"""

    def fn(rewards, group_size, target, last=False):
        values = rewards.tolist()
        groups = [values[i : i + group_size] for i in range(0, len(values), group_size)]
        if strided:  # 按列分组：第 j 组取了 rewards[j::n]（view(G, n) 之后沿 dim=0 比较）
            groups = [values[j :: len(groups)] for j in range(len(groups))]
        if keep_all:  # 一个组都没丢：只有一个不同值的组也算有信号
            signal = [True for g in groups]
        elif std_batched:  # 整批 (n, G) 一起算 std(dim=1) > 0
            signal = (torch.tensor(groups).std(dim=1) > 0).tolist()
        elif only_all_wrong:  # 只丢了全错的组
            signal = [any(v != 0 for v in g) for g in groups]
        elif by_mean:  # 0 < 均值 < 1 当成有信号
            signal = [0 < sum(g) / len(g) < 1 for g in groups]
        elif std_threshold is not None:  # std 大过某个阈值才算有信号（0：std > 0，逐组、float32）
            signal = [torch.tensor(g).std().item() > std_threshold for g in groups]
        else:
            signal = [len(set(g)) > 1 for g in groups]
        if bool_mask:
            return torch.tensor(signal)
        keep = [j for j, s in enumerate(signal) if s]
        if newest_first:  # 取了最后 target 个：后采的组优先
            keep = keep[-target:]
        keep = keep if no_cap else keep[:target]
        if top_up_with_equal and last:  # 凑不够时拿全相同的组补满
            keep += [j for j, s in enumerate(signal) if not s][: target - len(keep)]
        elif not keep and (last or fallback_early) and not empty_on_last:
            keep = list(range(min(target, len(groups))))
        if rows:  # 返回了回答（行）的下标
            keep = [j * group_size + i for j in keep for i in range(group_size)]
        return torch.tensor(keep, dtype=torch.int64)

    return fn


REF = _spec_variant()
PIT = "L2.10「4. 坑，以及出处」"
MISTAKES = [
    Mistake(
        "只丢了全错的组：全对的组 advantage 也全是 0",
        "L2.10「坑 1」",
        _spec_variant(only_all_wrong=True),
    ),
    Mistake(
        "把「0 < 组内均值 < 1」当成了有信号：reward 不是 0/1 时，全相同的组也被留下了",
        "L2.10「坑 2」",
        _spec_variant(by_mean=True),
    ),
    Mistake(
        "没有截到 target 个：多出来的有信号的组也返回了",
        "L2.10「坑 4」",
        _spec_variant(no_cap=True),
    ),
    Mistake(
        "取了最后 target 个有信号的组：后采的组优先了（应按组的先后取）",
        "L2.10「坑 3」",
        _spec_variant(newest_first=True),
    ),
    Mistake(
        "给 std 加了阈值（std 大过某个数才算有信号）：组内只要不全相同，advantage 就不为 0",
        "L2.10「坑 2」",
        _spec_variant(std_threshold=0.1),
    ),
    Mistake(
        "把「std > 0」当成了有信号：全相同的组算出的 float32 std 也可能不是 0（浮点舍入：八个 0.1 得到约 8e-9），"
        "而这组的 advantage 是精确的 0；规格是组内的值不全相等",
        "L2.10「坑 2」",
        _spec_variant(std_threshold=0.0),
    ),
    Mistake(
        "还能补采（last=False）时，一个有信号的组都没有就退回了前面的组",
        "L2.10「坑 5」",
        _spec_variant(fallback_early=True),
    ),
    Mistake(
        "最后一批（last=True）也凑不到一个有信号的组时返回了空：训练的 batch 不能是空的",
        "L2.10「坑 5」",
        _spec_variant(empty_on_last=True),
    ),
    Mistake(
        "最后一批凑不够时拿 reward 全相同的组补满了 target 个：规格是有几个训练几个",
        "L2.10「2. 规格」",
        _spec_variant(top_up_with_equal=True),
    ),
    Mistake("返回的是回答（行）的下标，不是组的下标", "L2.10「坑 5」", _spec_variant(rows=True)),
    Mistake(
        "返回了每组一个 True/False 的 mask，不是组的下标",
        "L2.10「2. 规格」",
        _spec_variant(bool_mask=True),
    ),
]
MISTAKE_IDS = [
    "only_all_wrong",
    "by_mean",
    "no_cap",
    "newest_first",
    "std_threshold",
    "std_positive",
    "fallback_early",
    "empty_on_last",
    "top_up_with_equal",
    "rows",
    "bool_mask",
]
SYMPTOMS = [
    symptom(
        "返回了 reward 全相同的组（又不是「最后一批、一个有信号的组都没有」时的退回）："
        "只有一个不同值的组也算成了有信号，或者分组分错了（第 j 组是 rewards[j·G : (j+1)·G]）",
        "L2.10「2. 规格」",
        lambda got, rewards, group_size, last, **kw: _returns_flat_group(
            got, rewards, group_size, last
        ),
    ),
    symptom(
        "返回的下标没有按升序排",
        "L2.10「坑 3」",
        lambda got, **kw: got.dim() == 1 and bool((got[1:] < got[:-1]).any()),
    ),
    symptom(
        "返回的下标超出了组数（退回时只能退回真有的组：min(target, n) 个）",
        "L2.10「2. 规格」",
        lambda got, rewards, group_size, **kw: (
            got.numel() > 0 and int(got.max()) >= rewards.numel() // group_size
        ),
    ),
    symptom(
        "返回了超过 target 个组",
        "L2.10「坑 4」",
        lambda got, target, **kw: got.numel() > target,
    ),
]


def _returns_flat_group(got, rewards, group_size, last):
    """got 里有全相同的组，而这一步不是「最后一批、一个有信号的组都没有」的退回。"""
    groups = rewards.reshape(-1, group_size).tolist()
    flat = [len(set(g)) == 1 for g in groups]
    fallback = last and all(flat)
    return not fallback and any(flat[j] for j in got.tolist())


def _t(*groups):
    return torch.tensor([v for g in groups for v in g], dtype=torch.float32)


# 课文第 3 节的两批（G = 4，P = 3），再加一个有信号的组 6：截断、先后都查得到
TWO_DRAWS = _t(
    [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0], [0.5] * 4, [1, 0, 1, 1], [0, 0, 1, 1]
)
# (输入, 说明)，按这个顺序跑（test_each_mistake_is_recognised 照同样的顺序检查）
# 八个相同的数，在这台机器上逐组算出的 float32 std 不为 0（求均值的舍入）：哪一个取决于 CPU 的累加顺序。
# 整批 (n, G) 一起算 std(dim=1) 时，这里量过：n >= 2 的全相同的行恰好是 0（逐行累加），n = 1 时和逐组算一样
_NOISY = next(
    (
        v
        for v in (1.2, 1.3, 2.1, 1.7, 3.3)
        if torch.tensor([v] * 8).std().item() > 0 and torch.full((1, 8), v).std(dim=1).item() > 0
    ),
    1.2,
)
DIAGNOSIS_CASES = [
    (dict(rewards=TWO_DRAWS, group_size=4, target=3, last=False), "两批 7 组，有信号的 4 组"),
    (dict(rewards=_t([0, 0, 0, 0], [1, 1, 1, 1]), group_size=4, target=3, last=False),
     "还能补采、一个有信号的组都没有"),
    (dict(rewards=_t([0, 0, 0, 0], [1, 1, 1, 1]), group_size=4, target=3, last=True),
     "最后一批、一个有信号的组都没有"),
    (dict(rewards=_t([1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]), group_size=4, target=3, last=True),
     "最后一批、只有 1 个有信号的组"),
    # 第二组全对：「只丢了全错的组」留下它，「0 < 均值 < 1」丢掉它（两者在这里分得开）
    (dict(rewards=_t([0.5, 0.5, 0.5, 0.52], [1, 1, 1, 1], [0, 0, 0, 0]), group_size=4, target=2,
          last=False), "组内只差一点点"),
    # 全相同、却算出不为 0 的 float32 std（_NOISY，均值 > 1：「0 < 均值 < 1」的写法也会丢掉它）；
    # correctness_plus_format 下全错但格式都对的组是八个 0.1，同样的舍入（std 约 8e-9）。
    # 八个 2.0 的 std 一定是 0：「只丢全错的组」留下它，「std > 0」丢掉它
    (dict(rewards=_t([_NOISY] * 8, [2.0] * 8, [0.1] * 7 + [1.1]), group_size=8, target=3,
          last=False), "全相同、float32 的 std 却不为 0 的组"),
    # 只差 float32 在 0.5 附近的一个最小间隔（6e-8）：任何正的 std 阈值都会把它丢掉
    (dict(rewards=_t([0.5, 0.5, 0.5, 0.50000006], [1, 1, 1, 1]), group_size=4, target=1,
          last=False), "组内只差一个 float32 的最小间隔"),
    # 只有一组、全相同：整批一起算的 std(dim=1) 在这里也不为 0（多于一组时它恰好是 0，上面的输入抓不到）。
    # 放在最后：这组输入上「一个组都没丢」「只丢了全错的组」结果相同，它们在前面的输入上已各自被点名
    (dict(rewards=_t([_NOISY] * 8), group_size=8, target=1, last=False),
     "只有一组、全相同，float32 的 std 却不为 0"),
]  # fmt: skip


@pytest.mark.parametrize("inputs,where", DIAGNOSIS_CASES, ids=[w for _, w in DIAGNOSIS_CASES])
def test_matches_reference_with_diagnosis(mod, inputs, where):
    got = mod.select_groups(**inputs)
    check(
        got,
        REF(**inputs),
        inputs=inputs,
        mistakes=MISTAKES + SYMPTOMS,
        where=where,
        section=SECTION,
    )


def test_worked_example_from_the_lesson(mod):
    """课文第 3 节：第一批 [0]；两批 [0, 3, 5]；组 5 换成全对时 [0, 3]；两批都没有信号时 [0, 1, 2]。"""
    first = _t([1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1])
    second = _t([0, 1, 1, 0], [0.5] * 4, [1, 0, 1, 1])
    cases = [
        (dict(rewards=first, group_size=4, target=3, last=False), [0], "第一批"),
        (dict(rewards=torch.cat([first, second]), group_size=4, target=3, last=True), [0, 3, 5], "两批"),
        (dict(rewards=torch.cat([first, _t([0, 1, 1, 0], [0.5] * 4, [1, 1, 1, 1])]), group_size=4,
              target=3, last=True), [0, 3], "组 5 全对时"),
        (dict(rewards=_t(*[[0.0] * 4] * 3, *[[1.0] * 4] * 3), group_size=4, target=3, last=True),
         [0, 1, 2], "两批都没有信号时"),
    ]  # fmt: skip
    for inputs, want, where in cases:
        got = mod.select_groups(**inputs)
        check(
            got, torch.tensor(want, dtype=torch.int64), inputs=inputs, mistakes=MISTAKES + SYMPTOMS,
            where=f"课文第 3 节「{where}」的结果", section="L2.10「3. 手算一遍」",
        )  # fmt: skip


@pytest.mark.parametrize("mistake", MISTAKES, ids=MISTAKE_IDS)
def test_each_mistake_is_recognised(mistake):
    """诊断表本身要灵：按诊断测试的顺序，每个典型错误第一次和正确答案不同的那组输入上，第一行只点名它自己。"""
    cases = [(inputs, REF(**inputs), {}) for inputs, _ in DIAGNOSIS_CASES]
    assert_named_first(mistake, cases, MISTAKES, where="x", section=SECTION)


@pytest.mark.slow  # 诊断表自己的检查（给维护者的）：CI 的 slow 一档跑
def test_no_two_mistakes_give_the_same_output():
    """诊断表本身：每组诊断输入上，两个不同的典型错误算出的结果不同（否则诊断分不开它们）。
    例外是最后一组输入（只有一组、全相同）：那里「只丢了全错的组」「std > 0」「还能补采就退回」都返回 [0]，
    天生分不开；它只为整批一起算的 std(dim=1) 而设（只有一组时才不为 0），这几个错误在前面的输入上已各自被点名。"""
    cases = [(inputs, REF(**inputs), {}) for inputs, _ in DIAGNOSIS_CASES]
    assert not (found := collisions(MISTAKES, cases[:-1])), "\n".join(found)


def test_each_symptom_is_absent_from_the_right_answer():
    for inputs, where in DIAGNOSIS_CASES:
        want = REF(**inputs)
        assert not [s.what for s in SYMPTOMS if s.fn(want, **inputs)], where


@pytest.mark.parametrize(
    "variant,needle",
    [
        (dict(keep_all=True), "返回了 reward 全相同的组"),
        (dict(strided=True), "返回了 reward 全相同的组"),
        (dict(std_batched=True), "「std > 0」"),
    ],
    ids=["keep_all", "strided", "std_batched"],
)
def test_other_writings_are_named_on_their_first_wrong_input(variant, needle):
    """诊断本身：表外的几种写法在第一个算错的诊断输入上，第一行说出它（可以和别的错误一起说）。
    一个组都没丢（只有一个不同值的组也算有信号）和按列分组：在全相同的输入上和「退回」的错误分不开，所以是症状。
    整批一起算 std(dim=1) > 0：这台 CPU 上多于一组时，全相同的行的 std 恰好是 0（逐行累加），
    只在最后那组输入（只有一组）上算错；那里「只丢了全错的组」等写法结果相同，一起被说出来。"""
    wrong_fn = _spec_variant(**variant)
    for inputs, where in DIAGNOSIS_CASES:
        want = REF(**inputs)
        line = diagnosis_line(wrong_fn(**inputs), want, inputs=inputs,
                              mistakes=MISTAKES + SYMPTOMS, where=where, section=SECTION)  # fmt: skip
        if line is not None:
            assert line.startswith("看起来是：") and needle in line, f"{where}：{line}"
            return
    pytest.fail(f"没有任何一个诊断输入能暴露 {variant}")


def test_integer_rewards_are_accepted(mod):
    """规格：整数张量也接受（只比较值是否相等）：有信号的组、全相同时最后一批的退回。"""
    mixed = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0])
    for rewards in (mixed, torch.zeros(8, dtype=torch.int64)):
        for last in (False, True):
            inputs = dict(rewards=rewards, group_size=4, target=3, last=last)
            where = f"整数 reward {rewards.tolist()}、last={last}"
            check(mod.select_groups(**inputs), REF(**inputs), inputs=inputs,
                  mistakes=MISTAKES + SYMPTOMS, where=where, section=SECTION)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(2, 5),
    st.integers(1, 8),
    st.booleans(),
    st.integers(0, 2**16),
)
@example(n=6, G=3, target=2, last=True, seed=5)
def test_properties(mod, n, G, target, last, seed):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (n, G), generator=g).float()
    rewards[torch.rand(n, generator=g) < 0.3] = 0.5  # 一些组全相同，但不是 0/1
    rewards[torch.rand(n, generator=g) < 0.2, 0] = 0.51  # 一些组只差一点点
    rewards = rewards.flatten()
    before = rewards.clone()
    got = mod.select_groups(rewards, G, target, last=last)
    assert torch.equal(rewards, before), "select_groups 改了输入的 rewards：回看 L2.10「2. 规格」"
    want = REF(rewards=rewards, group_size=G, target=target, last=last)
    where = f"n={n} 组、G={G}、target={target}、last={last}"
    check(got, want, inputs=dict(rewards=rewards, group_size=G, target=target, last=last),
          mistakes=MISTAKES + SYMPTOMS, where=where, section=SECTION)  # fmt: skip
    assert got.dtype == torch.int64 and got.dim() == 1 and got.numel() <= target


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(rewards=torch.zeros(6), group_size=4, target=1), "group_size"),
        (dict(rewards=torch.zeros(8), group_size=1, target=1), "group_size"),
        (dict(rewards=torch.zeros(8), group_size=0, target=1), "group_size"),
        (dict(rewards=torch.zeros(8), group_size=4, target=0), "target"),
        (dict(rewards=torch.zeros(2, 4), group_size=4, target=1), "一维"),
        (dict(rewards=torch.zeros(0), group_size=4, target=1), "rewards"),
        (dict(rewards=torch.tensor([0.0, float("nan"), 1.0, 1.0]), group_size=4, target=1), "NaN"),
    ],
    ids=["not_multiple", "group_size_1", "group_size_0", "target_0", "two_dims", "empty", "nan"],
)
def test_bad_arguments(mod, kwargs, needle):
    try:
        mod.select_groups(**kwargs)
    except ValueError as err:
        assert needle in str(err), f"这个非法参数的 ValueError 里应提到「{needle}」，得到：{err}"
    else:
        pytest.fail(
            f"{needle} 不合法时应抛 ValueError（中文说明要改什么）：回看 {SECTION}", pytrace=False
        )


def test_diagnoses_point_at_real_sections():
    sections = {m.section for m in MISTAKES + SYMPTOMS} | {SECTION, PIT, "L2.10「3. 手算一遍」"}
    assert_sections_exist(sections | hint_sections(CRASHES))


# ------------------------------------------------------- 第 1 节的数字：由附带的运行重算 ----------
def _lesson_script(name: str):
    """本节目录里的一个脚本（draws_needed.py、tiny_on_off.py），当模块读进来。"""
    spec = importlib.util.spec_from_file_location(name, LESSON / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _draws_needed():
    return _lesson_script("draws_needed")


def test_lesson_numbers_come_from_the_shipped_runs():
    """第 1 节两张表里的每个数 == draws_needed.py 从 real_recipe/ 的 metrics.jsonl 算出的（按表里的位数）。"""
    report = _draws_needed().report()
    text = (LESSON / "README.md").read_text(encoding="utf-8")
    for name, r in report.items():
        first = re.search(
            rf"^\| {re.escape(name)} \| ([\d.]+) \| ([\d.]+)–([\d.]+) \| ([\d.]+) \|$", text, re.M
        )
        assert first, f"L2.10 第 1 节的第一张表缺 {name} 这一行"
        want = [r["zero_std_mean"], r["zero_std_min"], r["zero_std_max"]]
        assert [float(x) for x in first.groups()[:3]] == [round(v, 3) for v in want], name
        assert float(first.group(4)) == round(r["informative_mean"], 2), name
        cost = re.search(
            rf"^\| {re.escape(name)} \| ([\d.]+) / ([\d.]+) \| ([\d.]+) / ([\d.]+) \|$", text, re.M
        )
        assert cost, f"L2.10 第 1 节的第二张表缺 {name} 这一行"
        plans = r["plans"]
        want = [plans[1]["draws"], plans[1]["short"], plans[2]["draws"], plans[2]["short"]]
        assert [float(x) for x in cost.groups()] == [
            round(v, d) for v, d in zip(want, (2, 3, 2, 3))
        ]
    # 附带运行的 zero_std_frac 均值：issue 45 引用的三个数
    means = [
        round(report[n]["zero_std_mean"], 3) for n in ("recipe-s0", "recipe-s1", "recipe100-s2")
    ]
    assert means == [0.426, 0.439, 0.445]


def test_plan_is_exact_on_a_two_point_distribution():
    """plan() 的卷积：每批有信号的组数一半是 2、一半是 4，P = 4 时手算得到的值。"""
    plan = _draws_needed().plan
    got = plan([2, 4], 4, extra=1)
    # 第一批 4 组（概率 1/2）就够；否则第二批 2 或 4，总数 4 或 6，都够
    assert (
        got["draws"] == pytest.approx(1.5) and got["short"] == 0 and got["kept"] == pytest.approx(4)
    )
    got = plan([2, 4], 4, extra=0)
    assert (
        got["draws"] == 1 and got["short"] == pytest.approx(0.5) and got["kept"] == pytest.approx(3)
    )


# ---------------------------------------------------------------- 第 1.1 节：--skip-zero-adv 在 H100 上 ------------------
SKIP = LESSON / "skip_h100"


def _skip_record(which: str) -> dict:
    import json

    record = json.loads((SKIP / which / "train_part.json").read_text(encoding="utf-8"))
    assert "H100" in record["env"]["device"] and "随机权重" in record["env"]["model"]
    return {v["name"]: v for v in record["ours"]}


def test_the_skip_ratio_is_the_shipped_h100_measurement():
    """第 1.1 节的表和比值 == skip_h100/alone/train_part.json；第一次（CPU 上有重活）那次的 0.80 和 GPU 忙的比例也是。"""
    import statistics

    text = (LESSON / "README.md").read_text(encoding="utf-8")
    ours = _skip_record("alone")
    base, skip = ours["z44"], ours["skip+z44"]
    assert base["options"]["skip"] == 0 and skip["options"]["skip"] == 1
    assert base["zero_std_frac"] == skip["zero_std_frac"] == 7 / 16
    assert base["train_s"] == statistics.median(base["all_s"]) and len(base["all_s"]) == 5

    def busy(v):
        return f"{v['profile']['busy_ms'] / v['profile']['wall_ms']:.0%}"

    for label, v in (("不跳过（`z44`）", base), ("跳过（`skip+z44`）", skip)):
        row = (
            f"| {label} | {v['train_s']:.2f} s | {v['phases']['fwd']:.2f} s | "
            f"{v['phases']['bwd']:.2f} s | {busy(v)} |"
        )
        assert row in text, f"L2.10 第 1.1 节的表和附带的测量对不上，应该写：{row}"
    ratios = [skip["train_s"] / base["train_s"]] + [
        skip["phases"][k] / base["phases"][k] for k in ("fwd", "bwd")
    ]
    row = "| 比值 | **{:.2f}** | {:.2f} | {:.2f} | |".format(*ratios)
    assert row in text, f"L2.10 第 1.1 节的比值应该写：{row}"
    assert ratios[0] <= 0.75, "issue 45 的目标：跳过之后训练部分 ≤ 0.75 倍"
    rows = 128 - 7 * 8
    assert f"从 128 减到 {rows}（{rows / 128:.2f} 倍），时间跟着降到 {ratios[0]:.2f} 倍" in text
    first = _skip_record("beside_cpu_load")
    assert f"给的是 {first['skip+z44']['train_s'] / first['z44']['train_s']:.2f} 倍" in text
    assert f"从 {busy(base)} 掉到 {busy(first['z44'])}" in text
    idle = 1 - base["profile"]["busy_ms"] / base["profile"]["wall_ms"]
    assert 0.3 <= idle < 0.4 and "本来就有三成多的时间 GPU 在等 CPU" in text
    log = (SKIP / "beside_cpu_load" / "box_output.txt").read_text(encoding="utf-8")
    seconds = re.search(r"^convert (\d+)s$", log, re.M)[1]
    assert f"机器上打印的是 {seconds} s" in text
    iters = [len(_skip_record(w)["z44"]["all_s"]) for w in ("beside_cpu_load", "alone")]
    assert f"它每个变体只计时 {iters[0]} 步，第二次是 {iters[1]} 步" in text
    l207 = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    assert f"训练部分是不跳过的 {ratios[0]:.2f} 倍" in l207


def test_the_whole_step_estimate_uses_the_page_timing():
    """第 1.1 节「换算到整步」：L2.07 第 6.5 节 H100 上一步的 rollout 和训练（hw-mb8-s2），训练部分乘以实测比值；
    真模型运行里全相同的组每步几组（real_recipe 的三次运行，按 16 组折算）。"""
    import statistics

    from common.run.metrics import read_metrics

    text = re.sub(r"\n(?!\n)\s*", "", (LESSON / "README.md").read_text(encoding="utf-8"))
    timing = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "gpu_record" / "hw-mb8-s2"
    rows = [r for r in read_metrics(timing / "metrics.jsonl") if r["step"] > 2]
    rollout = statistics.median(r["rollout_s"] for r in rows)
    train = statistics.median(r["train_s"] for r in rows)
    ours = _skip_record("alone")
    ratio = ours["skip+z44"]["train_s"] / ours["z44"]["train_s"]
    step = rollout + train * round(ratio, 2)
    quote = (
        f"一步 rollout {rollout:.2f} s、训练 {train:.2f} s；训练部分按 {ratio:.2f} 倍算，一步约 "
        f"{rollout:.2f} + {train:.2f} × {ratio:.2f} ≈ {step:.1f} s，是原来的 "
        f"{step / (rollout + train):.2f} 倍"
    )
    assert quote in text, f"L2.10 第 1.1 节的整步推算应该写：{quote}"
    report = _draws_needed().report()
    lo = min(round(16 * r["zero_std_min"]) for r in report.values())
    hi = max(round(16 * r["zero_std_max"]) for r in report.values())
    assert f"全相同的组每步在 {lo}–{hi} 组之间变" in text


# ---------------------------------------------------------------- 第 1.2 节：tiny 上开和关 ------------------------------------
def test_the_tiny_on_off_table_is_the_shipped_runs():
    """第 1.2 节的表、区间、最小的 p、批数和 zero_std_frac 的范围、两个对照的例子：tiny_on_off.py 从附带的运行算出的。"""
    from common.gsm8k.paired_stats import signed

    m = _lesson_script("tiny_on_off")
    rep = m.report()
    text = (LESSON / "README.md").read_text(encoding="utf-8")
    flat = re.sub(r"\n(?!\n)\s*", "", text)

    def p_text(p):
        return "1" if p == 1 else f"{p:.2g}"

    for seed, r in rep.items():
        a, d = r["acc"], r["on_minus_off"][100]
        pairs = " | ".join(f"{a['off'][s]:.3f} / {a['on'][s]:.3f}" for s in (10, 20, 100))
        row = (
            f"| {seed} | {r['batches']:.2f} / {r['kept']:.2f} | {pairs} | "
            f"{signed(d['diff'])} ± {d['se']:.3f}，p = {p_text(d['p'])} | "
            f"{a['off-ctl'][100]:.3f} / {a['on-ctl'][100]:.3f} |"
        )
        assert row in text, f"L2.10 第 1.2 节的表和 tiny_ds/ 对不上，应该有：{row}"
        assert r["short_steps"] == 0 and r["kept"] == r["P"]
    diffs = [
        (d["diff"], d["p"], s, st) for s, r in rep.items() for st, d in r["on_minus_off"].items()
    ]
    lo, hi = min(x[0] for x in diffs), max(x[0] for x in diffs)
    assert f"「开 − 关」在 {signed(lo)} 到 {signed(hi)} 之间" in flat
    p_min = min(diffs, key=lambda x: x[1])
    assert p_min[1] >= 0.05, "课文说没有一个 p < 0.05"
    assert f"最小的是 seed {p_min[2]} 第 {p_min[3]} 步的 {p_min[1]:.2g}" in flat
    batches = sorted(r["batches"] for r in rep.values())
    assert f"平均 {batches[0]:.2f}–{batches[-1]:.2f} 批" in flat
    zero = sorted(r["off_zero_std"] for r in rep.values())
    assert f"平均 {zero[0]:.0%}–{zero[-1]:.0%} 全相同" in flat
    assert round(16 * (1 - sum(zero) / len(zero))) == 12 and "16 组里也有 12 组上下有信号" in flat
    acc0, acc1 = rep[0]["acc"], rep[1]["acc"]
    assert f"seed 0 第 40 步 {acc0['on-ctl'][40]:.3f} 对 {acc0['off-ctl'][40]:.3f}" in flat
    assert f"seed 1 第 100 步 {acc1['on-ctl'][100]:.3f} 对 {acc1['off-ctl'][100]:.3f}" in flat
    assert m.STEPS == (10, 20, 40, 100) and "四个评估步（第 10、20、40、100 步）" in flat
    import json

    provs = [json.loads((f / "config.json").read_text())["provenance"] for f in (LESSON / "tiny_ds").iterdir()]  # fmt: skip
    ((commit, dirty),) = {(p["git"]["commit"][:7], p["git"]["dirty"]) for p in provs}
    ((torch_version),) = {p["libraries"]["torch"] for p in provs}
    assert dirty is False and torch_version.endswith("+cpu"), (
        "七个运行同一个干净的 commit、CPU 上跑的"
    )
    assert f"commit {commit}，没有改动，CPU 上 torch {torch_version.removesuffix('+cpu')}" in flat


def test_the_off_side_reproduces_on_this_code():
    """第 1.2 节：关的那一边借 L2.08 的 tiny_runs/seed0；现在的代码重跑的 seed 0 除计时、显存以外逐位相同。"""
    from common.run.metrics import deterministic_part, read_metrics

    def rows(path):
        return [deterministic_part(r) for r in read_metrics(path)]

    rerun = rows(LESSON / "tiny_ds" / "off-s0" / "metrics.jsonl")
    shipped = rows(ROOT / "L2_algorithm" / "08_reading_the_curves" / "tiny_runs" / "seed0" / "metrics.jsonl")  # fmt: skip
    assert len(rerun) == len(shipped) == 100
    assert rerun == shipped, (
        "重跑的 seed 0 和 L2.08 附带的不一样：tiny 的默认运行变了，第 1.2 节的配对不再成立"
    )


# ------------------------------------------- 第 1.3 节：真模型上开和关（H100），由附带的运行重算 ------
def _tar_times(seed: int) -> dict[str, int]:
    """timeline-sS.txt 里带回的每个文件的修改时刻（机器上的时钟），换成当天的秒。"""
    out = {}
    text = (LESSON / "gpu_runs" / f"timeline-s{seed}.txt").read_text(encoding="utf-8")
    for m in re.finditer(r"^\d+ \S+ (\d\d):(\d\d):(\d\d) (\S+)$", text, re.M):
        h, mi, sec, name = m.groups()
        out[name] = int(h) * 3600 + int(mi) * 60 + int(sec)
    return out


def _mm_ss(seconds: int) -> str:
    return f"{seconds // 60} 分 {seconds % 60} 秒"


def test_the_gpu_on_off_section_is_the_shipped_runs():
    """第 1.3 节的表、开 − 关、代价、梯度范数和 KL、用时：gpu_on_off.py 和 timeline-s0.txt 从附带的文件算出的。"""
    import json

    from common.gsm8k.paired_stats import binomial_se, signed

    m = _lesson_script("gpu_on_off")
    rep = m.report()
    assert sorted(rep) == [0], "第 1.3 节只写了 seed 0；多了 seed 就要改课文"
    r = rep[0]
    text = (LESSON / "README.md").read_text(encoding="utf-8")
    flat = re.sub(r"\n(?!\n)\s*", "", text)
    for name in ("off", "on"):
        x = r["runs"][name]
        assert x["n"] == {0: 1319, 50: 500, 100: 1319}
        g50, g100 = x["gain"][50], x["gain"][100]
        row = (
            f"| {name}-s0 | {x['acc'][0]:.3f} / {x['start_on'][50]:.3f} | "
            f"{x['acc'][50]:.3f}（{signed(g50['diff'])}，p = {g50['p']:.2g}） | "
            f"{x['acc'][100]:.3f}（{signed(g100['diff'])}，p = {g100['p']:.2g}） | "
            f"{x['kl'][50]:.3f} / {x['kl'][100]:.3f} | "
            f"{x['entropy'][0]:.3f} → {x['entropy'][1]:.3f} | {x['truncation']:.3f} |"
        )
        assert row in text, f"L2.10 第 1.3 节的表和 gpu_runs/ 对不上，应该有：{row}"
    assert (
        f"（{r['runs']['off']['start_on'][50]:.3f}，不是 {r['runs']['off']['acc'][0]:.3f}）" in flat
    )
    d50, d100 = r["on_minus_off"][50], r["on_minus_off"][100]
    want = (
        f"第 50 步 {signed(d50['diff'])} ± {d50['se']:.3f}（p = {d50['p']:.2g}），第 100 步 "
        f"{signed(d100['diff'])} ± {d100['se']:.3f}（{d100['up']} 题开对关错、{d100['down']} 题关对开错，"
        f"p = {d100['p']:.2g}）"
    )
    assert want in flat
    assert (
        f"+0.016 的标准误是 {d100['se']:.3f}，p = {d100['p']:.2g}；第 50 步的 +0.036 也只有 p = {d50['p']:.2g}"
        in flat
    )
    # 代价
    assert f"每步平均采 {r['batches']:.2f} 批" in flat and r["short_steps"] == 0
    assert "100 步里没有一步凑不够 16 组" in flat and r["P"] == 16
    assert f"每步丢 {r['dropped']:.1f} 组" in flat and f"另有 {r['surplus']:.1f} 组虽有信号" in flat
    plans = _draws_needed().report()["recipe-s0"]
    assert f"第 1 节用 recipe-s0 的分布估的是 {plans['plans'][2]['draws']:.2f}" in flat
    assert (
        f"`zero_std_frac` 均值 {r['off_zero_std']:.3f}，和 recipe-s0 的 {plans['zero_std_mean']:.3f}"
        in flat
    )
    sh = r["shared"]
    on_t, off_t = sh["on"], sh["off"]
    assert f"开的前 {on_t['steps']} 步，关的 {off_t['steps']} 步" in flat
    assert (
        f"每步 rollout {on_t['rollout_s']:.2f} s + 补采 {on_t['extra_rollout_s']:.2f} s + "
        f"训练 {on_t['train_s']:.2f} s = {on_t['total_s']:.2f} s" in flat
    )
    assert (
        f"关的一边 {off_t['rollout_s']:.2f} s + 0 + {off_t['train_s']:.2f} s = {off_t['total_s']:.2f} s"
        in flat
    ) and off_t["extra_rollout_s"] == 0
    assert f"一步贵 {on_t['total_s'] / off_t['total_s']:.2f} 倍" in flat
    assert f"代价按步算是 {on_t['total_s'] / off_t['total_s']:.2f} 倍" in flat
    # 梯度范数、裁剪、KL
    on, off = r["runs"]["on"], r["runs"]["off"]
    assert f"梯度范数平均 {on['grad_norm']:.2f}（关的 {off['grad_norm']:.2f}）" in flat
    assert f"{on['clipped']:.0%} 的步超过 `--grad-clip 1.0`" in flat and off["clipped"] == 0
    assert f"（第 50 步 {on['kl'][50]:.3f} 对 {off['kl'][50]:.3f}）" in flat
    assert f"第 100 步还降到了 {on['kl'][100]:.3f}（关的 {off['kl'][100]:.3f}）" in flat
    assert on["kl"][100] < on["kl"][50]
    G = 16
    informative = [round(G * (1 - x["zero_std_frac"])) for x in off["rows"]]
    assert f"每步从 {min(informative)} 组到 {max(informative)} 组不等" in flat
    # 用时：tqdm 的最后一帧，和机器上的文件时刻
    timeline = (LESSON / "gpu_runs" / "timeline-s0.txt").read_text(encoding="utf-8")
    tq = dict(re.findall(r"100/100 \[(\d+):(\d+)<", timeline))
    assert list(tq.items()) == [("12", "26"), ("18", "10")]
    assert "关的 100 步用了 12 分 26 秒" in flat and "开的用了 18 分 10 秒" in flat
    t = _tar_times(0)
    assert t["runs/off-s0/eval_before.json"] == t["runs/on-s0/eval_before.json"], (
        "shared_parts 假定两条的 elapsed_s 从同一秒起算"
    )
    total = t["runs/on-s0/eval_after.json"] - t["runs/on-s0/config.json"]
    shared = t["runs/off-s0/eval_after.json"] - t["runs/on-s0/config.json"]
    assert f"一共 {_mm_ss(total)}" in flat and f"其中前 {_mm_ss(shared)}和关的那条同卡" in flat
    # 标准误、出处
    assert f"1319 题上一个正确率的标准误约 ±{binomial_se(0.3, 1319):.3f}" in flat
    assert f"500 题是 ±{binomial_se(0.3, 500):.3f}" in flat
    for name in ("off-s0", "on-s0"):
        prov = json.loads((LESSON / "gpu_runs" / name / "config.json").read_text())["provenance"]
        assert prov["git"] == {"commit": prov["git"]["commit"], "dirty": False}
        assert f"commit {prov['git']['commit'][:7]}，没有改动" in flat
        assert prov["libraries"]["torch"] == "2.11.0" and "H100" in prov["device"]
        assert "--final-heldout" in prov["command"] and "--eval-kl" in prov["command"]
        assert ("--dynamic-sampling" in prov["command"]) == (name == "on-s0")


def test_compare_runs_reads_the_final_heldout_runs():
    """--final-heldout 1319、训练中 500 题的运行：compare_runs.py 按每步评过的题配对，和 gpu_on_off.py 的数一样；
    开了 dynamic sampling 的一边只比前 P 道候选题。"""
    spec = importlib.util.spec_from_file_location(
        "compare_runs_l2_10", ROOT / "L2_algorithm" / "08_reading_the_curves" / "compare_runs.py"
    )
    C = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(C)
    on, off = (C.Run(LESSON / "gpu_runs" / f"{k}-s0") for k in ("on", "off"))
    assert on.sizes == off.sizes == (1319, 500)
    rep = _lesson_script("gpu_on_off").report()[0]
    for step in (50, 100):
        d = C.difference(on, off, step, "greedy")
        assert d == rep["on_minus_off"][step]
    lines = C.fairness(on, off)
    assert "第 1–100 步每一步的前 16 道候选题都相同" in lines[1]
    assert "dynamic_sampling" in lines[0]
    printed = C.report([(on, off)], 50)
    assert "| `on-s0` | 50 | 500 | 0.364 → 0.364 |" not in printed  # 训练前也只取前 500 道
    start500 = sum(on.values(0, "greedy", 500)) / 500
    assert f"| `on-s0` | 50 | 500 | {start500:.3f} → 0.364 |" in printed
    assert "训练中的评估用其中的前 500 道" in printed


def test_the_first_1319_question_run_is_quoted_from_its_files():
    """README、L2.07 第 6.6 节、L2.08 第 6.6 节引用的 off-s0 / on-s0 的数：从附带的运行重算。"""
    from common.gsm8k.paired_stats import binomial_se, signed

    r = _lesson_script("gpu_on_off").report()[0]
    off, on = r["runs"]["off"], r["runs"]["on"]

    def gain(x):
        g = x["gain"][100]
        return f"{x['acc'][0]:.3f} → {x['acc'][100]:.3f}", f"{signed(g['diff'])}", f"{g['p']:.2g}"

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (a0, a1, ap), (b0, b1, bp) = gain(off), gain(on)
    assert f"默认的配方 {a0}（{a1}，p = {ap}）" in readme
    assert f"加 `--dynamic-sampling 2` {b0}（{b1}，p = {bp}）" in readme
    d = r["on_minus_off"][100]
    assert f"开 − 关 {signed(d['diff'])}（p = {d['p']:.2g}）" in readme
    assert (
        f"每步采 {r['batches']:.2f} 批 rollout" in readme
        and f"{on['clipped']:.0%} 的步被梯度裁剪" in readme
    )
    cost = r["shared"]["on"]["total_s"] / r["shared"]["off"]["total_s"]
    assert f"按步算贵 {cost:.2f} 倍" in readme
    abstract = (
        f"the recipe went from {off['acc'][0]:.3f} to {off['acc'][100]:.3f} in 100 steps (p = {ap}) "
        f"and, with DAPO's dynamic sampling, to {on['acc'][100]:.3f} (p = {bp}); the difference "
        f"between the two ({signed(d['diff']).replace(chr(0x2212), '-')}, p = {d['p']:.2g})"
    )
    assert abstract in readme, f"README 的英文摘要应该写：{abstract}"
    l207 = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    assert f"{a0}，**{a1}**（p = {ap}）" in l207
    assert f"从 ±{binomial_se(0.3, 500):.3f} 降到 ±{binomial_se(0.3, 1319):.3f}" in l207
    t = _tar_times(0)
    first = t["runs/off-s0/eval_before.json"] - t["runs/off-s0/config.json"]
    assert f"到训练前的 1319 题评完（含加载模型）是 {first} s" in l207
    l208 = (ROOT / "L2_algorithm" / "08_reading_the_curves" / "README.md").read_text(
        encoding="utf-8"
    )
    assert f"{a1}（逐题配对的检验在 L2.10 第 1.3 节），落在「三分之二」的那个区间里" in l208


def test_adamw_ignores_a_constant_gradient_scale():
    """第 1.3 节的论据：AdamW 的更新 m/√v 对梯度整体乘一个常数几乎不变（ε 远小于梯度时），
    一步步的梯度方向乱跳时走得比方向稳时近。课程的 AdamW 设置（betas 0.9 / 0.99），几十个参数、20 步。"""
    from common.model.optim import make_optimizer

    def walk(grads, scale):
        w = torch.zeros(64, requires_grad=True)
        opt = make_optimizer([w], "adamw", lr=1e-2)
        for g in grads:
            w.grad = g * scale
            opt.step()
        return w.detach()

    gen = torch.Generator().manual_seed(0)
    signal = torch.randn(64, generator=gen) * 3e-5  # 梯度的量级和真模型上每个参数的相近
    steady = [signal + 0.3 * signal.abs() * torch.randn(64, generator=gen) for _ in range(20)]
    noisy = [signal + 3.0 * signal.abs() * torch.randn(64, generator=gen) for _ in range(20)]
    a, b = walk(steady, 1.0), walk(steady, 1 / 0.58)  # 0.58 = 1 − 0.421：关的一边有信号的组的比例
    # 不完全相同只因为 ε（1e-8，和 √v ≈ 3e-5 比）：差在 1% 以内
    assert (a - b).norm() < 0.01 * a.norm(), "整体缩放梯度明显改变了 AdamW 的更新"
    assert walk(steady, 1.0).norm() > 2 * walk(noisy, 1.0).norm(), "方向稳的梯度应该走得更远"


def test_gpu_on_off_reads_controls_when_they_are_shipped(tmp_path, monkeypatch):
    """下一次 GPU 会话把对照（off-ctl-sS、on-ctl-sS）放进 gpu_runs/：gpu_on_off.py 自己读到，算「运行 − 对照」。
    这里拿附带的目录当假的对照（差应该是 0），只核对读法。"""
    import shutil

    m = _lesson_script("gpu_on_off")
    for name in ("off-s0", "on-s0"):
        shutil.copytree(LESSON / "gpu_runs" / name, tmp_path / name)
    shutil.copytree(LESSON / "gpu_runs" / "on-s0", tmp_path / "on-ctl-s0")
    monkeypatch.setattr(m, "RUNS", tmp_path)
    rep = m.report()[0]
    assert list(rep["minus_control"]) == ["on"] and "on-ctl" in rep["runs"]
    assert all(
        d["diff"] == 0 and d["up"] == d["down"] == 0 for d in rep["minus_control"]["on"].values()
    )
    assert rep["on_minus_off"] == m.report()[0]["on_minus_off"]
