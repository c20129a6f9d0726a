"""pytest plugin of the course's tests, registered by the repo root's conftest.py (`pytest_plugins`).

It is registered there, not in tests/conftest.py, so that `pytest --impl exercises` parses even
when no path is given (pytest then takes `exercises` for a path and reads only the conftest files
on the way to it). It adds `--impl`, says at the start (header) and at the end (before "N passed")
which implementation was tested, and makes every failure start with one Chinese line:

- a stub's NotImplementedError -> "还没实现：<file> 里的 <func>()。<hint> 写完后重跑：..." (always);
  only a `raise` written in the course's or the learner's code counts as a stub: a NotImplementedError
  that PyTorch raises (e.g. softmax of an int tensor, reading a meta tensor) is an error like any other.
  Such a failure is still a failure (exit code 1), but the terminal files it under its own category
  "还没实现" instead of listing it in FAILURES / the short summary: before FAILURES, one line per
  missing function says how many tests stopped there, its hint, and which test files to rerun.
  A test can raise such a "not done yet" itself (a NotImplementedError with `course_stub_location =
  (file, what)`, e.g. a checkpoint with no answer yet): those are summed up in one line per `what`;
- under `--impl exercises`, everything else as well:
  - `pytest.fail(msg, pytrace=False)` (tests/diagnose.py `check`) -> `msg` as it is;
  - `assert cond, msg` -> `msg`, then where the check is; no source traceback;
  - a bare `assert cond` -> "测试里的检查没通过：<the assert line>", then pytest's explanation;
  - `pytest.raises` that did not raise -> "应当抛出 <Error>，但没有抛";
  - any other exception -> the Chinese line a test attached to it (`exc.course_hint`, set by
    tests/diagnose.py `guarded` for exceptions raised inside the learner's function: which function,
    the likely cause there, the lesson section), or else "运行出错：<where> 抛了 <Type>：<what this kind
    of error usually means>" from `exception_kind`; then the original message and the traceback.
Hypothesis' failing example (an exception note) is kept after the first line; its "Explanation:"
note (lines of tests/diagnose.py that only failing examples ran) and reproduction advice are dropped.
When hypothesis finds several distinct failures it raises a BaseExceptionGroup: the first line is
that of the most telling one (a stub, else one with a Chinese diagnosis, else the first), and the
second line says how many there were.
"""

from __future__ import annotations

import dis
import re
import sysconfig
from pathlib import Path

import pytest

