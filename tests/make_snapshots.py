"""从本仓库的 solutions/ 重新生成快照（tests/snapshots/*.pt）。

    python tests/make_snapshots.py                    # 全部用例；删掉已经没有用例的 .pt
    python tests/make_snapshots.py --only l2_04       # 只处理 id 含 l2_04 的用例（id = <模块>::<用例>）
    python tests/make_snapshots.py --only '*::kl_k3'  # 也可以写 fnmatch 通配；--only 可以重复

快照只用来防止回归和检验你的实现；期望值全部由参考实现算出，不手写。规则：
- 总是 import 这个文件所在的仓库里的 solutions/，不管 Python 环境里装的是哪一份；
- 输入按 tests/snapshot_cases/ 的造法造；和已有快照存的输入在容差内一致时，沿用存下的输入
  （tests/snapshots.py 的 input_tolerance），输出由参考实现在这份输入上算出；
- 只有输入或输出超出用例容差（或文件缺失、读不出来）时才重写那个文件。所以在另一台 CPU 上运行，
  末位舍入的差别不会改动已提交的快照；连续运行两次，第二次什么也不改（git status 干净）。
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# 本仓库在最前面：import 到的 solutions 是这个 checkout 的，而不是环境里装的另一份
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from snapshots import (  # noqa: E402
    SNAPSHOT_DIR,
    all_cases,
    inputs_mismatch,
    load,
    output_mismatch,
    run,
    to_saveable,
)


def _check_solutions_is_this_checkout() -> None:
    import solutions

    here = (ROOT / "solutions").resolve()
    got = Path(solutions.__file__).resolve().parent
    if got != here:
        sys.exit(
            f"make_snapshots.py 要用本仓库的 {here}，但 import 到的是 {got}：换一个干净的 Python 进程再运行"
        )


def _select(cases, patterns):
    if not patterns:
        return cases
    return [c for c in cases if any(p in c.id or fnmatch.fnmatchcase(c.id, p) for p in patterns)]


def _plan(case, path: Path) -> tuple[dict, str | None]:
    """(要写进文件的内容, 为什么要写)；为什么是 None 表示文件不用动。"""
    fresh = to_saveable(case.inputs())
    saved, why = None, None
    if not path.exists():
        why = "新文件"
    else:
        try:
            saved = load(path)
        except Exception as e:  # noqa: BLE001  读不出来的文件（截断、旧格式）就重写
            why = f"原文件读不出来（{type(e).__name__}）"
        else:
            if (msg := inputs_mismatch(fresh, saved["inputs"], case)) is not None:
                why = f"输入变了：{msg}"
    inputs = fresh if why is not None else saved["inputs"]
    torch.manual_seed(0)
    output = to_saveable(run(case, "solutions", inputs))
    if why is None and (msg := output_mismatch(output, saved["output"], case)) is not None:
        why = f"输出变了：{msg}"
    return {"inputs": inputs, "output": output}, why


def main(argv: list[str] | None = None, snapshot_dir: Path = SNAPSHOT_DIR) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description="从本仓库的 solutions/ 重新生成 tests/snapshots/*.pt"
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="模式",
        help="只处理 id（<模块>::<用例>）含这个子串或匹配这个 fnmatch 通配的用例；可重复",
    )
    args = ap.parse_args(argv)
    _check_solutions_is_this_checkout()
    cases = all_cases()
    chosen = _select(cases, args.only)
    if not chosen:
        known = ", ".join(c.id for c in cases)
        print(f"--only {args.only} 没有匹配任何用例。已有的用例：{known}", file=sys.stderr)
        return 2
    snapshot_dir.mkdir(exist_ok=True)
    written = 0
    for case in chosen:
        path = snapshot_dir / case.path.name
        try:
            content, why = _plan(case, path)
        except Exception as e:  # noqa: BLE001  参考实现或造法出错：说清是哪个用例，不写任何东西
            print(
                f"用例 {case.id} 出错，没有写 {path.name}：{type(e).__name__}: {e}", file=sys.stderr
            )
            return 1
        if why is None:
            print(f"没变  {path.name}")
            continue
        tmp = path.with_suffix(".tmp")
        torch.save(content, tmp)
        tmp.replace(path)  # 原子替换：中途被打断也不会留下写了一半的快照
        written += 1
        print(f"重写  {path.name}（{why}）")
    if not args.only:  # 只有处理全部用例时才知道哪些文件已经没有用例了
        keep = {c.path.name for c in cases}
        for stale in sorted(snapshot_dir.glob("*.pt")) + sorted(snapshot_dir.glob("*.tmp")):
            if stale.name not in keep:
                stale.unlink()
                print(f"删除  {stale.name}（没有对应的用例）")
                written += 1
    print(f"{len(chosen)} 个用例，改动了 {written} 个文件")
    return 0


if __name__ == "__main__":
    sys.exit(main())
