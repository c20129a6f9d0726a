"""L2.08 第 6 节：一次真模型上的 GRPO 运行和它的对照，只读运行目录里的文件（不加载模型，不要 GPU）。

    python L2_algorithm/08_reading_the_curves/real_run.py                     # 仓库附带的那次运行
    python L2_algorithm/08_reading_the_curves/real_run.py runs/mine --control runs/mine-shuffled \\
        --plot runs/mine/compare.png                                          # 你自己的运行

打印三张表：
1. held-out 贪心正确率逐个评估点，运行 vs 对照，带二项分布的标准误；
2. 同一批题训练前 -> 训练后（answers_before.jsonl / answers_after.jsonl）：翻对了几题、翻错了几题，
   配对的差和它的标准误，以及精确的双侧符号检验 p 值——「涨了 / 跌了」是不是比抛硬币更可信；
3. 回答的写法变了什么：带代码块、用 \\boxed{}、用 ####、哪种最终答案都没写、有重复的行。
--plot 画一张 2×3 的图：两次运行的评估正确率、训练 batch 正确率（10 步滑动平均）、KL、熵、回答长度、截断率。
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
from common.metrics import read_json, read_jsonl, read_metrics

HERE = Path(__file__).resolve().parent
SHIPPED = (
    HERE / "real_run"
)  # 仓库附带：Qwen2.5-Coder-0.5B-Instruct，H200（32 GiB 上限），2026-12-01


# ---- 统计 -------------------------------------------------------------------------------------
def binomial_se(p: float, n: int) -> float:
    """n 道题上正确率 p 的标准误 sqrt(p(1-p)/n)。"""
    return math.sqrt(p * (1 - p) / n)


def sign_test_p(up: int, down: int) -> float:
    """精确的双侧符号检验：up 题翻对、down 题翻错，若涨跌各半的可能一样大，看到这么偏的概率。"""
    n = up + down
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(up, down) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(before: list[dict], after: list[dict]) -> dict:
    """同一批题训练前后的配对比较：翻对、翻错、差的均值和标准误、符号检验。"""
    if [r["question"] for r in before] != [r["question"] for r in after]:
        raise ValueError("answers_before.jsonl 和 answers_after.jsonl 的题目不是同一批、同一个顺序")
    b = [r["reward"] > 0 for r in before]
    a = [r["reward"] > 0 for r in after]
    n = len(b)
    up = sum(not x and y for x, y in zip(b, a))
    down = sum(x and not y for x, y in zip(b, a))
    diff = (up - down) / n
    se = math.sqrt(max(up + down - n * diff**2, 0.0)) / n  # 配对差 d_i ∈ {-1, 0, 1} 的样本标准误
    return {"n": n, "up": up, "down": down, "diff": diff, "se": se, "p": sign_test_p(up, down)}


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


# ---- 读运行目录 -------------------------------------------------------------------------------
def eval_points(run: Path) -> list[tuple[int, float]]:
    """[(步数, held-out 贪心正确率)]，第 0 步是 eval_before.json。"""
    points = [(0, read_json(run / "eval_before.json")["accuracy"])]
    for row in read_metrics(run / "metrics.jsonl"):
        if row.get("eval_accuracy") is not None:
            points.append((row["step"], row["eval_accuracy"]))
    return points


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


def habit_table(before: list[dict], after: list[dict] | None, step: int) -> str:
    hb = habits(before)
    ha = habits(after) if after else {}
    lines = [
        f"| 回答的写法（{len(before)} 题） | 训练前 | 训练后（第 {step} 步） |",
        "|---|---:|---:|",
    ]
    for name, _ in HABITS:
        lines.append(f"| {name} | {hb[name]} | {ha.get(name, '—')} |")
    return "\n".join(lines)


def plot(run: Path, control: Path | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(run, "GRPO", "tab:blue")] + (
        [(control, "shuffled reward", "tab:gray")] if control else []
    )
    panels = [  # 图里用英文：不是每台机器都有中文字体（curves.png 也一样）
        ("held-out greedy accuracy", None),
        ("train-batch accuracy (10-step mean)", "accuracy"),
        ("KL to reference (k3)", "kl"),
        ("entropy (nats/token)", "entropy"),
        ("completion length (tokens)", "completion_len_mean"),
        ("truncation rate", "truncation_rate"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (title, key) in zip(axes.flat, panels):
        for folder, label, color in runs:
            if key is None:
                steps, values = zip(*eval_points(folder))
                ax.plot(steps, values, "o-", color=color, label=label)
                continue
            rows = [r for r in read_metrics(folder / "metrics.jsonl") if r.get(key) is not None]
            steps = [r["step"] for r in rows]
            values = [r[key] for r in rows]
            if key == "accuracy":
                values = [sum(values[max(0, i - 9) : i + 1]) / len(values[max(0, i - 9) : i + 1])
                          for i in range(len(values))]  # fmt: skip
            ax.plot(steps, values, color=color, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    axes.flat[0].legend()
    fig.suptitle(f"{run.name} vs {control.name}" if control else run.name)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path, default=SHIPPED / "grpo", help="运行目录")
    ap.add_argument("--control", type=Path, default=None,
                    help="对照的运行目录（默认：只在读附带的运行时用附带的对照）")  # fmt: skip
    ap.add_argument("--plot", type=Path, default=None, help="把 2×3 的对比图存到这个 PNG")
    args = ap.parse_args(argv)
    control = args.control
    if control is None and args.run == SHIPPED / "grpo":
        control = SHIPPED / "control"
    for folder in [args.run] + ([control] if control else []):
        for name in ("eval_before.json", "metrics.jsonl"):
            if not (folder / name).is_file():
                raise SystemExit(f"错误：{folder / name} 不存在：要指向 grpo_train.py 的运行目录")
    try:
        before = read_jsonl(args.run / "answers_before.jsonl")
        after_path = args.run / "answers_after.jsonl"
        after = read_jsonl(after_path) if after_path.is_file() else None
        n = len(before)
        last = eval_points(args.run)[-1][0]
        print("## held-out 贪心正确率（± 是二项分布的标准误）\n")
        print(accuracy_table(args.run, control, n))
        if after is not None:
            pr = paired(before, after)
            print(f"\n## 同一批 {pr['n']} 题，训练前 -> 训练后（第 {last} 步）\n")
            print(f"翻对 {pr['up']} 题，翻错 {pr['down']} 题：配对的差 {pr['diff']:+.3f} ± {pr['se']:.3f}，"
                  f"符号检验 p = {pr['p']:.2f}")  # fmt: skip
        print("\n## 回答的写法（贪心回答；同一题可以占几行）\n")
        print(habit_table(before, after, last))
        if args.plot:
            plot(args.run, control, args.plot)
            print(f"\n图：{args.plot}")
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(
            f"错误：读不了运行目录 {args.run}（{type(err).__name__}: {err}）"
        ) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
