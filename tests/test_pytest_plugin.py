"""common/pytest_plugin.py：`--impl exercises` 下任何失败的报告都以一句中文开头，short summary（-rf）里也是。"""

from __future__ import annotations

pytest_plugins = ["pytester"]

DEMO = """
import pytest
from hypothesis import given, strategies as st


def test_fail_message():
    pytest.fail("输出不对：第二行是细节\\n细节", pytrace=False)


def test_assert_with_message():
    x = 1
    assert x == 2, "x 应为 2"


def test_bare_assert():
    x = 1
    assert x == 2


def test_error_in_code():
    [][0]


def test_did_not_raise():
    with pytest.raises(ValueError):
        pass


def test_stub():
    raise NotImplementedError("提示：先写这个")


@given(st.integers(0, 10))
def test_hypothesis(x):
    if x > 3:
        pytest.fail(f"x={x} 太大", pytrace=False)


def test_skipped():
    pytest.skip("跳过不算失败")


def test_passes():
    assert True
"""

# 测试名 -> 这次失败在 FAILURES 一节里的第一行（short summary 里 " - " 之后也是它）
FIRST_LINES = {
    "test_fail_message": "输出不对：第二行是细节",
    "test_assert_with_message": "x 应为 2",
    "test_bare_assert": "测试里的检查没通过：assert x == 2（test_demo.py:16）",
    "test_error_in_code": "运行出错：IndexError: list index out of range（出错位置：test_demo.py:20）",
    "test_did_not_raise": "应当抛出 ValueError，但你的代码什么也没抛（test_demo.py:24）。",
    "test_stub": "还没实现：test_demo.py 里的 test_stub()。提示：先写这个 写完后重跑：pytest --impl exercises test_demo.py",
    "test_hypothesis": "x=4 太大",
}


def _first_lines(lines: list[str]) -> dict[str, str]:
    """FAILURES 一节里每个测试标题（`____ test_x ____`）下面的第一行。"""
    out = {}
    for i, line in enumerate(lines[:-1]):
        name = line.strip("_ ").strip()
        if line.startswith("_") and name in FIRST_LINES:
            out[name] = lines[i + 1]
    return out


def test_every_failure_starts_with_chinese_under_exercises(pytester):
    pytester.makepyfile(test_demo=DEMO)
    result = pytester.runpytest_inprocess("--impl", "exercises", "-rf", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=len(FIRST_LINES), skipped=1, passed=1)
    lines = result.outlines
    got = _first_lines(lines)
    for name, first in FIRST_LINES.items():
        shown = got.get(name, "").replace(str(pytester.path) + "/", "")
        assert shown == first, f"{name} 的报告第一行是 {shown!r}，应为 {first!r}"
        summary = next(s for s in lines if s.startswith(f"FAILED test_demo.py::{name} - "))
        head = summary.split(" - ", 1)[1].rstrip(".")
        assert first.startswith(head.replace(str(pytester.path) + "/", "")[:10]), summary
    assert "Failing test case: test_hypothesis(" in result.stdout.str(), "hypothesis 的反例丢了"
    assert "def test_assert_with_message" not in result.stdout.str(), "带说明的 assert 不该再贴源码"


def test_solutions_keep_pytest_tracebacks(pytester):
    """默认（solutions，CI）：除了空桩的提示，保留 pytest 原来的报告，方便维护者调试。"""
    pytester.makepyfile(test_demo=DEMO)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=len(FIRST_LINES), skipped=1, passed=1)
    out = result.stdout.str()
    assert "def test_assert_with_message" in out and "IndexError" in out
    assert "还没实现：test_demo.py 里的 test_stub()" in out.replace(str(pytester.path) + "/", "")
