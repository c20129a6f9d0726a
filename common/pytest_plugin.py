"""pytest plugin of the course (registered through the `pytest11` entry point in pyproject.toml).

It must be a plugin rather than tests/conftest.py so that `pytest --impl exercises` parses even
when no path is given. It adds `--impl` and makes every failure start with one Chinese line:

- a stub's NotImplementedError -> "还没实现：<file> 里的 <func>()。<hint> 写完后重跑：..." (always);
- under `--impl exercises`, everything else as well:
  - `pytest.fail(msg, pytrace=False)` (tests/diagnose.py `check`) -> `msg` as it is;
  - `assert cond, msg` -> `msg`, then where the check is; no source traceback;
  - a bare `assert cond` -> "测试里的检查没通过：<the assert line>", then pytest's explanation;
  - `pytest.raises` that did not raise -> "应当抛出 <Error>，但没有抛";
  - any other exception -> "运行出错：<Type>: <message>（出错位置：<file>:<line>）", then the traceback.
Hypothesis' falsifying example (an exception note) is kept after the first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        choices=("solutions", "exercises"),
        default="solutions",
        help="被测实现：solutions（默认，参考答案）或 exercises（你的练习）",
    )


def _rel(path, root: Path) -> str:
    """相对 rootdir 的路径（如 exercises/l2_01_advantages.py）；不在 rootdir 下就原样返回。"""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _stub_location(excinfo, root: Path) -> tuple[str, str]:
    """找到抛出 NotImplementedError 的那一帧：哪个文件、哪个函数。"""
    for entry in reversed(excinfo.traceback):
        if "/exercises/" in Path(entry.path).as_posix():
            return _rel(entry.path, root), entry.name
    entry = excinfo.traceback[-1]
    return _rel(entry.path, root), entry.name


def _where(excinfo, prefer: str, root: Path) -> str:
    """`file:line`：优先取路径里含 `prefer` 的最深一帧（你的代码或测试文件），否则取最深一帧。"""
    entries = list(excinfo.traceback)
    if isinstance(excinfo.value, SyntaxError) and excinfo.value.filename:
        return f"{_rel(excinfo.value.filename, root)}:{excinfo.value.lineno}"
    if not entries:
        return "?"
    chosen = next((e for e in reversed(entries) if prefer in Path(e.path).as_posix()), entries[-1])
    return f"{_rel(chosen.path, root)}:{chosen.lineno + 1}"


def _notes(excinfo) -> str:
    notes = [n for n in getattr(excinfo.value, "__notes__", []) if isinstance(n, str)]
    return ("\n" + "\n".join(notes)) if notes else ""


def _in_chinese(item, excinfo, original: str) -> str:
    """失败报告：第一行是一句中文，后面是需要时才看的细节。"""
    root = item.config.rootpath.resolve()
    test_at = _where(excinfo, Path(item.path).as_posix(), root)
    value = excinfo.value
    if excinfo.errisinstance(pytest.fail.Exception):
        msg = str(getattr(value, "msg", value)).strip()
        if m := re.match(r"DID NOT RAISE (?:<class ')?(?:\w+\.)*(\w+)", msg):
            return f"应当抛出 {m.group(1)}，但你的代码什么也没抛（{test_at}）。" + _notes(excinfo)
        return msg + _notes(excinfo)
    if excinfo.errisinstance(AssertionError):
        text = str(value).strip()
        if text and not text.startswith("assert "):  # assert cond, "中文说明"
            message = text.split("\nassert ", 1)[0]
            return f"{message}\n（检查在 {test_at}）" + _notes(excinfo)
        line = str(excinfo.traceback[-1].statement).strip() if excinfo.traceback else ""
        return f"测试里的检查没通过：{line}（{test_at}）\n{text}" + _notes(excinfo)
    where = _where(excinfo, "/exercises/", root)
    head = f"运行出错：{type(value).__name__}: {str(value).splitlines()[0] if str(value) else ''}"
    return f"{head}（出错位置：{where}）\n\n{original}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed:
        return
    if call.excinfo.errisinstance(NotImplementedError):
        path, func = _stub_location(call.excinfo, item.config.rootpath.resolve())
        hint = str(call.excinfo.value).strip()
        report.longrepr = (
            f"还没实现：{path} 里的 {func}()。"
            f"{hint + ' ' if hint else ''}"
            f"写完后重跑：pytest --impl exercises {item.nodeid.split('::')[0]}"
        )
        return
    if item.config.getoption("--impl") == "exercises":
        report.longrepr = _in_chinese(item, call.excinfo, report.longreprtext)
