"""The run folder of a training script: one writer at a time, and a resume that never starts over.

    problem = out_dir_problem(out)      # common.run.out_dir, before anything heavy: None or why not
    run = RunFolder(out)
    ckpt = run.open(config, resume=False)                     # new: lock, write config.json -> None
    ckpt = run.open(config, resume=True, may_change=(...))    # resume: lock, verify -> Checkpoint
    plan_resume(out, config, may_change)                      # the verdict alone: reads only
    if run.needs_eval_before(): ...                           # new run, or eval_before.json lost
    with exit_cleanly(out, steps, errors=(...)): main()       # one Chinese line instead of a traceback

A folder holds ``config.json``, ``metrics.jsonl``, ``eval_before.json``, ``eval_after.json``,
``curves.png``, ``checkpoint.pt`` and ``run.lock``. The lock is an advisory ``fcntl.flock`` on
``run.lock``, held for the life of the process and released by the OS when it dies (even by
kill -9), so a second process refuses at once instead of interleaving its steps with the first.
``run.lock`` is deleted when the process ends in an orderly way (finished, refused, Ctrl-C,
SIGTERM, SIGHUP); after kill -9 it stays, unlocked, and the next process simply takes it.

A resume is checked before any model is built, by :func:`plan_resume`, which only reads, so a
refusal leaves every run file as it was: the checkpoint must load and pass its checksums (``common.run.checkpoint.read_checkpoint``), the
training settings it recorded must equal ``config.json``'s, and ``metrics.jsonl`` must hold exactly
one row for each step up to the checkpoint (``common.run.metrics.read_metrics`` refuses a bad line
anywhere but a half-written last one). Rows after the checkpoint are recomputed, bit-identically on
a CPU, by the resumed run. A run that stopped before its first checkpoint was complete (an error
while loading, Ctrl-C in the first evaluation, kill -9 while the first checkpoint was written) has
nothing to lose: it resumes from step 0. ``eval_questions.jsonl`` must hold one row for each
evaluation up to the checkpoint: those rows came from weights the resume no longer has, so a lost or
half-written one is refused, not dropped. Temporary files left by a killed run are deleted: only
the ``.tmp`` of a file the course writes here (:data:`WRITTEN`), never a user's own ``thesis.tmp``.
No file here is written through a symbolic link (``common.run.atomic_io.open_no_link``): a ``run.lock``
planted as a link to a file elsewhere is refused, not followed.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from common.options.cli import broken_stdout
from common.run.atomic_io import TMP_SUFFIX, WriteError, open_no_link
from common.run.bad_step import save_bad_step
from common.run.checkpoint import (
    CHECKPOINT_NAME,
    Checkpoint,
    CheckpointError,
    apply_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from common.run.finite_guard import NonFiniteError, guard_finite
from common.run.json_files import read_json, write_json, write_jsonl
from common.run.metrics import (
    CURVES_NAME,
    METRICS_NAME,
    MetricsError,
    MetricsLogger,
    plot_curves,
    read_metrics,
    read_rows,
)
from common.run.out_dir import CONFIG_NAME
from common.run.provenance import provenance
from common.run.random_streams import random_streams

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; the rest works without one
    fcntl = None

EVAL_BEFORE_NAME = "eval_before.json"
EVAL_AFTER_NAME = "eval_after.json"
LOCK_NAME = "run.lock"
QUESTIONS_NAME = "eval_questions.jsonl"  # per-question held-out results, one row per evaluation
EVAL_KEY = "eval_accuracy"  # a metrics.jsonl row with it had an evaluation (a QUESTIONS_NAME row)
RUN_FILES = (
    CONFIG_NAME,
    METRICS_NAME,
    EVAL_BEFORE_NAME,
    EVAL_AFTER_NAME,
    CURVES_NAME,
    CHECKPOINT_NAME,
)
# every file the course writes in a run folder (fnmatch patterns); only their temporary files
# are ever cleaned up: a user's own thesis.tmp in the same folder is not the course's to delete
EVALS = (
    "before",
    "after",
    "floor",
)  # eval_<when>.json and answers_<when>.jsonl (RunFolder.save_eval)
WRITTEN = (*RUN_FILES, QUESTIONS_NAME, *(f"eval_{w}.json" for w in EVALS),
           *(f"answers_{w}.jsonl" for w in EVALS), "bad_step_[0-9]*.pt")  # fmt: skip
TMP_PATTERNS = (
    *(name + TMP_SUFFIX for name in WRITTEN),
    "curves.tmp.png",  # curves.png written by older versions
)
IDENTITY_KEYS = ("out",)  # the folder's own path: a moved folder is still the same run


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as asked; the message says what to change."""


