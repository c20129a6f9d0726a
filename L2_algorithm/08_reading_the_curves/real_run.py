"""L2.08 第 6 节：真模型上的 GRPO 运行和它们的对照，只读运行目录里的文件（不加载模型，不要 GPU）。

    python L2_algorithm/08_reading_the_curves/real_run.py --plot real_run.png   # 仓库附带的三对运行
    python L2_algorithm/08_reading_the_curves/real_run.py runs/mine --control runs/mine-shuffled \\
        --plot runs/mine/compare.png                                          # 你自己的一对

每一对（运行 + 把 reward 打乱的对照）打印：
1. held-out 贪心正确率逐个评估点，运行 vs 对照，带二项分布的标准误；pass@1 / pass@k（在运行自己的温度下采样）；
2. 同一批题训练前 -> 最后一次评估（answers_before.jsonl / answers_after.jsonl）：翻对了几题、翻错了几题，
   配对的差和它的标准误，以及精确的双侧符号检验 p 值——「涨了 / 跌了」是不是比抛硬币更可信；
   运行没有 answers_after.jsonl（中途停了）时，只报它最后一次评估的正确率；
3. 回答的写法变了什么：带代码块、用 \\boxed{}、用 ####、哪种最终答案都没写、有重复的行；
4. 训练 batch 的 reward 每 10 步的均值、显存峰值、一步的时间。
读附带的运行时，先打印三对放在一起的总表。--plot 画一张 2×4 的图：每对一个颜色，运行实线、对照虚线。
--examples N 打印 N 道「训练前后判分变了」的题（按 held-out 的顺序取最前面的 N 道），和两次回答的结尾。
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
from common.gsm8k.paired_stats import binomial_se, signed
from common.gsm8k.paired_stats import paired as paired_values
from common.gsm8k.reward import extract_answer
from common.options.cli import CourseParser
from common.run.json_files import read_json, read_jsonl
from common.run.metrics import figure_problem, read_metrics, read_whole_rows, save_figure

HERE = Path(__file__).resolve().parent
SHIPPED = (
    HERE / "real_run"
)  # 仓库附带：Qwen2.5-Coder-0.5B-Instruct，H200（32 GiB 上限），2026-12-01/02
PAIRS = (  # (运行, 对照)：real_run/ 下的目录名，按跑的先后
    ("lr5e-6", "lr5e-6-shuffled"),
    ("recipe", "recipe-shuffled"),
    ("lr2e-6-token_mean-t0.7", "lr2e-6-token_mean-t0.7-shuffled"),
)
SEGMENT = 10  # 训练 batch 的 reward 按几步一段取均值


# ---- 统计（common/gsm8k/paired_stats.py）----------------------------------------------------------
def paired(before: list[dict], after: list[dict]) -> dict:
    """同一批题的配对比较（训练前 vs 训练后，或对照 vs 运行）：翻对、翻错、差的均值和标准误、符号检验。"""
    if [r["question"] for r in before] != [r["question"] for r in after]:
        raise ValueError("两份 answers_*.jsonl 的题目不是同一批、同一个顺序")
    return paired_values([r["reward"] > 0 for r in before], [r["reward"] > 0 for r in after])


# ---- 回答的写法 -------------------------------------------------------------------------------
ANSWER_PHRASE = re.compile(r"(?i)answer\s*(?:is|:|=)|答案")


def stuck_in_a_loop(text: str, tail: int = 1200, shortest: int = 8, longest: int = 200) -> bool:
    """回答的最后 tail 个字符里，有一段 shortest–longest 个字符的文字连续出现 ≥ 4 次：模型在原地打转。

    「一段长 L 的文字连着出现 4 次」就是「有 3L 个连续位置 i 满足 t[i] == t[i + L]」：对每个 L 比一次
    错开 L 位的两份字符数组（NumPy），比正则表达式的回溯快得多。
    """
    chars = np.frombuffer(text[-tail:].encode("utf-32-le"), dtype=np.uint32)
    for period in range(shortest, min(longest, len(chars) // 4) + 1):
        same = (chars[:-period] == chars[period:]).astype(np.int8)
        if same.sum() < 3 * period:  # 连相同的位置总数都不够：不用找最长的一段
            continue
        edges = np.diff(np.concatenate(([0], same, [0])))
        runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
        if runs.size and runs.max() >= 3 * period:
            return True
    return False


HABITS = (
    ("带代码块 ```", lambda t: "```" in t),
    ("用 \\boxed{} 给答案", lambda t: "\\boxed{" in t),
    ("用 #### 给答案", lambda t: "####" in t),
    ("「answer is / 答案」", lambda t: bool(ANSWER_PHRASE.search(t))),
    ("以上都没有（只能取最后一个数）", lambda t: not ("\\boxed{" in t or "####" in t or ANSWER_PHRASE.search(t))),
    ("原地打转（同一段连着重复 ≥ 4 次）", stuck_in_a_loop),
)  # fmt: skip


def habits(rows: list[dict]) -> dict[str, int]:
    return {name: sum(bool(test(r["completion"])) for r in rows) for name, test in HABITS}


def habit_table(before: list[dict], after: list[dict] | None, step: int) -> str:
    return habit_columns([("训练前", before), (f"训练后（第 {step} 步）", after)])


def habit_columns(columns: list[tuple[str, list[dict] | None]]) -> str:
    """回答写法的计数表：每列一份 answers_*.jsonl（None 画成 —）。"""
    counts = [habits(rows) if rows else {} for _, rows in columns]
    n = next(len(rows) for _, rows in columns if rows)
    lines = [
        f"| 回答的写法（{n} 题） | " + " | ".join(title for title, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, _ in HABITS:
        lines.append(f"| {name} | " + " | ".join(str(c.get(name, "—")) for c in counts) + " |")
    return "\n".join(lines)


# ---- 读运行目录 -------------------------------------------------------------------------------
def _bad(path: Path, what: str) -> SystemExit:
    return SystemExit(f"错误：{path} {what}：要指向 grpo_train.py 写完的运行目录，文件不要手改")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_folder(folder: Path) -> None:
    """读之前先核对运行目录里每个要用的文件：缺了、空了、值的类型不对，都在这里说清楚是哪个文件。"""
    for name in ("config.json", "eval_before.json", "metrics.jsonl"):
        if not (folder / name).is_file():
            raise _bad(folder / name, "不存在")
    config = read_json(folder / "config.json")
    keys = ("lr", "aggregation", "temperature", "micro_batch", "eval_batch", "reward")
    if config is None or any(k not in config for k in keys):
        raise _bad(folder / "config.json", f"读不出来，或缺少 {', '.join(keys)} 中的键")
    before = read_json(folder / "eval_before.json")
    if before is None or not _number(before.get("accuracy")) or not _number(before.get("n")):
        raise _bad(folder / "eval_before.json", "读不出来，或没有数值的 accuracy 和 n")
    try:
        rows = read_whole_rows(folder / "metrics.jsonl", "删掉这半行再读（会少最后一步）")
    except ValueError as err:
        raise SystemExit(f"错误：{err}") from None
    if not rows:
        raise _bad(folder / "metrics.jsonl", "是空的（一步都没有记下）")
    if any(not _number(r.get("reward_mean")) for r in rows):
        raise _bad(folder / "metrics.jsonl", "有一行的 reward_mean 不是数")
    for which in ("before", "after"):
        path = folder / f"answers_{which}.jsonl"
        if not path.is_file():
            continue
        try:
            answers = read_jsonl(path)
        except (OSError, ValueError) as err:
            raise _bad(path, f"读不出来（{type(err).__name__}）") from None
        if not answers:
            raise _bad(path, "是空的")
        for i, r in enumerate(answers, start=1):
            ok = isinstance(r, dict) and _number(r.get("reward"))
            if (
                not ok
                or not isinstance(r.get("question"), str)
                or not isinstance(r.get("completion"), str)
            ):
                raise _bad(path, f"第 {i} 行不是 {{question, completion, reward（数）}}")


def eval_points(run: Path) -> list[tuple[int, float]]:
    """[(步数, held-out 贪心正确率)]，第 0 步是 eval_before.json。"""
    points = [(0, read_json(run / "eval_before.json")["accuracy"])]
    for row in read_metrics(run / "metrics.jsonl"):
        if row.get("eval_accuracy") is not None:
            points.append((row["step"], row["eval_accuracy"]))
    return points


def pass_points(run: Path) -> dict[int, dict[str, float]]:
    """{步数: {"1": pass@1, "8": pass@8}}：只有带 pass@k 的评估点（--pass-k 0 的运行是空的）。"""
    points = {}
    before = read_json(run / "eval_before.json").get("pass_at")
    if before:
        points[0] = {k: float(v) for k, v in before.items()}
    for row in read_metrics(run / "metrics.jsonl"):
        ks = {
            key[len("eval_pass_at_") :]: row[key] for key in row if key.startswith("eval_pass_at_")
        }
        if ks:
            points[row["step"]] = ks
    return points


def answers(run: Path, which: str) -> list[dict] | None:
    path = run / f"answers_{which}.jsonl"
    return read_jsonl(path) if path.is_file() else None


def settings(run: Path) -> str:
    """运行的设置里和 GPU 配方可能不同的几项。"""
    c = read_json(run / "config.json")
    reward = "，reward 打乱" if c["reward"] == "shuffled" else ""
    lr = f"{c['lr']:g}".replace("e-0", "e-")  # 5e-06 -> 5e-6
    return (
        f"lr {lr}，{c['aggregation']}，T {c['temperature']:.1f}，"
        f"micro-batch {c['micro_batch']}，eval batch {c['eval_batch']}{reward}"
    )


def steps_done(run: Path) -> int:
    return read_metrics(run / "metrics.jsonl")[-1]["step"]


def reward_segments(run: Path, width: int = SEGMENT) -> list[float]:
    """训练 batch 的 reward_mean，每 width 步一段的均值（最后一段可以不满）。"""
    values = [r["reward_mean"] for r in read_metrics(run / "metrics.jsonl")]
    return [statistics.fmean(values[i : i + width]) for i in range(0, len(values), width)]


def peak_memory(run: Path) -> float | None:
    """整次运行里 PyTorch 显存的峰值（GiB，grpo_train 记的 peak_vram_gb，含评估）；CPU 上的运行是 None。"""
    values = [r.get("peak_vram_gb") for r in read_metrics(run / "metrics.jsonl")]
    return max((v for v in values if v is not None), default=None)


def step_seconds(run: Path, first: int = 1, last: int | None = None) -> dict[str, float]:
    """第 first–last 步：一步墙钟时间（相邻两步 elapsed_s 之差，含评估）的中位数、最小、最大，
    以及 rollout_s、train_s 的中位数。"""
    rows = read_metrics(run / "metrics.jsonl")
    wall = {b["step"]: b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])}
    wall[rows[0]["step"]] = rows[0]["elapsed_s"]
    last = rows[-1]["step"] if last is None else last
    pick = [r for r in rows if first <= r["step"] <= last]
    walls = [wall[r["step"]] for r in pick]
    return {
        "median": statistics.median(walls),
        "min": min(walls),
        "max": max(walls),
        "rollout": statistics.median(r["rollout_s"] for r in pick),
        "train": statistics.median(r["train_s"] for r in pick),
        "total": rows[-1]["elapsed_s"],
    }


# ---- 表 ---------------------------------------------------------------------------------------
def accuracy_table(run: Path, control: Path | None, n: int) -> str:
    ours = dict(eval_points(run))
    theirs = dict(eval_points(control)) if control else {}
    lines = ["| 步 | 运行 | 对照（reward 打乱） |", "|---:|---:|---:|"]
    for step in sorted(set(ours) | set(theirs)):
        cells = []
        for d in (ours, theirs):
            p = d.get(step)
            cells.append("—" if p is None else f"{p:.3f} ± {binomial_se(p, n):.3f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _arrow(points: dict[int, float]) -> str:
    return " → ".join(f"{points[s]:.3f}" for s in sorted(points))


def summary_row(run: Path) -> str:
    """总表的一行：设置、跑到第几步、贪心和 pass@k 从训练前到每次带 pass@k 的评估、配对的翻对/翻错。"""
    points = dict(eval_points(run))
    last = max(points)
    greedy = f"{points[0]:.3f} → {points[last]:.3f}（第 {last} 步）"
    passes = pass_points(run)
    p1 = _arrow({s: v["1"] for s, v in passes.items()}) if passes else "—"
    pk = _arrow({s: v[max(v, key=int)] for s, v in passes.items()}) if passes else "—"
    before, after = answers(run, "before"), answers(run, "after")
    if before and after:
        pr = paired(before, after)
        flips = f"{pr['up']} / {pr['down']}"
        diff = f"{signed(pr['diff'])} ± {pr['se']:.3f}，p = {pr['p']:.2f}"
    else:
        flips = diff = "—（没有 answers_after）"
    return f"| `{run.name}` | {settings(run)} | {greedy} | {p1} | {pk} | {flips} | {diff} |"


SUMMARY_HEAD = (
    "| 目录 | 设置 | 贪心：训练前 → 最后一次评估 | pass@1（采样） | pass@8（采样） "
    "| 翻对 / 翻错 | 配对的差，符号检验 |\n|---|---|---|---|---|---:|---|"
)


def pair_difference(run: Path, control: Path) -> str:
    """运行减对照，在两者都评估过的最后一步：两者都有 answers_after 且同一步时逐题配对，否则按两个独立样本算。"""
    ours, theirs = dict(eval_points(run)), dict(eval_points(control))
    step = max(set(ours) & set(theirs))
    a_run, a_ctl = answers(run, "after"), answers(control, "after")
    same_step = steps_done(run) == steps_done(control) == step
    if a_run and a_ctl and same_step:
        pr = paired(a_ctl, a_run)  # 「训练前」= 对照：翻对 = 运行对、对照错
        how = f"逐题配对：运行对、对照错 {pr['up']} 题，反过来 {pr['down']} 题，p = {pr['p']:.2g}"
        return f"| `{run.name}` | {step} | {signed(pr['diff'])} ± {pr['se']:.3f} | {how} |"
    n = read_json(run / "eval_before.json")["n"]
    se = math.hypot(binomial_se(ours[step], n), binomial_se(theirs[step], n))
    how = "没有两边同一步的逐题答案：按两个独立样本算标准误（同一批题，实际的标准误更小）"
    return f"| `{run.name}` | {step} | {signed(ours[step] - theirs[step])} ± {se:.3f} | {how} |"


PAIR_HEAD = "| 运行 | 在第几步比 | 贪心：运行 − 对照 | 怎么算的 |\n|---|---:|---:|---|"


def segment_row(run: Path, width: int = SEGMENT) -> str:
    cells = [f"{v:.3f}" for v in reward_segments(run, width)][: 100 // width]  # 表头只到第 100 步
    cells += ["—"] * (100 // width - len(cells))
    return f"| `{run.name}` | " + " | ".join(cells) + " |"


def segment_head(width: int = SEGMENT) -> str:
    spans = [f"{i + 1}–{i + width}" for i in range(0, 100, width)]
    return "| 目录 | " + " | ".join(spans) + " |\n|---|" + "---:|" * len(spans)


def credited_without_box(rows: list[dict]) -> list[int]:
    """reward 判对、回答里却没有 \\boxed{} 的题的下标：判分靠的是 ####、answer is 或「最后一个数」，最该人读。"""
    return [i for i, r in enumerate(rows) if r["reward"] > 0 and "\\boxed{" not in r["completion"]]


