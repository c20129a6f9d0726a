"""课文不给练习的答案：参考实现的非平凡行逐字出现在课文里的，每个函数最多 2 行且少于一半，每个模块、全部合计低于 10%。

扫描 solutions/ 里的每个课程模块，各对照它自己那节课的 README（按文件名自动发现，不用登记）。
规则（什么算「非平凡行」、什么算「逐字出现」）写在 tests/check_lesson_leaks.py 的开头；
`python tests/check_lesson_leaks.py -v` 列出每一行。
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess

import pytest
from check_lesson_leaks import (
    MAX_PER_FUNCTION,
    MAX_SHARE,
    MODULE_GLOB,
    function_lines,
    lesson_modules,
    lesson_readme,
    scan,
    too_much,
    totals,
)
from quiz import ROOT

RESULTS = scan()
MODULES = lesson_modules()


def test_every_solutions_module_is_scanned_against_its_lesson():
    on_disk = sorted(
        m.name
        for m in pkgutil.iter_modules([str(ROOT / "solutions")])
        if not m.name.startswith("_")
    )
    assert [p.stem for p in MODULES] == on_disk, "check_lesson_leaks.py 的 MODULE_GLOB 漏了模块"
    no_lesson = [p.name for p in MODULES if not lesson_readme(p).is_file()]
    assert not no_lesson, (
        f"这些 solutions/ 模块没有对应的课文 README（模块名 = 级别前缀 + 课的文件夹名，"
        f"见 MAINTAINING.md 第 1 节）：{no_lesson}"
    )
    with_functions = {p.stem for p in MODULES if function_lines(p)}
    assert {r.module for r in RESULTS} == with_functions
    empty = [r.id for r in RESULTS if not r.lines]
    assert not empty, f"这些函数一行可比的代码都没有，规则可能漏掉了它们：{empty}"


def test_the_counting_rules(tmp_path):
    """规则本身：docstring、校验、注释、平凡 return 不算；比较时忽略空白和注释。"""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "l2_01_toy.py").write_text(
        "def f(x, k):\n"
        '    """docstring: y = x.sum(dim=1)"""\n'
        "    if k < 0:\n"
        '        raise ValueError("k < 0")\n'
        "    y = x.sum(dim=1)  # 注释\n"
        "    z = torch.where(\n"
        "        y > 0, y, -y\n"
        "    )\n"
        "    return z\n",
        encoding="utf-8",
    )
    (tmp_path / "L2_algorithm" / "01_toy").mkdir(parents=True)
    (tmp_path / "L2_algorithm" / "01_toy" / "README.md").write_text(
        "先求和：`y  =  x.sum(dim = 1)`。\n`k < 0` 时报错。\n", encoding="utf-8"
    )
    [r] = scan(tmp_path)
    assert r.lines == ["y=x.sum(dim=1)", "z=torch.where(", "y>0,y,-y"], r.lines
    assert r.leaked == ["y=x.sum(dim=1)"], r.leaked


@pytest.mark.parametrize("fn", RESULTS, ids=[r.id for r in RESULTS])
def test_lesson_does_not_contain_the_solution(fn):
    if too_much(fn):
        shown = "\n".join(f"    {line}" for line in fn.leaked)
        pytest.fail(
            f"{fn.id}：参考实现的 {len(fn.lines)} 行里有 {len(fn.leaked)} 行逐字出现在课文里"
            f"（上限：{MAX_PER_FUNCTION} 行，且少于一半）。"
            f"课文给规格、例子和分级提示，不给代码。\n{shown}",
            pytrace=False,
        )


@pytest.mark.parametrize("module", sorted({r.module for r in RESULTS}))
def test_each_modules_share_is_small(module):
    leaked, total = totals([r for r in RESULTS if r.module == module])
    assert leaked / total < MAX_SHARE, (
        f"{module}：参考实现的非平凡行有 {leaked}/{total} = {leaked / total:.1%} 逐字出现在课文里，"
        f"上限是 {MAX_SHARE:.0%}"
    )


def test_a_short_function_pasted_whole_is_a_leak(tmp_path):
    """两行的函数两行都贴进课文：没超过「每个函数 2 行」，但那就是整个答案。"""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "l2_10_toy.py").write_text(
        "def f(lengths, max_len, buffer):\n"
        "    over = (lengths - (max_len - buffer)).clamp(min=0).float()\n"
        "    return -(over / buffer).clamp(max=1.0)\n",
        encoding="utf-8",
    )
    (tmp_path / "L2_algorithm" / "10_toy").mkdir(parents=True)
    readme = tmp_path / "L2_algorithm" / "10_toy" / "README.md"
    readme.write_text("规格：`f(lengths, max_len, buffer)`。\n", encoding="utf-8")
    [r] = scan(tmp_path)
    assert len(r.lines) == 2 and not r.leaked and not too_much(r)
    readme.write_text(
        "```python\nover = (lengths - (max_len - buffer)).clamp(min=0).float()\n"
        "return -(over / buffer).clamp(max=1.0)\n```\n",
        encoding="utf-8",
    )
    [r] = scan(tmp_path)
    assert len(r.leaked) == 2 <= MAX_PER_FUNCTION and too_much(r)
    readme.write_text("```python\nreturn -(over / buffer).clamp(max=1.0)\n```\n", encoding="utf-8")
    [r] = scan(tmp_path)
    assert len(r.leaked) == 1 and too_much(r), "两行里贴了一行，也是一半"


def test_total_share_is_small():
    leaked, total = totals(RESULTS)
    assert leaked / total < MAX_SHARE, (
        f"参考实现的非平凡行有 {leaked}/{total} = {leaked / total:.1%} 逐字出现在课文里，"
        f"上限是 {MAX_SHARE:.0%}"
    )


# 空桩的提示原样出现在学习者的失败信息里（「还没实现：……。<提示>」），不折叠：只能指路，不能写算法。
# 这条规则只认得出写成代码的算法（张量操作、切片、公式里的运算符）；写成一句话的做法要靠审稿人看。
_CODE_IN_HINT = re.compile(
    r"torch\.|\w\[[^\]]*[:,]|@|\w\s*\*\s*\w|\.(?:float|sum|mean|exp|log|T)\b"
    r"|logsumexp|expm1|cumsum|scatter|where\(|\bw\s*="
)


def _stubs(source: str) -> dict[str, tuple[int, str]]:
    """一个练习模块里的空桩：函数名 -> (raise 所在的行, 提示)。写好了的函数不在里面。"""
    stubs = {}
    for fn in ast.parse(source).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                if getattr(node.exc.func, "id", "") == "NotImplementedError" and node.exc.args:
                    text = "".join(
                        a.value for a in ast.walk(node.exc.args[0]) if isinstance(a, ast.Constant)
                    )
                    stubs[fn.name] = (node.lineno, text)
    return stubs


def _git(*args: str) -> str:
    """git 的输出；没有 git、不是 git 仓库或出错时是空串。"""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _course_stubs(rel: str, names: set[str]) -> dict[str, tuple[int, str]]:
    """`names` 这几个函数在 git 里最近一次还是空桩时的样子（HEAD 起往回找）。"""
    found: dict[str, tuple[int, str]] = {}
    for sha in _git("log", "--format=%H", "--", rel).split():
        for name, stub in _stubs(_git("show", f"{sha}:{rel}")).items():
            if name in names and name not in found:
                found[name] = stub
        if set(found) == names:
            break
    return found


def _stub_hints() -> list[tuple[str, str]]:
    """每个练习函数的空桩提示，读课程放空桩的地方：工作区里还是空桩的就读工作区（维护者改了还没提交的
    提示也查得到）；学习者已经写好的函数读 git 里它最近一次还是空桩的版本（issue 44：写完全部练习的学习者，
    工作区里一个空桩都没有，这条检查查的又是课程的空桩，不是他的代码）。"""
    hints = []
    for path in sorted((ROOT / "exercises").glob(MODULE_GLOB)):
        source = path.read_text(encoding="utf-8")
        stubs = _stubs(source)
        functions = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        if functions - set(stubs):
            stubs |= _course_stubs(f"exercises/{path.name}", functions - set(stubs))
        hints += [(f"{path.stem}:{name}:{line}", text) for name, (line, text) in stubs.items()]
    return hints


STUB_HINTS = _stub_hints()


def test_stub_hints_point_to_the_lesson_and_hold_no_algorithm():
    assert STUB_HINTS, (
        "找不到课程的空桩：exercises/ 里没有，git 里也没有（这份课程不是 git clone 下来的？"
        "这条检查要读 git 里的空桩）"
    )
    bad = [f"{where}：{text}" for where, text in STUB_HINTS if _CODE_IN_HINT.search(text)]
    assert not bad, (
        "这些空桩的提示写了算法（它会原样出现在失败信息里）：改成只指向规格、例子和提示在课文的哪一节\n"
        + "\n".join(bad)
    )
    lost = [f"{where}：{text}" for where, text in STUB_HINTS if "节" not in text]
    assert not lost, "这些空桩的提示没有指向课文的哪一节：\n" + "\n".join(lost)


def test_a_written_function_is_checked_by_its_course_stub_in_git():
    """写完练习的学习者：函数在工作区里不再是空桩，提示就从 git 里它还是空桩的版本读（issue 44）。"""
    rel = "exercises/l2_01_advantages.py"
    head = _stubs(_git("show", f"HEAD:{rel}"))
    assert head, f"git 的 HEAD 里 {rel} 没有空桩"
    assert _course_stubs(rel, set(head)) == head


@pytest.mark.parametrize(
    "text",
    [
        "提示：先取 hidden[:, L-T-1:L-1] 展平",
        "每块 z = h.float() @ W.float().T",
        "提示：sort 降序后算 softmax 的 cumsum",
        "再看 3.3 节的提示（为什么用 expm1）",
        "先用 torch.where 把 padding 处的 log 比值换成 0",
        "beta>0 时加 beta*kl_k3；三种聚合只差分母",
    ],
)
def test_the_stub_hint_rule_catches_algorithms(text):
    assert _CODE_IN_HINT.search(text), text
