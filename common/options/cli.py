"""argparse for the course's command lines: no abbreviations, and a Chinese error with a suggestion.

    p = CourseParser(prog="python -m common.vram", description="...")
    p.add_argument("--steps", type=int)
    p.parse_args(["--step", "5"])    # 错误：不认识的参数: --step 5（是不是 --steps？）, exit 2

argparse's default ``allow_abbrev=True`` takes ``--step 5`` as ``--steps 5`` without a word (and
would take ``--lr 1e-4`` as another flag the day one named ``--lr-...`` is added); a typo such as
``--setps`` gets only "unrecognized arguments". Every course script with argparse turns
abbreviations off (tests/test_cli.py checks the source of each); the ones in common/ use this class.
"""

from __future__ import annotations

import argparse
import difflib
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


class CourseParser(argparse.ArgumentParser):
    """ArgumentParser with allow_abbrev=False and one Chinese error line (exit code 2).

    usage_on_error=False: the error line alone, without the usage block before it (a script with
    twenty options would otherwise push the one line that matters off the screen).
    """

    def __init__(self, *args, usage_on_error: bool = True, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.usage_on_error = usage_on_error

    def error(self, message: str):
        if self.usage_on_error:
            self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: 错误：{did_you_mean(self, message)}\n")
