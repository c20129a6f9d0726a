"""L2.08 第 1.1 节：几个 seed 的运行和它们的对照，逐题配对地比（只读运行目录，不加载模型）。

    python L2_algorithm/08_reading_the_curves/compare_runs.py                 # 仓库附带的 tiny 运行
    python L2_algorithm/08_reading_the_curves/compare_runs.py \\
        --pair runs/s0 runs/s0-ctl --pair runs/s1 runs/s1-ctl --plot runs/compare.png

每一对 = 一次运行 + 同一个 seed 的对照（--reward shuffled）。它们每一步选到的题一样（grpo_train.py 的
选题有自己的随机数流），held-out 也是同一批题，所以可以逐题配对。打印：

1. 实验是不是公平：每对是不是同一批 held-out 题、每一步的训练题是不是一样、设置差在哪；
2. 每个目录训练前 -> 比较的那一步：贪心正确率、pass@1、pass@k，以及训练前后逐题配对的翻对 / 翻错；
   运行在比较的那一步之后还评估过的（对照先停了），也各自和训练前逐题配对地列出来；
3. 每个 seed 的「运行 − 对照」：贪心、pass@1、pass@k 都逐题配对，带精确的符号检验 p 值；
4. 几个 seed 放在一起：运行 − 对照的均值和 seed 之间的范围；
5. 评估自己的底噪（运行用 --start-evals 2 时）：同样的权重换一种 batch 组合，有几题判分变了。
--plot 画 held-out 正确率随步数的变化：每一对（一次运行和它的对照）一个颜色，运行实线、对照虚线。
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
from common.decode.evaluate import pass_at_k
from common.gsm8k.paired_stats import binomial_se, paired, signed, spread
from common.options.choices import CONTROLS
from common.options.cli import CourseParser, broken_stdout
from common.run.atomic_io import WriteError
from common.run.json_files import read_json_object
from common.run.metrics import MetricsError, figure_problem, read_whole_rows, save_figure

HERE = Path(__file__).resolve().parent
SHIPPED = HERE / "tiny_runs"  # 仓库附带：tiny 默认设置，seed 0、1、2，各带一个组内打乱的对照
SHIPPED_PAIRS = (
    ("seed0", "seed0-shuffled"),
    ("seed1", "seed1-shuffled"),
    ("seed2", "seed2-shuffled"),
)
# 这些设置不同，运行和对照就不只差「reward 里有没有信息」
# 决定题目本身的设置：不同就不是同一批题（held-out 和训练题都变了），逐题配对没有意义
QUESTIONS = ("data", "n_train", "difficulty", "n_heldout")
SAME = ("model", "init", "data", "n_train", "difficulty", "n_heldout", "prompts_per_step",
        "group_size", "max_new_tokens", "temperature", "top_p", "beta", "aggregation", "lr",
        "warmup_steps", "num_iterations", "micro_batch", "seed", "eval_batch", "pass_k",
        "dynamic_sampling", "skip_zero_adv", "rollout")  # fmt: skip


class RunError(ValueError):
    """A run folder this tool cannot read; the message names the file and what to do."""


def _json(path: Path) -> dict:
    return read_json_object(path, "要指向 grpo_train.py 的运行目录", error=RunError)


def _rows(path: Path) -> list[dict]:
    """A JSON-lines file's rows, each step once and in order; a half-written last line is refused
    (skipping it would move the comparison to an earlier step without a word)."""
    try:
        rows = read_whole_rows(path, "比较会悄悄挪到更早的一步。删掉这半行再比（比较的步会提前）")
    except MetricsError as err:  # 也包括同一步有两行（read_whole_rows 点名两行）
        raise RunError(str(err)) from None
    return rows


def _eval_problem(e, sizes: tuple[int, ...] | None) -> str | None:
    """What is wrong with one evaluation's per-question results (greedy, k, correct_of_k), or None.
    `sizes`: the question counts this folder's evaluations may have (None: any)."""
    if not isinstance(e, dict):
        return f"逐题结果要是一个 JSON 对象，得到 {type(e).__name__}"
    greedy, k, correct = e.get("greedy"), e.get("k", 0), e.get("correct_of_k")
    if not isinstance(greedy, list) or not greedy or any(x not in (0, 1) for x in greedy):
        return "greedy 要是一列 0/1（每题一个）"
    if sizes is not None and len(greedy) not in sizes:
        told = " 或 ".join(str(n) for n in sizes)
        return f"greedy 有 {len(greedy)} 题，这个目录的评估是 {told} 题（config.json）"
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        return f"k 要是一个 >= 0 的整数，得到 {k!r}"
    if correct is None:
        return None
    if not isinstance(correct, list) or len(correct) != len(greedy):
        return f"correct_of_k 要是和 greedy 一样长（{len(greedy)} 题）的一列整数"
    bad = [c for c in correct if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c <= k]
    if bad:
        return f"correct_of_k 里有 {bad[0]!r}：每题 k = {k} 条里答对的条数，要在 0 到 {k} 之间"
    return None


