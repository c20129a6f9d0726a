"""错误答案的诊断：把学习者的输出和参考输出、以及「已知的典型错误」的输出逐一比对。

    from diagnose import Mistake, check

    MISTAKES = [
        Mistake("用了有偏 std（除以 n，而不是 n-1）", "L2.01「4. 坑」坑 1",
                lambda rewards, group_size, **kw: ...),   # 同样的参数 -> 这个错误会算出的结果
    ]
    check(got, want, inputs=dict(rewards=r, group_size=4), mistakes=MISTAKES,
          where="group_advantages 的输出", section="L2.01「2. 公式」")

对不上时，失败信息的第一行（pytest 的 short summary 显示的那一行）是一句中文：
- 输出和某个典型错误的输出一致 -> 「看起来是：<错误>。回看 <课文章节>。」（<错误> 只说错在哪，
  不写「回看」：一条诊断只指向一节）；和几个错误都一致（这组输入分不开它们）-> 把它们都说出来
  （`named_all`），不是只说列表里排在前面的那个；
- 否则 -> 哪里不对：形状 / dtype / NaN / inf / 第一个不一致的位置和两边的值。
永远不只给一个原始的张量 diff。

课文章节写成 `L2.01「<标题开头>」`（后面可以再跟「坑 1」之类的补充）：`section_heading` 找出它指向的标题，
测试用它保证每个诊断指向的章节在课文里真的存在。
诊断本身也要测：`diagnosis_line` 把一个已知错误的输出送进 `check`，返回失败信息的第一行，应等于 `named(错误)`。
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from pytest_plugin import exception_kind, is_stub
from quiz import ROOT, find_heading


@dataclass(frozen=True)
class Mistake:
    what: str  # 一句中文：这是哪种错误
    section: str  # 课文里讲这个坑的地方，如 "L2.01「4. 坑」坑 2"
    fn: Callable[..., Any]  # 与被测函数同样的关键字参数 -> 这种错误会算出的结果
    # 认这个错误时用的容差（None = 用 check 的）。精度类的错误（在 bf16 / float32 里算）换一种写法，
    # 舍入就不同：和错误版只在「那种精度的误差」以内一致，所以要放宽到那个量级
    rtol: float | None = None
    atol: float | None = None
    # 返回多个值的函数：part=i 的错误只管第 i 个返回值（fn 只算出那一个），只在别的错误都对不上整体、
    # 而第 i 个返回值是第一个不对的值时才拿来比；None = fn 算出完整的返回值
    part: int | None = None
    # 症状（`symptom(...)` 造）：fn 是 (got, **inputs) -> bool，说的是「输出有这个毛病」（超过上限、符号反了……），
    # 不是「输出等于某个错误版」。没有哪个错误版对得上时才看：对学习者的输出成立、对正确结果不成立的第一个
    is_symptom: bool = False


def symptom(what: str, section: str, holds: Callable[..., bool]) -> Mistake:
    """一类错误共有的症状：认不出具体写法时，至少说出是哪一类（`holds(got, **inputs)` 为 True 即有此症状）。"""
    return Mistake(what, section, holds, is_symptom=True)


def _index(flat_i: int, shape: torch.Size) -> tuple[int, ...]:
    idx = []
    for size in reversed(shape):
        idx.append(flat_i % size)
        flat_i //= size
    return tuple(reversed(idx))


def _fmt(x: float, digits: int = 6) -> str:
    """一个数的文字形式；正无穷写成 +inf（和 -inf 一眼分得开）。"""
    return "+inf" if x == float("inf") else f"{x:.{digits}g}"


def _fmt_pair(got: float, want: float) -> tuple[str, str]:
    """两个数的文字形式：6 位有效数字分不开时（例如只差 float32 的舍入）加位数，直到看得出差别。"""
    for digits in (6, 9, 12, 17):
        g, w = _fmt(got, digits), _fmt(want, digits)
        if g != w:
            break
    return g, w


def _describe_tensor(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"形状是 {tuple(got.shape)}，应为 {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype 是 {got.dtype}，应为 {want.dtype}"
    if got.device != want.device:
        got = got.to(want.device)
    got = got.detach()
    if want.dtype == torch.bool or not want.is_floating_point():
        diff = (got != want).reshape(-1)
        if not diff.any():
            return None
        i = int(diff.nonzero()[0])
        pos = _index(i, want.shape)
        n = int(diff.sum())
        return f"位置 {pos} 上得到 {got.reshape(-1)[i].item()}，应为 {want.reshape(-1)[i].item()}（共 {n}/{diff.numel()} 处不同）"
    g, w = got.reshape(-1).double(), want.reshape(-1).double()
    pos_inf, neg_inf = lambda x: x == float("inf"), lambda x: x == float("-inf")  # noqa: E731
    for name, bad in (("NaN", torch.isnan), ("+inf", pos_inf), ("-inf", neg_inf)):
        unexpected = bad(g) & ~bad(w)
        if unexpected.any():
            i = int(unexpected.nonzero()[0])
            return (
                f"输出里有 {name}：共 {int(unexpected.sum())} 处，第一处在位置 {_index(i, want.shape)}"
                f"（应为 {_fmt(w[i].item())}）"
            )
    # 期望值本身是 NaN / ±inf 的位置要求一模一样（否则 rtol·|inf| 会让任何值都算「接近」）
    exact = torch.isnan(g) & torch.isnan(w) | (g == w)
    close = torch.where(torch.isfinite(w), (g - w).abs() <= atol + rtol * w.abs(), exact)
    if close.all():
        return None
    far = ~close
    i = int(far.nonzero()[0])
    g_s, w_s = _fmt_pair(g[i].item(), w[i].item())
    return (
        f"位置 {_index(i, want.shape)} 上得到 {g_s}，应为 {w_s}"
        f"（共 {int(far.sum())}/{far.numel()} 处超出容差 atol={atol:g}、rtol={rtol:g}）"
    )


def describe_mismatch(
    got: Any,
    want: Any,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    names: tuple[str, ...] | None = None,
) -> str | None:
    """两份输出一致时返回 None；否则返回一句中文，说清哪里不一致（形状、dtype、NaN、位置和值）。

    `names`：返回多个值时各自的名字，如 ("loss", "clipped")：不一致的那个写成「返回值 [1]（clipped）」。
    """
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"应返回张量，得到 {type(got).__name__}"
        return _describe_tensor(got, want, rtol, atol)
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            what = f"（{', '.join(names)}）" if names else f"（{type(want).__name__}）"
            n = (
                f"{len(got)} 个值的 {type(got).__name__}"
                if isinstance(got, (tuple, list))
                else None
            )
            return f"应返回 {len(want)} 个值{what}，得到 {n or type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            if (msg := describe_mismatch(g, w, rtol, atol)) is not None:
                label = (
                    f"返回值 [{i}]（{names[i]}）" if names and i < len(names) else f"返回值 [{i}]"
                )
                return f"{label}：{msg}"
        return None
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            return f"应返回 dict，得到 {type(got).__name__}"
        missing = [k for k in want if k not in got]
        if missing:
            return f"缺少键 {missing}"
        for k in want:
            if (msg := describe_mismatch(got[k], want[k], rtol, atol)) is not None:
                return f"键 {k!r}：{msg}"
        return None
    if isinstance(want, float):
        try:
            g = float(got.item() if isinstance(got, torch.Tensor) else got)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError：多于一个元素的张量
            return f"应为一个数，得到{_kind(got)}"
        if g != g and want != want:
            return None
        if g != g:
            return f"得到 NaN，应为 {_fmt(want)}"
        if abs(g - want) <= atol + rtol * abs(want):
            return None
        g_s, w_s = _fmt_pair(g, want)
        return f"得到 {g_s}，应为 {w_s}"
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            return f"应为 {want!r}，得到{_kind(got)}"
        got = got.item()
    return None if got == want else f"得到 {got!r}，应为 {want!r}"


def _kind(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"形状 {tuple(x.shape)} 的张量"
    return f" {type(x).__name__}"


def which_mistakes(
    got: Any,
    inputs: Mapping[str, Any],
    mistakes: tuple[Mistake, ...] | list[Mistake],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    want: Any = None,
) -> list[Mistake]:
    """`got` 和哪些典型错误的输出一致（按列表顺序；说法相同的只留第一个）。

    不止一个时，这组输入分不开它们：诊断把它们都说出来，而不是只说排在前面的那个。
    函数返回多个值（tuple）而没有哪个错误和整个返回值一致时，再只看第一个不对的返回值：
    和哪些错误的那一个返回值一致（一个值写错、另一个值换了另一种写法，也认得出来）。这一步要给出正确结果 `want`。
    还是没有时，看症状（`symptom`）：说出第一个「学习者的输出有、正确结果没有」的毛病。
    """
    symptoms = [m for m in mistakes if m.is_symptom]
    mistakes = [m for m in mistakes if not m.is_symptom]
    found = _matching(got, inputs, [m for m in mistakes if m.part is None], rtol, atol)
    if not found and isinstance(want, (tuple, list)) and len(want) > 1:
        found = _matching_parts(got, inputs, mistakes, rtol, atol, want)
    if not found and want is not None:
        found = [m for m in symptoms if _holds(m, got, inputs) and not _holds(m, want, inputs)][:1]
    return found


def _holds(m: Mistake, out, inputs) -> bool:
    try:
        return bool(m.fn(out, **inputs))
    except Exception:  # 这个症状在这个输出上说不上（形状不对之类）
        return False


def _matching_parts(got, inputs, mistakes, rtol, atol, want) -> list[Mistake]:
    if not isinstance(got, (tuple, list)) or len(want) != len(got):
        return []
    i = next(
        (i for i, (g, w) in enumerate(zip(got, want)) if describe_mismatch(g, w, rtol, atol)), None
    )
    if i is None:
        return []
    parts = []
    for m in mistakes:
        if m.part is None and _right_before(m, inputs, want, i, rtol, atol):
            parts.append(Mistake(m.what, m.section, _element(m.fn, i), m.rtol, m.atol))
        elif m.part == i:
            parts.append(m)
    candidates = [m for m in parts if _differs(m, inputs, want[i], rtol, atol)]
    return _matching(got[i], inputs, candidates, rtol, atol)


def _right_before(m: Mistake, inputs, want, i, rtol, atol) -> bool:
    """错误 m 的前 i 个返回值都是对的（got 的前 i 个是对的：前面就错了的 m 解释不了 got）。"""
    try:
        out = m.fn(**inputs)
    except Exception:
        return False
    return all(describe_mismatch(out[j], want[j], rtol, atol) is None for j in range(i))


def _matching(got, inputs, mistakes, rtol, atol) -> list[Mistake]:
    found: list[Mistake] = []
    for m in mistakes:
        try:
            wrong = m.fn(**inputs)
        except Exception:  # 这个错误在这组输入上算不出来：不可能是它
            continue
        r = rtol if m.rtol is None else m.rtol
        a = atol if m.atol is None else m.atol
        if describe_mismatch(got, wrong, r, a) is None and all(m.what != f.what for f in found):
            found.append(m)
    return found


def _element(fn, i):
    return lambda **kw: fn(**kw)[i]


def _differs(m: Mistake, inputs, want_i, rtol, atol) -> bool:
    """错误 m 在这组输入上的第 i 个返回值和正确的不一样（一样的话它解释不了这个值为什么不对）。"""
    try:
        return describe_mismatch(m.fn(**inputs), want_i, rtol, atol) is not None
    except Exception:
        return False


def which_mistake(
    got: Any,
    inputs: Mapping[str, Any],
    mistakes: tuple[Mistake, ...] | list[Mistake],
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> Mistake | None:
    """`got` 和哪个典型错误的输出一致（按列表顺序第一个）；都不一致返回 None。"""
    found = which_mistakes(got, inputs, mistakes, rtol, atol)
    return found[0] if found else None


def check(
    got: Any,
    want: Any,
    *,
    where: str,
    section: str,
    inputs: Mapping[str, Any] | None = None,
    mistakes: tuple[Mistake, ...] | list[Mistake] = (),
    rtol: float = 1e-5,
    atol: float = 1e-6,
    names: tuple[str, ...] | None = None,
) -> None:
    """`got` 与 `want` 一致则通过；否则用一句中文失败（识别出典型错误时先说是哪一种）。"""
    msg = describe_mismatch(got, want, rtol, atol, names)
    if msg is None:
        return
    if inputs is not None and (found := which_mistakes(got, inputs, mistakes, rtol, atol, want)):
        pytest.fail(f"{named_all(found)}\n（{where}：{msg}）", pytrace=False)
    pytest.fail(f"{where}不对：{msg}。对照 {section}。", pytrace=False)


def make_checker(
    want: Mapping[str, Callable[..., Any]],
    mistakes: Mapping[str, list[Mistake]],
    spec: Mapping[str, str],
    tol: Mapping[str, Mapping[str, float]] | None = None,
    names: Mapping[str, tuple[str, ...]] | None = None,
) -> Callable[..., None]:
    """一个模块里几个函数共用的 `check`：按函数名取参考实现、典型错误、课文章节、容差和返回值的名字。

    返回 `check_fn(name, got, inputs, *, where=None, section=None, want=None, **tol)`：
    `got` 是函数 `name` 在 `inputs` 上的输出；`want` 不给时用 `want[name](**inputs)`。
    """

    def check_fn(name, got, inputs, *, where=None, section=None, want=None, **override):
        check(
            got,
            want_fns[name](**inputs) if want is None else want,
            inputs=inputs,
            mistakes=mistakes[name],
            where=where or f"{name} 的输出",
            section=section or spec[name],
            names=(names or {}).get(name),
            **{**(tol or {}).get(name, {}), **override},
        )

    want_fns = want
    return check_fn


def looks_like(what: str, section: str) -> str:
    """认出一种典型错误时，失败信息的第一行：「看起来是：<错误>。回看 <章节>。」

    `what` 是一句话（可以带括号里的说明），句末的标点由这里加；它不写「回看」，章节只有 `section` 一处。
    """
    return f"看起来是：{what.rstrip('。；，：')}。回看 {section}。"


def named(m: Mistake) -> str:
    """识别出 `m` 时，失败信息的第一行。"""
    return looks_like(m.what, m.section)


def named_all(found: list[Mistake]) -> str:
    """识别出的错误不止一个（这组输入上它们算出同样的结果）时，第一行把它们都说出来。"""
    if len(found) == 1:
        return named(found[0])
    whats = "；也可能是".join(m.what.rstrip("。；，：") for m in found)
    sections = "、".join(dict.fromkeys(m.section for m in found))
    return f"看起来是：{whats}（这组输入上它们的结果相同）。回看 {sections}。"


def diagnosis_line(got: Any, want: Any, **kwargs: Any) -> str | None:
    """`check(got, want, **kwargs)` 失败时返回失败信息的第一行，通过时返回 None。"""
    try:
        check(got, want, **kwargs)
    except pytest.fail.Exception as e:
        return str(e.msg).splitlines()[0]
    return None


def assert_named(
    mistake: Mistake, inputs: Mapping[str, Any], want: Any, mistakes, **kwargs: Any
) -> None:
    """测诊断本身：已知错误 `mistake` 在 `inputs` 上的输出送进 `check`，失败信息的第一行必须点名它。"""
    line = diagnosis_line(mistake.fn(**inputs), want, inputs=inputs, mistakes=mistakes, **kwargs)
    assert line == named(mistake), f"没有认出「{mistake.what}」，第一行是：{line}"


def assert_named_first(
    mistake: Mistake,
    cases: Iterable[tuple[Mapping[str, Any], Any, Mapping[str, Any]]],
    mistakes,
    **kwargs: Any,
) -> None:
    """测诊断本身，按学习者看到的顺序：`cases` 是测试依次用的 (inputs, 正确结果, check 的额外参数)。

    已知错误 `mistake` 在第一个和正确结果不同的输入上，失败信息的第一行必须只点名它自己
    （不是别的错误，也不是「它或别的错误」）；所有输入上都和正确结果一样也算失败（测试认不出它）。
    """
    for inputs, want, extra in cases:
        try:
            wrong = mistake.fn(**inputs)
        except Exception:  # 这个错误在这组输入上谈不上（例如精度类的错误遇到 float32 的输入）
            continue
        if mistake.part is not None:  # 只错了一个返回值：其余的返回值是对的
            wrong = tuple(wrong if i == mistake.part else w for i, w in enumerate(want))
        opts = {**kwargs, **extra}
        tol = {k: opts[k] for k in ("rtol", "atol") if k in opts}
        if describe_mismatch(wrong, want, **tol) is None:
            continue
        line = diagnosis_line(wrong, want, inputs=inputs, mistakes=mistakes, **opts)
        assert line == named(mistake), f"没有认出「{mistake.what}」，第一行是：{line}"
        return
    raise AssertionError(f"没有任何一个输入能暴露「{mistake.what}」")


def collisions(
    mistakes,
    cases: Iterable[tuple[Mapping[str, Any], Any, Mapping[str, Any]]],
    inseparable: Iterable[tuple[Mistake, Mistake]] = (),
) -> list[str]:
    """诊断表本身的检查：在同一组诊断输入上，两个说法不同的典型错误算出同样的结果（彼此在容差以内）。

    `cases` 同 `assert_named_first`：(inputs, 正确结果, check 的额外参数)。只比在这组输入上和正确结果不同的错误
    （和正确结果一样的错误在这组输入上谈不上被点名）；症状不比（它们说的是输出的毛病，不是一个结果）。
    返回「第几组输入：错误 A / 错误 B」的列表，空列表 = 没有撞车：每个错误在每组暴露它的输入上都只和它自己一致，
    学习者的写法和其中一个一致时，诊断不会同时（或改为）点名另一个。
    `inseparable`：已知在某类输入上必然相同的几对（例如没有哪一列整列相等时，「沿 dim=0 判断全相等」就是
    「没有全相等的规则」），只在前面的输入上分得开；测试里写明为什么，这几对不报。
    """
    skip = {frozenset((a.what, b.what)) for a, b in inseparable}
    found = []
    for k, (inputs, want, extra) in enumerate(cases):
        tol = {key: extra[key] for key in ("rtol", "atol") if key in extra}
        outs: list[tuple[Mistake, Any]] = []
        for m in mistakes:
            if m.is_symptom:
                continue
            try:
                out = m.fn(**inputs)
            except Exception:  # 这个错误在这组输入上谈不上
                continue
            if m.part is not None:
                out = tuple(out if i == m.part else w for i, w in enumerate(want))
            if describe_mismatch(out, want, **tol) is None or any(
                m.what == o.what for o, _ in outs
            ):
                continue  # 和正确结果一样；或同一个错误的另一种写法（说法相同，诊断只说一次）
            for other, other_out in outs:
                if frozenset((m.what, other.what)) in skip:
                    continue
                if describe_mismatch(out, other_out, **tol) is None:
                    found.append(f"第 {k} 组输入：「{other.what}」/「{m.what}」")
            outs.append((m, out))
    return found


def hint_sections(crashes: Mapping[str, Mapping[str, str | tuple[str, str]]]) -> set[str]:
    """`guarded` 的 hints 里指向别处的章节（(原因, 章节) 的第二项），给 `assert_sections_exist` 核对。"""
    return {h[1] for per_fn in crashes.values() for h in per_fn.values() if isinstance(h, tuple)}


def assert_sections_exist(sections) -> None:
    """每个 `L2.01「标题开头」` 形式的章节指向，在课文里都要有对应的标题。"""
    missing = sorted(s for s in set(sections) if section_heading(s) is None)
    assert not missing, f"这些章节在课文里找不到对应的标题：{missing}"


def expect_value_error(call: Callable[[], Any], what: str) -> None:
    """`call()` 必须抛 ValueError；`what` 用一句中文说明是哪种非法输入。"""
    try:
        call()
    except ValueError:
        return
    except Exception as e:  # noqa: BLE001  任何别的异常都要说清楚
        if is_stub(e):
            raise  # 还是空桩：交给 tests/pytest_plugin.py 给出「还没实现」的提示
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        pytest.fail(
            f"{what}：应当抛 ValueError（并说明要改什么），实际抛了 {type(e).__name__}：{first}",
            pytrace=False,
        )
    pytest.fail(f"{what}：应当抛 ValueError（并说明要改什么），但什么也没抛", pytrace=False)


# ---------------------------------------------------------------- 学习者函数里抛出的异常、原地修改、梯度


def crash_line(
    name: str, exc: BaseException, section: str, hints: Mapping[str, str | tuple[str, str]]
) -> str:
    """学习者的函数 `name` 抛出 `exc` 时失败信息的第一行：哪个函数、什么异常、在这个函数里最可能的原因。

    `hints[种类]` 是这种异常在这个函数里最可能的原因（种类见 tests/pytest_plugin.py 的
    `EXCEPTION_KINDS`），可以写成 (原因, 章节) 指向别的章节；没有时用那一类异常的通用说明。
    """
    kind, generic = exception_kind(exc)
    cause = hints.get(kind) or generic
    if isinstance(cause, tuple):
        cause, section = cause
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if kind == "value_error":
        cause = f"{cause}（你的信息：{first}）"
    return f"{name}() 抛出 {type(exc).__name__}：{cause or first}。回看 {section}。"


def crash_first_line(
    call: Callable[[], Any],
    name: str,
    section: str,
    hints: Mapping[str, str | tuple[str, str]],
) -> str:
    """测异常提示本身：`call()` 必须抛异常，返回学习者会看到的第一行（`crash_line`）。"""
    try:
        call()
    except Exception as e:  # noqa: BLE001  任何异常都要有一句中文
        return crash_line(name, e, section, hints)
    raise AssertionError(f"{name} 的这个错误版没有抛异常")


@contextlib.contextmanager
def explained(
    name: str, section: str, hints: Mapping[str, str | tuple[str, str]] | None = None
) -> Iterator[None]:
    """with 块里抛出的异常挂上 `crash_line`（tests/pytest_plugin.py 把它当作失败信息的第一行）。"""
    try:
        yield
    except Exception as e:
        if not is_stub(e) and getattr(e, "course_hint", None) is None:
            e.course_hint = crash_line(name, e, section, hints or {})
        raise


def _tensor_args(fn, args, kwargs) -> dict[str, torch.Tensor]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return {}  # 参数对不上：让调用本身去报错
    return {k: v for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)}


def _guard(name, fn, section, hints, keep_inputs):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        tensors = _tensor_args(fn, args, kwargs) if keep_inputs else {}
        before = {k: (t._version, t.detach().clone()) for k, t in tensors.items()}
        with explained(name, section, hints):
            out = fn(*args, **kwargs)
        changed = [k for k, t in tensors.items() if t._version != before[k][0]]
        if changed:
            with torch.no_grad():  # 恢复原样：同一份输入（比如模块级的例子）还要给别的测试用
                for k in changed:
                    tensors[k].copy_(before[k][1])
            arg = changed[0]
            pytest.fail(
                f"{name}() 原地修改了输入的 {arg}（-=、/=、masked_fill_、x[...] = … 之类）："
                f"调用方后面还要用原来的 {arg}，要返回一个新张量。回看 {keep_inputs}。",
                pytrace=False,
            )
        return out

    return call


class _Guarded:
    def __init__(self, module, sections, hints, keep_inputs):
        self._module, self._sections, self._hints, self._keep = module, sections, hints, keep_inputs

    def __repr__(self):  # hypothesis 的反例里写的是被测模块本身
        return repr(self._module)

    def __getattr__(self, attr):
        value = getattr(self._module, attr)
        if attr in self._sections and callable(value):
            hints, keep = self._hints.get(attr, {}), self._keep.get(attr)
            return _guard(attr, value, self._sections[attr], hints, keep)
        return value


def guarded(
    module: Any,
    sections: Mapping[str, str],
    hints: Mapping[str, Mapping[str, str | tuple[str, str]]] | None = None,
    keep_inputs: Mapping[str, str] | None = None,
) -> Any:
    """被测模块的代理：`sections` 里的函数（函数名 -> 规格所在的章节）被调用时

    - 抛出异常（空桩的 NotImplementedError 除外），异常照原样抛出，但挂上一句中文的第一行
      （`crash_line`；`hints[函数名][异常种类]` 是这种异常在这个函数里最可能的原因）；
    - `keep_inputs` 里的函数（函数名 -> 讲「不改输入」的章节）原地改了任何一个张量参数，就直接失败，
      第一行点名：后面的参考值和典型错误都是拿同一份输入算的，不先说出来，失败信息会指向别的错误。
    """
    return _Guarded(module, sections, hints or {}, keep_inputs or {})


def require_grad(out: Any, name: str, section: str) -> None:
    """对 `name` 的输出做 backward 之前：它必须还连着计算图，否则第一行说清是梯度在函数里被切断了。"""
    if isinstance(out, torch.Tensor) and not out.requires_grad:
        pytest.fail(
            f"{name} 的输出不带梯度（requires_grad=False）：计算图在函数里被切断了——"
            "用了 torch.no_grad()、.detach()、.item()/.tolist()，或用 torch.tensor(...) 把结果重新包了一层。"
            f"回看 {section}。",
            pytrace=False,
        )


_SECTION = re.compile(r"^L([123])\.(\d\d)「([^」]+)」")
_LEVELS = {"1": "L1_concepts", "2": "L2_algorithm", "3": "L3_frameworks"}


def section_heading(section: str) -> str | None:
    """`"L2.01「坑 1」"` -> 课文 L2_algorithm/01_*/README.md 里以「坑 1」开头的标题；找不到返回 None。"""
    m = _SECTION.match(section)
    if m is None:
        return None
    readmes = sorted((ROOT / _LEVELS[m.group(1)]).glob(f"{m.group(2)}_*/README.md"))
    return find_heading(readmes[0], m.group(3)) if readmes else None
