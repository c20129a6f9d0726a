"""课文不给练习的答案：参考实现的非平凡行逐字出现在课文里的，每个函数最多 2 行，L2.01–L2.07 合计低于 10%。

规则（什么算「非平凡行」、什么算「逐字出现」）写在 tests/check_lesson_leaks.py 的开头；
`python tests/check_lesson_leaks.py -v` 列出每一行。
"""

from __future__ import annotations

import pytest
from check_lesson_leaks import MAX_PER_FUNCTION, MAX_SHARE, scan, totals

RESULTS = scan()


def test_every_l2_lesson_function_was_scanned():
    modules = {r.module for r in RESULTS}
    assert len(modules) == 7, f"应扫描 L2.01–L2.07 的 7 个参考实现，实际扫到 {sorted(modules)}"
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
    if len(fn.leaked) > MAX_PER_FUNCTION:
        shown = "\n".join(f"    {line}" for line in fn.leaked)
        pytest.fail(
            f"{fn.id}：参考实现有 {len(fn.leaked)} 行逐字出现在课文里（上限 {MAX_PER_FUNCTION}）。"
            f"课文给规格、例子和分级提示，不给代码。\n{shown}",
            pytrace=False,
        )


def test_total_share_is_small():
    leaked, total = totals(RESULTS)
    assert leaked / total < MAX_SHARE, (
        f"L2.01–L2.07 参考实现的非平凡行有 {leaked}/{total} = {leaked / total:.1%} 逐字出现在课文里，"
        f"上限是 {MAX_SHARE:.0%}"
    )
