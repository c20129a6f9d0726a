"""L2.08 第 6 节的 real_run.py：只读运行目录的分析脚本（不加载模型），以及课文里引用的数字。

课文第 6 节的数字（三对运行的总表、翻对/翻错、符号检验、运行减对照、reward 分段、回答写法的计数、十道题、
显存、时间、人读的核对）都由这个脚本从仓库附带的运行目录（L2_algorithm/08_reading_the_curves/real_run/）算出来；
这里重算一遍，确认课文和数据对得上。
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
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


SHIPPED = HERE / "real_run"
B, BC = SHIPPED / "lr5e-6", SHIPPED / "lr5e-6-shuffled"
R1, C1 = SHIPPED / "recipe", SHIPPED / "recipe-shuffled"
R2, C2 = SHIPPED / "lr2e-6-token_mean-t0.7", SHIPPED / "lr2e-6-token_mean-t0.7-shuffled"


def _in_lesson(text, where):
    assert text in LESSON, f"课文{where}和数据算出的不一样，应有：{text}"


def test_shipped_folders_hold_no_checkpoint_and_say_what_they_ran():
    for run, ctl in R.PAIRS:
        for name in (run, ctl):
            folder = SHIPPED / name
            assert not list(folder.glob("checkpoint*")), f"{folder} 不该附 checkpoint"
            c = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            assert c["n_heldout"] == 500 and c["reward"] == (
                "shuffled" if name == ctl else "correctness"
            )
    assert json.loads((R1 / "config.json").read_text(encoding="utf-8"))["lr"] == 1e-6
    c2 = json.loads((R2 / "config.json").read_text(encoding="utf-8"))
    assert (c2["lr"], c2["aggregation"], c2["temperature"]) == (2e-6, "token_mean", 0.7)
    assert json.loads((B / "config.json").read_text(encoding="utf-8"))["lr"] == 5e-6
    assert R.steps_done(R1) == R.steps_done(C1) == 50 and R.steps_done(R2) == 100


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_lesson_tables_come_from_the_shipped_runs():
    """第 6.7.2–6.7.4 节的表 == 脚本的函数在附带的运行目录上算出的表（逐行）。"""
    for run, ctl in R.PAIRS:
        _in_lesson(R.summary_row(SHIPPED / run), "第 6.7.2 节总表的一行")
        _in_lesson(R.summary_row(SHIPPED / ctl), "第 6.7.2 节总表的一行")
        _in_lesson(
            R.pair_difference(SHIPPED / run, SHIPPED / ctl), "第 6.7.2 节「运行 − 对照」的一行"
        )
        for name in (run, ctl):
            _in_lesson(R.segment_row(SHIPPED / name), "第 6.7.3 节 reward 分段表的一行")
    for line in R.accuracy_table(R2, C2, 500).splitlines():
        _in_lesson(line, "第 6.7.2 节第三对的逐点表")
    table = R.habit_columns([
        ("B 训练前（eval batch 256）", R.answers(B, "before")),
        ("B 第 100 步", R.answers(B, "after")),
        ("训练前（eval batch 512）", R.answers(R2, "before")),
        ("lr2e-6 第 100 步", R.answers(R2, "after")),
        ("它的对照 第 100 步", R.answers(C2, "after")),
    ])  # fmt: skip
    for line in table.splitlines():
        _in_lesson(line, "第 6.7.4 节回答写法的表")
    _in_lesson(
        R.render_examples(R.answers(R2, "before"), R.answers(R2, "after"), 10),
        "第 6.7.4 节的十道题",
    )


def test_lesson_sentences_come_from_the_shipped_runs():
    """正文里单独引用的数字：配对、翻题、对照、batch 大小的影响、显存、时间、人读的核对。"""
    sig = R.signed
    for run in (B, R2, C2):
        pr = R.paired(R.answers(run, "before"), R.answers(run, "after"))
        _in_lesson(f"翻对 {pr['up']} 题，翻错 {pr['down']} 题", "翻对翻错")
        _in_lesson(f"配对的差 {sig(pr['diff'])} ± {pr['se']:.3f}", "配对的差")
    pr = R.paired(R.answers(R2, "before"), R.answers(R2, "after"))
    _in_lesson(f"{sig(pr['diff'])} ± {pr['se']:.3f}（符号检验 p = {pr['p']:.2f}", "第 6.7 节开头")
    vs = R.paired(R.answers(C2, "after"), R.answers(R2, "after"))
    _in_lesson(f"比它的对照高 {sig(vs['diff'])} ± {vs['se']:.3f}", "第 6.7 节开头")
    _in_lesson(f"运行对、对照错的 {vs['up']} 题，反过来的 {vs['down']} 题", "第 6.7.2 节")
    flips = pr["up"] + pr["down"]
    _in_lesson(f"判分变了的共 {flips} 题，其余 {pr['n'] - flips} 题", "第 6.7.4 节")
    ex = R.flipped(R.answers(R2, "before"), R.answers(R2, "after"), 10)
    _in_lesson("展开：第 " + "、".join(map(str, ex)) + " 题", "第 6.7.4 节")
    ups = sum(R.answers(R2, "after")[i]["reward"] > 0 for i in ex)
    _in_lesson(
        f"这十道里{'一二三四五六七八九十'[ups - 1]}道翻对、{'一二三四五六七八九十'[9 - ups]}道翻错",
        "第 6.7.4 节",
    )
    # 第二对到第 50 步、对照的 ±0.03
    r1, c1, c2 = dict(R.eval_points(R1)), dict(R.eval_points(C1)), dict(R.eval_points(C2))
    _in_lesson(
        f"配方本身到第 50 步已是 {sig(r1[50] - r1[0])}、对照 {sig(c1[50] - c1[0])}", "第 6.7.7 节"
    )
    _in_lesson(
        f"第三对的对照 {sig(c2[100] - c2[0])}，第二对的对照第 50 步 {sig(c1[50] - c1[0])}",
        "第 6.7.2 节",
    )
    _in_lesson(
        f"第三对第 100 步 {dict(R.eval_points(R2))[100]:.3f}，配方在第 50 步 {r1[50]:.3f}",
        "第 6.7.7 节",
    )
    # 同一份权重，eval batch 256 和 512
    for run in (B, R2):
        c = json.loads((run / "config.json").read_text(encoding="utf-8"))
        acc = dict(R.eval_points(run))[0]
        _in_lesson(f"eval batch {c['eval_batch']} 量到 {acc:.3f}", "第 6.7.2 节 batch 大小的影响")
    # 显存
    assert {round(R.peak_memory(SHIPPED / n), 1) for p in R.PAIRS[1:] for n in p} == {24.8}
    _in_lesson("都是 **24.8 GiB**", "第 6.7.6 节显存")
    _in_lesson(f"第一对是 **{R.peak_memory(B):.2f} GiB**", "第 6.7.6 节显存")
    # 时间
    t = R.step_seconds(B, 16, 100)
    _in_lesson(f"第 16–100 步一步的中位数 **{t['median']:.1f} s**（{t['min']:.1f}–{t['max']:.1f} s；"
               f"rollout {t['rollout']:.1f} s、前向反向和更新 {t['train']:.1f} s），\n  100 步连同评估共 "
               f"{t['total']:.0f} s", "第 6.7.6 节时间")  # fmt: skip
    t = R.step_seconds(R2, 91, 100)
    _in_lesson(f"第三对最后 10 步一步的中位数 {t['median']:.1f} s（rollout {t['rollout']:.1f} s、"
               f"训练 {t['train']:.1f} s）", "第 6.7.6 节时间")  # fmt: skip
    _in_lesson(f"第 11–50 步一步约 {R.step_seconds(R2, 11, 50)['median']:.1f} s", "第 6.7.6 节时间")


def test_hand_check_agrees_with_the_reward_as_the_lesson_says():
    """hand_check.tsv：每第 10 题，人的判断；和 answers_after.jsonl 的判分一比，数字要和第 6.6 节一致。"""
    lines = (SHIPPED / "hand_check.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    after = R.answers(R2, "after")
    assert [int(r[0]) for r in rows] == list(range(0, 500, 10))
    agree = sum(int(r[1]) == (after[int(r[0])]["reward"] > 0) for r in rows)
    right = sum(int(r[1]) for r in rows)
    _in_lesson(
        f"**{len(rows)} 条里 {agree} 条一致**（{right} 条对，{len(rows) - right} 条错）",
        "第 6.7.5 节",
    )
    before_fp, after_fp = (
        R.credited_without_box(R.answers(R2, "before")),
        R.credited_without_box(after),
    )
    assert len(before_fp) == len(after_fp) == 1
    _in_lesson(
        f"训练前 1 条（第 {before_fp[0]} 题）、训练后 1 条（第 {after_fp[0]} 题）", "第 6.7.5 节"
    )
    row = after[441]
    assert (
        row["reward"] == 0 and row["gold"] == "80" and R.extract_answer(row["completion"]) == "-80"
    )


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_main_on_a_small_run(tmp_path, capsys):
    """一个 4 题的运行目录和它的对照：三张表和图都出来，退出码 0。"""
    run, control = tmp_path / "run", tmp_path / "control"
    config = {"lr": 1e-6, "aggregation": "sequence_mean", "temperature": 1.0, "micro_batch": 8,
              "eval_batch": 4}  # fmt: skip
    for folder, evals in ((run, [(1, 0.5), (2, 0.75)]), (control, [(1, 0.25)])):
        folder.mkdir()
        reward = "shuffled" if folder == control else "correctness"
        (folder / "config.json").write_text(json.dumps({**config, "reward": reward}))
        (folder / "eval_before.json").write_text(json.dumps({"accuracy": 0.5, "n": 4}))
        rows = [{"step": s, "accuracy": a, "reward_mean": a, "peak_vram_gb": 1.0, "rollout_s": 0.1, "train_s": 0.2, "elapsed_s": 0.3 * s, "kl": 0.01 * s, "entropy": 0.3, "eval_accuracy": a,
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
    assert "翻对 2 题，翻错 1 题" in out and "| 带代码块 ``` | 2 | 1 | — |" in out
    assert "按两个独立样本" in out  # 对照没有 answers_after：运行 − 对照不能逐题配对
    assert (tmp_path / "c.png").stat().st_size > 10_000
    # 中途停下、没有 answers_after.jsonl 的运行：报它最后一次评估，不报配对
    (run / "answers_after.jsonl").unlink()
    assert R.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "没有 answers_after.jsonl" in out and "最后一次评估在第 2 步，贪心 0.750" in out
    assert "翻对" not in out


def test_every_shipped_verdict_holds_under_the_current_reward():
    """real_run/ 里每一条回答（8 个 answers_*.jsonl，4,000 条）用现在的 reward 重新判分，和存下的判分一致。

    reward 改了规则（比如「对冲判 0、最后一个标记说了算」）时，这条列出每一条判分变了的回答：
    第 6.6 节的人读核对（hand_check.tsv）比的是存下的判分，所以它只在这里仍然成立时才成立。
    """
    from common.gsm8k.reward import correctness_reward

    changed, total = [], 0
    for path in sorted(SHIPPED.glob("*/answers_*.jsonl")):
        for i, row in enumerate(R.read_jsonl(path)):
            total += 1
            now = correctness_reward(row["completion"], row["gold"])
            if now != row["reward"]:
                changed.append(
                    f"{path.parent.name}/{path.name} 第 {i} 题：{row['reward']} -> {now}"
                )
    assert total == 4000
    assert not changed, "现在的 reward 改变了这些判分：\n" + "\n".join(changed)


def _tiny_folder(folder: Path, peak=None, rewards=(1, 0, 0, 1)) -> Path:
    """一个能读的最小运行目录（CPU 上的运行：peak_vram_gb 是 null）。"""
    folder.mkdir()
    config = {"lr": 3e-5, "aggregation": "sequence_mean", "temperature": 1.0, "micro_batch": 32,
              "eval_batch": 128, "reward": "correctness"}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "eval_before.json").write_text(json.dumps({"accuracy": 0.5, "n": 4}))
    row = {"step": 1, "reward_mean": 0.5, "peak_vram_gb": peak, "rollout_s": 0.1, "train_s": 0.2,
           "elapsed_s": 0.3, "eval_accuracy": 0.5}  # fmt: skip
    (folder / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    lines = [{"question": f"q{i}", "gold": "1", "completion": "x", "reward": r}
             for i, r in enumerate(rewards)]  # fmt: skip
    (folder / "answers_before.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def test_a_cpu_run_has_no_memory_figure_and_still_reports(tmp_path, capsys):
    """CPU 上的运行 peak_vram_gb 是 null：以前 max() 抛 TypeError；现在报「没有显存数字」，退出码 0。"""
    run = _tiny_folder(tmp_path / "run")
    assert R.main([str(run)]) == 0
    assert "显存峰值 —（CPU 上的运行没有显存数字）" in capsys.readouterr().out


@pytest.mark.parametrize(
    "spoil, needle",
    [
        (lambda f: (f / "answers_before.jsonl").write_text(""), "answers_before.jsonl 是空的"),
        (lambda f: (f / "metrics.jsonl").write_text(""), "metrics.jsonl 是空的"),
        (lambda f: (f / "answers_before.jsonl").write_text('{"question": "q", "completion": "x", "reward": "1"}\n'),
         "第 1 行不是"),
        (lambda f: (f / "eval_before.json").write_text("{}"), "没有数值的 accuracy 和 n"),
        (lambda f: (f / "config.json").write_text("[]"), "config.json 读不出来"),
    ],
)  # fmt: skip
def test_a_broken_folder_is_refused_in_chinese(tmp_path, spoil, needle):
    """以前：ZeroDivisionError / IndexError / TypeError 的 traceback。现在：一行中文，点名文件。"""
    run = _tiny_folder(tmp_path / "run")
    spoil(run)
    with pytest.raises(SystemExit) as exc:
        R.main([str(run)])
    assert str(exc.value.code).startswith("错误：") and needle in str(exc.value.code)


def test_negative_examples_is_refused(tmp_path, capsys):
    run = _tiny_folder(tmp_path / "run")
    with pytest.raises(SystemExit) as exc:
        R.main([str(run), "--examples", "-3"])
    assert exc.value.code != 0 and "要一个 >= 0 的整数" in capsys.readouterr().err


def test_the_same_start_evaluated_twice_as_section_6_3_says():
    """第 6.7.2 节：同一份起点，两个运行目录的 answers_before（eval batch 256 对 512、代码差 87 个 commit）。"""
    a, b = R.answers(B, "before"), R.answers(R1, "before")
    assert [x["question"] for x in a] == [x["question"] for x in b]
    grades = sum(x["reward"] != y["reward"] for x, y in zip(a, b))
    texts = sum(x["completion"] != y["completion"] for x, y in zip(a, b))
    configs = [json.loads((d / "config.json").read_text()) for d in (B, R1)]
    assert [c["eval_batch"] for c in configs] == [256, 512]
    _in_lesson(f"500 题里 {grades} 题的判分、{texts} 题的回答文字不一样", "第 6.7.2 节")


def test_lr5e6_answers_got_shorter():
    """第 6.7.1 节：第一对的回答在变短（所以不是长度偏差）。"""
    lengths = [r["completion_len_mean"] for r in R.read_metrics(B / "metrics.jsonl")]
    first, last = statistics.fmean(lengths[:10]), statistics.fmean(lengths[-10:])
    assert last < first
    _in_lesson(f"从第 1–10 步的 {first:.1f} token 降到第 91–100 步的 {last:.1f}", "第 6.7.1 节")


def test_the_5090_page_step_time_is_the_first_pairs():
    """L2.07 第 6.5 节的表：一步的时间来自第一对（单独占着 GPU 的那次）的 metrics.jsonl。"""
    t = R.step_seconds(B, 16, 100)
    page = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    text = (
        f"第 16–100 步一步的中位数 {t['median']:.1f} s（{t['min']:.1f}–{t['max']:.1f} s），"
        f"其中 rollout 约 {t['rollout']:.1f} s、训练约 {t['train']:.1f} s；100 步连同评估 {t['total']:.0f} s"
    )
    assert text in page, f"L2.07 第 6.5 节的一步时间和 real_run/lr5e-6 对不上：{text}"


def test_why_the_old_pairs_barely_moved_as_section_6_7_says():
    """第 6.7 节开头：旧配方两对运行的 KL 最大值和全对 / 全错的组所占的比例。"""
    kl = [max(r["kl"] for r in R.read_metrics(SHIPPED / n / "metrics.jsonl") if r.get("kl") is not None)
          for n in ("recipe", "lr2e-6-token_mean-t0.7")]  # fmt: skip
    _in_lesson(f"KL 最大 {kl[0]:.3f} 和 {kl[1]:.3f}", "第 6.7 节开头")
    zero = sorted(
        statistics.fmean(r["zero_std_frac"] for r in R.read_metrics(SHIPPED / n / "metrics.jsonl"))
        for n in ("recipe", "lr2e-6-token_mean-t0.7")
    )
    _in_lesson(f"每步有 {zero[0]:.0%}–{zero[1]:.0%} 的组全对或全错", "第 6.7 节开头")
