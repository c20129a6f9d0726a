"""L2.08 第 6.2–6.6 节：现在的 GPU 配方在真模型上的两个 seed 和它们的对照（real_recipe/），以及第 86 步的 NaN。

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
NAMES = ("recipe-s0", "control-s0", "recipe-s1", "control-s1")


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


def _pairs():
    return [(C.Run(RUNS / f"recipe-s{s}"), C.Run(RUNS / f"control-s{s}")) for s in (0, 1)]


def test_the_folders_are_the_recipe_and_hold_no_checkpoint():
    recipe = tomllib.loads(PRESETS.read_text(encoding="utf-8"))["recipe"]["gpu"]
    shared = ("prompts_per_step", "group_size", "lr", "warmup_steps", "beta", "aggregation",
              "temperature", "max_new_tokens", "n_heldout", "top_p", "data")  # fmt: skip
    for name in NAMES:
        config = json.loads((RUNS / name / "config.json").read_text(encoding="utf-8"))
        for key in shared:
            assert config[key] == recipe[key], f"{name} 的 {key} 不是 presets.toml 的 [recipe.gpu]"
        assert config["reward"] == ("correctness" if name.startswith("recipe") else "shuffled")
        assert config["seed"] == int(name[-1])
        assert config["provenance"]["device"].startswith("NVIDIA H200")
        assert not list((RUNS / name).glob("*.pt")), f"{name} 里不该附 checkpoint"


def test_the_pasted_comparison_is_what_the_tool_prints():
    printed = C.report(_pairs(), 50).replace("## ", "#### ")
    block = LESSON.split("<!-- real-compare:begin -->")[1].split("<!-- real-compare:end -->")[0]
    assert block.strip() == printed.strip(), (
        "L2.08 第 6.3 节的 compare_runs.py 输出和附带的运行对不上"
    )


def test_the_summary_numbers_come_from_the_runs():
    pairs = _pairs()
    for run, control in pairs:
        at100 = C.paired(run.values(0, "greedy"), run.values(100, "greedy"))
        vs = C.difference(run, control, 50, "greedy")
        assert f"{run.mean(100, 'greedy'):.3f}" in LESSON
        _in_lesson(f"{C.signed(at100['diff'])}", "第 6 节开头")
        _in_lesson(f"{at100['p']:.3g}", "第 6 节开头")
        _in_lesson(f"{C.signed(vs['diff'])}", "第 6 节开头")
        _in_lesson(f"{vs['p']:.3g}", "第 6 节开头")
    r0, r1 = (C.paired(r.values(0, "greedy"), r.values(100, "greedy")) for r, _ in pairs)
    _in_lesson(
        f"0.290 → {pairs[0][0].mean(100, 'greedy'):.3f} 和 0.290 → {pairs[1][0].mean(100, 'greedy'):.3f}",
        "第 6 节开头",
    )
    _in_lesson(f"均值 {C.signed((r0['diff'] + r1['diff']) / 2)}", "第 6.6 节")
    gap = abs(pairs[0][0].mean(100, "greedy") - pairs[1][0].mean(100, "greedy"))
    _in_lesson(f"第 100 步差 {gap:.3f}", "第 6.3 节")
    presets = PRESETS.read_text(encoding="utf-8")
    assert f"{C.signed(r0['diff'])} / {C.signed(r1['diff'])}" in presets, "presets.toml 的依据"
    assert f"p = {r0['p']:.2g} / {r1['p']:.2g}" in presets, "presets.toml 的依据"


def test_reward_segments_and_curve_claims():
    for name in NAMES:
        _in_lesson(R.segment_row(RUNS / name), "第 6.3 节 reward 分段表的一行")

    def seg(name, key):
        rows = list(_rows(name).values())[:100]
        return [statistics.fmean(r[key] for r in rows[i : i + 10]) for i in range(0, len(rows), 10)]

    e0, e1 = seg("recipe-s0", "entropy"), seg("recipe-s1", "entropy")
    _in_lesson(
        f"从 {e0[0]:.3f}、{e1[0]:.3f} 降到 91–100 步的 {e0[-1]:.3f}、{e1[-1]:.3f}", "第 6.3 节"
    )
    ctl = seg("control-s0", "entropy") + seg("control-s1", "entropy")
    _in_lesson(f"对照在 {min(ctl):.3f}–{max(ctl):.3f} 之间", "第 6.3 节")
    lens = [v for n in NAMES for v in seg(n, "completion_len_mean")]
    _in_lesson(f"在 {min(lens):.0f}–{max(lens):.0f} token 之间", "第 6.3 节")
    trunc = [statistics.fmean(r["truncation_rate"] for r in _rows(n).values()) for n in NAMES]
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


def test_time_and_memory_figures():
    def med(name, lo, hi, key=None):
        rows = _rows(name)
        pick = lambda r: r[key] if key else r["rollout_s"] + r["train_s"]  # noqa: E731
        return statistics.median(pick(rows[s]) for s in range(lo, hi + 1))

    four = [med(n, 11, 49) for n in NAMES]
    assert len({f"{x:.1f}" for x in four}) == 1, f"四个进程同卡时一步的中位数应该都一样：{four}"
    step4, ro4, tr4 = (med("recipe-s0", 11, 49, k) for k in (None, "rollout_s", "train_s"))
    _in_lesson(f"一步的中位数 {step4:.1f} s（rollout {ro4:.1f} s、训练 {tr4:.1f} s）", "第 6.5 节")
    two = sorted(med(n, 52, 99) for n in ("recipe-s0", "recipe-s1"))
    _in_lesson(f"（第 52–99 步）{two[0]:.1f}–{two[1]:.1f} s", "第 6.5 节")
    _in_lesson(f"四个进程 {step4:.1f} / 4 ≈ 两个进程 {two[1]:.1f} / 2 ≈ 3.5 s", "第 6.5 节")
    assert abs(step4 / 4 - 3.5) < 0.1 and abs(two[1] / 2 - 3.5) < 0.1
    for name in ("recipe-s0", "recipe-s1"):  # 第 50 步的评估落在第 51 步的 elapsed_s 里
        rows = _rows(name)
        ev = (
            rows[51]["elapsed_s"]
            - rows[50]["elapsed_s"]
            - rows[51]["rollout_s"]
            - rows[51]["train_s"]
        )
        assert 9 < ev < 11, f"{name} 第 50 步的评估用了 {ev:.1f} s，课文写的是约 10 s"
    peaks = {n: max(r["peak_vram_gb"] for r in _rows(n).values()) for n in NAMES}
    run_peak = {f"{peaks[n]:.2f}" for n in ("recipe-s0", "recipe-s1")}
    assert len(run_peak) == 1
    ctl = sorted(peaks[n] for n in ("control-s0", "control-s1"))
    _in_lesson(f"运行 {run_peak.pop()} GiB，对照 {ctl[0]:.2f}–{ctl[1]:.2f} GiB", "第 6.5 节")


@pytest.mark.parametrize("name", ("recipe-s0", "recipe-s1"))
def test_the_flip_floor_is_zero_as_the_lesson_says(name):
    floor = json.loads((RUNS / name / "eval_floor.json").read_text(encoding="utf-8"))
    assert floor["grade_flips"] == 0 and floor["text_changes"] == 0
    _in_lesson("500 题里没有一题的判分或回答文字变了", "第 6.3 节")


def test_the_5090_page_quotes_the_same_runs():
    """L2.07 第 6 节（5090 一页走完）引用的真模型数字 = 附带的运行算出的。"""
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    pairs = _pairs()
    for s, (run, control) in enumerate(pairs):
        d = C.paired(run.values(0, "greedy"), run.values(100, "greedy"))
        row = (
            f"| seed {s} | {run.mean(0, 'greedy'):.3f} | {run.mean(50, 'greedy'):.3f}（对照 "
            f"{control.mean(50, 'greedy'):.3f}） | {run.mean(100, 'greedy'):.3f} | "
            f"{C.signed(d['diff'])} ± {d['se']:.3f}，p = {d['p']:.3g} |"
        )
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
