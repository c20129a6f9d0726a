"""L2.08 第 6.2–6.6 节：现在的 GPU 配方在真模型上的三个 seed 和它们的对照（real_recipe/），以及第 86 步的 NaN。

课文里的每个数都由 compare_runs.py、real_run.py、cudnn_nan.py 的函数从仓库附带的文件重算一遍，确认对得上；
presets.toml 的 [recipe.gpu] 就是这些运行用的配方。
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import json
import re
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
# 第三批：又一台 H100，两个进程同卡，seed 2 再跑一次到第 100 步
THIRD = ("recipe100-s2", "control100-s2")
RERUN = "rerun10-s2"  # 第三批：同一台机器、同一份代码，紧接着把 recipe100-s2 的命令再跑 10 步
SINGLE = "single-s2"  # 第三批：单独一个进程计时（metrics.jsonl 没取回，只有机器上打印的每步时间）
ALL = NAMES + SECOND + THIRD
SEGMENT_ORDER = ("recipe-s0", "control-s0", "control100-s0", "recipe-s1", "control-s1",
                 "control100-s1", "recipe-s2", "control-s2", "recipe100-s2", "control100-s2",
                 RERUN)  # fmt: skip
A727 = {"commit": "a727cbaa099014d8905df2e07eb7b181b11cac6e", "dirty": False}


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


@functools.cache
def _rows(name: str) -> dict[int, dict]:
    lines = (RUNS / name / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


@functools.cache
def _run(name: str):
    return C.Run(RUNS / name)


@functools.cache
def _config(name: str) -> dict:
    return json.loads((RUNS / name / "config.json").read_text(encoding="utf-8"))


def _pairs50():
    return [(_run(f"recipe-s{s}"), _run(f"control-s{s}")) for s in (0, 1, 2)]


RUNS100 = ("recipe-s0", "recipe-s1", "recipe100-s2")  # 跑到第 100 步的三个运行，seed 0、1、2


def _pairs100():
    return [(_run(r), _run(f"control100-s{s}")) for s, r in enumerate(RUNS100)]


def _gain(run, step: int = 100) -> dict:
    """运行自己和起点比（贪心，逐题配对）。"""
    return C.paired(run.values(0, "greedy"), run.values(step, "greedy"))


def _join(values) -> str:
    """「a、b 和 c」：课文列三个数的写法。"""
    values = list(values)
    return "、".join(values[:-1]) + " 和 " + values[-1]


def _block(tag: str) -> str:
    return LESSON.split(f"<!-- {tag}:begin -->")[1].split(f"<!-- {tag}:end -->")[0]


def test_the_folders_are_the_recipe_and_hold_no_checkpoint():
    recipe = tomllib.loads(PRESETS.read_text(encoding="utf-8"))["recipe"]["gpu"]
    shared = ("prompts_per_step", "group_size", "lr", "warmup_steps", "beta", "aggregation",
              "temperature", "max_new_tokens", "n_heldout", "top_p", "data")  # fmt: skip
    for name in ALL:
        config = _config(name)
        for key in shared:
            assert config[key] == recipe[key], f"{name} 的 {key} 不是 presets.toml 的 [recipe.gpu]"
        assert config["reward"] == ("correctness" if name.startswith("recipe") else "shuffled")
        assert config["seed"] == int(name[-1])
        device = config["provenance"]["device"]
        assert device.startswith("NVIDIA H200" if name in NAMES else "NVIDIA H100"), name
        assert not list((RUNS / name).glob("*.pt")), f"{name} 里不该附 checkpoint"
    for name in SECOND:
        config = _config(name)
        assert config["provenance"]["git"] == {
            "commit": "8991d54851e0e5cd33d1a415cb1c108bad8510d6",
            "dirty": False,
        }, "第 6.2 节说第二批是 commit 8991d54（干净）"
        assert config["steps"] == (100 if name.startswith("control100") else 50)
        assert len(_rows(name)) == config["steps"]
    _in_lesson("commit 8991d54（干净，`provenance` 里记着）", "第 6.2 节")
    for name in THIRD:
        config = _config(name)
        assert config["provenance"]["git"] == A727, "第 6.2 节说第三批是 commit a727cba（干净）"
        assert config["steps"] == 100 and len(_rows(name)) == 100
    _in_lesson("commit a727cba，干净", "第 6.2 节")
    before = {(RUNS / n / "answers_before.jsonl").read_bytes() for n in ("recipe-s0", "recipe-s1")}
    assert len(before) == 1, "两个运行附带的 answers_before.jsonl 应该逐字节相同（同一份起点）"


def _argv_without(config: dict, *flags: str) -> list[str]:
    """provenance 里的完整命令，去掉 flags 这几个选项和它们的值。"""
    argv, out = config["provenance"]["command"], []
    skip = False
    for x in argv:
        if skip:
            skip = False
        elif x in flags:
            skip = True
        else:
            out.append(x)
    return out


FOLDER_ORDER = ("recipe-s0", "recipe-s1", "control-s0", "control-s1", "control100-s0",
                "control100-s1", "recipe-s2", "control-s2", "recipe100-s2", "control100-s2",
                RERUN, SINGLE)  # fmt: skip
BATCH = {"e0b562f": "第一批", "8991d54": "第二批", "a727cba": "第三批"}
USED_FOR = {
    "recipe-s0": "seed 0 的运行，第 50、100 步",
    "recipe-s1": "seed 1 的运行，第 50、100 步",
    "control-s0": "seed 0 第 50 步的对照；换 GPU 的比较",
    "control-s1": "seed 1 第 50 步的对照；换 GPU 的比较",
    "control100-s0": "seed 0 第 100 步的对照；换 GPU 的比较；写法表",
    "control100-s1": "seed 1 第 100 步的对照；换 GPU 的比较；写法表",
    "recipe-s2": "seed 2 第 50 步的运行；不换 GPU 的比较",
    "control-s2": "seed 2 第 50 步的对照；不换 GPU 的比较",
    "recipe100-s2": "seed 2 第 100 步的运行；不换 GPU 的比较；和 `rerun10-s2` 逐步比",
    "control100-s2": "seed 2 第 100 步的对照；不换 GPU 的比较；写法表",
    RERUN: "同一台机器紧接着重跑；单进程计时的核对",
    SINGLE: "单进程计时",
}


def _started(name: str) -> datetime.datetime:
    return datetime.datetime.strptime(
        _config(name)["provenance"]["started"], "%Y-%m-%d %H:%M:%S %z"
    )


def _folder_table() -> str:
    """第 6.2 节开头的表：每格取自 config.json 的 provenance、metrics.jsonl（single-s2：打印的计时）。"""
    with_rows = [n for n in FOLDER_ORDER if n != SINGLE]
    # 同一时刻（10 s 之内）开始的目录算一组：同卡一起跑的几个进程
    groups: list[list[str]] = []
    for name in sorted(with_rows, key=_started):
        if groups and (_started(name) - _started(groups[-1][0])).total_seconds() < 10:
            groups[-1].append(name)
        else:
            groups.append([name])
    for a, b in zip(groups, groups[1:]):  # 一组的训练结束之后，下一组才开始
        end = max(_started(n) + datetime.timedelta(seconds=_rows(n)[max(_rows(n))]["elapsed_s"])
                  for n in a)  # fmt: skip
        assert end < _started(b[0]), f"{a} 和 {b} 在时间上重叠"
    last = {n: max(_rows(n)) for n in with_rows} | {SINGLE: max(_single())}
    procs = {SINGLE: "1"}
    for group in groups:
        for name in group:
            after50 = sum(last[n] > 50 for n in group)
            changes = last[name] > 50 and after50 < len(group)
            procs[name] = f"{len(group)}（第 50 步之后 {after50}）" if changes else str(len(group))
    lines = [
        "| 目录 | 批次 | GPU | commit | 跑到第几步 | 同卡几个进程 | 用在哪 |",
        "|---|---|---|---|---:|---|---|",
    ]
    for name in FOLDER_ORDER:
        prov = _config(name)["provenance"]
        commit = prov["git"]["commit"][:7]
        gpu = "H200" if prov["device"].startswith("NVIDIA H200") else "H100"
        dirty = "，有没提交的改动" if prov["git"]["dirty"] else ""
        lines.append(
            f"| `{name}` | {BATCH[commit]} | {gpu} | {commit}{dirty} | {last[name]} | "
            f"{procs[name]} | {USED_FOR[name]} |"
        )
    return "\n".join(lines)


def test_the_folder_table_is_the_provenance():
    """第 6.2 节开头：十二个目录一张表（批次、GPU、commit、跑到第几步、同卡几个进程）。"""
    assert sorted(FOLDER_ORDER) == sorted(p.name for p in RUNS.iterdir() if p.is_dir())
    assert _block("real-folders").strip() == _folder_table(), (
        "L2.08 第 6.2 节开头的目录表和附带目录的 config.json / metrics.jsonl 对不上"
    )
    text = (RUNS / SINGLE / "timing_printed_on_box.txt").read_text(encoding="utf-8")
    assert "卡上只有它一个" in text, "single-s2 是单独一个进程"
    _in_lesson("seed 2 第 50 步的数来自第二批的一对，第 100 步来自第三批的一对", "第 6 节开头")
    assert _config("recipe-s2")["provenance"]["git"]["commit"].startswith("8991d54")


def test_the_rerun_and_the_timing_run_are_the_same_recipe():
    """第 6.2 节：rerun10-s2 = recipe100-s2 的命令只改 --steps；single-s2 只改 --n-heldout、--steps，
    不带 --start-evals 2；同一个 commit、同一种卡。"""
    first, rerun, single = _config("recipe100-s2"), _config(RERUN), _config(SINGLE)
    for other in (rerun, single):
        assert other["provenance"]["git"] == A727
        assert other["provenance"]["device"] == first["provenance"]["device"]
        assert not list((RUNS / RERUN).glob("*.pt")) and not list((RUNS / SINGLE).glob("*.pt"))
    assert (rerun["steps"], rerun["seed"], rerun["reward"]) == (10, 2, "correctness")
    assert _argv_without(rerun, "--steps", "--out") == _argv_without(first, "--steps", "--out")
    assert (single["steps"], single["n_heldout"], single["seed"]) == (12, 16, 2)
    flags = ("--steps", "--out", "--n-heldout", "--start-evals")
    assert _argv_without(single, *flags) == _argv_without(first, *flags)
    assert "--start-evals" not in single["provenance"]["command"]
    assert first["provenance"]["started"] > single["provenance"]["started"], "计时那次在这一对之前"
    assert rerun["provenance"]["started"] > first["provenance"]["started"]
    assert rerun["out"].endswith("recipe10-s2"), "第 6.2 节说机器上的目录叫 recipe10-s2"
    _in_lesson("在机器上叫 `recipe10-s2`", "第 6.2 节")
    assert len(_rows(RERUN)) == 10


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
    # 第 100 步：三个运行各自和起点比，三个对照，运行 − 对照
    runs, controls = [r for r, _ in _pairs100()], [c for _, c in _pairs100()]
    at100 = [_gain(r) for r in runs]
    acc = [f"{r.mean(100, 'greedy'):.3f}" for r in runs]
    up = [C.signed(g["diff"]) for g in at100]
    ps = [f"{g['p']:.3g}" for g in at100]
    _in_lesson(
        f"0.290 → {_join(acc)}（第 100 步，{_join(up)}，和训练前逐题配对 p = {_join(ps)}）",
        "第 6 节开头",
    )
    assert all(g["diff"] > 0 for g in at100), "课文说三个运行都比起点高"
    ctl = [c.mean(100, "greedy") for c in controls]
    assert all(x < c.mean(0, "greedy") for x, c in zip(ctl, controls)), "课文说三个对照都低于起点"
    _in_lesson(f"三个对照第 100 步是 {_join(f'{x:.3f}' for x in ctl)}，都低于起点", "第 6 节开头")
    late = [C.difference(r, c, 100, "greedy")["diff"] for r, c in _pairs100()]
    drops = [-_gain(c)["diff"] for c in controls]
    _in_lesson(f"「运行 − 对照」的 {_join(map(C.signed, late))}\n", "第 6 节开头")
    _in_lesson(f"（里面分别有 {_join(f'{d:.3f}' for d in drops)} 是对照掉下去）", "第 6 节开头")
    _in_lesson(f"（{'、'.join(up)}，第 6.3 节）", "第 6 节开头")
    _in_lesson(
        f"{_join(map(C.signed, late))} 里有 {_join(f'{d:.3f}' for d in drops)} 是对照掉下去",
        "第 6.3 节",
    )
    _in_lesson(f"（{late[2]:.3f} 里 {drops[2]:.3f}）", "第 6.3 节")
    # 目标
    over6 = [g["diff"] >= 0.06 for g in at100]
    assert over6 == [True, True, False]
    _in_lesson(f"三个 seed 里两个做到（seed 2 是 {up[2]}）", "第 6 节开头")
    best = [g["diff"] >= 0.08 and g["p"] < 0.01 for g in at100]
    assert best == [True, False, False], "「比起点高 +0.08 以上、p < 0.01」只有 seed 0 做到"
    # 第 6.3 节「该怎么读（第 100 步）」
    _in_lesson(
        f"第 100 步 {_join(acc)}，比起点 {up[0]}（p = {ps[0]}）、{up[1]}（p = {ps[1]}）和 {up[2]}（p = {ps[2]}）",
        "第 6.3 节",
    )
    mean_gain = C.signed(statistics.fmean(g["diff"] for g in at100))
    _in_lesson(f"**配方的涨幅是这三个数**，均值 {mean_gain}", "第 6.3 节")
    on = [C.paired(r.values(50, "greedy"), r.values(100, "greedy")) for r in runs]
    _in_lesson(
        f"第 50 → 100 步是 {C.signed(on[0]['diff'])} 和 {C.signed(on[1]['diff'])}", "第 6.3 节"
    )
    _in_lesson(
        f"第 50 步已经到 {runs[2].mean(50, 'greedy'):.3f}，到第 100 步是 {C.signed(on[2]['diff'])}"
        f"（翻对 {on[2]['up']} 题、翻错 {on[2]['down']} 题，p = {on[2]['p']:.1g}）",
        "第 6.3 节",
    )
    assert all(o["p"] > 0.05 for o in on), "课文说第 50 → 100 步的三个变化单看都在噪声之内"
    d0, d1, d2 = (_gain(c) for c in controls)
    late_moves = []
    for s, (c, d) in enumerate(zip(controls, (d0, d1, d2))):  # 起点 → 第 50 步 → 第 100 步
        _in_lesson(
            f"seed {s} 的对照 {c.mean(0, 'greedy'):.3f} → {c.mean(50, 'greedy'):.3f}（第 50 步）→ "
            f"{c.mean(100, 'greedy'):.3f}（第 100 步；和起点比翻对 {d['up']}、翻错 {d['down']}，"
            f"p = {d['p']:.3g}）",
            "第 6.3 节",
        )
        late_moves.append(C.paired(c.values(50, "greedy"), c.values(100, "greedy")))
    m0, m1, m2 = late_moves
    _in_lesson(
        f"三个对照是 {C.signed(m0['diff'])}（翻对 {m0['up']}、翻错 {m0['down']}，p = {m0['p']:.3g}）、"
        f"{C.signed(m1['diff'])}（{m1['up']} / {m1['down']}，p = {m1['p']:.3g}）和 "
        f"{C.signed(m2['diff'])}（{m2['up']} / {m2['down']}，p = {m2['p']:.3g}）",
        "第 6.3 节",
    )
    again = C.difference(runs[2], controls[2], 50, "greedy")
    _in_lesson(
        f"同一对在第 50 步是 {C.signed(again['diff'])}（{again['up']} / {again['down']} 题，"
        f"p = {again['p']:.3g}），seed 2 的第一对在第 50 步是 {C.signed(diffs[2])}",
        "第 6.3 节",
    )
    sd = statistics.stdev(g["diff"] for g in at100)
    _in_lesson(
        f"运行第 100 步在 {min(acc)} 到 {max(acc)} 之间，涨幅 {C.signed(min(g['diff'] for g in at100))} "
        f"到 {C.signed(max(g['diff'] for g in at100))}（标准差 {sd:.3f}）",
        "第 6.3 节",
    )
    # 第 6.6 节
    _in_lesson(f"（100 步，{_join(up)}，p = {_join(ps)}：", "第 6.6 节")
    assert [g["p"] < 0.01 for g in at100] == [True, True, False], "第 6.6 节：前两个 p < 0.01"
    assert at100[2]["p"] < 0.05
    _in_lesson(
        f"一个没有明显变化（{C.signed(d1['diff'])}，p = {d1['p']:.3g}），\n"
        f"一个明显变差（{C.signed(d2['diff'])}，p = {d2['p']:.3g}），一个把模型推坏了（{C.signed(d0['diff'])}）",
        "第 6.6 节",
    )
    _in_lesson(f"三个 seed 是 {_join(up)}，均值 {mean_gain}", "第 6.6 节")
    _in_lesson(f"第 100 步是 {_join(acc)}，seed 2 没到", "第 6.6 节")
    assert [float(a) >= 0.35 for a in acc] == [True, True, False]
    _in_lesson(
        f"第 50 → 100 步 {C.signed(on[0]['diff'])}、{C.signed(on[1]['diff'])}，"
        f"seed 2 的第二次运行 {C.signed(on[2]['diff'])}",
        "第 6.6 节",
    )
    _in_lesson(f"高 {late[0]:.2f}」（或 {late[1]:.2f}、{late[2]:.2f}）", "第 6.6 节")
    _in_lesson(f"这三个差里分别有 {'、'.join(f'{d:.3f}' for d in drops)} 是对照掉下去", "第 6.6 节")
    # 第 50 步的四对「运行 − 对照」（seed 2 有两对）：都是正的；第 50 步运行自己比起点的涨幅
    four = diffs + [again["diff"]]
    assert all(x > 0 for x in four), "课文说第 50 步四对都是正的"
    listed = f"{'、'.join(map(C.signed, diffs))} 和 seed 2 第二对的 {C.signed(again['diff'])}"
    _in_lesson(f"第 50 步四对都是正的（{listed}）", "第 6.3 节")
    _in_lesson(f"（第 50 步四对都是正的：{listed}）", "第 6.6 节")
    _in_lesson(f"第 50 步运行自己比起点只涨了 {'、'.join(map(C.signed, gains))}", "第 6.6 节")
    _in_lesson(f"每个 p ≤ {max(C.difference(r, c, 50, 'greedy')['p'] for r, c in pairs):.3g}",
               "第 6.3、6.6 节")  # fmt: skip
    # 第 6.8 节
    span = f"{C.signed(min(g['diff'] for g in at100))} 到 {C.signed(max(g['diff'] for g in at100))}"
    _in_lesson(f"为什么三个 seed 的最小到最大 {span} 不能当范围", "第 6.8 节")
    _in_lesson(
        f"第 50 步的「运行 − 对照」在这里的四对是 {C.signed(min(four))} 到 {C.signed(max(four))}",
        "第 6.8 节",
    )
    # presets.toml 的依据
    presets = PRESETS.read_text(encoding="utf-8")
    assert " / ".join(up) in presets, "presets.toml 的依据"
    assert "p = " + " / ".join(f"{g['p']:.2g}" for g in at100) in presets, "presets.toml 的依据"
    assert " / ".join(C.signed(x) for x in diffs) in presets, "presets.toml 的依据"
    assert " / ".join(f"{x:.3f}" for x in ctl) in presets, "presets.toml 的依据"


def test_the_same_seed_twice():
    """第 6.3 节「同一个 seed 跑两次」：换 GPU（第一、二批的对照），不换 GPU（seed 2 的第二、三批）。"""
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
    gpu = [
        C.difference(_run(f"control-s{s}"), _run(f"control100-s{s}"), 50, "greedy") for s in (0, 1)
    ]
    same = []
    for kind in ("recipe", "control"):
        first, second = _run(f"{kind}-s2"), _run(f"{kind}100-s2")
        assert C.fairness(second, first)[1] == "训练题：第 1–50 步每一步都相同"
        d = C.difference(second, first, 50, "greedy")
        same.append(d)
        _in_lesson(
            f"{second.mean(50, 'greedy'):.3f} 和 {first.mean(50, 'greedy'):.3f}，差 {C.signed(d['diff'])} ± "
            f"{d['se']:.3f}（{d['up']} / {d['down']} 题，p = {d['p']:.3g}）",
            "第 6.3 节",
        )
    _in_lesson(
        f"上面那 {C.signed(gpu[0]['diff'])} 和 {C.signed(gpu[1]['diff'])} 不能算成", "第 6.3 节"
    )
    # 课文说「差不多大」：同型号重跑的差不比换 GPU 的小
    assert max(d["diff"] for d in same) >= max(d["diff"] for d in gpu)
    r, c = (_run(f"{k}-s2") for k in ("recipe", "control"))
    r2, c2 = (_run(f"{k}100-s2") for k in ("recipe", "control"))
    _in_lesson(
        f"第 50 步运行 {r.mean(50, 'greedy'):.3f} 和 {r2.mean(50, 'greedy'):.3f}，对照 "
        f"{c.mean(50, 'greedy'):.3f} 和 {c2.mean(50, 'greedy'):.3f}，\n  差 {C.signed(same[0]['diff'])} 和 "
        f"{C.signed(same[1]['diff'])}；换 GPU（H200 对 H100）的两个对照差 {C.signed(gpu[0]['diff'])} 和 "
        f"{C.signed(gpu[1]['diff'])}",
        "第 6 节开头",
    )
    _in_lesson(f"第 50 步就差 {same[0]['diff']:.3f}", "第 6.3 节")
    _in_lesson(f"在第 50 步就能差 {same[0]['diff']:.2f}", "第 6.6 节")
    _in_lesson(
        f"第 50 步就能差 {same[0]['diff']:.2f}（第 6.3 节；只量了 seed 2 的一对", "第 6.8 节"
    )
    pair = f"我们只量了 seed 2 的一对：{same[0]['diff']:.3f} 和 {same[1]['diff']:.3f}"
    _in_lesson(pair, "第 6.3 节")
    _in_lesson(pair, "第 6.6 节")
    # 两次的逐题结果（eval_questions.jsonl 的 greedy 列表）：第 50 步有几题对错不同
    moved = []
    for kind in ("recipe", "control"):
        a, b = (_run(n).values(50, "greedy") for n in (f"{kind}-s2", f"{kind}100-s2"))
        moved.append(sum(x != y for x, y in zip(a, b, strict=True)))
    assert moved[0] == same[0]["up"] + same[0]["down"]
    _in_lesson(f"第 50 步有 {moved[0]} 题两次的对错不同", "第 6 节开头")
    _in_lesson(
        f"有 {same[0]['up']} + {same[0]['down']} = {moved[0]} 题对错不同，两次的对照有 {moved[1]} 题",
        "第 6.3 节",
    )
    _in_lesson(f"同一个 seed 再跑一次，第 50 步就有 {moved[0]} 题对错不同", "第 6.3 节")
    assert all(_run(f"recipe{x}-s2").floor["grade_flips"] == 0 for x in ("", "100"))
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    assert f"第 50 步就差了 {same[0]['diff']:.3f}" in page, "L2.07 第 6.6 节：同一个 seed 重跑的差"
    lo, hi = sorted(f"{d['diff']:.3f}" for d in same)
    glo, ghi = sorted(f"{d['diff']:.3f}" for d in gpu)
    top = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"第 50 步差 {lo}–{hi}，和换 GPU（H200 对 H100，{glo}–{ghi}）差不多大" in top, (
        "README 的结果"
    )


def _cell(a: float, b: float, fmt: str) -> str:
    return f"{a:{fmt}} / {b:{fmt}}".replace("-", "−")


def _rerun_table(steps=4) -> str:
    first, again = _rows("recipe100-s2"), _rows(RERUN)
    lines = [
        "| 步 | 选到的题 | 训练 batch 的正确率 | 回答的平均长度 | loss | 梯度范数 |",
        "|---:|---|---|---|---|---|",
    ]
    for s in range(1, steps + 1):
        a, b = first[s], again[s]
        same = "相同" if a["prompt_ids"] == b["prompt_ids"] else "不同"
        lines.append(
            f"| {s} | {same} | {_cell(a['accuracy'], b['accuracy'], '.3f')} | "
            f"{_cell(a['completion_len_mean'], b['completion_len_mean'], '.1f')} | "
            f"{_cell(a['loss'], b['loss'], '.4f')} | {_cell(a['grad_norm'], b['grad_norm'], '.6f')} |"
        )
    return "\n".join(lines)


def test_the_same_machine_rerun_is_the_measurement():
    """第 6.3 节：同一台机器、同一份代码再跑 10 步。题每步相同，第 1 步采样相同，梯度第 1 步就不同。"""
    assert _block("real-rerun").strip() == _rerun_table(), (
        "第 6.3 节重跑的表和附带的 metrics.jsonl 对不上"
    )
    first, again = _rows("recipe100-s2"), _rows(RERUN)
    assert all(first[s]["prompt_ids"] == again[s]["prompt_ids"] for s in range(1, 11))
    for key in ("accuracy", "completion_len_mean", "entropy", "loss"):
        assert first[1][key] == again[1][key], f"第 1 步的 {key} 应该逐位相同"
    assert first[1]["grad_norm"] != again[1]["grad_norm"], "课文说第 1 步的梯度范数就不同"
    for s in range(2, 11):  # 「第 5–10 步也一样：其余几列每一步都不同」
        for key in ("accuracy", "completion_len_mean", "loss", "grad_norm"):
            assert first[s][key] != again[s][key], f"第 {s} 步的 {key} 两次相同，课文说不同"
    g = f"（{first[1]['grad_norm']:.6f} 对 {again[1]['grad_norm']:.6f}）"
    _in_lesson(
        f"梯度范数第 1 步就差了一点{g[:-1]}，前一个是 `recipe100-s2`，后一个是 `rerun10-s2`）",
        "第 6 节开头",
    )
    _in_lesson(f"第 1 步的梯度范数就不一样了{g}", "第 6.3 节")
    for name in ("eval_before.json", "eval_floor.json"):
        assert (RUNS / RERUN / name).read_bytes() == (RUNS / "recipe100-s2" / name).read_bytes(), (
            name
        )
    assert (RUNS / RERUN / "eval_before.json").read_bytes() == (
        RUNS / "recipe-s0" / "eval_before.json"
    ).read_bytes(), "起点评估在 H200 和 H100 上也逐字节相同"
    _in_lesson("和评估底噪（`eval_floor.json`）逐字节相同", "第 6.3 节")


def test_the_first_step_is_the_same_for_every_folder_of_a_seed():
    """第 6.3 节：附带的有 metrics.jsonl 的目录里，同一个 seed 的第 1 步正确率和平均长度都相同（H200 和 H100 也一样）。"""
    folders = sorted(p.parent.name for p in RUNS.glob("*/metrics.jsonl"))
    assert sorted(SEGMENT_ORDER) == folders
    by_seed: dict[int, set] = {}
    for name in folders:
        r = _rows(name)[1]
        by_seed.setdefault(_config(name)["seed"], set()).add(
            (r["accuracy"], r["completion_len_mean"])
        )
    assert all(len(v) == 1 for v in by_seed.values()), by_seed
    devices = {_config(n)["provenance"]["device"].split(" (")[0] for n in folders}
    assert any("H200" in d for d in devices) and any("H100" in d for d in devices)
    _in_lesson(f"附带的{_cn(len(folders))}个有 `metrics.jsonl` 的目录里", "第 6.3 节")


def _cn(n: int) -> str:
    return {10: "十", 11: "十一", 12: "十二"}[n]


def test_clipping_never_acted_in_these_runs():
    """第 6.3 节：每批只更新一次，ratio 恒为 1，clip 的偏差（Spurious Rewards 的解释）在这里不起作用。"""
    for name in ALL:
        config = _config(name)
        assert config["num_iterations"] == 1
        assert all(r["clip_fraction"] == 0 for r in _rows(name).values()), name
    _in_lesson("`clip_fraction` 每一步都是 0", "第 6.3 节")


@pytest.mark.slow  # 读五个目录的全部回答（约 2.5 s）：默认一档的 CPU 预算
def test_the_control_that_fell_wrote_code():
    """第 6.3 节：seed 0 的对照第 100 步在写代码块、编造运行结果；seed 1、2 的对照往反方向走，seed 2 的运行全去掉了。"""
    before = R.answers(RUNS / "recipe-s0", "before")
    after0 = R.answers(RUNS / "control100-s0", "after")
    after1 = R.answers(RUNS / "control100-s1", "after")
    after2 = R.answers(RUNS / "control100-s2", "after")
    run2 = R.answers(RUNS / "recipe100-s2", "after")
    table = R.habit_columns([("训练前", before), ("对照 seed 0，第 100 步", after0),
                             ("对照 seed 1，第 100 步", after1), ("对照 seed 2，第 100 步", after2),
                             ("运行 seed 2，第 100 步", run2)])  # fmt: skip
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
    # 同一批题比：训练前、第 100 步都不带代码块的那些题
    plain = [i for i in range(len(before)) if not code(before[i]) and not code(after0[i])]
    moved = C.paired([float(before[i]["reward"] > 0) for i in plain],
                     [float(after0[i]["reward"] > 0) for i in plain])  # fmt: skip
    _in_lesson(
        f"训练前、第 100 步都不带代码块的 {len(plain)} 题，正确率从 "
        f"{right([before[i] for i in plain]):.3f} 掉到 {right([after0[i] for i in plain]):.3f}"
        f"（翻对 {moved['up']} 题、翻错 {moved['down']} 题）",
        "第 6.3 节",
    )
    n2 = sum(map(code, after2))
    assert n2 == sum("```output" in r["completion"] for r in after2), (
        "课文说这些题都接着编了 output 块"
    )
    _in_lesson(
        f"代码块从 {sum(map(code, before))} 题变成 {sum(map(code, after1))} 题和 {n2} 题"
        f"（seed 2 的 {n2} 题都还接着编了",
        "第 6.3 节",
    )
    _in_lesson(
        f"**seed 2 的运行把代码块全去掉了**（{sum(map(code, before))} → {sum(map(code, run2))}），"
        f"它的对照还剩 {n2} 题",
        "第 6.3 节",
    )
    for name, rows in (
        ("control100-s0", after0),
        ("control100-s2", after2),
        ("recipe100-s2", run2),
    ):
        ea = json.loads((RUNS / name / "eval_after.json").read_text(encoding="utf-8"))
        assert ea["step"] == 100 and abs(ea["accuracy"] - right(rows)) < 1e-9, name


def _seg(name, key):
    rows = list(_rows(name).values())[:100]
    return [statistics.fmean(r[key] for r in rows[i : i + 10]) for i in range(0, len(rows), 10)]


def test_reward_segments_and_curve_claims():
    rows = "\n".join(R.segment_row(RUNS / name) for name in SEGMENT_ORDER)
    _in_lesson(rows, "第 6.3 节的 reward 分段表")
    assert sorted(SEGMENT_ORDER) == sorted(ALL + (RERUN,))
    ent = [_seg(n, "entropy") for n in RUNS100]
    _in_lesson(
        f"从 {'、'.join(f'{e[0]:.3f}' for e in ent)} 降到 91–100 步的 "
        f"{'、'.join(f'{e[-1]:.3f}' for e in ent)}",
        "第 6.3 节",
    )
    up0, down1, up2 = (_seg(f"control100-s{s}", "entropy") for s in (0, 1, 2))
    i, j, k = up0.index(max(up0)), down1.index(min(down1)), up2.index(max(up2))
    _in_lesson(
        f"seed 0 的在 {10 * i + 1}–{10 * i + 10} 步升到 {up0[i]:.3f}，"
        f"seed 2 的在 {10 * k + 1}–{10 * k + 10} 步升到 {up2[k]:.3f}，"
        f"seed 1 的在 {10 * j + 1}–{10 * j + 10} 步降到 {down1[j]:.3f}",
        "第 6.3 节",
    )
    rew = [_seg(n, "reward_mean") for n in RUNS100]
    first, last = sorted(r[0] for r in rew), sorted(r[-1] for r in rew)
    _in_lesson(
        f"从 1–10 步的 {first[0]:.3f}–{first[-1]:.3f} 到 91–100 步的 {last[0]:.3f}–{last[-1]:.3f}",
        "第 6.3 节",
    )
    _in_lesson(
        f"41–50 步是 {_seg('control-s0', 'reward_mean')[4]:.3f} 和 "
        f"{_seg('control-s1', 'reward_mean')[4]:.3f}",
        "第 6.3 节",
    )
    _in_lesson(f"81–90 步落到 {_seg('control100-s0', 'reward_mean')[8]:.3f}", "第 6.3 节")
    _in_lesson(
        f"seed 2 的对照 91–100 步是 {_seg('control100-s2', 'reward_mean')[9]:.3f}", "第 6.3 节"
    )
    three = [_seg(n, "reward_mean")[0] for n in ("recipe-s2", "recipe100-s2", RERUN)]
    _in_lesson(f"第 1–10 步就是 {'、'.join(f'{x:.3f}' for x in three)}", "第 6.3 节")
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
    past50 = ("recipe-s0", "recipe-s1", "control100-s0", "control100-s1") + THIRD
    run_peak = {f"{peaks[n]:.2f}" for n in past50}
    assert sorted(past50) == sorted(n for n in ALL if max(_rows(n)) > 50), (
        "第 50 步之后还继续训练的目录"
    )
    assert len(run_peak) == 1, "第 50 步评估之后还继续训练的六个目录，显存峰值应该一样"
    low = sorted(peaks[n] for n in ("control-s0", "control-s1", "recipe-s2", "control-s2"))
    _in_lesson(
        f"第 50 步评估之后还继续训练的六个目录（三个运行、三个跑到第 100 步的对照）{run_peak.pop()} GiB",
        "第 6.5 节",
    )
    # 取的两段步数：去掉前 10 步（预热）和第 50 步评估前后的第 50、51 步
    assert H200_STEPS == (("recipe-s0", 52, 99), ("recipe-s1", 52, 99))
    _in_lesson("四个进程同卡时（第 11–49 步）", "第 6.5 节")
    _in_lesson("去掉了前 10 步（学习率预热的那几步", "第 6.5 节")
    _in_lesson("和第 50 步评估前后的第 50、51 步", "第 6.5 节")
    assert all(_config(n)["warmup_steps"] == 10 for n in NAMES)
    assert all(max(_rows(n)) == 50 for n in ("control-s0", "control-s1")), "两个对照停在第 50 步"
    _in_lesson(f"只跑到第 50 步的四个目录 {low[0]:.2f}–{low[-1]:.2f} GiB", "第 6.5 节")
    for name in ("recipe-s0", "control100-s0") + THIRD:  # 峰值第一次出现在第 50 步的评估之后
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


def _single() -> dict[int, dict]:
    """single-s2：机器上从 metrics.jsonl 打印出来的每步时间（那份 metrics.jsonl 没取回）。"""
    text = (RUNS / SINGLE / "timing_printed_on_box.txt").read_text(encoding="utf-8")
    keys = ("rollout_s", "train_s", "completion_len_mean", "peak_vram_gb")
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            step, *values = line.split()
            out[int(step)] = dict(zip(keys, map(float, values)))
    return out


def test_the_single_process_timing():
    """第 6.5 节：H100 上单独一个进程一步多久，和两个进程同卡比。"""
    text = (RUNS / SINGLE / "timing_printed_on_box.txt").read_text(encoding="utf-8")
    assert "a727cba" in text and "NVIDIA H100 80GB HBM3" in text, "打印的计时要写明 commit 和卡"
    assert _config(SINGLE)["provenance"]["device"].startswith("NVIDIA H100 80GB HBM3")
    rows = _single()
    assert sorted(rows) == list(range(1, 13)), "计时那次跑了 12 步"
    steady = [rows[s] for s in range(3, 13)]
    ro = [r["rollout_s"] for r in steady]
    tr = [r["train_s"] for r in steady]
    step = statistics.median(r["rollout_s"] + r["train_s"] for r in steady)
    ratio = statistics.median(tr) / statistics.median(ro)
    _in_lesson(
        f"第 3–12 步 rollout {min(ro):.2f}–{max(ro):.2f} s、训练 {min(tr):.2f}–{max(tr):.2f} s，"
        f"一步的中位数 {step:.1f} s（rollout : 训练 ≈ 1 : {ratio:.1f}）",
        "第 6.5 节",
    )
    _in_lesson(f"H100 上单独一个进程量到的是 1 : {ratio:.1f}", "第 6.5 节")
    _in_lesson(
        f"前两步的 rollout 是 {rows[1]['rollout_s']:.2f} s 和 {rows[2]['rollout_s']:.2f} s",
        "第 6.5 节",
    )
    extra = rows[1]["rollout_s"] + rows[2]["rollout_s"] - 2 * statistics.median(ro)
    _in_lesson(f"多出来的约 {extra:.0f} s", "第 6.5 节")
    peak = max(r["peak_vram_gb"] for r in rows.values())
    _in_lesson(f"12 步里的峰值是 {peak:.2f} GiB", "第 6.5 节")
    # 两个进程同卡（第三批的一对，第 11–99 步）
    two = [_med(n, 11, 99) for n in THIRD]
    two_ro = [_med(n, 11, 99, "rollout_s") for n in THIRD]
    two_tr = [_med(n, 11, 99, "train_s") for n in THIRD]
    assert len({f"{x:.1f}" for x in two}) == 1
    _in_lesson(
        f"第 11–99 步）一步的中位数是 {two[0]:.1f} s（rollout {_span(two_ro)} s、训练 {_span(two_tr)} s）",
        "第 6.5 节",
    )
    shared = statistics.fmean(two) / 2
    _in_lesson(
        f"同卡时每个进程一步 {two[0]:.1f} s，两个进程合起来每 {two[0]:.1f} s 走两步，也就是一步 "
        f"{shared:.1f} s 的整卡时间，单独跑是 {step:.1f} s",
        "第 6.5 节",
    )
    assert abs(shared / step - 1) < 0.05, "课文说同卡一起跑和一前一后跑差不多"
    slow_ro = statistics.fmean(two_ro) / statistics.median(ro)
    slow_tr = statistics.fmean(two_tr) / statistics.median(tr)
    _in_lesson(f"rollout 慢到 {slow_ro:.2f} 倍、训练慢到 {slow_tr:.2f} 倍", "第 6.5 节")
    _in_lesson(
        f"单独一个进程在 H100 上一步约 {step:.1f} s（rollout 约 {statistics.median(ro):.1f} s、"
        f"训练约 {statistics.median(tr):.1f} s）；两个进程同卡时每个一步 {two[0]:.1f} s",
        "第 6 节开头",
    )
    for name in THIRD:
        ev = _eval_seconds(name)
        assert 5 < ev < 7, f"{name} 第 50 步的评估用了 {ev:.1f} s，课文写的是约 6 s"
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    want = (
        f"一步 {step:.1f} s（rollout {statistics.median(ro):.1f} s、训练 {statistics.median(tr):.1f} s），"
        f"两个进程同卡时合起来一步 {shared:.1f} s"
    )
    assert want in page, f"L2.07 第 6.5 节的单进程数字，应该是：{want}"
    # rerun10-s2 也是卡上只有它，metrics.jsonl 附了：核对打印的计时
    again = _rows(RERUN)
    steady2 = [again[s] for s in range(3, 11)]
    step2 = statistics.median(r["rollout_s"] + r["train_s"] for r in steady2)
    ro2 = statistics.median(r["rollout_s"] for r in steady2)
    tr2 = statistics.median(r["train_s"] for r in steady2)
    _in_lesson(
        f"第 3–10 步一步的中位数 {step2:.2f} s（rollout {ro2:.2f} s、训练 {tr2:.2f} s）",
        "第 6.5 节",
    )
    assert abs(step2 / step - 1) < 0.03, "课文说 rerun10-s2 和打印的数对得上"
    _in_lesson(
        f"它前两步的 rollout 是 {again[1]['rollout_s']:.2f} s 和 {again[2]['rollout_s']:.2f} s，"
        "比 `single-s2` 的少",
        "第 6.5 节",
    )
    assert all(again[s]["rollout_s"] < rows[s]["rollout_s"] for s in (1, 2))
    assert (
        _config(RERUN)["n_heldout"] == 500
        and "--start-evals" in _config(RERUN)["provenance"]["command"]
    )


def test_the_5090_estimate_is_this_arithmetic():
    """第 6.5 节：把 H200 上一步的 3.5 s 按量到的 rollout : 训练拆开，再按带宽、算力的比例换到 5090。"""
    spans = [_med(n, lo, hi, "train_s") / _med(n, lo, hi, "rollout_s")
             for n, lo, hi in (("recipe-s0", 11, 49), ("recipe-s1", 11, 49), ("control-s0", 11, 49),
                               ("control-s1", 11, 49)) + H200_STEPS]  # fmt: skip
    rows = _rows("recipe-s0")
    ratio = statistics.median(rows[s]["train_s"] / rows[s]["rollout_s"] for s in range(11, 50))
    _in_lesson(
        f"rollout : 训练 ≈ 1 : {ratio:.2f}（H200 上四个进程、两个进程时各个目录的中位数在 "
        f"1 : {min(spans):.2f} 到 1 : {max(spans):.2f} 之间）",
        "第 6.5 节",
    )
    step = 3.5  # 课文的「一步要一整张 H200 约 3.5 s」（test_time_and_memory_figures 核对）
    rollout, train = step / (1 + ratio), step * ratio / (1 + ratio)
    _in_lesson(f"也就是 rollout 约 {rollout:.1f} s、训练约 {train:.1f} s", "第 6.5 节")
    bandwidth, compute = 4.8 / 1.79, 989 / 419  # 课文引用的公开规格：H200 / 5090
    ro5090 = rollout * bandwidth
    _in_lesson(f"这一半慢 {bandwidth:.1f} 倍，约 {ro5090:.1f} s", "第 6.5 节")
    tr5090 = (train * compute, train * compute * 2)
    _in_lesson(f"差 {compute:.1f} 倍", "第 6.5 节")
    _in_lesson(
        f"那就是 {compute * 2:.1f} 倍。训练这一半就是 {tr5090[0]:.1f}–{tr5090[1]:.1f} s",
        "第 6.5 节",
    )
    total = [ro5090 + t for t in tr5090]
    _in_lesson(
        f"一步约 {total[0]:.0f}–{total[1]:.0f} s，150 步约 "
        f"{150 * total[0] / 60:.0f}–{150 * total[1] / 60:.0f} 分钟",
        "第 6.5 节",
    )
    # 同样的推法换到 100 步（四次运行）：L2.07 第 6.5 节的「另一条推法」转述同一个推算。
    # 预算用的是 L2.07 从 H100 上 micro-batch 8 的实测推的数（首页 README 也引它），由 test_5090_budget.py 核对
    minutes = f"{100 * total[0] / 60:.0f}–{100 * total[1] / 60:.0f} 分钟"
    four = f"{4 * 100 * total[0] / 60:.0f}–{4 * 100 * total[1] / 60:.0f} 分钟"
    _in_lesson(f"100 步的训练约 {minutes}、4 次运行约 {four}", "第 6.5 节")
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    assert f"100 步的训练约 {minutes}，四次约 {four}" in page, (
        f"L2.07 第 6.5 节「另一条推法」：100 步的训练约 {minutes}，四次约 {four}"
    )


@pytest.mark.parametrize("name", ("recipe-s0", "recipe-s1", "recipe-s2", "recipe100-s2", RERUN))
def test_the_flip_floor_is_zero_as_the_lesson_says(name):
    floor = json.loads((RUNS / name / "eval_floor.json").read_text(encoding="utf-8"))
    assert floor["grade_flips"] == 0 and floor["text_changes"] == 0
    _in_lesson("500 题里没有一题的判分或回答文字变了", "第 6.3 节")


def test_the_5090_page_quotes_the_same_runs():
    """L2.07 第 6 节（5090 一页走完）引用的真模型数字 = 附带的运行算出的。"""
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    # 第 50 步一列是第一对（seed 2：第二批），第 100 步两列是跑到第 100 步的一对（seed 2：第三批）
    for s, ((run, control), (run100, late)) in enumerate(zip(_pairs50(), _pairs100())):
        at50 = f"{run.mean(50, 'greedy'):.3f}（对照 {control.mean(50, 'greedy'):.3f}）"
        d = _gain(run100)
        at100 = f"{run100.mean(100, 'greedy'):.3f}（对照 {late.mean(100, 'greedy'):.3f}）"
        gain = f"{C.signed(d['diff'])} ± {d['se']:.3f}，p = {d['p']:.3g}"
        row = f"| seed {s} | {run.mean(0, 'greedy'):.3f} | {at50} | {at100} | {gain} |"
        assert row in page, f"L2.07 第 6.6 节的表和附带的运行对不上，应该是：{row}"
    second = _pairs100()[2]
    note = (
        f"第二次在第 50 步是 {second[0].mean(50, 'greedy'):.3f}"
        f"（对照 {second[1].mean(50, 'greedy'):.3f}）"
    )
    assert note in page, f"L2.07 第 6.6 节：{note}"
    gains = [_gain(r)["diff"] for r, _ in _pairs100()]
    span = f"高 {C.signed(min(gains))} 到 {C.signed(max(gains))}（均值 {C.signed(statistics.fmean(gains))}）"
    assert span in page, f"L2.07 第 6.6 节：{span}"
    ctl = "、".join(f"{c.mean(100, 'greedy'):.3f}" for _, c in _pairs100())
    assert f"三个对照都低于起点（{ctl}）" in page, "L2.07 第 6.6 节的对照"
    rows = {n: _rows(n) for n in NAMES}
    step4 = statistics.median(rows["recipe-s0"][s]["rollout_s"] + rows["recipe-s0"][s]["train_s"]
                              for s in range(11, 50))  # fmt: skip
    assert f"四个进程同卡时一步的中位数 {step4:.1f} s" in page
    ratio = statistics.median(rows["recipe-s0"][s]["train_s"] / rows["recipe-s0"][s]["rollout_s"]
                              for s in range(11, 50))  # fmt: skip
    assert f"rollout : 训练 ≈ 1 : {ratio:.2f}。" in page, "L2.07 第 6.5 节换到 5090 的推算"
    assert f"rollout 和训练约 1 : {ratio:.2f}" in page, (
        f"L2.07 第 6.5 节：训练 / rollout ≈ {ratio:.2f}"
    )
    peak = max(r["peak_vram_gb"] for r in rows["recipe-s0"].values())
    assert f"显存峰值 {peak:.2f} GiB（micro-batch 32、eval batch 512）" in page
    h100 = _span([_med(*a) for a in H100_STEPS])
    ro = _slower_on_h100("rollout_s")
    assert f"一步 {h100} s，rollout 只比 H200 慢 {ro:.2f} 倍" in page, "L2.07 第 6.5 节的 H100 数字"


def test_the_front_pages_quote_the_same_runs():
    """README、L1.01、L2.07 引用的第 100 步结果 = 附带的三个 seed 算出的。"""
    runs = [r for r, _ in _pairs100()]
    gains = [_gain(r) for r in runs]
    acc = [f"{r.mean(100, 'greedy'):.3f}" for r in runs]
    up = [C.signed(g["diff"]) for g in gains]
    p2 = [f"{g['p']:.2g}" for g in gains]
    ctl = [f"{c.mean(100, 'greedy'):.3f}" for _, c in _pairs100()]
    pages = {
        "README.md": (
            f"0.290 → {_join(acc)}**（第 100 步，三个 seed，\n  逐题配对 p = {_join(p2)}）",
            f"三个 seed 100 步涨了 {_join(up)}",
            f"three seeds went from 0.290 to {', '.join(acc[:2])} and {acc[2]}",
            f"(paired sign test p = {', '.join(p2[:2])} and {p2[2]})",
            f"all three controls ended below the start ({', '.join(ctl)})",
            f"三个 seed 里两个做到（seed 2 是 {up[2]}）",
        ),
        "L1_concepts/01_what_you_need/README.md": (
            f"三个 seed 100 步后 held-out 贪心正确率 0.290 → {_join(acc)}（逐题配对 p = {_join(p2)}）",
        ),
        "L2_algorithm/07_grpo_train/README.md": (
            f"0.290 → {' / '.join(acc)}（第 100 步，{' / '.join(up)}，逐题配对的符号检验 p = {' / '.join(p2)}）",
            f"100 步后 held-out 贪心正确率\n  0.290 → {_join(acc)}",
        ),
    }
    for page, quotes in pages.items():
        text = (ROOT / page).read_text(encoding="utf-8")
        for quote in quotes:
            assert quote in text, f"{page} 引用的真模型结果和附带的运行对不上，应该写：{quote}"


def test_what_ships_in_real_recipe():
    """第 6.2 节：附带了几个目录，起点的回答只附了两份（多大）。"""
    folders = [p for p in RUNS.iterdir() if p.is_dir()]
    _in_lesson(f"{_cn(len(folders))}个目录原样附在仓库里", "第 6.2 节")
    assert not list(RUNS.glob("*/curves.png")), "第 6.2 节说没有附 curves.png"
    size = (RUNS / "recipe-s0" / "answers_before.jsonl").stat().st_size / 1e6
    _in_lesson(f"它有 {size:.1f} MB", "第 6.2 节")
    with_after = sorted(p.parent.name for p in RUNS.glob("*/answers_after.jsonl"))
    assert with_after == ["control100-s0", "control100-s1", "control100-s2", "recipe100-s2"]
    assert sorted(p.name for p in (RUNS / RERUN).iterdir()) == [
        "config.json", "eval_before.json", "eval_floor.json", "metrics.jsonl"]  # fmt: skip
    assert sorted(p.name for p in (RUNS / SINGLE).iterdir()) == [
        "config.json", "timing_printed_on_box.txt"]  # fmt: skip
    for name in ("recipe-s0", "recipe100-s2"):  # 「seed 0、2 的运行后半段变短」
        lens = _seg(name, "completion_len_mean")
        assert statistics.fmean(lens[5:]) < statistics.fmean(lens[:5]), name


# ---------------------------------------------------------------- issue 44：该期待什么、p 值怎么读 ------------------------
L207 = ROOT / "L2_algorithm" / "07_grpo_train" / "README.md"


def _t975(df: int) -> float:
    """t 分布 97.5% 分位点，只用 3 个自由度：F(t) = 1/2 + (x/(1 + x²) + atan x)/π，x = t/√3；二分求解 F = 0.975。"""
    import math

    assert df == 3
    lo, hi = 0.0, 20.0
    for _ in range(200):
        mid = (lo + hi) / 2
        x = mid / math.sqrt(3)
        lo, hi = (
            (mid, hi) if 0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi < 0.975 else (lo, mid)
        )
    return lo


def test_the_range_for_one_new_seed_is_this_arithmetic():
    """L2.07 第 6.6 节：一个新 seed 第 100 步的涨幅范围 = 四次（三个 seed + 那一页的命令原样跑的一次）的均值 ± 预测的标准差。"""
    page_run = C.Run(L207.parent / "gpu_page" / "q3-s0")  # 那一页的命令原样跑的 seed 0
    gains = [_gain(r)["diff"] for r, _ in _pairs100()] + [_gain(page_run)["diff"]]
    n = len(gains)
    mean, sd = statistics.fmean(gains), statistics.stdev(gains)
    pred = sd * (1 + 1 / n) ** 0.5
    two_thirds = (mean - pred, mean + pred)
    ninety_five = (mean - 1.96 * pred, mean + 1.96 * pred)
    t = _t975(n - 1) * pred
    t_range = (mean - t, mean + t)

    def end(x):
        s = C.signed(x, 2)
        return "0" if s in ("+0.00", "\u22120.00") else s

    def span(lo_hi):
        return f"{end(lo_hi[0])} 到 {end(lo_hi[1])}"

    block = L207.read_text(encoding="utf-8").split("<!-- expected-gain:begin -->")[1]
    block = re.sub(r"\n(?!\n)\s*", "", block.split("<!-- expected-gain:end -->")[0])
    for quote in (
        f"{'、'.join(C.signed(g) for g in gains[:3])}，和这一页的命令原样跑的 seed 0",
        f"{C.signed(gains[3])}，都是和各自的训练前逐题配对的差",
        f"**四次的均值 {C.signed(mean)}，标准差 {sd:.3f}。**",
        f"和第一次差 {gains[0] - gains[3]:.3f}",
        f"{sd:.3f} × √(1 + 1/{n}) ≈ {pred:.3f}",
        f"约三分之二的新 seed 落在 {span(two_thirds)}，约 95% 落在 {span(ninety_five)}",
        f"按 t 分布（{n - 1} 个自由度），95% 的范围是 {span(t_range)}",
        f"四次的最小到最大（{C.signed(min(gains))} 到 {C.signed(max(gains))}）",
    ):
        assert quote in block, f"L2.07 第 6.6 节的范围和附带的运行算出的对不上，应该写：{quote}"
    assert (n - 1) / (n + 1) == 3 / 5 and "n = 4 时是 3/5" in block
    flat = re.sub(r"\n(?!\n)\s*", "", LESSON)
    for quote in (
        f"约三分之二落在 {span(two_thirds)}，约 95% 落在 {span(ninety_five)}；只有四个点，按 t 分布是 {span(t_range)}",
        f"约三分之二落在 {span(two_thirds)}，约 95% 落在 {span(ninety_five)}（怎么算的、",
    ):
        assert quote in flat, f"L2.08 第 6.6、6.8 节引用的范围要和 L2.07 第 6.6 节一致：{quote}"
    # 三个 seed 的最小到最大盖住下一个点的概率 (n − 1)/(n + 1) = 1/2（第 6.6 节「不能说的」）
    _in_lesson("只在大约一半的时候盖住一个新 seed", "第 6.6 节")


def test_how_to_read_the_p_values():
    """第 6.6 节：p 不含重跑的噪声；多重比较（正文里不同的「p = 」有几个，Bonferroni 的阈值）；事后选的步。"""
    import re

    part = LESSON.split("## 6. 在一个真模型上")[1].split("### 6.7 之前没成功的三对")[0]
    distinct = set(re.findall(r"p = ([0-9.]+(?:e-\d+)?)", part))
    n = len(distinct)
    _in_lesson(f"正文里写成「p = 」的不同的 p 就有 {n} 个", "第 6.6 节")
    bar = 0.05 / n
    _in_lesson(f"阈值是 0.05 / {n} ≈ {bar:.4f}", "第 6.6 节")
    gains = [_gain(r)["p"] for r, _ in _pairs100()]
    passed = [p < bar for p in gains]
    assert passed == [True, True, False], passed  # 「seed 0、1 过，seed 2 不过」
    at50 = [C.paired(c.values(50, "greedy"), r.values(50, "greedy"))["p"] for r, c in _pairs50()]
    assert [p < bar for p in at50] == [False, False, True], at50  # 「只有 seed 2 过」
    assert 0.05 / 27 > gains[1] > 0.05 / 28, "「比较多于 27 个时 seed 1 的 0.00184 也不过」"
    same = [C.paired(_run(a).values(50, "greedy"), _run(b).values(50, "greedy"))["diff"]
            for a, b in (("recipe-s2", "recipe100-s2"), ("control-s2", "control100-s2"))]  # fmt: skip
    _in_lesson(
        f"第 50 步的正确率就差 {same[0]:.3f} 和 {same[1]:.3f}（第 6.3 节），约 ±0.02", "第 6.6 节"
    )
    se = sorted(_gain(r)["se"] for r, _ in _pairs100())
    _in_lesson(f"和一个涨幅自己的标准误（±{se[0]:.3f}–{se[-1]:.3f}）一样大", "第 6.6 节")


def test_the_old_flip_floor_kept_the_eval_batch():
    """第 6.3 节：附带的运行的 --start-evals 2 只换了题序，两次都是 eval batch 512（没有量到 batch 大小的影响）。"""
    for name in ("recipe-s0", "recipe-s1", "recipe-s2", "recipe100-s2", RERUN):
        assert _config(name)["eval_batch"] == 512 and _config(name)["start_evals"] == 2
        floor = json.loads((RUNS / name / "eval_floor.json").read_text(encoding="utf-8"))
        assert "batch_size_second" not in floor, "那时的底噪还不换 batch 大小"
    _in_lesson("只换了题序，没有换 batch 的大小**（两次都是 eval batch 512）", "第 6.3 节")


def test_groups_with_signal_and_the_old_kl_as_presets_toml_says():
    """presets.toml：16 组里约 9 组带信号（zero_std_frac）；旧配方的 KL 最大值，lr 5e-6 的那次。"""
    text = PRESETS.read_text(encoding="utf-8")
    zero = sorted(statistics.fmean(_rows(n)[s]["zero_std_frac"] for s in range(1, 101))
                  for n in RUNS100)  # fmt: skip
    signal = [16 * (1 - z) for z in zero]
    assert all(round(x) == 9 for x in signal), signal
    quote = f"zero_std_frac 的均值 {zero[0]:.2f}–{zero[-1]:.2f}"
    assert quote in text and "16 组里约 9 组带信号" in text, (
        f"presets.toml 里的数和附带的运行对不上：{quote}"
    )
    _in_lesson("现在的配方三个运行平均 16 组里约 9 组带信号", "第 6.2 节")
    old = HERE / "real_run"
    kl = {}
    for name in ("recipe", "lr2e-6-token_mean-t0.7", "lr5e-6"):
        lines = (old / name / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        kl[name] = max(r["kl"] for r in map(json.loads, lines) if r.get("kl") is not None)
    want = f"KL（k3）最大 {kl['recipe']:.3f}（lr 1e-6）和 {kl['lr2e-6-token_mean-t0.7']:.3f}（lr 2e-6）"
    assert want in text and f"lr 5e-6 的那次到了 {kl['lr5e-6']:.3f}" in text, want
    assert all(r["kl"] is None for r in _rows("recipe-s0").values()), "现在的配方不算 KL"
