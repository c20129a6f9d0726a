"""L2.03-05 配套 notebook 能在 CPU 上从头跑完（在内存里执行，不改写仓库里的文件）。"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [ROOT / "L2_algorithm" / "04_kl" / "kl_estimators.ipynb"]


@pytest.mark.slow  # 启动 kernel + 采样，约 10 s
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()  # 任何一个 cell 报错都会抛 CellExecutionError
    text = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") == "stream"
    )
    # 结论所依赖的那几行确实打印出来了
    for name in ("k1", "k2", "k3"):
        assert f"{name}: 10 个距离里" in text
    assert any(
        "image/png" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
