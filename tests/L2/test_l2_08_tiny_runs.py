"""L2.08 第 1 节：课文里 tiny 运行的每个数，都由仓库附带的运行目录（tiny_runs/）算出来。

tiny_runs/ 是 2026-12-05 在本项目的 2 核 CPU 上跑的默认设置：seed 0、1、2 各一次运行，各带一个组内打乱的对照
（--reward shuffled），只留下 config、metrics、评估和逐题结果（没有 checkpoint）。这里不跑模型，只读文件。
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "L2_algorithm" / "08_reading_the_curves"
RUNS = HERE / "tiny_runs"
LESSON = (HERE / "README.md").read_text(encoding="utf-8")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"l2_08_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


C = _load("compare_runs")


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUNS / name / "metrics.jsonl").read_text().splitlines()]


def _json(name: str, file: str) -> dict:
    return json.loads((RUNS / name / file).read_text(encoding="utf-8"))


def _in_lesson(text: str, where: str) -> None:
    assert text in LESSON, f"L2.08 {where} 里找不到（数字和 tiny_runs/ 对不上？）：\n{text}"


def test_the_shipped_pairs_are_fair():
    """每对：同一个 seed，除 reward 外设置相同，100 步里每一步的训练题都相同。"""
    for run, control in C.SHIPPED_PAIRS:
        a, b = _json(run, "config.json"), _json(control, "config.json")
        assert (a["reward"], b["reward"]) == ("correctness", "shuffled")
        assert {k: a.get(k) for k in C.SAME} == {k: b.get(k) for k in C.SAME}
        ids = [r["prompt_ids"] for r in _rows(run)], [r["prompt_ids"] for r in _rows(control)]
        assert len(ids[0]) == 100 and ids[0] == ids[1]


def test_compare_output_in_the_lesson_is_what_the_tool_prints():
    pairs = [(C.Run(RUNS / r), C.Run(RUNS / c)) for r, c in C.SHIPPED_PAIRS]
    printed = C.report(pairs).replace("## ", "#### ")
    block = LESSON.split("<!-- compare-output:begin -->")[1].split("<!-- compare-output:end -->")[0]
    assert block.strip() == printed.strip(), (
        "L2.08 第 1.1 节的 compare_runs.py 输出和附带的运行对不上"
    )


def test_section_1_table_is_the_seed0_run():
    rows = {r["step"]: r for r in _rows("seed0")}
    before = _json("seed0", "eval_before.json")
    _in_lesson(
        f"| 0 | — | {before['accuracy']:.3f} | {before['pass_at']['1']:.3f} | "
        f"{before['pass_at']['8']:.3f} | — | — | — | — |",
        "第 1 节的表",
    )
    for step in (1, 5, 10, 20, 40, 60, 80, 100):
        r = rows[step]
        cells = [
            str(step), f"{r['accuracy']:.2f}", f"{r['eval_accuracy']:.3f}",
            f"{r['eval_pass_at_1']:.3f}" if "eval_pass_at_1" in r else "",
            f"{r['eval_pass_at_8']:.3f}" if "eval_pass_at_8" in r else "",
            f"{r['format_rate']:.2f}", f"{r['completion_len_mean']:.1f}", f"{r['entropy']:.3f}",
            f"{r['zero_std_frac']:.2f}",
        ]  # fmt: skip
        _in_lesson("| " + " | ".join(cells).replace("  ", " ") + " |", "第 1 节的表")
    after = _json("seed0", "eval_after.json")
    _in_lesson(
        f"held-out 贪心正确率 **{before['accuracy']:.3f} → {after['accuracy']:.3f}**", "第 1 节"
    )


def test_section_1_1_table_and_gradient_norms():
    def cells(kind: str, key) -> str:
        names = [f"seed{s}{kind}" for s in range(3)]
        return " / ".join(f"{key(_json(n, 'eval_after.json')):.3f}" for n in names)

    for kind, label in (
        ("", "默认运行，第 100 步（seed 0 / 1 / 2）"),
        ("-shuffled", "对照，第 100 步（seed 0 / 1 / 2）"),
    ):
        greedy = cells(kind, lambda e: e["accuracy"])
        p1 = cells(kind, lambda e: e["pass_at"]["1"])
        p8 = cells(kind, lambda e: e["pass_at"]["8"])
        _in_lesson(f"| {label} | {greedy} | {p1} | {p8} |", "第 1.1 节的表")
    norm = lambda kind: statistics.fmean(
        statistics.fmean(r["grad_norm"] for r in _rows(f"seed{s}{kind}")) for s in range(3)
    )
    _in_lesson(
        f"每步裁剪前的梯度范数运行是 {norm(''):.2f}，对照是 {norm('-shuffled'):.2f}", "第 1.1 节"
    )


def test_seed_band_table_is_what_seed_bands_prints():
    bands = _load("seed_bands")
    for label, kind in (("default run", ""), ("control: --reward shuffled", "-shuffled")):
        runs = [bands.load_run(RUNS / f"seed{s}{kind}") for s in range(3)]
        _in_lesson(bands.summary(label, runs), "第 1.3 节的表")


@pytest.mark.parametrize("run, control", [("seed0", "seed0-shuffled")])
def test_real_run_reads_a_cpu_run_and_its_control(run, control, capsys):
    """CPU 上的运行（peak_vram_gb 是 null）和它的对照：real_run.py 也能比，退出码 0。"""
    R = _load("real_run")
    assert R.main([str(RUNS / run), "--control", str(RUNS / control)]) == 0
    out = capsys.readouterr().out
    assert "显存峰值 —（CPU 上的运行没有显存数字）" in out and "运行 − 对照" in out


def test_the_other_controls_in_section_1_1():
    """第 1.1 节「两种打乱」和「学习率大了」里的数，都来自 tiny_runs/controls/ 和三对运行。"""
    ctl = RUNS / "controls"
    rows = lambda folder: [
        json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()
    ]
    after = lambda folder: json.loads((folder / "eval_after.json").read_text())
    evals = lambda folder: {
        r["step"]: r["eval_accuracy"] for r in rows(folder) if "eval_accuracy" in r
    }
    run, within, batch = (
        rows(RUNS / "seed0"),
        rows(RUNS / "seed0-shuffled"),
        rows(ctl / "ctl-batch-s0"),
    )
    assert run[0]["zero_std_frac"] == within[0]["zero_std_frac"]  # 第 1 步：同样的回答、同样的组成
    _in_lesson(
        f"组内全相同的组在运行和组内打乱的对照里都是 {run[0]['zero_std_frac']:.2f}，"
        f"在整批打乱的对照里只有 {batch[0]['zero_std_frac']:.2f}",
        "第 1.1 节两种打乱",
    )
    _in_lesson(
        f"梯度范数运行 {run[0]['grad_norm']:.2f}、组内打乱 {within[0]['grad_norm']:.2f}、"
        f"整批打乱 {batch[0]['grad_norm']:.2f}",
        "第 1.1 节两种打乱",
    )
    zs = lambda r: statistics.fmean(x["zero_std_frac"] for x in r)
    _in_lesson(
        f"运行 {zs(run):.2f}、组内打乱 {zs(within):.2f}、整批打乱 {zs(batch):.2f}",
        "第 1.1 节两种打乱",
    )
    b, w = after(ctl / "ctl-batch-s0"), after(RUNS / "seed0-shuffled")
    _in_lesson(
        f"第 100 步贪心 {b['accuracy']:.3f}、pass@1 {b['pass_at']['1']:.3f}、pass@8 {b['pass_at']['8']:.3f}",
        "第 1.1 节两种打乱",
    )
    _in_lesson(
        f"（{w['accuracy']:.3f} / {w['pass_at']['1']:.3f} / {w['pass_at']['8']:.3f}）",
        "第 1.1 节两种打乱",
    )
    hi, hb = ctl / "ctl-lr1e-4-s0", ctl / "ctl-batch-lr1e-4-s0"
    e, a = evals(hi), after(hi)
    assert json.loads((hi / "config.json").read_text())["lr"] == 1e-4
    _in_lesson(
        f"第 5 步涨到 {e[5]:.3f}、第 10 步 {e[10]:.3f}、第 100 步还有 {e[100]:.3f}——同时 pass@1 从 0.224 掉到 "
        f"{a['pass_at']['1']:.3f}、pass@8 从 0.680 掉到 {a['pass_at']['8']:.3f}",
        "第 1.1 节学习率大了",
    )
    e, a = evals(hb), after(hb)
    _in_lesson(
        f"（第 10 步 {e[10]:.3f}，第 100 步 {e[100]:.3f}；pass@1 {a['pass_at']['1']:.3f}、pass@8 {a['pass_at']['8']:.3f}）",
        "第 1.1 节学习率大了",
    )


def _row(folder: Path, step: int, keys: tuple[str, ...], digits: dict) -> str:
    r = {
        x["step"]: x for x in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
    }[step]
    return f"| {step} | " + " | ".join(f"{r[k]:.{digits.get(k, 2)}f}" for k in keys) + " |"


def test_failure_labs_tables():
    """第 2、3 节的表：tiny_runs/labs/ 里的 lab-format、lab-lr。"""
    labs = RUNS / "labs"
    fmt = ("reward_mean", "accuracy", "entropy", "zero_std_frac")
    for step in (1, 9, 25, 40):
        _in_lesson(_row(labs / "lab-format", step, fmt, {"entropy": 3}), "第 2 节的表")
    lr = ("accuracy", "format_rate", "completion_len_mean", "entropy", "zero_std_frac")
    for step in (1, 5, 21, 38, 40):
        _in_lesson(
            _row(labs / "lab-lr", step, lr, {"completion_len_mean": 1, "entropy": 3}), "第 3 节的表"
        )
    a = json.loads((labs / "lab-lr" / "eval_after.json").read_text())
    _in_lesson(
        f"held-out 贪心正确率：0.060 → {a['accuracy']:.3f}，格式率 0.90 → {a['format_rate']:.3f}",
        "第 3 节",
    )
    f = json.loads((labs / "lab-format" / "eval_after.json").read_text())
    _in_lesson(
        f"训练后 **{f['accuracy']:.2f}**；同一批题上的格式率：0.90 → **{f['format_rate']:.2f}**",
        "第 2 节",
    )


def test_low_temperature_lab_table():
    """第 4 节的表和第 41–100 步的平均：tiny_runs/labs/lab-temp 和 lab-temp-control。"""
    labs = RUNS / "labs"
    load = lambda name: {
        r["step"]: r
        for r in map(json.loads, (labs / name / "metrics.jsonl").read_text().splitlines())
    }
    t, c = load("lab-temp"), load("lab-temp-control")
    for step in (1, 10, 30, 60, 100):
        cells = []
        for r in (t[step], c[step]):
            held = f"{r['eval_accuracy']:.3f}"
            held = f"**{held}**" if step == 100 else held
            cells += [
                f"{r['accuracy']:.2f}",
                held,
                f"{r['entropy']:.3f}",
                f"{r['zero_std_frac']:.2f}",
            ]
        _in_lesson(f"| {step} | " + " | ".join(cells) + " |", "第 4 节的表")
    late = lambda r, k: statistics.fmean(r[s][k] for s in range(41, 101))
    _in_lesson(
        f"温度 0.3 时组内全相同的比例 {late(t, 'zero_std_frac'):.2f}、熵 {late(t, 'entropy'):.3f}；"
        f"温度 1.0 时 {late(c, 'zero_std_frac'):.2f}、{late(c, 'entropy'):.3f}",
        "第 4 节",
    )
