"""课文有没有把练习的答案原样抄进去：数参考实现里有多少「非平凡」的行逐字出现在课文 README 里。

    python tests/check_lesson_leaks.py            # 打印每个参考实现里每个函数的统计
    python tests/check_lesson_leaks.py -v         # 同时列出泄露的行

tests/test_lesson_leaks.py 用同一套规则做检查：每个函数最多 MAX_PER_FUNCTION 行、且少于它的一半
（一个两行的函数，两行都贴进课文也只有 2 行，但那就是整个答案），每个模块、全部合计都低于 MAX_SHARE。

扫描的是 solutions/ 里的每个课程模块（l<级>_<NN>_<名字>.py，按文件名自动发现，不用登记），
每个模块对照它自己那节课的 README（solutions/l2_05_grpo_loss.py -> L2_algorithm/05_grpo_loss/README.md）。

「非平凡行」的定义（每个顶层函数的函数体，逐物理行）：
- 去掉注释、去掉所有空白后再比较（所以改缩进、改空格、加注释都不算「不一样」）；
- 不算：docstring；`raise` 语句和只负责抛错的 `if ...: raise ...`（输入校验）；`assert`；
  `return 名字` / `return 常量` / `pass` / `continue` / `break` 这样的平凡语句；
  去掉空白后少于 MIN_CHARS 个字符的行（`)`、`else:`、`],` 之类的收尾行）。
「逐字出现」：这一行（去空白后）是课文全文（同样去空白后）的子串。课文里讲别的东西的代码
（比如 TRL 是怎么写的）不会和参考实现逐字相同，不受影响。
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from quiz import LEVELS, ROOT

MODULE_GLOB = "l[0-9]_*.py"  # solutions/ 里的每个课程模块
MAX_PER_FUNCTION = 2  # 每个函数最多这么多行逐字出现在课文里
MAX_SHARE = 0.10  # 全部函数合计：逐字出现的行必须低于这个比例
MIN_CHARS = 6  # 去空白后短于这个长度的行不算（收尾括号、else: 之类）

_WS = re.compile(r"\s+")


@dataclass
class FunctionLeaks:
    module: str
    name: str
    lines: list[str] = field(default_factory=list)  # 非平凡行（去注释、去空白）
    leaked: list[str] = field(default_factory=list)  # 其中逐字出现在课文里的

    @property
    def id(self) -> str:
        return f"{self.module}.{self.name}"


def _squash(text: str) -> str:
    return _WS.sub("", text)


def _code_lines_without_comments(source: str) -> dict[int, str]:
    """{行号: 去掉注释后的这一行}（行号从 1 起）。"""
    lines = source.splitlines()
    comments: dict[int, int] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
    return {
        i: (line[: comments[i]] if i in comments else line) for i, line in enumerate(lines, start=1)
    }


def _is_validation_if(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and not node.orelse
        and all(isinstance(s, ast.Raise) for s in node.body)
    )


def _is_trivial_statement(node: ast.AST) -> bool:
    if isinstance(node, (ast.Raise, ast.Assert, ast.Pass, ast.Continue, ast.Break)):
        return True
    if _is_validation_if(node):
        return True
    if isinstance(node, ast.Return):
        return node.value is None or isinstance(node.value, (ast.Name, ast.Constant))
    return False


def _trivial_line_numbers(fn: ast.FunctionDef) -> set[int]:
    skip: set[int] = set()
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip.update(range(body[0].lineno, body[0].end_lineno + 1))  # docstring
    for node in ast.walk(fn):
        if isinstance(node, ast.stmt) and node is not fn and _is_trivial_statement(node):
            skip.update(range(node.lineno, node.end_lineno + 1))
    return skip


def function_lines(path: Path) -> dict[str, list[str]]:
    """{函数名: 非平凡行（去注释、去空白）}，按模块里出现的顺序。"""
    source = path.read_text(encoding="utf-8")
    code = _code_lines_without_comments(source)
    out: dict[str, list[str]] = {}
    for fn in ast.parse(source).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        skip = _trivial_line_numbers(fn)
        first = fn.body[0].lineno
        lines = []
        for i in range(first, fn.end_lineno + 1):
            squashed = _squash(code.get(i, ""))
            if i not in skip and len(squashed) >= MIN_CHARS:
                lines.append(squashed)
        out[fn.name] = lines
    return out


def lesson_readme(module_path: Path, root: Path = ROOT) -> Path:
    """solutions/l2_01_advantages.py -> L2_algorithm/01_advantages/README.md（级别的对应在 quiz.LEVELS）"""
    level, rest = module_path.stem.split("_", 1)
    folder = next((f for f, prefix in LEVELS.items() if prefix == level), f"<没有 {level} 这一级>")
    return root / folder / rest / "README.md"


def lesson_modules(root: Path = ROOT) -> list[Path]:
    """solutions/ 里的每个课程模块（按文件名发现）。"""
    return sorted((root / "solutions").glob(MODULE_GLOB))


def scan(root: Path = ROOT) -> list[FunctionLeaks]:
    """每个课程模块的每个顶层函数一条（课文不存在时按空课文算；test_lesson_leaks.py 另查课文在不在）。"""
    results = []
    for path in lesson_modules(root):
        readme = lesson_readme(path, root)
        text = _squash(readme.read_text(encoding="utf-8")) if readme.is_file() else ""
        for name, lines in function_lines(path).items():
            leaks = FunctionLeaks(path.stem, name, lines)
            leaks.leaked = [line for line in lines if line in text]
            results.append(leaks)
    return results


def too_much(fn: FunctionLeaks) -> bool:
    """这个函数逐字出现在课文里的行太多：多于 MAX_PER_FUNCTION 行，或者占了它的一半以上（含一半）。"""
    return len(fn.leaked) > MAX_PER_FUNCTION or (
        bool(fn.leaked) and 2 * len(fn.leaked) >= len(fn.lines)
    )


def totals(results: list[FunctionLeaks]) -> tuple[int, int]:
    return sum(len(r.leaked) for r in results), sum(len(r.lines) for r in results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="列出逐字出现在课文里的行")
    args = ap.parse_args(argv)
    results = scan()
    for r in results:
        flag = "  <-- 超过上限" if too_much(r) else ""
        print(f"{r.id:50s} {len(r.leaked):3d} / {len(r.lines):3d}{flag}")
        if args.verbose:
            for line in r.leaked:
                print(f"    {line}")
    leaked, total = totals(results)
    share = leaked / total if total else 0.0
    print(
        f"合计 {leaked} / {total} = {share:.1%}（上限：每个函数 {MAX_PER_FUNCTION} 行，合计 < {MAX_SHARE:.0%}）"
    )
    over = [r for r in results if len(r.leaked) > MAX_PER_FUNCTION]
    return 0 if not over and share < MAX_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())
