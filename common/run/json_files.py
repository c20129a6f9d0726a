"""Reading and writing small JSON and JSON-lines files.

Every write is atomic (``common.run.atomic_io``: temp file, fsync, rename), so a reader never sees
half a file. JSON has no NaN or infinity: :func:`json_value` stores them as null.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from common.run.atomic_io import atomic_write


def json_value(value):
    """``value`` as JSON can hold it: a 0-d torch / numpy scalar as a Python number, NaN/inf as None."""
    if hasattr(value, "item"):  # 0-d torch / numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | Path, obj: dict) -> None:
    """Write a small JSON file atomically (write a temp file, then rename over the target)."""
    text = json.dumps({k: json_value(v) for k, v in obj.items()}, ensure_ascii=False, indent=2)
    atomic_write(path, text + "\n")


def read_json(path: str | Path) -> dict | None:
    """A small JSON object file; None if it is missing, unreadable, not UTF-8 JSON or not an object."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def read_json_object(path: str | Path, hint: str, error: type[Exception] = ValueError) -> dict:
    """A JSON object file, or ``error`` with one Chinese line: what is wrong with ``path``, then ``hint``."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path} 读不出来（{type(err).__name__}: {err}）：{hint}") from None
    if not isinstance(obj, dict):
        raise error(f"{path} 不是一个 JSON 对象：{hint}")
    return obj


def json_line(row: dict) -> str:
    """One JSON-lines row (no newline): UTF-8 text as is, values through :func:`json_value`."""
    return json.dumps({k: json_value(v) for k, v in row.items()}, ensure_ascii=False)


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Write rows as JSON lines atomically (common.run.atomic_io: temp file, fsync, rename)."""
    atomic_write(path, "".join(json_line(r) + "\n" for r in rows))


def read_jsonl(path: str | Path) -> list[dict]:
    """Every line of a JSON-lines file written by :func:`write_jsonl`; raises OSError / ValueError."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_run_config(run: str | Path, needed=()) -> dict:
    """``config.json`` of a grpo_train.py run folder, for the lesson tools that read one.

    ValueError with one Chinese line when it is missing, cut (not JSON), not an object, or lacks
    one of the ``needed`` keys: the tools say what is wrong instead of a traceback.
    """
    path = Path(run) / "config.json"
    hint = "参数要指向 grpo_train.py 的一个运行目录（config.json 坏了就无法知道它的设置）"
    if not path.is_file():
        raise ValueError(f"{path} 不存在：{hint}")
    config = read_json_object(path, hint)
    missing = [k for k in needed if k not in config]
    if missing:
        raise ValueError(f"{path} 里缺 {missing}：{hint}")
    return config
