"""每节课的 notebook（`L*/*/*.ipynb`，按 glob 自动发现）都能在 CPU 上从头跑完，没有任何一格报错。

在内存里执行（kernel python3，工作目录 = notebook 所在文件夹），不改写仓库里的文件。启动 kernel 就要好几秒，
所以标成 slow：默认 `pytest` 不跑，CI 用 `pytest -m slow` 运行。新加的 notebook 不用登记，放进课程文件夹就会被测。
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("L*/*/*.ipynb"))

# 个别 notebook 的结论依赖某几行输出：这里写出它们必须打印的文字（键 = 相对仓库根目录的路径）
MUST_PRINT = {
    "L2_algorithm/04_kl/kl_estimators.ipynb": [
        "k1: 10 个距离里",
        "k2: 10 个距离里",
        "k3: 10 个距离里",
    ],
}
# 这些 notebook 的结论是一张图：执行后必须产出 PNG
MUST_PLOT = {"L2_algorithm/04_kl/kl_estimators.ipynb"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_notebooks_are_discovered():
    found = {_rel(p) for p in NOTEBOOKS}
    assert found, "没有找到任何 L*/*/*.ipynb"
    stale = (set(MUST_PRINT) | MUST_PLOT) - found
    assert not stale, (
        f"这些 notebook 已经不存在，删掉 tests/test_notebooks.py 里对应的检查：{stale}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_notebook_runs(path):
    import nbclient  # 只有这个 slow 测试用到：默认的 pytest 不必付 import 的时间（约 1–2 s CPU）
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # 任何一格抛异常都会变成 CellExecutionError，测试失败并显示那一格
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, (
        f"{path.name} 有格子报错：{errors[0].get('ename')}: {errors[0].get('evalue')}"
    )
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    for line in MUST_PRINT.get(_rel(path), []):
        assert line in text, f"{path.name} 没有打印「{line}」"
    if _rel(path) in MUST_PLOT:
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} 没有画出图"
