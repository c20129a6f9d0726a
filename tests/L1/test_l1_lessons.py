"""L1 的课文：贴出来的账本输出必须和 `python -m common.vram` 现在打印的一字不差（改了账本就要重贴）。
课文结尾的三节由 tests/test_lessons.py 对所有课统一检查。"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from common import vram
from common.fit import fit_table

ROOT = Path(__file__).resolve().parents[2]
L1 = ROOT / "L1_concepts"
BASE_0P6 = [
    "--model",
    "Qwen3-0.6B",
    "--layout",
    "policy",
    "--precision",
    "fp32",
    "--rollout-backend",
    "fast",
]

PASTED = [
    ("01_what_you_need", []),
    ("04_vram_ledger", BASE_0P6),
    ("04_vram_ledger", ["--model", "Qwen3-4B", "--method", "lora"]),
]


def _vram_output(argv) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert vram.main(argv) == 0
    return buf.getvalue()


@pytest.mark.parametrize(
    "lesson,argv", PASTED, ids=lambda x: x if isinstance(x, str) else " ".join(x) or "table"
)
def test_pasted_ledger_output_is_current(lesson, argv):
    readme = (L1 / lesson / "README.md").read_text(encoding="utf-8")
    out = _vram_output(argv)
    assert out in readme, (
        f"L1_concepts/{lesson}/README.md 里贴的 `python -m common.vram {' '.join(argv)}` 输出已经过时："
        "重新运行这条命令，把输出原样贴回去，并检查正文里引用的数字"
    )


def test_knob_table_in_the_ledger_lesson_is_current():
    readme = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    for extra in (["--logprobs", "naive"], ["--no-checkpointing"], ["--micro-batch", "16"]):
        total = re.search(r"合计 ([\d.]+) GiB / 32 GiB = (\d+)%", _vram_output(BASE_0P6 + extra))
        assert f"{total.group(1)} GiB（{total.group(2)}%" in readme, extra


def test_numbers_quoted_in_the_first_lesson_are_current():
    from common import env_check

    readme = (L1 / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    row = next(r for r in fit_table(24) if (r["model"], r["method"]) == ("Qwen3-0.6B", "full"))
    assert f"占 {row['usage']:.0%}，回答上限 {row['max_new_tokens_fit']} token" in readme
    for r in env_check.preset_report(None):  # 贴出来的 env_check 输出里，预设那几行来自账本
        assert r["why"] in readme, r["preset"]


def test_the_three_vram_figures_in_the_first_lesson_are_current():
    """L1.01 第 2.1 节那张小表：两个账本数字等于账本现在算出的，实测数字和首页 README、L2.07 一致。"""
    from common import env_check

    readme = (L1 / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- vram-story:begin -->", 1)[1].split("<!-- vram-story:end -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| **")]
    assert len(rows) == 3, "第 2.1 节的小表应该正好三行数字"
    measured, ledger_policy, ledger_colocate = rows

    why = next(r["why"] for r in env_check.preset_report(None) if r["preset"] == "qwen3-0.6b")
    gib, pct = re.search(r"账本算出 ([\d.]+) GiB / 32 GiB = (\d+%)", why).groups()
    assert f"**{gib} GiB（{pct}）**" in ledger_policy, (
        "第二行要等于 env_check 里 qwen3-0.6b 的账本数字"
    )

    fit = next(r for r in fit_table(32) if (r["model"], r["method"]) == ("Qwen3-0.6B", "full"))
    assert f"**{fit['total_gb']:.1f} GiB（{fit['usage']:.0%}）**" in ledger_colocate, (
        "第三行要等于装箱表里 Qwen3-0.6B full 的合计和占比"
    )

    value = re.search(r"\*\*([\d.]+ GiB)\*\*", measured).group(1)
    for other in (ROOT / "README.md", ROOT / "L2_algorithm" / "07_grpo_train" / "README.md"):
        assert value in other.read_text(encoding="utf-8"), (
            f"第一行的实测峰值 {value} 应该和 {other.relative_to(ROOT)} 里的实测数字一致"
        )
