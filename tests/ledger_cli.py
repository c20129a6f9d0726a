"""What `python -m common.vram ARGS` prints, for tests that compare it with a lesson's pasted output."""

from __future__ import annotations

import contextlib
import io

from common.vram import report


def ledger_output(argv: list[str]) -> str:
    """stdout of the ledger's command line for ``argv`` (it must exit 0)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = report.main(argv)
    assert code == 0, f"python -m common.vram {' '.join(argv)} 退出码 {code}"
    return buf.getvalue()