# 异常的种类：(种类, 异常类型, 匹配 str(exc) 的正则, 一句中文说明；{0} {1}… 是正则里的分组)
# 按顺序取第一个匹配的。tests/diagnose.py 按「种类」给每个练习函数写更具体的原因。
EXCEPTION_KINDS: list[tuple[str, tuple[type[BaseException], ...], str, str]] = [
    (
        "no_grad",
        (RuntimeError,),
        r"does not require grad and does not have a grad_fn",
        "结果没有梯度（grad_fn 为空）：计算图被切断了——用了 torch.no_grad()、.detach()、.item()/.tolist()，"
        "或用 torch.tensor(...) 把结果重新包了一层",
    ),
    (
        "inplace",
        (RuntimeError,),
        r"leaf Variable that requires grad is being used in an in-place operation"
        r"|modified by an inplace operation",
        "原地修改了反向传播会用到的张量（+=、-=、masked_fill_、x[...] = ... 之类）",
    ),
    (
        "backward_twice",
        (RuntimeError,),
        r"Trying to backward through the graph a second time",
        "同一张计算图 backward 了两次：是不是把带梯度的张量存起来、下次调用又用了它",
    ),
    (
        "broadcast",
        (RuntimeError,),
        r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
        r"dimension (\d+)",
        "两个张量的形状对不上、广播失败（第 {2} 维一边是 {0}、一边是 {1}）：多半是有个张量少了一维"
        "（归约之后那一维没了，或该补的维度没补）",
    ),
    (
        "expand",
        (RuntimeError,),
        r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at "
        r"non-singleton dimension (\d+)",
        "把张量扩成目标形状时对不上（第 {2} 维要扩成 {0}，那一维却是 {1}）：多半是这个张量少了一维"
        "（归约之后那一维没了），剩下的维和目标形状错开了",
    ),
    (
        "cat_shape",
        (RuntimeError,),
        r"Tensors must have same number of dimensions|stack expects each tensor to be equal size",
        "拼接（cat / stack）的几个张量形状对不上：多半是有一个少了一维（归约之后那一维没了）",
    ),
    (
        "reshape",
        (RuntimeError,),
        r"shape '\[([^\]]*)\]' is invalid for input of size (\d+)",
        "reshape 成 [{0}] 装不下 {1} 个元素：检查要分成几行几列",
    ),
    (
        "matmul",
        (RuntimeError,),
        r"mat1 and mat2 shapes cannot be multiplied \((\w+) and (\w+)\)",
        "矩阵乘的形状对不上（{0} 乘 {1}，中间两维不相等）：多半是乘的方向反了，或少了 / 多了一次转置",
    ),
    (
        "dim_range",
        (IndexError, RuntimeError),
        r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)",
        "dim={2} 超出了张量的维数（只能在 {0} 到 {1} 之间）：检查这个张量到底有几维",
    ),
    (
        "view",
        (RuntimeError,),
        r"view size is not compatible with input tensor's size and stride",
        "对内存里不连续的张量（切片、转置出来的常常是）用了 view：view 要求张量在内存里连续",
    ),
    (
        "gather",
        (RuntimeError,),
        r"Index tensor must have the same number of dimensions as input tensor"
        r"|Size does not match at dimension \d+ expected index",
        "gather 的索引和输入的形状对不上：索引的维数和输入不同，或除了被 gather 的那一维，其余各维大小不同",
    ),
    (
        "index",
        (IndexError, RuntimeError),
        r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)|index out of range",
        "下标越界：检查用作下标的张量（token id、位置）是不是超出了那一维的大小",
    ),
    (
        "int_dtype",
        (RuntimeError, NotImplementedError),
        r"could not infer output dtype\. Input dtype must be either a floating point"
        r"|only support floating point and complex dtypes|not implemented for '(Long|Int|Bool)'",
        "整数（或 bool）张量直接做了只对浮点定义的运算（mean、std、softmax 之类）",
    ),
    (
        "dtype",
        (RuntimeError, NotImplementedError),
        r"expected m1 and m2 to have the same dtype|expected scalar type|Expected .*dtype"
        r"|can't be cast to the desired output type|not implemented for '\w+'|only supports boolean",
        "dtype 不对（两个操作数的 dtype 不一致，或整数 / 浮点 / bool 用错了地方）：检查每个张量的 dtype",
    ),
    (
        "autocast_device",
        (RuntimeError,),
        r"unsupported scalarType|unknown device type for autocast",
        "torch.autocast 不认这个设备：meta 设备（只有形状、没有数值，课程用它按真实尺寸数字节）没有 autocast",
    ),
    (
        "meta_value",
        (RuntimeError, NotImplementedError),
        r"cannot be called on meta tensors|Cannot copy out of meta tensor",
        "meta 设备上的张量只有形状、没有数值：函数里读了张量的数值（.item()、.tolist()、float(...) 之类）",
    ),
    (
        "device",
        (RuntimeError,),
        r"Expected all tensors to be on the same device|is not on the expected device",
        "张量不在同一个 device 上：多半是函数里新建的张量留在了默认的 CPU 上，没跟着输入",
    ),
    (
        "bool_ambiguous",
        (RuntimeError,),
        r"Boolean value of Tensor with more than one value is ambiguous",
        "对多个元素的张量用了 Python 的 if / and / or / not（它们只认一个真假值，逐元素的条件不是）",
    ),
    (
        "empty_cat",
        (ValueError, RuntimeError),
        r"torch\.cat\(\): expected a non-empty list of Tensors",
        "torch.cat 拿到了空列表：输入是空的时候（比如 B·T = 0）一块也没有，要单独处理",
    ),
    (
        "zero_division",
        (ZeroDivisionError,),
        r"",
        "Python 数除以了 0：分母可能为 0 的情况要先判断",
    ),
    (
        "none",
        (TypeError, AttributeError),
        r"'NoneType'|NoneType",
        "有个值是 None：可选参数（默认 None）没按规格说的意思处理，或自己写的函数忘了 return",
    ),
    (
        "bad_args",
        (TypeError,),
        r"received an invalid combination of arguments|must be Tensor, not",
        "传给 PyTorch 函数的参数类型不对（比如该传张量的地方传了 Python 的 list 或 int）",
    ),
    (
        "signature",
        (TypeError,),
        r"unexpected keyword argument|missing \d+ required positional argument|takes \d+ positional",
        "调用时的参数和你的函数签名对不上：函数名、参数名、参数个数要和练习文件里的一模一样",
    ),
    (
        "not_tensor",
        (AttributeError,),
        r"'(float|int|list|tuple|bool)' object has no attribute",
        "得到的是 Python 的 {0}，不是张量：多半是用了 .item()、.tolist()、float(...) 把张量变成了 Python 数",
    ),
    (
        "value_error",
        (ValueError,),
        r"",
        "这组输入是合法的，却抛了 ValueError：检查你写的输入检查条件",
    ),
]