_HELD: set[RunFolder] = set()  # folders this process has locked (exit_cleanly lets go of them)


class RunFolder:
    """One training run's folder. :meth:`open` takes the lock; the OS releases it at exit."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_fd: int | None = None
        self._new = False
        self._metrics: MetricsLogger | None = None  # opened by restore()
        self._questions: MetricsLogger | None = None

    def file(self, name: str) -> Path:
        return self.path / name

    # ---- the lock --------------------------------------------------------------------------
    def lock(self) -> RunFolder:
        """Create the folder if needed and take its lock, or raise RunFolderError at once."""
        if self._lock_fd is not None:
            return self
        for _ in range(10):  # another process may delete run.lock between our open and our flock
            fd = self._open_lock_file()
            if fcntl is None:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise RunFolderError(
                    f"{self.path} 正被另一个训练进程（pid {holder}）使用：一个运行目录同一时间只能有一个进程写。"
                    "等它结束再续跑，或者换一个 --out"
                ) from None
            if self._still_the_lock_file(fd):
                break
            os.close(fd)  # we locked a file its last owner had just deleted: take the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        _HELD.add(self)
        self.clean_tmp()
        return self

    def _open_lock_file(self) -> int:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            return open_no_link(self.file(LOCK_NAME), os.O_RDWR | os.O_CREAT)
        except OSError as err:
            raise RunFolderError(
                f"建不了运行目录 {self.path}（{err.strerror or err}）：换一个能写的 --out"
            ) from None

    def _still_the_lock_file(self, fd: int) -> bool:
        try:
            return os.stat(self.file(LOCK_NAME)).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def close(self) -> None:
        """Release the lock and delete run.lock (the OS releases the lock anyway when the process
        ends; only kill -9 leaves the file behind, unlocked)."""
        if self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        _HELD.discard(self)
        if fcntl is not None:  # delete while still holding it: nobody can be inside the lock now
            self.file(LOCK_NAME).unlink(missing_ok=True)
            os.close(fd)
        else:
            os.close(fd)
            try:
                self.file(LOCK_NAME).unlink(missing_ok=True)
            except OSError:
                pass

    def clean_tmp(self) -> list[Path]:
        """Delete temporary files a killed run left behind (only while holding the lock): the
        ``.tmp`` of a file the course writes here (:data:`WRITTEN`), never a link, never another file."""
        removed = []
        if not self.file(CONFIG_NAME).exists():  # no run was ever started here: nothing is ours
            return removed
        for pattern in TMP_PATTERNS:
            for tmp in sorted(self.path.glob(pattern)):
                if tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink()
                    removed.append(tmp)
        if removed:
            names = ", ".join(sorted(p.name for p in removed))
            print(f"{self.path}：删掉了上次中断时留下的临时文件 {names}")
        return removed

    # ---- open: a new run, or a resume ------------------------------------------------------
    def open(
        self,
        config: dict,
        *,
        resume: bool,
        may_change=(),
        record: dict | None = None,
        device=None,
    ) -> Checkpoint | None:
        """Lock the folder, then start a new run (write config.json; returns None) or check a resume.

        resume=True returns the verified checkpoint, or None when the run never saved one (it
        starts at step 0); the verdict is :func:`plan_resume`'s, and a refusal writes nothing.
        A new run is refused when the folder already holds a run's files.
        record: written into a new run's config.json beside the settings (e.g. "provenance"),
        never compared on resume. device: add the run's provenance (common.run.provenance) to it.
        """
        if device is not None:  # which commit, libraries, machine and command
            record = {**(record or {}), "provenance": provenance(device)}
        self.lock()
        try:
            if resume:
                plan = plan_resume(self.path, config, (*may_change, *IDENTITY_KEYS))
                if plan.checkpoint is None:
                    rows = plan.rows_to_recompute
                    done = (
                        f"metrics.jsonl 有 {rows} 行，都会重算"
                        if rows
                        else "metrics.jsonl 也没有一行"
                    )
                    print(
                        f"{self.path} 里还没有存好的 checkpoint（{done}）：上次在第一个 checkpoint 存好之前就停了"
                        "（加载模型出错、被中断、存盘时被杀……），这次从第 0 步开始，用 config.json 里的设置"
                    )
                return plan.checkpoint
            present = [name for name in RUN_FILES if self.file(name).exists()]
            if present:
                raise RunFolderError(
                    f"{self.path} 里已经有一次运行（{', '.join(present)}）：续跑用 --resume {self.path}，"
                    "否则换一个 --out"
                )
            write_json(self.file(CONFIG_NAME), {**config, **(record or {})})
            self._new = True
            return None
        except BaseException:
            self.close()  # a refusal lets go of the folder at once
            raise

    def needs_eval_before(self) -> bool:
        """True for a new run, and for a resume whose eval_before.json is missing or unreadable."""
        if self._new:
            return True
        before = read_json(self.file(EVAL_BEFORE_NAME))
        if before is not None and isinstance(before.get("accuracy"), (int, float)):
            return False
        print(
            f"{self.file(EVAL_BEFORE_NAME)} 不见了或读不出：从起点权重重新做一次训练前评估"
            "（评估用自己的随机数，不改变续跑的结果）"
        )
        return True

    # ---- what a training run writes here -----------------------------------------------------
    def restore(self, ckpt: Checkpoint | None, *, model, optimizer, seed: int, device):
        """The run's state at its first step -> (steps done, random streams).

        A new run starts at 0 with fresh streams of ``seed`` (common.run.random_streams); a resume
        loads the checkpoint's weights, optimizer state and streams. metrics.jsonl and
        eval_questions.jsonl then lose the rows after that step (the resumed run recomputes them).
        """
        streams = random_streams(seed, device)
        start = 0
        if ckpt is not None:
            start = apply_checkpoint(ckpt, model=model, optimizer=optimizer, generators=streams)
            start = start["step"]
        logs = (self.file(METRICS_NAME), self.file(QUESTIONS_NAME))
        self._metrics, self._questions = (MetricsLogger(p, resume_from_step=start) for p in logs)
        return start, streams

    def log(self, row: dict) -> None:
        """One step's row of metrics.jsonl (after :meth:`restore`)."""
        self._metrics.log(row)

    def log_eval(self, step: int, ev: dict) -> None:
        """One evaluation's per-question results (``ev["per_question"]``) in eval_questions.jsonl."""
        self._questions.log({"step": step, **ev["per_question"]})

    def save_eval(self, when: str, ev: dict) -> None:
        """``eval_<when>.json`` (before, after, floor); its ``"answers"``, if any, go to
        ``answers_<when>.jsonl`` (each question's greedy answer and its score)."""
        if "answers" in ev:
            write_jsonl(self.file(f"answers_{when}.jsonl"), ev.pop("answers"))
        write_json(self.file(f"eval_{when}.json"), ev)

    def read_eval(self, when: str) -> dict | None:
        return read_json(self.file(f"eval_{when}.json"))

    def save_checkpoint(self, step: int, *, model, optimizer, generators, config: dict) -> None:
        """checkpoint.pt after step ``step`` (atomic, with checksums; common.run.checkpoint),
        keeping the config to check a resume against."""
        state = dict(model=model, optimizer=optimizer, step=step, generators=generators)
        save_checkpoint(self.path, **state, extra={"config": config})

    def plot_curves(self, title: str) -> None:
        """curves.png from metrics.jsonl (common.run.metrics.plot_curves), with config.json and
        eval_before.json when they can be read (the panel notes and the held-out points at step 0)."""
        plot_curves(
            read_metrics(self.file(METRICS_NAME)),
            self.file(CURVES_NAME),
            title=title,
            config=read_json(self.file(CONFIG_NAME)),
            before=read_json(self.file(EVAL_BEFORE_NAME)),
        )

    def save_bad_step(self, step: int, **evidence) -> None:
        """``bad_step_<step>.pt`` (common.run.bad_step), then NonFiniteError: the gradients went NaN/inf."""
        save_bad_step(self.path, step, **evidence)

    def check_finite(self, step: int, **values) -> None:
        """NonFiniteError when a loss, the gradient norm, a weight or an optimizer state of this
        step is NaN/inf (common.run.finite_guard): nothing non-finite reaches the checkpoint."""
        guard_finite(step, **values)


