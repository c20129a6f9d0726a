"""Config values checked against a table of rules: each rule is (key, check, Chinese message).

    RULES = (Rule("lr", number(gt=0), "{flag} 必须是 > 0 的有限数"),
             Rule("steps", integer(ge=1), "{flag} 必须是 >= 1 的整数"))
    errors = broken_rules(vars(cfg), RULES)   # ["--lr 必须是 > 0 的有限数（得到 nan）", ...]

The checks are type-strict, so the same table validates values parsed from the command line and
values read back from a hand-edited config.json: ``True`` is not an integer, ``"0.1"`` is not a
number, NaN and inf are never numbers here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

Check = Callable[[object], bool]


@dataclass(frozen=True)
class Rule:
    key: str
    check: Check
    message: str  # Chinese; "{flag}" = --the-key, "{value}" = the value; "（得到 …）" is added


def message(rule: Rule, value) -> str:
    text = rule.message.format(flag=flag(rule.key), value=value)
    return text if "{value" in rule.message else f"{text}（得到 {value!r}）"


def number(*, gt=None, ge=None, lt=None, le=None) -> Check:
    """A finite int or float (not bool) within the given bounds."""

    def check(v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (
            (gt is None or v > gt)
            and (ge is None or v >= ge)
            and (lt is None or v < lt)
            and (le is None or v <= le)
        )

    return check


def integer(*, ge=None, le=None) -> Check:
    """An int (not bool) within the given bounds."""

    def check(v) -> bool:
        if isinstance(v, bool) or not isinstance(v, int):
            return False
        return (ge is None or v >= ge) and (le is None or v <= le)

    return check


def one_of(options: Iterable) -> Check:
    options = tuple(options)
    return lambda v: any(v == o and type(v) is type(o) for o in options)


def text() -> Check:
    return lambda v: isinstance(v, str) and bool(v.strip())


def optional(check: Check) -> Check:
    return lambda v: v is None or check(v)


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def broken_rules(values: Mapping, rules: Iterable[Rule]) -> list[str]:
    """One Chinese line per rule the values break (a missing key is None)."""
    return [message(r, values.get(r.key)) for r in rules if not r.check(values.get(r.key))]
