"""L2.08 第 6 节的 real_run.py：只读运行目录的分析脚本（不加载模型），以及课文里引用的数字。

课文第 6 节的数字（翻对/翻错、符号检验、回答写法的计数）都由这个脚本从仓库附带的运行目录
（L2_algorithm/08_reading_the_curves/real_run/）算出来；这里重算一遍，确认课文和数据对得上。
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "L2_algorithm" / "08_reading_the_curves"
LESSON = (HERE / "README.md").read_text(encoding="utf-8")


def _load():
    spec = importlib.util.spec_from_file_location("l2_08_real_run", HERE / "real_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load()


def test_sign_test_by_hand():
    assert R.sign_test_p(0, 0) == 1.0
    assert R.sign_test_p(5, 0) == pytest.approx(2 / 32)  # 5 次全朝一边：2 × (1/2)^5
    assert R.sign_test_p(3, 3) == 1.0
    assert R.sign_test_p(1, 9) == pytest.approx(2 * 11 / 1024)  # 2 × (C(10,0) + C(10,1)) / 2^10


def test_paired_counts_and_se():
    q = [{"question": str(i), "reward": r} for i, r in enumerate([1, 0, 0, 1])]
    a = [{"question": str(i), "reward": r} for i, r in enumerate([1, 1, 0, 0])]
    pr = R.paired(q, a)
    assert (pr["up"], pr["down"], pr["diff"]) == (1, 1, 0.0)
    d = [0, 1, 0, -1]  # 配对差；标准误 = 样本标准差（分母 n）/ sqrt(n)
    assert pr["se"] == pytest.approx(math.sqrt(sum(x * x for x in d) / 4) / 2)
    with pytest.raises(ValueError, match="不是同一批"):
        R.paired(q, list(reversed(a)))


def test_loop_detector():
    assert R.stuck_in_a_loop("x = 1\n" + "so the total is 5, " * 6)
    assert not R.stuck_in_a_loop("3 + 4 = 7\n7 × 2 = 14\nThe answer is \\boxed{14}.")


def test_bad_run_folder_is_refused_in_chinese(tmp_path):
    with pytest.raises(SystemExit) as err:
        R.main([str(tmp_path)])
    assert "不存在" in str(err.value.code) and "运行目录" in str(err.value.code)


def test_lesson_numbers_come_from_the_shipped_run():
    """第 6 节写的数字 == 脚本的函数在附带的运行目录上算出的数字。"""
    run = HERE / "real_run" / "grpo"
    before = R.read_jsonl(run / "answers_before.jsonl")
    after = R.read_jsonl(run / "answers_after.jsonl")
    pr = R.paired(before, after)
    assert f"翻对 {pr['up']} 题，翻错 {pr['down']} 题" in LESSON
    assert f"配对的差 {pr['diff']:+.3f} ± {pr['se']:.3f}".replace("-", "−") in LESSON
    assert f"p = {pr['p']:.2f}" in LESSON
    table = R.habit_table(before, after, 100)
    for name in (
        "带代码块 ```",
        "以上都没有（只能取最后一个数）",
        "原地打转（同一段连着重复 ≥ 4 次）",
    ):
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        assert row in LESSON, f"课文第 6.5 节的这一行和数据算出的不一样：{row}"
    ours = R.accuracy_table(run, HERE / "real_run" / "control", len(before)).splitlines()[2:]
    for line in ours:  # 第 6.3 节的表：只有第 0 步和缺的格子写法不同
        step, *cells = line.strip("|").split("|")
        if step.strip() in ("0", "100"):
            continue
        assert line in LESSON, f"课文第 6.3 节少了这一行：{line}"
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert config["lr"] == 5e-6 and config["n_heldout"] == len(before) == 500


def test_main_on_a_small_run(tmp_path, capsys):
    """一个 4 题的运行目录和它的对照：三张表和图都出来，退出码 0。"""
    run, control = tmp_path / "run", tmp_path / "control"
    for folder, evals in ((run, [(1, 0.5), (2, 0.75)]), (control, [(1, 0.25)])):
        folder.mkdir()
        (folder / "eval_before.json").write_text(json.dumps({"accuracy": 0.5, "n": 4}))
        rows = [{"step": s, "accuracy": a, "kl": 0.01 * s, "entropy": 0.3, "eval_accuracy": a,
                 "completion_len_mean": 10.0, "truncation_rate": 0.0} for s, a in evals]  # fmt: skip
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = lambda rewards: "".join(
        json.dumps({"question": f"q{i}", "completion": "```py```" * (r == 0), "reward": r}) + "\n"
        for i, r in enumerate(rewards)
    )
    (run / "answers_before.jsonl").write_text(answers([1, 0, 0, 1]))
    (run / "answers_after.jsonl").write_text(answers([1, 1, 1, 0]))
    assert R.main([str(run), "--control", str(control), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "翻对 2 题，翻错 1 题" in out and "| 带代码块 ``` | 2 | 1 |" in out
    assert (tmp_path / "c.png").stat().st_size > 10_000