class ResumePlan(NamedTuple):
    """Where a resume starts: the verified checkpoint, or None (step 0) and the rows it recomputes."""

    checkpoint: Checkpoint | None
    rows_to_recompute: int = 0


def plan_resume(out: str | Path, config: dict, may_change=()) -> ResumePlan:
    """Read ``out``'s checkpoint, config.json and metrics.jsonl and decide where a resume starts.

    Writes nothing: a refusal (RunFolderError, CheckpointError, MetricsError) leaves every file as
    it was. A run that stopped before its first checkpoint (:func:`rows_before_first_checkpoint`)
    starts again at step 0. Otherwise the checkpoint must load and pass its checksums, be at most
    ``config["steps"]``, have been trained with ``config`` (keys in ``may_change`` may differ), and
    metrics.jsonl must hold exactly one row for each step up to it.
    """
    out = Path(out)
    untouched = f"{out} 里的文件都没有动"
    rows, read = _rows_if_never_saved(out)
    if rows is not None:
        return ResumePlan(None, rows)
    try:
        ckpt = read_checkpoint(out)
    except CheckpointError as err:
        raise CheckpointError(f"{err}。{untouched}") from None
    # the step: a resume only goes forward
    target = config.get("steps")
    if isinstance(target, int) and ckpt.step > target:
        raise RunFolderError(
            f"--steps {target} 比 checkpoint 的第 {ckpt.step} 步还小：续跑只能接着往后跑，"
            f"给一个 >= {ckpt.step} 的 --steps。{untouched}"
        )
    # the settings: those the checkpoint was trained with
    stored = ckpt.extra.get("config")
    if not isinstance(stored, dict):
        raise CheckpointError(
            f"{ckpt.path} 里没有记下训练设置（不是这个脚本写的 checkpoint），无法核对 "
            f"{CONFIG_NAME}：{untouched}"
        )
    keys = (set(stored) | set(config)) - set(may_change)
    differ = sorted(k for k in keys if stored.get(k) != config.get(k))
    if differ:
        shown = "；".join(
            f"{k} = {config.get(k)!r}，checkpoint 里是 {stored.get(k)!r}" for k in differ[:5]
        )
        raise RunFolderError(
            f"{out / CONFIG_NAME} 和 {ckpt.path} 记下的训练设置不一致（{shown}）："
            f"{CONFIG_NAME} 在运行开始后被改过。改回去再续跑；要换设置请开一个新的 --out。"
            f"{untouched}"
        )
    # the metrics (read above, once): one row for each step up to the checkpoint
    path, step = out / METRICS_NAME, ckpt.step
    if step > 0 and not path.is_file():
        raise RunFolderError(
            f"{path} 不见了，而 checkpoint 已经到第 {step} 步：续跑会丢掉前 {step} 步的记录。"
            f"找回这个文件再续跑（真要不要这些记录，就建一个空的 {METRICS_NAME}）"
        )
    if isinstance(read, MetricsError):  # reported only now: a checkpoint problem comes first
        raise MetricsError(f"{read}（{untouched}）")
    steps = [r["step"] for r in read if r["step"] <= step]
    if steps != list(range(1, step + 1)) and path.stat().st_size > 0:
        missing = sorted(set(range(1, step + 1)) - set(steps))
        repeated = sorted({s for s in steps if steps.count(s) > 1})
        what = "、".join(
            part
            for part in (
                f"缺第 {missing[:5]} 步" if missing else "",
                f"第 {repeated[:5]} 步出现了不止一次" if repeated else "",
                "" if missing or repeated else "行的顺序乱了",
            )
            if part
        )
        raise RunFolderError(
            f"{path} 和 checkpoint（第 {step} 步）对不上：{what}。"
            f"续跑会让记录缺行或重复；{untouched}"
        )
    _check_questions(out, ckpt.step, [r["step"] for r in read if EVAL_KEY in r], untouched)
    return ResumePlan(ckpt)


