"""L2.04–L2.07（以及 TRL 对照）的测试共用的小工具（诊断本身在 tests/diagnose.py）。

- `derived`：同一批典型错误，换一种方式看它们的输出（例如不看 loss 值，而看梯度或保留下来的 token 数）；
- `named` / `diagnosis_line`：测试「诊断」本身——把一个已知错误的输出送进 `check`，取失败信息的第一行；
- `expect_value_error`：该抛 ValueError 却没抛时，用一句中文失败（而不是 pytest 的英文 "DID NOT RAISE"）。
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from diagnose import Mistake, check


def derived(
    mistakes: list[Mistake], make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> list[Mistake]:
    """`make(错误版函数) -> 新的 fn`：新 fn 的参数就是调用 check 时传的 inputs。"""
    return [Mistake(m.what, m.section, make(m.fn)) for m in mistakes]


def named(m: Mistake) -> str:
    """识别出 `m` 时，失败信息的第一行。"""
    return f"看起来是{m.what}：回看 {m.section}。"


def diagnosis_line(got: Any, want: Any, **kwargs: Any) -> str | None:
    """`check(got, want, **kwargs)` 失败时返回失败信息的第一行，通过时返回 None。"""
    try:
        check(got, want, **kwargs)
    except pytest.fail.Exception as e:
        return str(e.msg).splitlines()[0]
    return None


def expect_value_error(call: Callable[[], Any], what: str) -> None:
    """`call()` 必须抛 ValueError；`what` 用一句中文说明是哪种非法输入。"""
    try:
        call()
    except ValueError:
        return
    except NotImplementedError:
        raise  # 还是空桩：交给 common/pytest_plugin.py 给出「还没实现」的提示
    except Exception as e:  # noqa: BLE001  任何别的异常都要说清楚
        pytest.fail(f"{what}：应当抛 ValueError，实际抛了 {type(e).__name__}：{e}", pytrace=False)
    pytest.fail(f"{what}：应当抛 ValueError（并说明要改什么），但什么也没抛", pytrace=False)
