"""compare_runs.py 在坏的、或对不上的运行目录上（issue 47）：拒绝时一行中文点名文件和行，退出码 1，没有 traceback；
读得懂但不寻常的（两边都是对照、pass_k 不同）在 stderr 上说一句。只读文件，不跑模型。"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "L2_algorithm" / "08_reading_the_curves"
SCRIPT = HERE / "compare_runs.py"


@pytest.fixture(scope="module")
def C():
    import importlib.util

    spec = importlib.util.spec_from_file_location("l2_08_compare_faults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def runs(tmp_path):
    """seed0 和它的对照的一份副本（可以随便改）。"""
    for name in ("seed0", "seed0-shuffled"):
        shutil.copytree(HERE / "tiny_runs" / name, tmp_path / name)
    return tmp_path / "seed0", tmp_path / "seed0-shuffled"


def compare(C, capsys, *argv) -> tuple[int, str, str]:
    rc = C.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def refused(C, capsys, *argv) -> str:
    rc, _, err = compare(C, capsys, *argv)
    assert rc == 1 and err.startswith("错误："), err
    return err


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text(encoding="utf-8"))
    edit(obj)
    path.write_text(json.dumps(obj), encoding="utf-8")


def test_pairs_that_cannot_be_compared_are_refused(C, capsys, runs):
    run, ctl = runs
    assert "前后反了" in refused(C, capsys, "--pair", ctl, run)  # 对照当成了运行
    assert "自己配对" in refused(C, capsys, "--pair", run, run)
    err = refused(C, capsys, "--pair", run, ctl, "--pair", run, ctl)  # 会被当成两个 seed
    assert "和第 1 个一样" in err


def test_odd_pairs_are_said_on_stderr(C, capsys, runs, tmp_path):
    run, ctl = runs
    shutil.copytree(ctl, tmp_path / "ctl2")
    rc, out, err = compare(C, capsys, "--pair", ctl, tmp_path / "ctl2")
    assert rc == 0 and "两边都是对照" in err and "运行 − 对照" in out
    shutil.copytree(run, tmp_path / "run2")
    rc, out, err = compare(C, capsys, "--pair", run, tmp_path / "run2")
    assert rc == 0 and "后一个不是对照" in err


def test_different_held_out_sizes_are_refused(C, capsys, runs):
    """以前：8 题对 6 题 -> paired() 的 ValueError，traceback。"""
    run, ctl = runs

    def cut(pq):
        for key in ("greedy", "correct_of_k"):
            if key in pq:
                pq[key] = pq[key][:6]

    _edit_json(ctl / "eval_before.json", lambda d: cut(d["per_question"]))
    rows = _lines(ctl / "eval_questions.jsonl")
    for r in rows:
        cut(r)
    _write(ctl / "eval_questions.jsonl", rows)
    assert "held-out 题数不同（200 vs 6）" in refused(C, capsys, "--pair", run, ctl)


def test_odd_per_question_results_are_refused_with_file_and_line(C, capsys, runs):
    run, ctl = runs
    rows = _lines(ctl / "eval_questions.jsonl")
    good = json.loads(json.dumps(rows))
    rows[6]["correct_of_k"][5] = rows[6]["k"] + 3  # 手改：比 k 还大（以前：pass_at_k 的 traceback）
    _write(ctl / "eval_questions.jsonl", rows)
    err = refused(C, capsys, "--pair", run, ctl)
    assert "eval_questions.jsonl 第 7 行（第 40 步）" in err and "0 到 8 之间" in err
    _write(ctl / "eval_questions.jsonl", good)
    _edit_json(ctl / "eval_before.json", lambda d: d.update(per_question=[0, 1]))  # 以前：traceback
    assert "per_question 不对" in refused(C, capsys, "--pair", run, ctl)


def test_a_cut_last_line_is_refused_not_skipped(C, capsys, runs):
    """以前：最后一行写了一半，比较悄悄挪到了更早的一步。"""
    run, ctl = runs
    path = ctl / "eval_questions.jsonl"
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - 200], encoding="utf-8")
    err = refused(C, capsys, "--pair", run, ctl)
    assert "第 10 行" in err and "只写了一半" in err and "更早的一步" in err


def test_a_duplicated_metrics_row_is_named(C, capsys, runs):
    """以前：对照的 metrics.jsonl 里一步出现两次 -> 「对照没有用同一个选题随机数流」，没说是哪一行。"""
    run, ctl = runs
    lines = (ctl / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(5, lines[3])
    (ctl / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    err = refused(C, capsys, "--pair", run, ctl)
    assert "metrics.jsonl 第 6 行又是第 4 步（第 4 行已经有这一步）" in err


def test_different_pass_k_is_compared_at_the_common_k(C, capsys, runs):
    """以前：pass@2 和 pass@4 在同一个标签下比。现在两边都按共同的 k（Chen 的估计对 <= 采样数的 k 无偏）。"""
    run, ctl = runs
    rows = _lines(run / "eval_questions.jsonl")

    def four(pq):  # 运行只采了 4 条：把 8 条里答对的数换成 4 条里一个合法的数
        if pq["k"]:
            pq["k"], pq["correct_of_k"] = 4, [min(c, 4) for c in pq["correct_of_k"]]

    for r in rows:
        four(r)
    _write(run / "eval_questions.jsonl", rows)
    _edit_json(run / "eval_before.json", lambda d: four(d["per_question"]))
    rc, out, err = compare(C, capsys, "--pair", run, ctl)
    assert rc == 0 and "pass_k 不同（[4, 8]）" in err and "pass@4" in err
    assert "pass@8" not in out and "| pass@4 |" in out


@pytest.mark.slow
def test_plot_format_folder_and_leftovers(C, capsys, runs, tmp_path):
    run, ctl = runs
    out = tmp_path / "figs"
    out.mkdir()
    (out / "mine.tmp").write_text("keep")
    err = refused(C, capsys, "--pair", run, ctl, "--plot", out)  # 以前：拒绝了，但留下 .tmp.png
    assert "是一个已有的目录" in err
    assert sorted(p.name for p in out.iterdir()) == ["mine.tmp"]
    assert "不是能画的格式" in refused(C, capsys, "--pair", run, ctl, "--plot", out / "a.jpg")
    rc, _, _ = compare(C, capsys, "--pair", run, ctl, "--plot", out / "compare.pdf")
    assert rc == 0 and (out / "compare.pdf").read_bytes().startswith(b"%PDF")  # 以前：PNG 字节
    err = refused(C, capsys, "--pair", run, ctl, "--plot", out / "no" / "a.png")
    assert "不存在" in err  # 在读任何目录之前就说
    assert sorted(p.name for p in out.iterdir()) == ["compare.pdf", "mine.tmp"]


@pytest.mark.slow
def test_an_ascii_or_full_stdout(tmp_path):
    """LC_ALL=C、UTF-8 模式关着：stdout 是 ASCII（租来的机器、一些 CI）。以前：UnicodeEncodeError。
    stdout 在 /dev/full 上：以前是 OSError 的 traceback。"""
    env = dict(os.environ, LC_ALL="C", PYTHONUTF8="0", PYTHONIOENCODING="")
    env.pop("LANG", None)
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-2000:]
    assert "运行 − 对照".encode() in proc.stdout
    with open("/dev/full", "w") as full:  # stdout 写不进去：一行中文说是 stdout
        proc = subprocess.run([sys.executable, str(SCRIPT)], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "写不了标准输出 stdout" in proc.stderr


# ---------------------------------------------------------------- 课里的另外两个工具


def _tool(name: str, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(HERE / name), *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)  # fmt: skip


def _refused_in_chinese(proc, *needles) -> None:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "错误" in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """tiny 预设 2 步、4 道 held-out 题（有的题型一题都没有），带 checkpoint。"""
    out = tmp_path_factory.mktemp("l2_08") / "run"
    train = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
    args = ["--n-heldout", "4", "--prompts-per-step", "2", "--group-size", "4", "--micro-batch",
            "8", "--max-new-tokens", "12", "--n-train", "100", "--pass-k", "0", "--eval-every",
            "2", "--save-every", "2", "--steps", "2", "--out", out]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(train), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.slow
def test_before_after_on_a_small_held_out_set_and_a_cut_config(small_run, tmp_path):
    """以前：--n-heldout 小到缺一种题型 -> ZeroDivisionError；config.json 截断 -> JSONDecodeError 的 traceback。"""
    proc = _tool("before_after.py", small_run)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "| — | — |" in proc.stdout  # 缺的那种题型：没有题，不是 0/0
    _refused_in_chinese(_tool("before_after.py", small_run, "--pass-k", "abc"), "要一个整数")
    cut = tmp_path / "cut"
    cut.mkdir()
    text = (small_run / "config.json").read_text(encoding="utf-8")
    (cut / "config.json").write_text(text[: len(text) // 2], encoding="utf-8")
    _refused_in_chinese(_tool("before_after.py", cut), "config.json 读不出来")


@pytest.mark.slow
def test_cudnn_nan_run_widths_refuses_before_the_work(tmp_path):
    """以前：--run-widths 没给 --model、metrics.jsonl 最后一行写了一半 -> traceback。"""
    run = tmp_path / "seed0"
    shutil.copytree(HERE / "tiny_runs" / "seed0", run)
    _refused_in_chinese(_tool("cudnn_nan.py", "--run-widths", run), "--run-widths 要 --model")
    text = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(text[:-40])
    proc = _tool("cudnn_nan.py", "--run-widths", run, "--model", tmp_path / "no-model")
    _refused_in_chinese(proc, "metrics.jsonl 的最后一行（第 100 行）只写了一半")
    proc = _tool("cudnn_nan.py", "--json", tmp_path / "missing" / "r.json")
    _refused_in_chinese(proc, "不存在")


def test_different_questions_are_refused_and_a_repeated_seed_is_said(C, capsys, runs, tmp_path):
    """以前：对照用了另一个 --difficulty（题全不一样），只多一行「还有这些设置不同」，照样逐题配对；
    一个运行的副本配同一个对照，当成了第二个 seed。"""
    run, ctl = runs
    _edit_json(ctl / "config.json", lambda c: c.update(difficulty=c["difficulty"] + 1))
    assert "决定题目的设置不同（difficulty" in refused(C, capsys, "--pair", run, ctl)
    _edit_json(ctl / "config.json", lambda c: c.update(difficulty=c["difficulty"] - 1))
    shutil.copytree(run, tmp_path / "run-copy")
    rc, _, err = compare(C, capsys, "--pair", run, ctl, "--pair", tmp_path / "run-copy", ctl)
    assert rc == 0 and "同一个 seed" in err


def test_an_evaluation_of_neither_size_is_refused(C, capsys, tmp_path):
    """--final-heldout 的运行评两种题数（训练前和最后一步全部、训练中前 n_heldout 道）：别的题数点名两种。"""
    gpu = ROOT / "L2_algorithm" / "10_dynamic_sampling" / "gpu_runs"
    for name in ("on-s0", "off-s0"):
        shutil.copytree(gpu / name, tmp_path / name)
    rows = _lines(tmp_path / "off-s0" / "eval_questions.jsonl")
    rows[0]["greedy"] = rows[0]["greedy"][:499]
    _write(tmp_path / "off-s0" / "eval_questions.jsonl", rows)
    err = refused(C, capsys, "--pair", tmp_path / "on-s0", tmp_path / "off-s0")
    assert (
        "第 1 行（第 50 步）" in err and "greedy 有 499 题，这个目录的评估是 1319 或 500 题" in err
    )


def test_a_final_heldout_on_one_side_only_is_refused_naming_the_flag(C, capsys, tmp_path):
    """L2.07 第 6.6 节让学习者在运行和对照上都加 --final-heldout 1319；只加了一边时，拒绝的那句要点名这个参数。"""
    gpu = ROOT / "L2_algorithm" / "10_dynamic_sampling" / "gpu_runs"
    shutil.copytree(gpu / "on-s0", tmp_path / "on-s0")
    ctl = tmp_path / "tiny-ctl"
    shutil.copytree(HERE / "tiny_runs" / "seed0-shuffled", ctl)
    _edit_json(ctl / "config.json", lambda c: c.update(
        {k: json.loads((gpu / "on-s0" / "config.json").read_text())[k]
         for k in ("data", "n_train", "difficulty", "n_heldout")}))  # fmt: skip
    err = refused(C, capsys, "--pair", tmp_path / "on-s0", ctl)
    assert "held-out 题数不同（1319 vs 200）" in err and "--final-heldout" in err