def _check_questions(out: Path, step: int, evaluated: list[int], untouched: str) -> None:
    """eval_questions.jsonl must hold one row for each evaluation up to the checkpoint's ``step``
    (metrics.jsonl's rows with :data:`EVAL_KEY`): those rows came from weights the resume no longer
    has, so a lost one cannot be recomputed and the resume is refused, naming file and line."""
    path = out / QUESTIONS_NAME
    want = [s for s in evaluated if s <= step]
    try:
        rows, cut = read_rows(path)
    except MetricsError as err:
        raise MetricsError(f"{err}（{untouched}）") from None
    have = [r["step"] for r in rows if r["step"] <= step]
    if have == want:
        return
    missing = sorted(set(want) - set(have))
    repeated = sorted({s for s in have if have.count(s) > 1})
    extra = sorted(set(have) - set(want))
    what = "；".join(
        part
        for part in (
            f"缺第 {missing[:5]} 步的逐题结果" if missing else "",
            f"第 {repeated[:5]} 步出现了不止一次" if repeated else "",
            f"有 {METRICS_NAME} 里没有评估过的第 {extra[:5]} 步" if extra else "",
            "" if missing or repeated or extra else "行的顺序乱了",
        )
        if part
    )
    if not path.is_file():
        what = "文件不见了"
    elif cut is not None and missing:
        what += f"（第 {cut} 行，最后一行，只写了一半）"
    raise RunFolderError(
        f"{path} 和 checkpoint（第 {step} 步）对不上：{what}。这些逐题结果是用那几步的权重算的，"
        f"checkpoint 已经到第 {step} 步，续跑补不回来；接着跑会少掉它们（compare_runs.py 会比错步）。"
        f"要完整的记录请换一个 --out 重新跑；{untouched}"
    )