def exception_kind(exc: BaseException) -> tuple[str, str]:
    """(种类, 一句中文说明)：`EXCEPTION_KINDS` 里第一个匹配的；都不匹配时是 ("other", "")。"""
    text = str(exc)
    for kind, types, pattern, explanation in EXCEPTION_KINDS:
        if isinstance(exc, types) and (m := re.search(pattern, text)):
            return kind, explanation.format(*(g or "" for g in m.groups()))
    return "other", ""


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        choices=("solutions", "exercises"),
        default="solutions",
        help="被测实现：solutions（默认，参考答案）或 exercises（你的练习）",
    )


IMPL_LINE = {
    "solutions": "这次测的是 solutions/（课程的参考答案），不是你写的 exercises/；"
    "测你的代码：pytest --impl exercises",
    "exercises": "这次测的是 exercises/（你写的代码）",
}


def pytest_report_header(config):
    """开头一行：测的是哪一份实现（-q 时 pytest 不打印开头，结尾那一行照样有）。"""
    return IMPL_LINE[config.getoption("impl")]


def _rel(path, root: Path) -> str:
    """相对 rootdir 的路径（如 exercises/l2_01_advantages.py）；不在 rootdir 下就原样返回。"""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


_INSTALLED = {
    Path(p).resolve() for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
}


