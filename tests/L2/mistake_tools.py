"""L2.04–L2.07（以及 TRL 对照）的测试共用的小工具（诊断本身在 tests/diagnose.py）。

- `derived`：同一批典型错误，换一种方式看它们的输出（例如不看 loss 值，而看梯度或保留下来的 token 数）；
- `named`、`diagnosis_line`、`expect_value_error` 在 tests/diagnose.py，这里转出，老的 import 不用改。
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnose import Mistake, diagnosis_line, expect_value_error, named  # noqa: F401


def derived(
    mistakes: list[Mistake], make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> list[Mistake]:
    """`make(错误版函数) -> 新的 fn`：新 fn 的参数就是调用 check 时传的 inputs。"""
    return [Mistake(m.what, m.section, make(m.fn)) for m in mistakes]
