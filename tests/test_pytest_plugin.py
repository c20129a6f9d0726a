"""tests/pytest_plugin.py：`--impl exercises` 下任何失败的报告都以一句中文开头，short summary（-rf）里也是。"""

from __future__ import annotations

import re

import hypothesis  # noqa: F401
import pytest
import torch  # noqa: F401  先在外层 import：pytester 的进程内运行结束时会把里面新 import 的模块删掉，再 import torch 会崩

pytest_plugins = ["pytester"]

DEMO = """
import pytest
from hypothesis import given, settings, strategies as st


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


@settings(database=None)  # 每次都重新找反例：从例子库重放时 hypothesis 不给 Explanation
@given(st.integers(0, 10))
def test_hypothesis(x):
    if x > 3:
        pytest.fail(f"x={x} 太大", pytrace=False)


@settings(database=None, derandomize=True)
@given(st.integers(0, 10))
def test_hypothesis_error(x):
    if x > 3:
        raise ValueError(f"x={x} 太大")


@settings(database=None, derandomize=True)
@given(st.integers(0, 10))
def test_hypothesis_two_failures(x):
    if x % 2 == 1:
        [][0]
    if x >= 4:
        pytest.fail(f"x={x} 太大", pytrace=False)


def test_torch_not_implemented_is_not_a_stub():
    import torch

    torch.softmax(torch.tensor([1, 2]), -1)


def test_hint_attached_by_a_test():
    error = RuntimeError("shape mismatch")
    error.course_hint = "f() 抛了 RuntimeError：形状不对。回看 L2.01「3.1」。"
    raise error


def test_error_inside_learner_code():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "learner" / "exercises" / "mine.py"
    spec = importlib.util.spec_from_file_location("learner_mine", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.f()


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
    "test_error_in_code": (
        "运行出错：测试在 test_demo.py:20 抛出 IndexError：下标越界：检查用作下标的张量（token id、位置）"
        "是不是超出了那一维的大小。"
    ),
    "test_did_not_raise": "应当抛出 ValueError，但你的代码什么也没抛（test_demo.py:24）。",
    "test_hypothesis": "x=4 太大",
    "test_hypothesis_error": (
        "运行出错：测试在 test_demo.py:43 抛出 ValueError：这组输入是合法的，却抛了 ValueError：检查你写的输入检查条件。"
    ),
    # 两种不同的失败（BaseExceptionGroup）：讲带中文诊断的那一种，不是「抛出 BaseExceptionGroup」
    "test_hypothesis_two_failures": "x=4 太大",
    "test_torch_not_implemented_is_not_a_stub": (
        "运行出错：测试在 test_demo.py:58 抛出 NotImplementedError：整数（或 bool）张量直接做了只对浮点定义的运算"
        "（mean、std、softmax 之类）。"
    ),
    "test_hint_attached_by_a_test": "f() 抛了 RuntimeError：形状不对。回看 L2.01「3.1」。",
    "test_error_inside_learner_code": (
        "运行出错：你的 f()（learner/exercises/mine.py:2）抛出 ZeroDivisionError：Python 数除以了 0："
        "分母可能为 0 的情况要先判断。"
    ),
}
LEARNER = "def f():\n    return 1 / 0\n"
# 空桩不在 FAILURES 里逐个列出，而是在「还没实现的函数」一节里每个函数一行
STUB_LINE = (
    "还没实现：test_demo.py 里的 test_stub()（1 个测试停在这里）。提示：先写这个 "
    "写完后重跑：pytest --impl exercises test_demo.py"
)


def _first_lines(lines: list[str]) -> dict[str, str]:
    """FAILURES 一节里每个测试标题（`____ test_x ____`）下面的第一行。"""
    out = {}
    for i, line in enumerate(lines[:-1]):
        name = line.strip("_ ").strip()
        if line.startswith("_") and name in FIRST_LINES:
            out[name] = lines[i + 1]
    return out


def _run(pytester, *args):
    """在 pytester 的临时目录里运行 pytest，装上课程的插件（那里没有 tests/conftest.py 来注册它）。"""
    return pytester.runpytest_inprocess("-p", "pytest_plugin", "-p", "no:cacheprovider", *args)


def _make_demo(pytester):
    pytester.makepyfile(test_demo=DEMO)
    (pytester.path / "learner" / "exercises").mkdir(parents=True)
    (pytester.path / "learner" / "exercises" / "mine.py").write_text(LEARNER)


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_every_failure_starts_with_chinese_under_exercises(pytester):
    _make_demo(pytester)
    result = _run(pytester, "--impl", "exercises", "-rf")
    result.assert_outcomes(failed=len(FIRST_LINES), skipped=1, passed=1)
    assert result.parseoutcomes().get("还没实现") == 1
    lines = result.outlines
    assert STUB_LINE in [x.replace(str(pytester.path) + "/", "") for x in lines]
    got = _first_lines(lines)
    for name, first in FIRST_LINES.items():
        shown = got.get(name, "").replace(str(pytester.path) + "/", "")
        assert shown == first, f"{name} 的报告第一行是 {shown!r}，应为 {first!r}"
        summary = next(s for s in lines if s.startswith(f"FAILED test_demo.py::{name} - "))
        head = summary.split(" - ", 1)[1].rstrip(".")
        assert first.startswith(head.replace(str(pytester.path) + "/", "")[:10]), summary
    # 较新的 hypothesis 写 "Failing test case:"，较旧的（如 6.155）写 "Falsifying example:"
    out = result.stdout.str()
    assert re.search(r"(Failing test case|Falsifying example): test_hypothesis\(", out), (
        "hypothesis 的反例丢了"
    )
    assert "def test_assert_with_message" not in result.stdout.str(), "带说明的 assert 不该再贴源码"
    # hypothesis 的「Explanation: These lines were always and only run by failing test cases: …」对学习者是噪音
    assert "Explanation" not in out and "These lines were" not in out, out
    two = lines.index("x=4 太大", lines.index(next(s for s in lines if "test_hypothesis_two" in s)))
    assert lines[two + 1].startswith("（hypothesis 找到了 2 种不同的失败"), lines[two + 1]
    # 异常的第二行留着原始的英文信息，方便搜索
    assert (
        "（原始信息：ZeroDivisionError: division by zero；出错位置：learner/exercises/mine.py:2）"
        in out
    )


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_hypothesis_explanation_is_there_without_the_plugin_filter(pytester):
    """对照：不加 --impl exercises 时 hypothesis 的 Explanation 还在，说明上面的测试确实测到了过滤。"""
    _make_demo(pytester)
    result = _run(pytester, "-k", "test_hypothesis_error")
    assert (
        "These lines were always and only run by failing" in result.stdout.str()
    )  # 各版本措辞不同


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_solutions_keep_pytest_tracebacks(pytester):
    """默认（solutions，CI）：除了空桩的提示，保留 pytest 原来的报告，方便维护者调试。"""
    _make_demo(pytester)
    result = _run(pytester)
    result.assert_outcomes(failed=len(FIRST_LINES), skipped=1, passed=1)
    out = result.stdout.str()
    assert "def test_assert_with_message" in out and "IndexError" in out
    assert STUB_LINE in out.replace(str(pytester.path) + "/", "")


HALF_DONE = """
import pytest

