"""执行 L2.01 / L2.02 / L2.06 的 notebook（kernel python3，工作目录 = notebook 所在文件夹），断言没有报错。

启动 kernel 就要好几秒，所以标成 slow：默认 `pytest` 跳过，CI 用 `pytest -m slow` 运行。
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(
    p
    for lesson in ("01_advantages", "02_logprobs_and_masks", "06_sampling")
    for p in (ROOT / "L2_algorithm" / lesson).glob("*.ipynb")
)


def test_there_are_notebooks():
    assert any(p.name == "advantage_scaling.ipynb" for p in NOTEBOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # 任何一格抛异常都会变成 CellExecutionError，测试失败并显示那一格
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    assert not errors, (
        f"{path.name} 有格子报错：{errors[0].get('ename')}: {errors[0].get('evalue')}"
    )
