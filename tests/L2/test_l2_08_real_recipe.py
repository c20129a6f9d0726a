"""L2.08 第 6.2–6.6 节：现在的 GPU 配方在真模型上的三个 seed 和它们的对照（real_recipe/），以及第 86 步的 NaN。

课文里的每个数都由 compare_runs.py、real_run.py、cudnn_nan.py 的函数从仓库附带的文件重算一遍，确认对得上；
presets.toml 的 [recipe.gpu] 就是这些运行用的配方。
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "L2_algorithm" / "08_reading_the_curves"
RUNS = HERE / "real_recipe"
LESSON = (HERE / "README.md").read_text(encoding="utf-8")
PRESETS = ROOT / "L2_algorithm" / "07_grpo_train" / "presets.toml"
NAMES = ("recipe-s0", "control-s0", "recipe-s1", "control-s1")  # 第一批：H200，四个进程同卡
SECOND = ("control100-s0", "control100-s1", "recipe-s2", "control-s2")  # 第二批：H100，两个进程同卡
ALL = NAMES + SECOND
SEGMENT_ORDER = ("recipe-s0", "control-s0", "control100-s0", "recipe-s1", "control-s1",
                 "control100-s1", "recipe-s2", "control-s2")  # fmt: skip


def _load(name):
    spec = importlib.util.spec_from_file_location(f"l2_08_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


C = _load("compare_runs")
R = _load("real_run")
N = _load("cudnn_nan")


def _in_lesson(text: str, where: str) -> None:
    assert text in LESSON, f"L2.08 {where} 和附带的运行对不上，应该写：{text}"


def _rows(name: str) -> dict[int, dict]:
    lines = (RUNS / name / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


def _run(name: str):
    return C.Run(RUNS / name)


def _pairs50():
    return [(_run(f"recipe-s{s}"), _run(f"control-s{s}")) for s in (0, 1, 2)]


def _pairs100():
    return [(_run(f"recipe-s{s}"), _run(f"control100-s{s}")) for s in (0, 1)]


def _block(tag: str) -> str:
    return LESSON.split(f"<!-- {tag}:begin -->")[1].split(f"<!-- {tag}:end -->")[0]


def test_the_folders_are_the_recipe_and_hold_no_checkpoint():
    recipe = tomllib.loads(PRESETS.read_text(encoding="utf-8"))["recipe"]["gpu"]
    shared = ("prompts_per_step", "group_size", "lr", "warmup_steps", "beta", "aggregation",
              "temperature", "max_new_tokens", "n_heldout", "top_p", "data")  # fmt: skip
    for name in ALL:
        config = json.loads((RUNS / name / "config.json").read_text(encoding="utf-8"))
        for key in shared:
            assert config[key] == recipe[key], f"{name} 的 {key} 不是 presets.toml 的 [recipe.gpu]"
        assert config["reward"] == ("correctness" if name.startswith("recipe") else "shuffled")
        assert config["seed"] == int(name[-1])
        device = config["provenance"]["device"]
        assert device.startswith("NVIDIA H200" if name in NAMES else "NVIDIA H100"), name
        assert not list((RUNS / name).glob("*.pt")), f"{name} 里不该附 checkpoint"
    for name in SECOND:
        config = json.loads((RUNS / name / "config.json").read_text(encoding="utf-8"))
        assert config["provenance"]["git"] == {
            "commit": "8991d54851e0e5cd33d1a415cb1c108bad8510d6",
            "dirty": False,
        }, "第 6.2 节说第二批是 commit 8991d54（干净）"
        assert config["steps"] == (100 if name.startswith("control100") else 50)
        assert len(_rows(name)) == config["steps"]
    _in_lesson("commit 8991d54（干净，`provenance` 里记着）", "第 6.2 节")
    before = {(RUNS / n / "answers_before.jsonl").read_bytes() for n in ("recipe-s0", "recipe-s1")}
    assert len(before) == 1, "两个运行附带的 answers_before.jsonl 应该逐字节相同（同一份起点）"


def test_the_pasted_comparisons_are_what_the_tool_prints():
    printed = C.report(_pairs50(), 50).replace("## ", "#### ")
    assert _block("real-compare").strip() == printed.strip(), (
        "L2.08 第 6.3 节第 50 步的 compare_runs.py 输出和附带的运行对不上"
    )
    printed = C.report(_pairs100(), 100).replace("## ", "#### ")
    assert _block("real-compare-100").strip() == printed.strip(), (
        "L2.08 第 6.3 节第 100 步的 compare_runs.py 输出和附带的运行对不上"
    )
    for run, control in _pairs50() + _pairs100():
        assert C.fairness(run, control)[0].endswith("其余设置相同")


def test_the_summary_numbers_come_from_the_runs():
    pairs = _pairs50()
    for run, control in pairs:
        vs = C.difference(run, control, 50, "greedy")
        _in_lesson(f"{C.signed(vs['diff'])}", "第 6 节开头")
        _in_lesson(f"{vs['p']:.3g}", "第 6 节开头")
        _in_lesson(f"{control.mean(50, 'greedy'):.3f}", "第 6 节开头")
    diffs = [C.difference(r, c, 50, "greedy")["diff"] for r, c in pairs]
    gains, moves = (
        [C.paired(x.values(0, "greedy"), x.values(50, "greedy"))["diff"] for x in xs]
        for xs in ([r for r, _ in pairs], [c for _, c in pairs])
    )
    _in_lesson(f"涨了 {'、'.join(map(C.signed, gains))}", "第 6.3 节")
    _in_lesson(f"对照同时在往下走（{'、'.join(map(C.signed, moves))}）", "第 6.3 节")
    _in_lesson(f"均值 {C.signed(statistics.fmean(diffs))}", "第 6 节开头")
    for run, late in _pairs100():
        at100 = C.paired(run.values(0, "greedy"), run.values(100, "greedy"))
        assert f"{run.mean(100, 'greedy'):.3f}" in LESSON
        _in_lesson(f"{C.signed(at100['diff'])}", "第 6 节开头")
        _in_lesson(f"{at100['p']:.3g}", "第 6 节开头")
        _in_lesson(f"{late.mean(100, 'greedy'):.3f}", "第 6 节开头")
    r0, r1 = (C.paired(r.values(0, "greedy"), r.values(100, "greedy")) for r, _ in _pairs100())
    (a0, c0), (a1, c1) = _pairs100()
    _in_lesson(
        f"0.290 → {a0.mean(100, 'greedy'):.3f} 和 0.290 → {a1.mean(100, 'greedy'):.3f}",
        "第 6 节开头",
    )
    late = [C.difference(r, c, 100, "greedy")["diff"] for r, c in _pairs100()]
    _in_lesson(f"的 {C.signed(late[0])} 和 {C.signed(late[1])}", "第 6 节开头")
    drops = [
        -C.paired(c.values(0, "greedy"), c.values(100, "greedy"))["diff"] for _, c in _pairs100()
    ]
    _in_lesson(
        f"seed 0 的 {C.signed(late[0])} 里有 {drops[0]:.3f} 是对照掉下去，"
        f"seed 1 的 {C.signed(late[1])} 里是 {drops[1]:.3f}",
        "第 6 节开头",
    )
    _in_lesson(
        f"{C.signed(late[0])} 和 {C.signed(late[1])} 里有 {drops[0]:.3f} 和 {drops[1]:.3f} 是对照掉下去",
        "第 6.3 节",
    )
    _in_lesson(f"均值 {C.signed((r0['diff'] + r1['diff']) / 2)}", "第 6.6 节")
    gap = abs(a0.mean(100, "greedy") - a1.mean(100, "greedy"))
    _in_lesson(f"运行第 100 步差 {gap:.3f}", "第 6.3 节")
    _in_lesson(
        f"0.290 → {c0.mean(50, 'greedy'):.3f}（第 50 步）→ {c0.mean(100, 'greedy'):.3f}（第 100 步）",
        "第 6.3 节",
    )
    drop = C.paired(c0.values(0, "greedy"), c0.values(100, "greedy"))
    _in_lesson(f"翻对 {drop['up']} 题、翻错 {drop['down']} 题", "第 6.3 节")
    d0, d1 = (C.paired(c.values(0, "greedy"), c.values(100, "greedy")) for _, c in _pairs100())
    _in_lesson(
        f"一个 seed 没有明显变化（{C.signed(d1['diff'])}，p = {d1['p']:.3g}），"
        f"一个把模型推坏了（{C.signed(d0['diff'])}）",
        "第 6.6 节",
    )
    presets = PRESETS.read_text(encoding="utf-8")
    assert f"{C.signed(r0['diff'])} / {C.signed(r1['diff'])}" in presets, "presets.toml 的依据"
    assert f"p = {r0['p']:.2g} / {r1['p']:.2g}" in presets, "presets.toml 的依据"
    assert " / ".join(C.signed(x) for x in diffs) in presets, "presets.toml 的依据"


def test_the_same_seed_on_two_gpus():
    """第 6.3 节「同一个 seed，换一张 GPU」：两批的对照在第 50 步逐题配对。"""
    texts = []
    for s in (0, 1):
        first, second = _run(f"control-s{s}"), _run(f"control100-s{s}")
        assert first.prompt_ids() == {k: v for k, v in second.prompt_ids().items() if k <= 50}
        d = C.difference(first, second, 50, "greedy")
        texts.append(f"{C.signed(d['diff'])} ± {d['se']:.3f}（p = {d['p']:.3g}）")
    _in_lesson(f"差 {texts[0]}和 {texts[1]}", "第 6.3 节")
    h200 = [_run(f"control-s{s}").mean(50, "greedy") for s in (0, 1)]
    h100 = [_run(f"control100-s{s}").mean(50, "greedy") for s in (0, 1)]
    _in_lesson(f"H200 上是 {h200[0]:.3f} 和 {h200[1]:.3f}", "第 6.3 节")
    _in_lesson(f"H100 上是 {h100[0]:.3f} 和 {h100[1]:.3f}", "第 6.3 节")


def test_clipping_never_acted_in_these_runs():
    """第 6.3 节：每批只更新一次，ratio 恒为 1，clip 的偏差（Spurious Rewards 的解释）在这里不起作用。"""
    for name in ALL:
        config = json.loads((RUNS / name / "config.json").read_text(encoding="utf-8"))
        assert config["num_iterations"] == 1
        assert all(r["clip_fraction"] == 0 for r in _rows(name).values()), name
    _in_lesson("`clip_fraction` 每一步都是 0", "第 6.3 节")


def test_the_control_that_fell_wrote_code():
    """第 6.3 节：seed 0 的对照第 100 步在写代码块、编造运行结果。"""
    before = R.answers(RUNS / "recipe-s0", "before")
    after0 = R.answers(RUNS / "control100-s0", "after")
    after1 = R.answers(RUNS / "control100-s1", "after")
    table = R.habit_columns([("训练前", before), ("对照 seed 0，第 100 步", after0),
                             ("对照 seed 1，第 100 步", after1)])  # fmt: skip
    _in_lesson(table, "第 6.3 节的写法表")

    def code(row):
        return "```" in row["completion"]

    def right(rows):
        return sum(r["reward"] > 0 for r in rows) / len(rows)

    with_code = [r for r in after0 if code(r)]
    n_output = sum("```output" in r["completion"] for r in after0)
    _in_lesson(
        f"从 {sum(map(code, before))} 题变成 {len(with_code)} 题，其中 {n_output} 题", "第 6.3 节"
    )
    _in_lesson(f"这 {len(with_code)} 个回答的正确率只有 {right(with_code):.3f}", "第 6.3 节")
    down = [i for i in range(len(before)) if before[i]["reward"] > 0 and after0[i]["reward"] <= 0]
    coded = sum(code(after0[i]) for i in down)
    coded_before = sum(code(before[i]) for i in down)
    _in_lesson(
        f"翻错的 {len(down)} 题里，{coded} 题训练后的回答带代码块（训练前只有 {coded_before} 题带）",
        "第 6.3 节",
    )
    plain_before = right([r for r in before if not code(r)])
    plain_after = right([r for r in after0 if not code(r)])
    _in_lesson(f"正确率从 {plain_before:.3f} 掉到 {plain_after:.3f}", "第 6.3 节")
    _in_lesson(f"代码块从 {sum(map(code, before))} 题变成 {sum(map(code, after1))} 题", "第 6.3 节")
    eval_after = json.loads(
        (RUNS / "control100-s0" / "eval_after.json").read_text(encoding="utf-8")
    )
    assert eval_after["step"] == 100 and abs(eval_after["accuracy"] - right(after0)) < 1e-9


def _seg(name, key):
    rows = list(_rows(name).values())[:100]
    return [statistics.fmean(r[key] for r in rows[i : i + 10]) for i in range(0, len(rows), 10)]


def test_reward_segments_and_curve_claims():
    rows = "\n".join(R.segment_row(RUNS / name) for name in SEGMENT_ORDER)
    _in_lesson(rows, "第 6.3 节的 reward 分段表")
    assert sorted(SEGMENT_ORDER) == sorted(ALL)
    e0, e1 = _seg("recipe-s0", "entropy"), _seg("recipe-s1", "entropy")
    _in_lesson(
        f"从 {e0[0]:.3f}、{e1[0]:.3f} 降到 91–100 步的 {e0[-1]:.3f}、{e1[-1]:.3f}", "第 6.3 节"
    )
    up, down = _seg("control100-s0", "entropy"), _seg("control100-s1", "entropy")
    i, j = up.index(max(up)), down.index(min(down))
    _in_lesson(
        f"一个在 {10 * i + 1}–{10 * i + 10} 步升到 {up[i]:.3f}、"
        f"一个在 {10 * j + 1}–{10 * j + 10} 步降到 {down[j]:.3f}",
        "第 6.3 节",
    )
    _in_lesson(
        f"41–50 步是 {_seg('control-s0', 'reward_mean')[4]:.3f} 和 "
        f"{_seg('control-s1', 'reward_mean')[4]:.3f}",
        "第 6.3 节",
    )
    _in_lesson(f"81–90 步落到 {_seg('control100-s0', 'reward_mean')[8]:.3f}", "第 6.3 节")
    lens = [v for n in ALL for v in _seg(n, "completion_len_mean")]
    _in_lesson(f"在 {min(lens):.0f}–{max(lens):.0f} token 之间", "第 6.3 节")
    trunc = [statistics.fmean(r["truncation_rate"] for r in _rows(n).values()) for n in ALL]
    _in_lesson(f"截断率**平均 {min(trunc):.1%}–{max(trunc):.1%}", "第 6.3 节")


def test_the_nan_section_is_the_measurement():
    result = json.loads((RUNS / "cudnn_nan.json").read_text(encoding="utf-8"))
    _in_lesson(N.summary_table(result), "第 6.4 节的表")
    old = result["old_run"]
    assert old["steps_width_64_mod_128"] == [86], (
        "旧运行前 100 步里宽度 ≡ 64 (mod 128) 的步应该只有第 86 步"
    )
    pw = old["steps"][85]["prompt_width"]
    _in_lesson(f"宽度就是 {pw} + 512 = {pw + 512}", "第 6.4 节")
    assert (pw + 512) % 128 == 64
    widths = json.loads((RUNS / "widths.json").read_text(encoding="utf-8"))
    total = 0
    for name in NAMES:
        rows = list(_rows(name).values())
        w = widths[name]["widths"]
        assert len(w) == len(rows)
        assert all(x > r["completion_len_max"] for x, r in zip(w, rows)), "宽度 = prompt + 最长回答"
        hits = [r["step"] for x, r in zip(w, rows) if x % 128 == 64]
        assert hits == widths[name]["steps_width_64_mod_128"]
        total += len(rows)
    n_hits = sum(len(widths[n]["steps_width_64_mod_128"]) for n in NAMES)
    _in_lesson(f"{total} 步里 {n_hits} 步宽度 ≡ 64 (mod 128)", "第 6.4 节")


def _med(name, lo, hi, key=None):
    rows = _rows(name)
    pick = lambda r: r[key] if key else r["rollout_s"] + r["train_s"]  # noqa: E731
    return statistics.median(pick(rows[s]) for s in range(lo, hi + 1))


def _eval_seconds(name: str) -> float:
    """第 50 步的评估用了多久：它落在第 51 步的 elapsed_s 里，减去第 51 步自己的 rollout 和训练。"""
    rows = _rows(name)
    return (
        rows[51]["elapsed_s"] - rows[50]["elapsed_s"] - rows[51]["rollout_s"] - rows[51]["train_s"]
    )


def _slower_on_h100(key: str) -> float:
    """同样两个进程同卡：H100 上 key（rollout_s / train_s）的中位数的均值 ÷ H200 上的。"""
    h100 = statistics.fmean(_med(*a, key) for a in H100_STEPS)
    return h100 / statistics.fmean(_med(*a, key) for a in H200_STEPS)


def _span(values):
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return lo if lo == hi else f"{lo}–{hi}"


H100_STEPS = (("control100-s0", 11, 99), ("control100-s1", 11, 99), ("recipe-s2", 11, 49),
              ("control-s2", 11, 49))  # fmt: skip
H200_STEPS = (("recipe-s0", 52, 99), ("recipe-s1", 52, 99))


def test_time_and_memory_figures():
    four = [_med(n, 11, 49) for n in NAMES]
    assert len({f"{x:.1f}" for x in four}) == 1, f"四个进程同卡时一步的中位数应该都一样：{four}"
    step4, ro4, tr4 = (_med("recipe-s0", 11, 49, k) for k in (None, "rollout_s", "train_s"))
    _in_lesson(f"一步的中位数 {step4:.1f} s（rollout {ro4:.1f} s、训练 {tr4:.1f} s）", "第 6.5 节")
    two = sorted(_med(n, 52, 99) for n in ("recipe-s0", "recipe-s1"))
    _in_lesson(f"（第 52–99 步）{two[0]:.1f}–{two[1]:.1f} s", "第 6.5 节")
    _in_lesson(f"四个进程 {step4:.1f} / 4 ≈ 两个进程 {two[1]:.1f} / 2 ≈ 3.5 s", "第 6.5 节")
    assert abs(step4 / 4 - 3.5) < 0.1 and abs(two[1] / 2 - 3.5) < 0.1
    for name in ("recipe-s0", "recipe-s1"):
        ev = _eval_seconds(name)
        assert 9 < ev < 11, f"{name} 第 50 步的评估用了 {ev:.1f} s，课文写的是约 10 s"
    peaks = {n: max(r["peak_vram_gb"] for r in _rows(n).values()) for n in ALL}
    run_peak = {
        f"{peaks[n]:.2f}" for n in ("recipe-s0", "recipe-s1", "control100-s0", "control100-s1")
    }
    assert len(run_peak) == 1, "跑过第 50 步评估的四个目录，显存峰值应该一样"
    low = sorted(peaks[n] for n in ("control-s0", "control-s1", "recipe-s2", "control-s2"))
    _in_lesson(f"两个跑到第 100 步的对照）{run_peak.pop()} GiB", "第 6.5 节")
    _in_lesson(f"只跑到第 50 步的四个目录 {low[0]:.2f}–{low[-1]:.2f} GiB", "第 6.5 节")
    for name in ("recipe-s0", "control100-s0"):  # 峰值第一次出现在第 50 步的评估之后
        top = f"{peaks[name]:.2f}"
        first = min(s for s, r in _rows(name).items() if f"{r['peak_vram_gb']:.2f}" == top)
        assert first == 51, (
            f"{name} 的显存峰值第一次出现在第 {first} 步，课文说是第 50 步的评估之后"
        )


def test_the_h100_timing_is_the_measurement():
    """第 6.5 节：同样两个进程同卡，H100 对 H200。"""
    h100 = [_med(*a) for a in H100_STEPS]
    ro = [_med(*a, "rollout_s") for a in H100_STEPS]
    tr = [_med(*a, "train_s") for a in H100_STEPS]
    ro2 = [_med(*a, "rollout_s") for a in H200_STEPS]
    tr2 = [_med(*a, "train_s") for a in H200_STEPS]
    _in_lesson(
        f"一步的中位数 {_span(h100)} s（rollout {_span(ro)} s、训练 {_span(tr)} s）", "第 6.5 节"
    )
    _in_lesson(f"7.0–7.1 s（rollout {_span(ro2)} s、训练 {_span(tr2)} s）", "第 6.5 节")
    ro_ratio, tr_ratio = _slower_on_h100("rollout_s"), _slower_on_h100("train_s")
    _in_lesson(f"量到的只慢 {ro_ratio:.2f} 倍，和训练（{tr_ratio:.2f} 倍）差不多", "第 6.5 节")
    assert ro_ratio < 1.43, "课文的结论「rollout 没有按带宽放大」要求 rollout 慢得比带宽比少"
    for name in ("control100-s0", "control100-s1"):
        ev = _eval_seconds(name)
        assert 5 < ev < 7, f"{name} 第 50 步的评估用了 {ev:.1f} s，课文写的是约 6 s"


@pytest.mark.parametrize("name", ("recipe-s0", "recipe-s1", "recipe-s2"))
def test_the_flip_floor_is_zero_as_the_lesson_says(name):
    floor = json.loads((RUNS / name / "eval_floor.json").read_text(encoding="utf-8"))
    assert floor["grade_flips"] == 0 and floor["text_changes"] == 0
    _in_lesson("500 题里没有一题的判分或回答文字变了", "第 6.3 节")


def test_the_5090_page_quotes_the_same_runs():
    """L2.07 第 6 节（5090 一页走完）引用的真模型数字 = 附带的运行算出的。"""
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    for s, (run, control) in enumerate(_pairs50()):
        at50 = f"{run.mean(50, 'greedy'):.3f}（对照 {control.mean(50, 'greedy'):.3f}）"
        if s < 2:
            late = _run(f"control100-s{s}")
            d = C.paired(run.values(0, "greedy"), run.values(100, "greedy"))
            at100 = f"{run.mean(100, 'greedy'):.3f}（对照 {late.mean(100, 'greedy'):.3f}）"
            gain = f"{C.signed(d['diff'])} ± {d['se']:.3f}，p = {d['p']:.3g}"
        else:
            at100 = gain = "—"
        row = f"| seed {s} | {run.mean(0, 'greedy'):.3f} | {at50} | {at100} | {gain} |"
        assert row in page, f"L2.07 第 6.6 节的表和附带的运行对不上，应该是：{row}"
    rows = {n: _rows(n) for n in NAMES}
    step4 = statistics.median(rows["recipe-s0"][s]["rollout_s"] + rows["recipe-s0"][s]["train_s"]
                              for s in range(11, 50))  # fmt: skip
    assert f"四个进程同卡时一步的中位数 {step4:.1f} s" in page
    ratio = statistics.median(rows["recipe-s0"][s]["train_s"] / rows["recipe-s0"][s]["rollout_s"]
                              for s in range(11, 50))  # fmt: skip
    assert f"rollout 和训练约 1 : {ratio:.1f}" in page, (
        f"L2.07 第 6.5 节：训练 / rollout ≈ {ratio:.2f}"
    )
    peak = max(r["peak_vram_gb"] for r in rows["recipe-s0"].values())
    assert f"显存峰值 {peak:.2f} GiB（micro-batch 32、eval batch 512）" in page
    h100 = _span([_med(*a) for a in H100_STEPS])
    ro = _slower_on_h100("rollout_s")
    assert f"一步 {h100} s，rollout 只比 H200 慢 {ro:.2f} 倍" in page, "L2.07 第 6.5 节的 H100 数字"