from exercises_demo import done, todo_a, todo_b


@pytest.mark.parametrize("x", range(5))
def test_a(x):
    todo_a(x)


@pytest.mark.parametrize("x", range(3))
def test_b(x):
    assert todo_b(x) == x


def test_b_again():
    todo_b(0)


def test_done():
    assert done() == 2, "done() 应返回 2"


def test_done_passes():
    assert done() in (1, 2)
"""
HALF_DONE_EXERCISES = """
def todo_a(x):
    raise NotImplementedError("提示：先想清楚 a")


def todo_b(x):
    raise NotImplementedError("提示：b 的提示")


def done():
    return 1
"""


def test_missing_functions_get_one_line_each(pytester):
    """写了一部分练习时：每个还没写的函数一行（几个测试停在它那里、提示、重跑什么），不再逐个测试重复；
    FAILURES 和 short summary 里只剩已经写了的函数的失败；退出码仍是 1。"""
    pytester.makepyfile(test_half=HALF_DONE, exercises_demo=HALF_DONE_EXERCISES)
    result = _run(pytester, "--impl", "exercises", "-ra")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes() == {"failed": 1, "还没实现": 9, "passed": 1}
    out = [x.replace(str(pytester.path) + "/", "") for x in result.outlines]
    stub_lines = [x for x in out if x.startswith("还没实现：")]
    assert stub_lines == [
        "还没实现：exercises_demo.py 里的 todo_a()（5 个测试停在这里）。提示：先想清楚 a "
        "写完后重跑：pytest --impl exercises test_half.py",
        "还没实现：exercises_demo.py 里的 todo_b()（4 个测试停在这里）。提示：b 的提示 "
        "写完后重跑：pytest --impl exercises test_half.py",
    ]
    assert any("还没实现的函数 2 个" in x for x in out)
    assert (
        "停在上面这些地方的 9 个测试不再逐个列出；下面是其余的失败：你已经写了的部分哪里不对。"
        in out
    )
    assert [x for x in out if x.startswith("FAILED")] == [
        "FAILED test_half.py::test_done - done() 应返回 2"
    ]
    assert out.index(stub_lines[-1]) < out.index(next(x for x in out if "FAILURES" in x))


ALL_SLOW = """
import pytest