def _checkpoint_step(out: Path) -> int | None:
    """The step of ``out``'s checkpoint, read cheaply (mmap, unverified) for a message; None if none."""
    path = out / CHECKPOINT_NAME
    if not path.is_file():
        return None
    try:
        import torch

        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("step")
    except Exception:
        return None
    return step if isinstance(step, int) else None


def _rows_if_never_saved(out: Path) -> tuple[int | None, list[dict] | MetricsError]:
    """(rows_before_first_checkpoint(out), metrics.jsonl's rows or the MetricsError reading it raised).

    metrics.jsonl is read once, here, for both that verdict and plan_resume's row check.
    """
    try:
        read = read_metrics(out / METRICS_NAME)
    except MetricsError as err:
        read = err
    if (out / CHECKPOINT_NAME).exists() or (out / EVAL_AFTER_NAME).exists():
        return None, read
    config = read_json(out / CONFIG_NAME)
    if config is None or isinstance(read, MetricsError):
        return None, read
    steps = [r["step"] for r in read]
    every, total = config.get("save_every"), config.get("steps")
    first_save = min(every, total) if all(isinstance(v, int) for v in (every, total)) else 0
    rows = len(steps) if all(isinstance(s, int) and s <= first_save for s in steps) else None
    return rows, read


def rows_before_first_checkpoint(out: str | Path) -> int | None:
    """The metrics rows of a run that stopped before its first checkpoint was complete, or None.

    Such a run has config.json, no checkpoint.pt, no eval_after.json, and metrics rows only up to
    its first save step (min(save_every, steps) from config.json; with no such keys, no rows at
    all): nothing a checkpoint held was ever lost, so it can start again from step 0. A run with
    rows past that step had a checkpoint once; losing it is refused, not papered over.
    """
    return _rows_if_never_saved(Path(out))[0]


def _out_of_gpu_memory(err: BaseException) -> bool:
    torch = sys.modules.get("torch")  # torch is imported by then whenever a GPU ran out
    return torch is not None and isinstance(err, torch.OutOfMemoryError)


def out_of_memory_line(err: BaseException) -> str:
    """torch's CUDA out-of-memory error as one Chinese line: how much it asked for, what to do."""
    asked = re.search(r"Tried to allocate [\d.]+ \w+", str(err))
    what = f"（{asked.group(0)}）" if asked else ""
    return (
        f"显存不够（CUDA out of memory）{what}。先 nvidia-smi 看卡上有没有别的进程占着显存：有就停掉它，"
        "再照下一行续跑。没有别的进程还是不够：换一个 --out 从头跑，加 --micro-batch 4（一次反向的条数减半，"
        "算法不变，只是慢些），评估时不够再加 --eval-batch 32；运行和它的对照要用一样的值（L2.07 第 6.4 节）"
    )