# ---- 十道题的前后 ------------------------------------------------------------------------------
def flipped(before: list[dict], after: list[dict], count: int) -> list[int]:
    """按 held-out 的顺序，最前面 count 道判分变了（翻对或翻错）的题的下标。"""
    if [r["question"] for r in before] != [r["question"] for r in after]:
        raise ValueError("两份 answers_*.jsonl 的题目不是同一批、同一个顺序")
    idx = [
        i for i, (b, a) in enumerate(zip(before, after)) if (b["reward"] > 0) != (a["reward"] > 0)
    ]
    return idx[:count]


def _ending(text: str, tail: int) -> str:
    end = " ".join(text.split())  # 换行和连续空白压成一个空格，好排版
    return end if len(end) <= tail else "…" + end[-tail:]


def render_examples(before: list[dict], after: list[dict], count: int = 10, tail: int = 160) -> str:
    """最前面 count 道翻了的题：题目开头、标准答案、两次判分、reward 取到的答案和两次回答的结尾。"""
    mark = lambda r: "✓" if r["reward"] > 0 else "✗"
    blocks = []
    for i in flipped(before, after, count):
        b, a = before[i], after[i]
        q = " ".join(b["question"].split())
        q = q if len(q) <= 90 else q[:90] + "…"
        blocks.append(
            f"**第 {i} 题**（标准答案 {b['gold']}）{q}\n"
            f"训练前 {mark(b)}（取到 {extract_answer(b['completion'])}），"
            f"训练后 {mark(a)}（取到 {extract_answer(a['completion'])}）\n\n"
            "````text\n"
            f"前：{_ending(b['completion'], tail)}\n"
            f"后：{_ending(a['completion'], tail)}\n"
            "````"
        )
    return "\n\n".join(blocks)


