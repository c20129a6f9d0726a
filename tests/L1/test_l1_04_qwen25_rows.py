"""L1.04 第 4.1 节：装箱表里 Qwen2.5 三个模型的那几格，必须等于 `python -m common.vram` 现在算出的。"""

from __future__ import annotations

import re
from pathlib import Path

from common.vram.fit import fit_table
from common.vram.report import MARK

README = Path(__file__).resolve().parents[2] / "L1_concepts" / "04_vram_ledger" / "README.md"
METHODS = ("full", "lora", "qlora")


def test_the_qwen25_rows_are_the_fit_table():
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- qwen25-rows:begin -->", 1)[1].split("<!-- qwen25-rows:end -->", 1)[0]
    shown = {
        row[0]: row[1:]
        for row in (
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in block.splitlines()
            if line.startswith("| Qwen2.5")
        )
    }
    rows = [r for r in fit_table(32) if r["model"].startswith("Qwen2.5")]
    assert set(shown) == {r["model"] for r in rows}, (
        f"L1.04 第 4.1 节的表应当正好列出装箱表里的 Qwen2.5 模型：{sorted({r['model'] for r in rows})}"
    )
    for r in rows:
        mark = MARK[r["verdict"]].split()[0]
        want = f"{mark} {r['total_gb']:.1f} GiB（{r['usage']:.0%}）"
        got = shown[r["model"]][METHODS.index(r["method"])]
        assert got == want, (
            f"L1.04 第 4.1 节 {r['model']} {r['method']} 那一格过时了：现在是 {want}（python -m common.vram）"
        )
    assert re.search(r"「P 上限」.*?是 (\d+)", text).group(1) == str(
        next(r for r in rows if (r["model"], r["method"]) == ("Qwen2.5-0.5B-Instruct", "full"))[
            "max_prompts_fit"
        ]
    ), "L1.04 第 4.1 节引用的 0.5B 全参数「P 上限」过时了"