def resume_hint(out: str | Path, steps: int | None = None) -> str:
    """How to continue from ``out`` (or why it cannot be continued)."""
    out = Path(out)
    more = f" --steps {steps}" if steps else ""
    command = f"python {sys.argv[0]} --resume {out}{more}"
    step = _checkpoint_step(out)
    if step is not None:
        return f"checkpoint 停在第 {step} 步；接着跑：{command}"
    if not (out / CONFIG_NAME).is_file():
        return f"{out} 里还没有这次运行的记录：原样重跑同一条命令即可"
    if rows_before_first_checkpoint(out) is not None:
        return f"{out} 里还没有存好的 checkpoint：续跑会从第 0 步开始（用 config.json 里的设置）：{command}"
    return f"{out} 里没有读得出的 checkpoint，不能续跑：重新开始请换一个 --out（或删掉这个目录）"


ERRORS = (RunFolderError, CheckpointError, MetricsError, WriteError, NonFiniteError)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler, a shutdown) or SIGHUP (the SSH session or terminal went
    away): handled exactly like Ctrl-C. ``signum`` is the signal that came."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def _stop_signals() -> list[signal.Signals]:
    """SIGTERM; SIGHUP unless it is ignored (``nohup`` ignores it on purpose: keep that); SIGINT
    while Python's own Ctrl-C handler is in place."""
    stops = [signal.SIGTERM]
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        stops.append(signal.SIGHUP)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        stops.append(signal.SIGINT)
    return stops


def _stop(signum, frame):
    """The first Ctrl-C / SIGTERM / SIGHUP stops the run; later ones (a second Ctrl-C 10 ms after the
    first) are ignored, so they cannot break the clean exit with a traceback of their own."""
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is _stop:
            signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _ignore_stop_signals() -> None:
    """At interpreter exit after a stop: later Ctrl-C / SIGTERM / SIGHUP are ignored (registered last
    with atexit, so it runs before the other exit handlers)."""
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)


def _say(text: str) -> None:
    """stderr may be a terminal that is gone (SIGHUP after SSH dropped): never fail on that."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


@contextmanager
def exit_cleanly(out: str | Path, steps: int | None = None, *, errors: tuple = ()):
    """Turn the course's errors, Ctrl-C, SIGTERM and SIGHUP into one Chinese line on stderr and exit != 0.

    errors: the caller's own error classes (data, preset, optimizer, ...) besides :data:`ERRORS`.
    Ctrl-C exits 130, SIGTERM 143 and SIGHUP 129 (128 + the signal), all with how to resume (a
    SIGHUP from a dropped SSH session may find no terminal to print to: the lock still goes, and
    ``nohup``'s ignored SIGHUP stays ignored); a failed write
    (a full disk) also says how to resume, and so does CUDA running out of memory (what to change
    first). On the way out the run folder's lock is let go.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _stop) for sig in _stop_signals()} if main else {}
    try:
        yield
    except KeyboardInterrupt as err:
        # 退出时的收尾（torch 的 atexit）不再被下一次 Ctrl-C 打断
        atexit.register(_ignore_stop_signals)
        signum = err.signum if isinstance(err, Terminated) else signal.SIGINT
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        _say(f"\n已中断（{what}）。{resume_hint(out, steps)}")
        sys.exit(128 + signum)
    except (*ERRORS, *errors) as err:
        hint = f"\n{resume_hint(out, steps)}" if isinstance(err, WriteError) else ""
        sys.exit(f"错误：{err}{hint}")
    except OSError as err:
        line = broken_stdout(err)
        if line is None:
            raise
        sys.exit(f"错误：{line}\n{resume_hint(out, steps)}")
    except RuntimeError as err:
        if not _out_of_gpu_memory(err):
            raise
        sys.exit(f"错误：{out_of_memory_line(err)}\n{resume_hint(out, steps)}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for run in list(_HELD):
            run.close()
