"""argparse for the course's command lines: no abbreviations, and a Chinese error with a suggestion.

    p = CourseParser(prog="python -m common.vram", description="...")
    p.add_argument("--steps", type=int)
    p.parse_args(["--step", "5"])    # 错误：不认识的参数: --step 5（是不是 --steps？）, exit 2

argparse's default ``allow_abbrev=True`` takes ``--step 5`` as ``--steps 5`` without a word (and
would take ``--lr 1e-4`` as another flag the day one named ``--lr-...`` is added); a typo such as
``--setps`` gets only "unrecognized arguments". Every course script with argparse turns
abbreviations off (tests/test_cli.py checks the source of each); the ones in common/ use this class.

Parsing also makes stdout and stderr able to print Chinese (:func:`course_stdio`): under
``LC_ALL=C`` with Python's UTF-8 mode off (some rented boxes, some CI runners) they are ASCII, and
the first Chinese line would be a UnicodeEncodeError.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

# the rest of argparse's messages a learner meets, in Chinese (order matters: longest first)
ENGLISH = {
    "the following arguments are required: ": "缺少必需的参数：",
    ": expected one argument": " 后面要跟一个值",
    ": invalid choice: ": " 的值不在可选范围里：",
    " (choose from ": "（可选：",
    ": invalid float value: ": " 要一个数，得到 ",
    ": invalid int value: ": " 要一个整数，得到 ",
    "argument ": "",
}


def _closest(token: str, options: list[str]) -> str | None:
    """The flag `token` most likely meant: the only one it abbreviates, else a close spelling."""
    name = token.split("=", 1)[0].lstrip("-")
    names = {o.lstrip("-"): o for o in options}
    starts = [o for n, o in names.items() if n.startswith(name)]
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.75)
    return names[close[0]] if close else None


def did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error message in Chinese, with the closest real flag for each unknown one."""
    head, sep, rest = message.partition("unrecognized arguments: ")
    if not sep:
        for english, chinese in ENGLISH.items():
            message = message.replace(english, chinese)
        return message[:-1] + "）" if "（可选：" in message and message.endswith(")") else message
    parsers = [parser] + [  # a subcommand's flags come back to the top parser as unknown
        sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for sub in action.choices.values()
    ]
    options = sorted({o for p in parsers for o in p._option_string_actions if o.startswith("--")})
    unknown = [t for t in rest.split(" ") if t.startswith("--")]
    guesses = [(t, _closest(t, options)) for t in unknown]
    guesses = [(t, g) for t, g in guesses if g]
    if len(guesses) == 1 and len(unknown) == 1:
        hint = f"（是不是 {guesses[0][1]}？）"
    elif guesses:
        hint = "（" + "；".join(f"{t} 是不是 {g}？" for t, g in guesses) + "）"
    else:
        hint = "（--help 列出所有参数）"
    return f"{head}不认识的参数: {rest}{hint}"


class StdoutError(OSError):
    """Writing stdout failed (a full disk, /dev/full, a closed pipe): not a file of the run."""


class _Stdout:
    """sys.stdout whose write errors are :class:`StdoutError` (so a message can say it was stdout)."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _call(self, method, *args):
        try:
            return getattr(self._stream, method)(*args)
        except StdoutError:
            raise
        except OSError as err:
            raise StdoutError(err.errno, err.strerror) from None

    def write(self, text):
        return self._call("write", text)

    def writelines(self, lines):
        return self._call("writelines", lines)

    def flush(self):
        return self._call("flush")


def course_stdio() -> None:
    """stdout / stderr able to print Chinese, and stdout's write errors named as such.

    Under an ASCII locale (``LC_ALL=C`` with UTF-8 mode off) both are reopened as UTF-8; a write
    error on the process's own stdout becomes :class:`StdoutError` (:func:`broken_stdout`).
    """
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "中文".encode(encoding)
            continue
        except (UnicodeEncodeError, LookupError):
            pass
        if hasattr(stream, "reconfigure"):
            errors = "backslashreplace" if stream is sys.stderr else "strict"
            stream.reconfigure(encoding="utf-8", errors=errors)
    if sys.stdout is not None and sys.stdout is sys.__stdout__:  # not a test's captured stdout
        sys.stdout = _Stdout(sys.stdout)
        if sys.excepthook is sys.__excepthook__:
            sys.excepthook = _stdout_hook


def _stdout_hook(kind, err, tb) -> None:
    """An uncaught StdoutError (any course command) is one Chinese line, not a traceback."""
    line = broken_stdout(err)
    if line is None:
        sys.__excepthook__(kind, err, tb)
    else:
        print(f"错误：{line}", file=sys.stderr)


def broken_stdout(err: BaseException) -> str | None:
    """A Chinese line when ``err`` came from writing stdout (:class:`StdoutError`), else None.
    stdout then goes to /dev/null, so the flush at exit adds no second error."""
    if not isinstance(err, StdoutError):
        return None
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return (
        f"写不了标准输出 stdout（{err.strerror or err}）：它被重定向到了写不进去的地方"
        "（磁盘满了、/dev/full、读的一方已关掉的管道）。把输出重定向到有空间的文件（或 /dev/null）再运行"
    )


class CourseParser(argparse.ArgumentParser):
    """ArgumentParser with allow_abbrev=False and one Chinese error line (exit code 2); parsing
    makes stdout / stderr UTF-8 when the locale is ASCII (:func:`course_stdio`).

    usage_on_error=False: the error line alone, without the usage block before it (a script with
    twenty options would otherwise push the one line that matters off the screen).
    """

    def __init__(self, *args, usage_on_error: bool = True, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.usage_on_error = usage_on_error

    def parse_known_args(self, args=None, namespace=None):
        course_stdio()
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if self.usage_on_error:
            self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: 错误：{did_you_mean(self, message)}\n")
