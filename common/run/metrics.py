"""Per-step training metrics: an append-only jsonl log and the ``curves.png`` plot.

Convention (other tools rely on it): wall-clock timings live ONLY under keys ending in ``_s`` or
``_per_s`` and memory ONLY under keys ending in ``_gb``; every other value in a row is a deterministic
function of the run's seed on a CPU, so two runs (or a run and its resumed twin) can be compared with
:func:`deterministic_part`.

Reading never loses a row silently: :func:`read_metrics` ignores only a last line without its
newline (a run killed in the middle of an append); any other line that is not a JSON object with an
integer ``step`` raises :class:`MetricsError` naming the file and the line, and nothing is rewritten.
Every write is atomic or rolled back (``common.run.atomic_io``): a full disk leaves no half line.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from common.run.atomic_io import append_line, atomic_write
from common.run.json_files import json_line, json_value, write_jsonl
from common.run.out_dir import out_file_problem

NONDETERMINISTIC_SUFFIXES = ("_s", "_per_s", "_gb")

# The files of a run folder that this module writes (common.run.run_folder knows the whole folder).
METRICS_NAME = "metrics.jsonl"
CURVES_NAME = "curves.png"

# (key in metrics.jsonl, panel title) for curves.png, in the order a reader checks them (L2.08).
CURVES = (
    ("reward_mean", "reward (mean)"),
    ("accuracy", "accuracy: sampled train batch vs held-out"),
    ("format_rate", "format rate (\\boxed{})"),
    ("completion_len_mean", "completion length (tokens)"),
    ("truncation_rate", "truncation rate"),
    ("entropy", "entropy (nats/token)"),
    ("zero_std_frac", "groups with zero reward std"),
    ("kl", "KL to reference (k3)"),
    ("clip_fraction", "clip fraction"),
)


def is_nondeterministic_key(key: str) -> bool:
    return key.endswith(NONDETERMINISTIC_SUFFIXES)


def deterministic_part(row: dict) -> dict:
    """The row without timing/memory keys: what must be bit-identical across a resume on a CPU."""
    return {k: v for k, v in row.items() if not is_nondeterministic_key(k)}


class MetricsError(ValueError):
    """A metrics.jsonl line that is not a row (other than a half-written last line)."""


def _row(line: bytes) -> dict | None:
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return row if isinstance(step, int) and not isinstance(step, bool) else None


def read_metrics(path: str | Path) -> list[dict]:
    """All rows of a metrics.jsonl; [] if there is no file.

    The file is append-only, so only its very last line can be half-written (a run killed during
    an append): a last line without a trailing newline that does not parse is ignored. Any other
    bad line raises MetricsError with its line number; the file is never modified here.
    A reader that must not lose that last row unnoticed uses :func:`read_rows`.
    """
    return read_rows(path)[0]


def read_rows(path: str | Path) -> tuple[list[dict], int | None]:
    """(:func:`read_metrics`'s rows, the number of the half-written last line it ignored or None)."""
    path = Path(path)
    if not path.is_file():
        return [], None
    lines = path.read_bytes().split(b"\n")
    partial = lines.pop()  # b"" when the file ends with a newline (or is empty)
    rows = []
    for lineno, line in enumerate(lines, start=1):
        row = _row(line)
        if row is None:
            raise MetricsError(
                f"{path} 第 {lineno} 行不是一行合法的指标（要一个带整数 step 的 JSON 对象）："
                f"{line[:80].decode('utf-8', 'replace')!r}。文件没有被改动；把这一行修好或删掉再运行"
            )
        rows.append(row)
    if partial.strip() and _row(partial) is not None:
        rows.append(_row(partial))  # complete row, only the newline missing
    elif partial.strip():
        return rows, len(lines) + 1
    return rows, None


def cut_line_error(path: Path, lineno: int, why: str) -> MetricsError:
    """A half-written last line that a reader cannot skip: names the file, the line and why."""
    return MetricsError(
        f"{path} 的最后一行（第 {lineno} 行）只写了一半（进程在写它时被杀了）：{why}"
    )


def read_whole_rows(path: str | Path, why: str) -> list[dict]:
    """:func:`read_metrics`'s rows for a reader that must not lose the last one unnoticed (a
    comparison, a lesson tool): a half-written last line is a MetricsError saying ``why``, and so
    is a step that has two rows (a file that was concatenated or edited), naming both lines."""
    rows, cut = read_rows(path)
    if cut is not None:
        raise cut_line_error(Path(path), cut, why)
    first: dict[int, int] = {}
    for line, r in enumerate(rows, start=1):
        if r["step"] in first:
            raise MetricsError(
                f"{path} 第 {line} 行又是第 {r['step']} 步（第 {first[r['step']]} 行已经有这一步）："
                "同一步有两行，文件被拼接或改过。删掉重复的那一行再用"
            )
        first[r["step"]] = line
    return rows


class MetricsLogger:
    """Append one JSON object per step to ``path``; each line is flushed so a crash loses at most one row."""

    def __init__(self, path: str | Path, resume_from_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None:
            self.truncate_after(resume_from_step)

    def truncate_after(self, step: int) -> None:
        """Drop rows with ``row["step"] > step`` (logged after the checkpoint we resume from), atomically.

        Also drops a half-written last line. A bad line elsewhere raises MetricsError (file unchanged).
        """
        kept = [r for r in read_metrics(self.path) if r["step"] <= step]
        write_jsonl(self.path, kept)

    def log(self, row: dict) -> None:
        if "step" not in row:
            raise ValueError("每一行 metrics 都必须有 'step' 键")
        append_line(self.path, json_line(row))


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average that skips missing values (None)."""
    out, buf = [], []
    for v in values:
        if v is not None:
            buf.append(v)
            buf = buf[-window:]
        out.append(sum(buf) / len(buf) if buf else None)
    return out


def _note(ax, text: str, y: float = 0.5) -> None:
    """A gray explanation in the middle of a panel (why it is empty or flat)."""
    ax.text(
        0.5,
        y,
        text,
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="dimgray",
        fontsize=8,
        bbox=dict(boxstyle="round", fc="white", ec="lightgray", alpha=0.9),
    )


def _heldout_points(rows: list[dict], before: dict | None, key: str, eval_key: str) -> list:
    """(step, value) of one held-out metric, step 0 = ``eval_before.json`` when there is one.

    key: "accuracy" (greedy) or "1", "8", ... (pass@k from the periodic evaluations).
    """
    row_key = eval_key if key == "accuracy" else f"eval_pass_at_{key}"
    points = [(r["step"], r[row_key]) for r in rows if r.get(row_key) is not None]
    start = None if before is None else (before.get("pass_at", {}) | before).get(key)
    return ([(0, start)] if start is not None else []) + points


def _accuracy_panel(ax, rows, before, config, eval_key) -> None:
    """Sampled training-batch accuracy next to held-out greedy accuracy and held-out pass@1/pass@k.

    Greedy and sampled accuracy are different quantities (a model whose right answer is its most
    likely one but gets only 40% of the probability is right 100% greedy and 40% sampled): the
    like-for-like comparison with the training batch is held-out pass@1, sampled the same way.
    """
    temp = (config or {}).get("temperature")
    t = f", T={temp:g}" if temp is not None else ""
    ax.lines[-1].set_label(f"train batch (sampled{t})")  # the thick moving average
    greedy = _heldout_points(rows, before, "accuracy", eval_key)
    if greedy:
        ax.plot(*zip(*greedy), "o-", color="C3", ms=4, label="held-out greedy")
    logged = {
        k.removeprefix("eval_pass_at_") for r in rows for k in r if k.startswith("eval_pass_")
    }
    ks = sorted(logged | set((before or {}).get("pass_at", {})), key=int)
    for k, (style, color) in zip(ks, (("s--", "C1"), ("^:", "gray"))):
        points = _heldout_points(rows, before, k, eval_key)
        if points:
            label = f"held-out pass@{k}" + (f" (sampled{t})" if k == "1" else "")
            ax.plot(*zip(*points), style, color=color, ms=3.5, lw=1, label=label)
    ax.set_ylim(-0.02, 1.02)


def curves_figure(
    rows: list[dict],
    title: str = "",
    *,
    config: dict | None = None,
    before: dict | None = None,
    eval_key: str = "eval_accuracy",
):
    """The matplotlib figure of ``curves.png`` (see :func:`plot_curves`); the caller closes it.

    config: the run's ``config.json`` (beta, num_iterations, temperature: the panel notes use them);
    before: its ``eval_before.json`` (the held-out points at step 0).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = config or {}
    steps = [r["step"] for r in rows]
    window = max(1, len(rows) // 20)
    fig, axes = plt.subplots(3, 3, figsize=(13, 9), constrained_layout=True)
    for ax, (key, label) in zip(axes.flat, CURVES):
        values = [json_value(r.get(key)) for r in rows]
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        if any(v is not None for v in values):
            xs = [s for s, v in zip(steps, values) if v is not None]
            ax.plot(xs, [v for v in values if v is not None], color="C0", alpha=0.35, lw=0.8)
            sm = _smooth(values, window)
            ax.plot(steps, sm, color="C0", lw=2, label=f"avg of {window}" if window > 1 else None)
        else:  # nothing to draw: say why instead of showing an empty axis
            no_ref = key == "kl" and config.get("beta") == 0
            _note(
                ax,
                "β = 0: no reference model,\nso there is no KL to log"
                if no_ref
                else f"'{key}' not logged",
            )
            ax.set_xticks([])
            ax.set_yticks([])
        if key == "accuracy" and ax.lines:
            _accuracy_panel(ax, rows, before, config, eval_key)
        if key == "clip_fraction" and config.get("num_iterations") == 1:
            _note(
                ax,
                "μ = 1: one update per rollout, so the ratio\n"
                "π/π_old is exactly 1 and nothing is clipped",
                y=0.6,
            )
        if key in ("format_rate", "truncation_rate", "zero_std_frac"):
            ax.set_ylim(-0.02, 1.02)
        elif key not in ("reward_mean", "accuracy") and ax.has_data():
            # non-negative: an entropy drop from 0.06 to 0.03 is a halving, not a cliff
            ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6.5 if key == "accuracy" else 7, loc="best")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


FIGURE_FORMATS = ("png", "pdf", "svg")  # a figure's format is its file's suffix


def figure_problem(path: str | Path, flag: str = "--plot") -> str | None:
    """Why ``flag path`` cannot take a figure (a folder, a missing folder, an unknown suffix...);
    None if it can. Asked before the work (common.run.out_dir.out_file_problem, then the suffix)."""
    path = Path(path)
    problem = out_file_problem(path, flag, "figure.png")
    if problem is None and path.suffix.lower().lstrip(".") not in FIGURE_FORMATS:
        problem = (
            f"{flag} {path}：后缀 {path.suffix or '（没有）'} 不是能画的格式"
            f"（可以用 {' / '.join('.' + f for f in FIGURE_FORMATS)}）"
        )
    return problem


def save_figure(fig, path: str | Path, dpi: int = 80) -> Path:
    """Write a matplotlib figure in its suffix's format (PNG bytes never go under a .pdf name),
    atomically (common.run.atomic_io: no half figure, no temporary file left), then close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    image = io.BytesIO()
    try:
        fig.savefig(image, format=fmt if fmt in FIGURE_FORMATS else "png", dpi=dpi)
    finally:
        plt.close(fig)
    return atomic_write(path, image.getvalue())


def plot_curves(
    rows: list[dict],
    out_png: str | Path,
    title: str = "",
    eval_key: str = "eval_accuracy",
    *,
    config: dict | None = None,
    before: dict | None = None,
) -> Path:
    """Draw ``curves.png``: one panel per entry of :data:`CURVES` against ``step``. Written atomically.

    Thin line = raw per-step value, thick line = trailing moving average. The accuracy panel sets
    the sampled training-batch accuracy beside the held-out evaluations (greedy, and pass@1 / pass@k
    when logged), from step 0 (``before``: the run's ``eval_before.json``). ``config`` is the run's
    ``config.json``: with beta = 0 the KL panel says there is no reference model, and with
    num_iterations = 1 the clip-fraction panel says why it is 0. Other never-logged metrics say so
    instead of drawing an empty axis.
    """
    fig = curves_figure(rows, title, config=config, before=before, eval_key=eval_key)
    return save_figure(fig, out_png)