class Run:
    """One run folder: its config, every evaluation's per-question results, its metrics rows."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.name = self.folder.name
        self.config = _json(self.folder / "config.json")
        path = self.folder / "eval_before.json"
        before = _json(path)
        if "per_question" not in before:
            raise RunError(
                f"{path} 里没有逐题结果 per_question："
                "这个目录是旧版 grpo_train.py 写的，用 real_run.py 读它"
            )
        problem = _eval_problem(before["per_question"], None)
        if problem:
            raise RunError(
                f"{path} 的 per_question 不对：{problem}。文件被改过；重新评估或换一个目录"
            )
        self.n = len(before["per_question"]["greedy"])
        # --final-heldout 比 --n-heldout 大时：训练前和最后一步评 n 道，训练中评其中的前 n_heldout 道
        inner = self.config.get("n_heldout")
        inner = inner if isinstance(inner, int) and 0 < inner < self.n else self.n
        self.sizes = (self.n,) if inner == self.n else (self.n, inner)
        questions = self.folder / "eval_questions.jsonl"
        rows = _rows(questions)
        for line, r in enumerate(rows, start=1):
            problem = _eval_problem(r, self.sizes)
            if problem:
                raise RunError(f"{questions} 第 {line} 行（第 {r['step']} 步）不对：{problem}")
        self.metrics = _rows(self.folder / "metrics.jsonl")
        self.evals = {0: before["per_question"]} | {r["step"]: r for r in rows}
        self.k = self.k_measured  # 配对比较时由 align_k 改成几个目录共同的 k
        self.floor = (
            _json(self.folder / "eval_floor.json") if self._has("eval_floor.json") else None
        )

    def _has(self, name: str) -> bool:
        return (self.folder / name).is_file()

    def values(self, step: int, metric: str, n: int | None = None) -> list[float] | None:
        """Per question at `step`: "greedy" (0/1), "pass@1" (c/k) or "pass@k"; None if not measured.
        `n`: only the first n questions (an in-training evaluation covers the first n_heldout)."""
        e = self.evals.get(step)
        if e is None:
            return None
        if metric == "greedy":
            return [float(x) for x in e["greedy"][:n]]
        k, correct = e.get("k", 0), e.get("correct_of_k")
        kk = 1 if metric == "pass@1" else self.k
        if not k or correct is None or not 1 <= kk <= k:
            return None
        return [pass_at_k(k, c, kk) for c in correct[:n]]

    def size(self, step: int) -> int:
        """How many questions the evaluation at `step` covered."""
        return len(self.evals[step]["greedy"])

    def mean(self, step: int, metric: str, n: int | None = None) -> float | None:
        v = self.values(step, metric, n)
        return None if v is None else sum(v) / len(v)

    @property
    def k_measured(self) -> int:
        return max((e.get("k", 0) for e in self.evals.values()), default=0)

    def same_folder(self, other: Run) -> bool:
        return self.folder.resolve() == other.folder.resolve()

    @property
    def is_control(self) -> bool:
        return self.config.get("reward") in CONTROLS

    def prompt_ids(self) -> dict[int, list[int]]:
        return {r["step"]: r["prompt_ids"] for r in self.metrics if "prompt_ids" in r}


METRICS = ("greedy", "pass@1", "pass@k")


def align_k(runs: list[Run]) -> int:
    """pass@k 只在同一个 k 上比：几个目录都量过的最大的 k（Chen et al. 的估计对任何 <= 采样数的 k 都无偏）。"""
    ks = {r.k_measured for r in runs}
    k = 0 if 0 in ks else min(ks)
    for r in runs:
        r.k = k
    return k


def check_pairs(pairs: list[tuple[Run, Run]]) -> list[str]:
    """Refuse pairs that cannot be compared (RunError); return warnings for odd but readable ones.

    compare_runs.py knows which side is the control (config.json's reward) and which folders and
    held-out sets it was given: a swapped pair, a folder paired with itself, a --pair given twice
    and held-out sets of different sizes are refused; two controls, two runs and different pass_k
    are said once on stderr.
    """
    warnings, seen = [], {}
    for i, (run, control) in enumerate(pairs, start=1):
        where = f"第 {i} 个 --pair（{run.folder} {control.folder}）"
        if run.same_folder(control):
            raise RunError(f"{where}：同一个目录和自己配对，差永远是 0。第二个要给它的对照")
        key = (run.folder.resolve(), control.folder.resolve())
        if key in seen:
            raise RunError(
                f"{where} 和第 {seen[key]} 个一样：同一对会被当成两个 seed 算。删掉重复的 --pair"
            )
        seen[key] = i
        rewards = f"reward {run.config.get('reward')} vs {control.config.get('reward')}"
        if run.is_control and not control.is_control:
            raise RunError(
                f"{where}：前后反了（{rewards}）。--pair 先给运行、再给对照："
                f"--pair {control.folder} {run.folder}"
            )
        if run.is_control and control.is_control:
            warnings.append(
                f"{where}：两边都是对照（{rewards}）；「运行 − 对照」读作「前一个 − 后一个」"
            )
        elif not control.is_control:
            warnings.append(
                f"{where}：后一个不是对照（{rewards}，对照是 {' / '.join(CONTROLS)}）；"
                "「运行 − 对照」读作「前一个 − 后一个」"
            )
        questions = [k for k in QUESTIONS if run.config.get(k) != control.config.get(k)]
        if questions:
            raise RunError(
                f"{where}：决定题目的设置不同（{', '.join(f'{k} {run.config.get(k)} vs {control.config.get(k)}' for k in questions)}），"
                "两边评的不是同一批题，不能逐题配对。对照要用和运行相同的这些设置跑"
            )
        if run.n != control.n:
            raise RunError(
                f"{where}：held-out 题数不同（{run.n} vs {control.n}），不能逐题配对。"
                "两边要用同样的 --n-heldout 和 --final-heldout 跑"
            )
    seeds = [run.config.get("seed") for run, _ in pairs]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1 and s is not None})
    if repeated:
        warnings.append(
            f"有几对的运行是同一个 seed（{repeated}）：它们不是独立的 seed，跨 seed 的均值和标准差会低估差别"
        )
    runs = [r for pair in pairs for r in pair]
    ks = sorted({r.k_measured for r in runs})
    if len(ks) > 1:
        k = align_k(runs)
        warnings.append(
            f"各目录的 pass_k 不同（{ks}）："
            + (f"pass@k 一律按 pass@{k} 比" if k else "有的目录没采样（pass_k 0），只比贪心")
        )
    return warnings


def common_step(run: Run, control: Run, step: int | None) -> int:
    """The step to compare at: `step` if both measured it, else the last step both measured
    with pass@k (or, without pass@k, the last step both measured at all)."""
    both = sorted(set(run.evals) & set(control.evals))
    if step is not None:
        if step not in both:
            raise RunError(
                f"{run.name} 和 {control.name} 没有都在第 {step} 步评估过；都评估过的步：{both}"
            )
        return step
    with_k = [s for s in both if run.values(s, "pass@k") and control.values(s, "pass@k")]
    return (with_k or both)[-1]


def fairness(run: Run, control: Run) -> list[str]:
    """Lines that say whether this is a fair control (same questions, prompts and settings)."""
    lines = []
    differ = [k for k in SAME if run.config.get(k) != control.config.get(k)]
    rewards = f"reward：{run.config.get('reward')} vs {control.config.get('reward')}"
    lines.append(rewards + ("；其余设置相同" if not differ else f"；还有这些设置不同：{differ}"))
    a, b = run.prompt_ids(), control.prompt_ids()
    steps = sorted(set(a) & set(b))
    # 开了 dynamic sampling 的一边记的是一步排好的全部候选题（L2.10）：两边比前 P 道
    ds = run.config.get("dynamic_sampling") or control.config.get("dynamic_sampling")
    P = run.config.get("prompts_per_step") if ds else None
    what = f"每一步的前 {P} 道候选题" if ds else "每一步"
    if not steps:
        lines.append("训练题：没有记录 prompt_ids，无法核对")
    else:
        first = next((s for s in steps if a[s][:P] != b[s][:P]), None)
        lines.append(
            f"训练题：第 1–{steps[-1]} 步{what}都相同"
            if first is None
            else f"训练题：从第 {first} 步起不同（对照没有用同一个选题随机数流）"
        )
    return lines


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _sized(runs: list[Run]) -> bool:
    """Whether a question-count column is needed: some folder evaluated two sets (--final-heldout)."""
    return any(len(r.sizes) > 1 for r in runs)


def _col(show: bool, head: str, cell=None) -> str:
    """One optional table column: the header (cell None) or a cell; '' when not shown."""
    if not show:
        return ""
    return f" {head} |" if cell is None else f" {cell} |"


def before_after_table(runs: list[Run], steps: dict[str, int]) -> str:
    k = max(r.k for r in runs)
    show = _sized(runs)
    metrics = METRICS if k else METRICS[:1]  # --pass-k 0 的运行只评了贪心
    heads = "| pass@1 | pass@{k} " if k else ""
    lines = [
        f"| 目录 | 比较的步 |{_col(show, '题数')} 贪心：训练前 → 后 {heads.format(k=k)}"
        "| 贪心逐题：翻对 / 翻错，p |",
        "|---|---:|" + ("---:|" if show else "") + "---|" + "---|" * (len(metrics) - 1) + "---|",
    ]
    for r in runs:
        s = steps[r.name]
        n = r.size(s)  # 训练中的评估只有前 n_heldout 道：训练前也只取这几道
        cells = [f"{fmt(r.mean(0, m, n))} → {fmt(r.mean(s, m))}" for m in metrics]
        d = paired(r.values(0, "greedy", n), r.values(s, "greedy"))
        lines.append(
            f"| `{r.name}` | {s} |{_col(show, '', n)} "
            + " | ".join(cells)
            + f" | {d['up']} / {d['down']}，p = {d['p']:.3g} |"
        )
    return "\n".join(lines)


def later_table(runs: list[Run], steps: dict[str, int]) -> str | None:
    """Evaluations after the compared step (a run that went on after its control stopped), each
    against the folder's own start, paired per question (greedy); None if there are none."""
    show = _sized(runs)
    lines = [
        f"| 目录 | 步 |{_col(show, '题数')} 贪心 | 比训练前 ± 标准误 | 翻对 / 翻错（题） | 符号检验 p |",
        "|---|---:|" + ("---:|" if show else "") + "---:|---:|---:|---:|",
    ]
    for r in runs:
        for s in [s for s in sorted(r.evals) if s > steps[r.name]]:
            n = r.size(s)
            d = paired(r.values(0, "greedy", n), r.values(s, "greedy"))
            lines.append(
                f"| `{r.name}` | {s} |{_col(show, '', n)} {fmt(r.mean(s, 'greedy'))} | {signed(d['diff'])} ± "
                f"{d['se']:.3f} | {d['up']} / {d['down']} | {d['p']:.3g} |"
            )
    return "\n".join(lines) if len(lines) > 2 else None


def difference(run: Run, control: Run, step: int, metric: str) -> dict | None:
    n = min(run.size(step), control.size(step))  # 一边这一步是最后一步（全部题）、另一边不是
    a, b = control.values(step, metric, n), run.values(step, metric, n)
    return None if a is None or b is None else paired(a, b)


def pair_table(pairs: list[tuple[Run, Run]], steps: list[int]) -> str:
    show = _sized([r for pair in pairs for r in pair])
    lines = [
        f"| 运行 − 对照 | 步 |{_col(show, '题数')} 指标 | 运行 | 对照 | 差 ± 标准误 "
        "| 运行好 / 对照好（题） | 符号检验 p |",
        "|---|---:|" + ("---:|" if show else "") + "---|---:|---:|---:|---:|---:|",
    ]
    for (run, control), step in zip(pairs, steps):
        for metric in METRICS:
            d = difference(run, control, step, metric)
            if d is None:
                continue
            label = metric if metric != "pass@k" else f"pass@{run.k}"
            n = d["n"]
            lines.append(
                f"| `{run.name}` − `{control.name}` | {step} |{_col(show, '', n)} {label} "
                f"| {fmt(run.mean(step, metric, n))} | {fmt(control.mean(step, metric, n))} "
                f"| {signed(d['diff'])} ± {d['se']:.3f} "
                f"| {d['up']} / {d['down']} | {d['p']:.3g} |"
            )
    return "\n".join(lines)


def seeds_table(pairs: list[tuple[Run, Run]], steps: list[int]) -> str:
    lines = [
        f"| 指标 | 运行 − 对照：{len(pairs)} 个 seed 的均值 | seed 之间的范围 | 每个 seed |",
        "|---|---:|---|---|",
    ]
    for metric in METRICS:
        diffs = [difference(r, c, s, metric) for (r, c), s in zip(pairs, steps)]
        if any(d is None for d in diffs):
            continue
        sp = spread([d["diff"] for d in diffs])
        sd = "" if sp["sd"] is None else f"，标准差 {sp['sd']:.3f}"
        each = "，".join(signed(d["diff"]) for d in diffs)
        label = metric if metric != "pass@k" else f"pass@{pairs[0][0].k}"
        lines.append(
            f"| {label} | {signed(sp['mean'])} | {signed(sp['min'])} 到 {signed(sp['max'])}{sd} | {each} |"
        )
    return "\n".join(lines)


def floor_lines(runs: list[Run]) -> list[str]:
    lines = []
    for r in runs:
        f = r.floor
        if f:
            lines.append(
                f"- `{r.name}`：{f['n']} 题里 {f['grade_flips']} 题判分变了（{f['up']} 题变对、{f['down']} 题变错），"
                f"{f['text_changes']} 题的回答文字变了；正确率 {f['accuracy_first']:.3f} vs {f['accuracy_second']:.3f}"
            )
    return lines


def plot(pairs: list[tuple[Run, Run]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = max(r.k for pair in pairs for r in pair)
    panels = [("greedy", "held-out accuracy (greedy)"), ("pass@1", "held-out pass@1 (sampled)"),
              ("pass@k", f"held-out pass@{k} (sampled)")]  # fmt: skip
    panels = panels if k else panels[:1]  # --pass-k 0 的运行只评了贪心
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    axes = axes[0]
    fig.set_layout_engine("constrained")
    for ax, (metric, title) in zip(axes, panels):
        for i, (run, control) in enumerate(pairs):
            for r, style in ((run, "o-"), (control, "s--")):
                pts = [
                    (s, r.mean(s, metric)) for s in sorted(r.evals) if r.mean(s, metric) is not None
                ]
                if pts:
                    ax.plot(*zip(*pts), style, color=f"C{i}", ms=3, label=r.name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("runs (solid) vs their controls (dashed), one colour per pair", fontsize=11)
    save_figure(fig, path)  # 后缀定格式；不留半张图、不留临时文件


def report(pairs: list[tuple[Run, Run]], step: int | None = None) -> str:
    check_pairs(pairs)
    steps = [common_step(r, c, step) for r, c in pairs]
    runs = [r for pair in pairs for r in pair]
    out = ["## 实验是不是公平\n"]
    for run, control in pairs:
        out.append(f"`{run.name}` vs `{control.name}`：")
        out += [f"- {line}" for line in fairness(run, control)]
        out.append("")
    at = {r.name: s for (run, control), s in zip(pairs, steps) for r in (run, control)}
    n = runs[0].n
    inner = min(min(r.sizes) for r in runs)
    note = (
        ""
        if inner == n
        else f"，训练中的评估用其中的前 {inner} 道（±{binomial_se(0.5, inner):.3f}）"
    )
    out.append(
        f"## 训练前 → 比较的那一步（{n} 道 held-out 题；一个正确率 0.5 的标准误是 ±{binomial_se(0.5, n):.3f}"
        f"{note}）\n"
    )
    out.append(before_after_table(runs, at))
    later = later_table(runs, at)
    if later:  # 对照先停了、运行还评估过后面几步：这几步没有对照，只能和训练前比
        out.append("\n## 比较的那一步之后的评估（没有对照，只和各自的训练前逐题配对，贪心）\n")
        out.append(later)
    out.append("\n## 每个 seed：运行 − 对照，同一步、同一批题逐题配对\n")
    out.append(pair_table(pairs, steps))
    out.append("\n## 几个 seed 放在一起\n")
    out.append(seeds_table(pairs, steps))
    floor = floor_lines(runs)
    if floor:
        out.append("\n## 评估自己的底噪：同样的权重，换一种 batch 组合再评一次\n")
        out += floor
    return "\n".join(out)


def main(argv=None) -> int:
    ap = CourseParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", nargs=2, action="append", type=Path, metavar=("RUN", "CONTROL"),
                    help="一次运行和它的对照（同一个 seed）；可给多次。不给：仓库附带的 tiny 运行")  # fmt: skip
    ap.add_argument("--step", type=int, default=None,
                    help="在哪一步比（默认：两边都评估过 pass@k 的最后一步；"
                    "都没评 pass@k 时是两边都评估过的最后一步）")  # fmt: skip
    ap.add_argument(
        "--plot", type=Path, default=None, help="把 held-out 正确率随步数的图存到这个 PNG"
    )
    args = ap.parse_args(argv)
    given = args.pair or [(SHIPPED / r, SHIPPED / c) for r, c in SHIPPED_PAIRS]
    try:
        problem = args.plot and figure_problem(args.plot)  # 在读任何目录之前
        if problem:
            raise RunError(problem)
        pairs = [(Run(r), Run(c)) for r, c in given]
        for warning in check_pairs(pairs):
            print(f"注意：{warning}", file=sys.stderr)
        print(report(pairs, args.step))
        if args.plot:
            plot(pairs, args.plot)
            print(f"\n图：{args.plot}")
    except (RunError, WriteError) as err:
        print(f"错误：{err}", file=sys.stderr)
        return 1
    except OSError as err:
        line = broken_stdout(err) or f"读写文件失败（{type(err).__name__}: {err}）：看看路径和权限"
        print(f"错误：{line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
