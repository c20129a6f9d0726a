"""从 solutions/ 重新生成所有快照：python tests/make_snapshots.py

快照只用来防止回归和检验你的实现；期望值全部由参考实现算出，不手写。
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from snapshots import SNAPSHOT_DIR, all_cases, run, to_saveable  # noqa: E402


def main() -> None:
    SNAPSHOT_DIR.mkdir(exist_ok=True)
    cases = all_cases()
    keep = {c.path for c in cases}
    for stale in SNAPSHOT_DIR.glob("*.pt"):
        if stale not in keep:
            stale.unlink()
    for case in cases:
        torch.manual_seed(0)
        out = run(case, "solutions")
        tmp = case.path.with_suffix(".tmp")
        torch.save({"inputs": to_saveable(case.inputs()), "output": to_saveable(out)}, tmp)
        tmp.replace(case.path)
        print(f"wrote {case.path.relative_to(SNAPSHOT_DIR.parent.parent)}")
    print(f"{len(cases)} snapshots")


if __name__ == "__main__":
    main()