pytestmark = pytest.mark.slow


def test_heavy():
    pass
"""
SLOW_HINT = "这里的测试都在 slow 或 vllm 一档"


def test_a_file_whose_tests_are_all_slow_says_how_to_run_them(pytester):
    """默认的 -m 把一个文件的测试全部去掉时（exit 5），告诉学习者加 -m slow；真的选中了测试就不说。"""
    pytester.makepyfile(test_all_slow=ALL_SLOW)
    result = _run(pytester, "-m", "not slow and not vllm")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert SLOW_HINT in result.stdout.str()
    result = _run(pytester, "-m", "slow")
    result.assert_outcomes(passed=1)
    assert SLOW_HINT not in result.stdout.str()


def test_test_ids_are_readable(request):
    """中文的参数化 id 照原样显示，不是 \\u4e8c… 这样的转义（pyproject.toml 里那个长名字的选项）。"""
    option = "disable_test_id_escaping_and_forfeit_all_rights_to_community_support"
    assert request.config.getini(option) is True, f"pyproject.toml 里要有 {option} = true"
    cjk = re.compile(r"\\u[4-9][0-9a-f]{3}")  # 被转义的汉字（U+4E00–U+9FFF 一带）
    escaped = [item.nodeid for item in request.session.items if cjk.search(item.nodeid)]
    assert not escaped, f"这些测试 id 里的中文被转义了，学习者读不出来：{escaped[:5]}"


def test_the_summary_says_which_implementation_was_tested(pytester):
    """issue 44 以前：没写练习时 `pytest tests/L2/...` 打印「90 passed」，没有一句话说测的是 solutions/。"""
    from pytest_plugin import IMPL_LINE

    pytester.makepyfile(test_one="def test_ok():\n    pass\n")
    for impl in ("solutions", "exercises"):
        out = _run(pytester, "-q", "--impl", impl).stdout.str()
        assert IMPL_LINE[impl] in out, out
    assert "solutions/" in IMPL_LINE["solutions"] and "--impl exercises" in IMPL_LINE["solutions"]
