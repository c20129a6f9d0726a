"""pytest plugin of the course (registered through the `pytest11` entry point in pyproject.toml).

It must be a plugin rather than tests/conftest.py so that `pytest --impl exercises` parses even
when no path is given. It adds `--impl` and turns a stub's NotImplementedError into a short
Chinese hint instead of a traceback.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        choices=("solutions", "exercises"),
        default="solutions",
        help="被测实现：solutions（默认，参考答案）或 exercises（你的练习）",
    )


def _stub_location(excinfo) -> tuple[str, str]:
    """找到抛出 NotImplementedError 的那一帧：哪个文件、哪个函数。"""
    for entry in reversed(excinfo.traceback):
        path = str(entry.path).replace("\\", "/")
        if "/exercises/" in path:
            return "exercises/" + path.split("/exercises/")[-1], entry.name
    entry = excinfo.traceback[-1]
    return str(entry.path), entry.name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not call.excinfo.errisinstance(NotImplementedError):
        return
    path, func = _stub_location(call.excinfo)
    hint = str(call.excinfo.value).strip()
    report.longrepr = (
        f"还没实现：{path} 里的 {func}()。"
        f"{hint + ' ' if hint else ''}"
        f"写完后重跑：pytest --impl exercises {item.nodeid.split('::')[0]}"
    )