# ---- 图 ---------------------------------------------------------------------------------------
SMOOTHED = ("reward_mean", "completion_len_mean", "truncation_rate")  # 一步只有 64 条：画滑动平均
COLORS = ("tab:red", "tab:blue", "tab:green", "tab:purple", "tab:orange")


def plot(pairs: list[tuple[Path, Path | None]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [  # 图里用英文：不是每台机器都有中文字体（curves.png 也一样）
        ("held-out greedy accuracy", "greedy"),
        ("held-out pass@1 (sampled at the run's T)", "1"),
        ("held-out pass@8 (sampled at the run's T)", "8"),
        (f"train-batch reward ({SEGMENT}-step mean)", "reward_mean"),
        ("KL to reference (k3)", "kl"),
        ("entropy (nats/token, at the run's T)", "entropy"),
        (f"completion length (tokens, {SEGMENT}-step mean)", "completion_len_mean"),
        (f"truncation rate ({SEGMENT}-step mean)", "truncation_rate"),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(17, 7))
    for ax, (title, key) in zip(axes.flat, panels):
        for (run, control), color in zip(pairs, COLORS):
            for folder, style in ((run, "-"), (control, "--")):
                if folder is None:
                    continue
                label = folder.name
                if key == "greedy":
                    ax.plot(*zip(*eval_points(folder)), "o" + style, color=color, label=label)
                    continue
                if key in ("1", "8"):
                    pts = {s: v[key] for s, v in pass_points(folder).items() if key in v}
                    if pts:
                        ax.plot(*zip(*sorted(pts.items())), "s" + style, color=color, label=label)
                    continue
                rows = [r for r in read_metrics(folder / "metrics.jsonl") if r.get(key) is not None]
                if not rows:  # β = 0 时每一步的 kl 都是 null：不画空线，格子里写明没测
                    continue
                steps = [r["step"] for r in rows]
                values = [r[key] for r in rows]
                if key in SMOOTHED:
                    values = [statistics.fmean(values[max(0, i - SEGMENT + 1) : i + 1])
                              for i in range(len(values))]  # fmt: skip
                ax.plot(steps, values, style, color=color, label=label, linewidth=1.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if not ax.lines:  # --pass-k 0 没有 pass@k，β = 0 没有 KL：空着的格子写明没测
            ax.text(0.5, 0.5, "not measured in these runs", ha="center", va="center", color="0.5")
            ax.set_xticks([])
            ax.set_yticks([])
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("runs (solid) vs shuffled-reward controls (dashed)")
    fig.tight_layout()
    save_figure(fig, path)  # 后缀定格式；不留半张图


# ---- 一对运行的报告 ----------------------------------------------------------------------------
def report_pair(run: Path, control: Path | None) -> None:
    before = answers(run, "before")
    if before is None:
        raise ValueError(f"{run / 'answers_before.jsonl'} 不存在")
    after = answers(run, "after")
    n = len(before)
    points = eval_points(run)
    last = points[-1][0]
    print(f"# {run.name}（{settings(run)}）" + (f" vs {control.name}" if control else ""))
    print("\n## held-out 贪心正确率（± 是二项分布的标准误）\n")
    print(accuracy_table(run, control, n))
    for folder in [run] + ([control] if control else []):
        passes = pass_points(folder)
        if passes:
            cells = "，".join(f"第 {s} 步 " + " / ".join(f"{v[k]:.3f}" for k in sorted(v, key=int))
                             for s, v in sorted(passes.items()))  # fmt: skip
            print(f"\n{folder.name} 的 pass@1 / pass@k（采样，T {read_json(folder / 'config.json')['temperature']:g}）：{cells}")  # fmt: skip
    if after is not None:
        pr = paired(before, after)
        print(f"\n## 同一批 {pr['n']} 题，训练前 -> 训练后（第 {last} 步）\n")
        print(f"翻对 {pr['up']} 题，翻错 {pr['down']} 题：配对的差 {signed(pr['diff'])} ± {pr['se']:.3f}，"
              f"符号检验 p = {pr['p']:.2f}")  # fmt: skip
    else:
        print(f"\n（{run.name} 没有 answers_after.jsonl：它在第 {steps_done(run)} 步停了，"
              f"最后一次评估在第 {last} 步，贪心 {points[-1][1]:.3f}；没有逐题的配对比较）")  # fmt: skip
    if control is not None:
        print("\n## 运行 − 对照\n")
        print(PAIR_HEAD)
        print(pair_difference(run, control))
    print("\n## 回答的写法（贪心回答；同一题可以占几行）\n")
    columns = [("训练前", before), (f"训练后（第 {last} 步）", after)]
    if control is not None:
        columns.append((f"对照（第 {eval_points(control)[-1][0]} 步）", answers(control, "after")))
    print(habit_columns(columns))
    print(f"\n## 训练 batch 的 reward，每 {SEGMENT} 步的均值\n")
    print(segment_head())
    for folder in [run] + ([control] if control else []):
        print(segment_row(folder))
    print("\n## 显存和时间\n")
    for folder in [run] + ([control] if control else []):
        t = step_seconds(folder)
        peak = peak_memory(folder)
        memory = "—（CPU 上的运行没有显存数字）" if peak is None else f"{peak:.2f} GiB"
        print(f"{folder.name}：显存峰值 {memory}；一步的中位数 {t['median']:.1f} s"
              f"（{t['min']:.1f}–{t['max']:.1f} s；rollout {t['rollout']:.1f} s，训练 {t['train']:.1f} s），"
              f"共 {t['total']:.0f} s")  # fmt: skip
    print()


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"要一个 >= 0 的整数，得到 {text!r}")
    return value


def main(argv=None) -> int:
    ap = CourseParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path, default=None,
                    help="运行目录（不给：仓库附带的三对运行）")  # fmt: skip
    ap.add_argument("--control", type=Path, default=None, help="对照的运行目录")
    ap.add_argument("--plot", type=Path, default=None, help="把 2×4 的对比图存到这个 PNG")
    ap.add_argument("--examples", type=_count, default=0,
                    help="再打印这么多道训练前后判分变了的题（最后一对的运行）")  # fmt: skip
    args = ap.parse_args(argv)
    if args.run is None:
        pairs = [(SHIPPED / r, SHIPPED / c) for r, c in PAIRS]
    else:
        pairs = [(args.run, args.control)]
    problem = args.plot and figure_problem(args.plot)  # 在读任何目录之前
    if problem:
        ap.error(problem)
    for run, control in pairs:
        for folder in [run] + ([control] if control else []):
            check_folder(folder)
    try:
        if args.run is None:
            print("# 三对运行放在一起（pass@k 在各自运行的温度下采样，只能在一对之内比）\n")
            print(SUMMARY_HEAD)
            for run, control in pairs:
                print(summary_row(run))
                print(summary_row(control))
            print("\n" + PAIR_HEAD)
            for run, control in pairs:
                print(pair_difference(run, control))
            print()
        for run, control in pairs:
            report_pair(run, control)
        if args.examples:
            run = pairs[-1][0]
            before, after = answers(run, "before"), answers(run, "after")
            if after is None:
                raise ValueError(f"{run / 'answers_after.jsonl'} 不存在，没有训练后的回答可比")
            print(f"# {run.name}：最前面 {args.examples} 道判分变了的题\n")
            print(render_examples(before, after, args.examples))
        if args.plot:
            plot(pairs, args.plot)
            print(f"\n图：{args.plot}")
    except (OSError, ValueError, KeyError, StopIteration) as err:
        raise SystemExit(f"错误：读不了运行目录（{type(err).__name__}: {err}）") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