def is_stub(exc: BaseException) -> bool:
    """NotImplementedError 是不是「还没写」：最深的一帧是一条 raise 语句，而且不在装好的库里。

    PyTorch 也会抛 NotImplementedError（整数张量做 softmax、读 meta 张量的数值……）：那时最深的一帧是
    调用 PyTorch 的那一行（或 PyTorch 自己的代码），不是 raise。
    """
    if not isinstance(exc, NotImplementedError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if dis.opname[code.co_code[tb.tb_lasti]] != "RAISE_VARARGS":
        return False
    path = Path(code.co_filename).resolve()
    return not any(path.is_relative_to(p) for p in _INSTALLED)


def _stub_location(excinfo, root: Path) -> tuple[str, str]:
    """找到抛出 NotImplementedError 的那一帧：哪个文件、哪个函数。"""
    for entry in reversed(excinfo.traceback):
        if "/exercises/" in Path(entry.path).as_posix():
            return _rel(entry.path, root), entry.name
    entry = excinfo.traceback[-1]
    return _rel(entry.path, root), entry.name


def _deepest(excinfo, prefer: str):
    """路径里含 `prefer` 的最深一帧（你的代码或测试文件）；没有就是最深一帧；没有帧时 None。"""
    entries = list(excinfo.traceback)
    if not entries:
        return None
    return next((e for e in reversed(entries) if prefer in Path(e.path).as_posix()), entries[-1])


def _where(excinfo, prefer: str, root: Path) -> str:
    """`file:line`：优先取路径里含 `prefer` 的最深一帧，否则取最深一帧。"""
    if isinstance(excinfo.value, SyntaxError) and excinfo.value.filename:
        return f"{_rel(excinfo.value.filename, root)}:{excinfo.value.lineno}"
    chosen = _deepest(excinfo, prefer)
    return "?" if chosen is None else f"{_rel(chosen.path, root)}:{chosen.lineno + 1}"


# hypothesis 附在异常上的说明里，学习者用不上的几种（反例本身 "Failing test case: ..." 保留）
_HYPOTHESIS_NOISE = re.compile(
    r"^(Explanation:|These lines were always and only run by failing"
    r"|You can add @seed|You can reproduce this example|@reproduce_failure)"
)


def _notes(excinfo) -> str:
    notes = [n for n in getattr(excinfo.value, "__notes__", []) if isinstance(n, str)]
    text = _strip_noise("\n".join(notes))
    return ("\n" + text) if text.strip() else ""


def _strip_noise(text: str) -> str:
    """pytest 的原始报告里，去掉 hypothesis 的那几段说明（连同它下面缩进更深的行）。"""
    kept, skip_deeper_than = [], None
    for line in text.splitlines():
        body = line[4:] if line.startswith("E   ") else line
        indent = len(body) - len(body.lstrip())
        if skip_deeper_than is not None and body.strip() and indent > skip_deeper_than:
            continue
        skip_deeper_than = None
        if _HYPOTHESIS_NOISE.match(body.strip()):
            skip_deeper_than = indent
            continue
        kept.append(line)
    return "\n".join(kept)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _exception_head(item, excinfo, root: Path) -> str:
    """其它异常的第一行：测试挂上的 course_hint，否则按异常种类给一句中文。"""
    value = excinfo.value
    hint = getattr(value, "course_hint", None)
    if isinstance(hint, str) and hint:
        return hint
    _, explanation = exception_kind(value)
    learner = _deepest(excinfo, "/exercises/")
    if learner is not None and "/exercises/" in Path(learner.path).as_posix():
        who = f"你的 {learner.name}()（{_rel(learner.path, root)}:{learner.lineno + 1}）"
    else:
        who = f"测试在 {_where(excinfo, Path(item.path).as_posix(), root)} "
    name = type(value).__name__
    return f"运行出错：{who}抛出 {name}：{explanation or _first_line(str(value))}。"


def _in_chinese(item, excinfo, original: str) -> str:
    """失败报告：第一行是一句中文，后面是需要时才看的细节。"""
    root = item.config.rootpath.resolve()
    test_at = _where(excinfo, Path(item.path).as_posix(), root)
    value = excinfo.value
    notes = _notes(excinfo)
    if excinfo.errisinstance(pytest.fail.Exception):
        msg = str(getattr(value, "msg", value)).strip()
        if m := re.match(r"DID NOT RAISE (?:<class ')?(?:\w+\.)*(\w+)", msg):
            return f"应当抛出 {m.group(1)}，但你的代码什么也没抛（{test_at}）。" + notes
        return msg + notes
    if excinfo.errisinstance(AssertionError):
        text = str(value).strip()
        if text and not text.startswith("assert "):  # assert cond, "中文说明"
            message = text.split("\nassert ", 1)[0]
            return f"{message}\n（检查在 {test_at}）" + notes
        line = str(excinfo.traceback[-1].statement).strip() if excinfo.traceback else ""
        return f"测试里的检查没通过：{line}（{test_at}）\n{text}" + notes
    head = _exception_head(item, excinfo, root)
    detail = f"{type(value).__name__}: {_first_line(str(value))}"
    where = _where(excinfo, "/exercises/", root)
    return f"{head}\n（原始信息：{detail}；出错位置：{where}）{notes}\n\n{_strip_noise(original)}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _one_failure(excinfo) -> tuple[pytest.ExceptionInfo, int]:
    """(要讲的那个失败, 一共几个)。hypothesis 找到几种不同的失败时抛 BaseExceptionGroup：

    先讲空桩，其次是带中文诊断的（测试挂上的 course_hint、`check` 的 pytest.fail），否则第一个。
    """
    leaves = _leaves(excinfo.value)
    if len(leaves) == 1 and leaves[0] is excinfo.value:
        return excinfo, 1
    diagnosed = (
        e for e in leaves if getattr(e, "course_hint", None) or isinstance(e, pytest.fail.Exception)
    )
    best = next((e for e in leaves if is_stub(e)), None) or next(diagnosed, leaves[0])
    return pytest.ExceptionInfo.from_exception(best), len(leaves)


def _with_count(text: str, n: int) -> str:
    """n > 1 时在第一行后面加一句：hypothesis 一共找到了几种失败。"""
    if n == 1:
        return text
    first, _, rest = text.partition("\n")
    more = f"（hypothesis 找到了 {n} 种不同的失败，上面说的是其中一种；改好它再重跑，看剩下的）"
    return f"{first}\n{more}" + (f"\n{rest}" if rest else "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed:
        return
    excinfo, n = _one_failure(call.excinfo)
    if is_stub(excinfo.value):
        # 测试自己抛的「还没做」（例如检查点一题都没答）用 course_stub_location 说清是哪个文件里的什么
        where = getattr(excinfo.value, "course_stub_location", None)
        if where is None:
            path, func = _stub_location(excinfo, item.config.rootpath.resolve())
            where = (path, f"{func}()")
        path, what = where
        hint = str(excinfo.value).strip()
        test_file = item.nodeid.split("::")[0]
        report.longrepr = _with_count(
            f"还没实现：{path} 里的 {what}。"
            f"{hint + ' ' if hint else ''}"
            f"写完后重跑：pytest --impl exercises {test_file}",
            n,
        )
        # 终端里不逐个列出：pytest_terminal_summary 对每个还没写的函数只说一行
        report.course_stub = (path, what, hint.splitlines()[0] if hint else "", test_file)
        return
    if item.config.getoption("--impl") == "exercises":
        report.longrepr = _with_count(_in_chinese(item, excinfo, report.longreprtext), n)


# 因为练习还是空桩而失败的测试，在终端里单独归一类：进度里仍是 F、退出码仍是 1（pytest 按 report.failed 判），
# 但不在 FAILURES 一节和 short summary 里逐个列出（一个函数没写，几十个测试都会停在同一行上）
STUB = "还没实现"


def pytest_report_teststatus(report, config):
    if report.failed and getattr(report, "course_stub", None):
        return STUB, "F", STUB
    return None


def _stub_summary(terminalreporter) -> None:
    """每个还没写的函数一行：哪个文件里的哪个函数、卡住了几个测试、提示、写完后重跑哪些测试文件。"""
    reports = terminalreporter.stats.get(STUB, [])
    if not reports:
        return
    by_function: dict[tuple[str, str], list] = {}
    for r in reports:
        path, what, hint, test_file = r.course_stub
        by_function.setdefault((path, what), []).append((hint, test_file))
    functions = {k: v for k, v in by_function.items() if k[1].endswith("()")}
    others: dict[str, list] = {}  # 不是函数的（检查点作答）：同一件事在几个文件里，合成一行
    for (path, what), hits in by_function.items():
        if (path, what) not in functions:
            others.setdefault(what, []).append((path, hits))
    terminalreporter.ensure_newline()
    title = f"还没实现的函数 {len(functions)} 个" if functions else "还没做完的部分"
    if others:
        title += "，还没作答的检查点" if functions else ""
    terminalreporter.section(title, sep="=")
    for (path, what), hits in functions.items():
        hint = hits[0][0]
        terminalreporter.write_line(
            f"还没实现：{path} 里的 {what}（{len(hits)} 个测试停在这里）。"
            f"{hint + ' ' if hint else ''}写完后重跑：pytest --impl exercises {_files(hits)}"
        )
    for what, places in others.items():
        hits = [h for _, hs in places for h in hs]
        names = "、".join(Path(path).stem for path, _ in places)
        hint = hits[0][0]
        terminalreporter.write_line(
            f"还没做：{what}（{len(places)} 个文件：{names}）。"
            f"{hint + ' ' if hint else ''}做完后重跑：pytest --impl exercises {_files(hits)}"
        )
    rest = (
        "下面是其余的失败：你已经写了的部分哪里不对。"
        if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error")
        else "其余选中的测试没有失败。"
    )
    terminalreporter.write_line(f"停在上面这些地方的 {len(reports)} 个测试不再逐个列出；{rest}")


def _files(hits) -> str:
    """写完后要重跑的测试文件：最多列两个。"""
    files = list(dict.fromkeys(f for _, f in hits))
    return " ".join(files[:2]) + (f" 等 {len(files)} 个文件" if len(files) > 2 else "")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """先（在 FAILURES 之前）对每个还没写的函数说一行；最后，测试全被默认的 -m 去掉时说怎么运行它们。"""
    _stub_summary(terminalreporter)
    result = yield
    if terminalreporter.stats.get("passed") or terminalreporter.stats.get("failed"):
        terminalreporter.write_line(IMPL_LINE[config.getoption("impl")])
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or not terminalreporter.stats.get(
        "deselected"
    ):
        return result
    if "not slow" not in (config.getoption("markexpr") or ""):
        return result
    terminalreporter.write_line(
        "这里的测试都在 slow 或 vllm 一档，默认的 pytest 不选它们：加 -m slow（或 -m vllm）再运行一次。"
    )
    return result
