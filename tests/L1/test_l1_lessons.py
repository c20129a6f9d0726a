"""L1 的课文：贴出来的账本输出必须和 `python -m common.vram` 现在打印的一字不差（改了账本就要重贴）。
课文结尾的三节由 tests/test_lessons.py 对所有课统一检查。"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import pytest

from common.vram import report as vram
from common.vram.fit import fit_table

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

# grpo_train.py 在 GPU 上的设定（common.models.ledger_settings）写成命令行；L1.04 第 7 节贴了这条命令
PRESET_0P6 = BASE_0P6 + [
    "--micro-batch",
    "8",
    "--logprobs",
    "hidden",
    "--optimizer",
    "fused",
    "--host-grads",
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


# L1.04 正文里引用的账本合计（第 2.6、2.8、6 节）：「X GiB（Y%」必须等于这条命令现在算出的
QUOTED_TOTALS = [
    BASE_0P6,
    BASE_0P6 + ["--logprobs", "naive"],
    BASE_0P6 + ["--no-checkpointing"],
    BASE_0P6 + ["--micro-batch", "16"],
    BASE_0P6 + ["--rollout-backend", "eager"],
    BASE_0P6 + ["--prompt-len", "129"],
    BASE_0P6 + ["--prompt-len", "256"],
    PRESET_0P6,
    PRESET_0P6 + ["--prompt-len", "129"],
]


def _extra(argv) -> str:
    return " ".join(argv[len(BASE_0P6) :]) or "base"


@pytest.mark.parametrize("argv", QUOTED_TOTALS, ids=_extra)
def test_totals_quoted_in_the_ledger_lesson_are_current(argv):
    readme = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    total = re.search(r"合计 ([\d.]+) GiB / 32 GiB = (\d+)%", _vram_output(argv))
    assert f"{total.group(1)} GiB（{total.group(2)}%" in readme, (
        f"L1.04 引用的 `python -m common.vram {' '.join(argv)}` 合计已经过时："
        f"现在是 {total.group(1)} GiB（{total.group(2)}%），改正文里的数字"
    )


def test_backward_peaks_quoted_in_the_answer_to_q4_are_current():
    """L1 答案页 L1.04 Q4 的 D：题数翻倍时反向峰值怎么变（快速 rollout 升高，eager 不变）。"""
    answers = (L1 / "ANSWERS.md").read_text(encoding="utf-8")

    def backward_peak(argv) -> str:
        return re.search(r"反向峰值\s+([\d.]+) GiB", _vram_output(argv)).group(1)

    fast = [backward_peak(BASE_0P6 + ["--prompts", p]) for p in ("8", "16")]
    eager = BASE_0P6[:-1] + ["eager"]
    slow = [backward_peak(eager + ["--prompts", p]) for p in ("8", "16")]
    assert slow[0] == slow[1], f"eager 时题数翻倍，反向峰值不该变：{slow}"
    for quoted in (f"反向峰值 {fast[0]} → {fast[1]} GiB", f"反向峰值才不变（{slow[0]} GiB）"):
        assert quoted in answers, f"L1 答案页 L1.04 Q4 的数字要按账本改成：{quoted}"


def test_the_preset_command_in_the_ledger_lesson_is_what_env_check_computes():
    """L1.04 第 7 节给的等价命令 = common.models.ledger_settings（env_check 用的设定）；
    那一段把账本和实测的差拆成几块，每块都由账本算出。"""
    from common.decode_shape import static_shape
    from common.vram.ledger import GiB, ledger
    from common.vram.plan import preset_settings as ledger_settings
    from common.vram.report import explain

    readme = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    assert "python -m common.vram " + " ".join(PRESET_0P6) in readme
    shape, settings = ledger_settings("qwen3-0.6b")
    # 带 --model 时输出末尾另有 grpo_train.py --model 的决定（report.training_choice），这里只比账本那一段
    assert _vram_output(PRESET_0P6).startswith(explain(ledger(shape, settings)) + "\n\n"), (
        "L1.04 第 7 节的等价命令和 common.models.ledger_settings 对不上了：改命令（和这里的 PRESET_0P6）"
    )
    measured_prompt = 53  # 第 7 节贴的实测输出里的 prompt 长度
    assert f"账本设定：P8×G8，prompt {measured_prompt} + 回答 512" in readme
    short = ledger(shape, dataclasses.replace(settings, prompt_len=measured_prompt))
    full = ledger(shape, settings)
    for quoted in (
        f"账本的 allocated 峰值是 {short.peak_allocated / GiB:.2f} GiB",
        f"峰值变成 {full.peak_allocated / GiB:.2f} GiB",
        f"{full.peak_allocated / GiB:.2f} + {full.slack / GiB:.2f} + {full.context / GiB:.2f}"
        f" = {full.total / GiB:.2f}",
        f"静态 KV 从 {static_shape(64, measured_prompt, 512)[1]} 个槽变成"
        f" {static_shape(64, settings.prompt_len, 512)[1]} 个",
    ):
        assert quoted in readme, f"L1.04 第 7 节要按账本改成：{quoted}"


def test_numbers_quoted_in_the_first_lesson_are_current():
    from common import env_check

    readme = (L1 / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    row = next(r for r in fit_table(24) if (r["model"], r["method"]) == ("Qwen3-0.6B", "full"))
    assert f"占 {row['usage']:.0%}，回答上限 {row['max_new_tokens_fit']} token" in readme
    for r in env_check.preset_report(None):  # 贴出来的 env_check 输出里，预设那几行来自账本
        assert r["why"] in readme, r["preset"]
    # 第 5 节：同一个预设改用普通的 HF 生成
    from common.vram.ledger import ledger
    from common.vram.plan import preset_settings as ledger_settings

    shape, settings = ledger_settings("qwen3-0.6b")
    eager = ledger(shape, dataclasses.replace(settings, rollout_backend="eager"))
    assert f"改用普通的 HF 生成，同一个预设只要 {eager.usage:.0%}" in readme


def test_the_three_vram_figures_in_the_first_lesson_are_current():
    """L1.01 第 2.1 节那张小表：两个账本数字等于账本现在算出的；实测数字就是 L1.04 第 7 节贴的
    measure_vram.py 输出里的整步峰值，首页 README、L2.07 引用的也是它。"""
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
    ledger_lesson = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    assert f"整步峰值（allocated）：实测 {value}" in ledger_lesson, (
        f"第一行的实测峰值 {value} 应该是 L1.04 第 7 节贴的 measure_vram.py 输出里的整步峰值"
    )
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{gib} GiB" in front, f"首页 README 引用的账本数字应该是 {gib} GiB（env_check）"
    for other in (ROOT / "README.md", ROOT / "L2_algorithm" / "07_grpo_train" / "README.md"):
        assert value in other.read_text(encoding="utf-8"), (
            f"第一行的实测峰值 {value} 应该和 {other.relative_to(ROOT)} 里的实测数字一致"
        )


def test_gpu_figures_on_the_front_page_come_from_the_lessons():
    """首页 README「在 5090 上能跑到哪一步」里的每个数字，都要在它引用的课文里出现（数字只在课文里测、在这里转述）。"""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    block = front.split("在 5090 上能跑到哪一步", 1)[1].split("每次运行都会在输出目录里留下", 1)[0]
    lessons = "\n".join(
        (ROOT / path / "README.md").read_text(encoding="utf-8")
        for path in (
            "L1_concepts/01_what_you_need",
            "L1_concepts/04_vram_ledger",
            "L2_algorithm/06_sampling",
        )
    )
    figures = re.findall(r"(\d+(?:\.\d+)?) ?(GiB|ms|倍)", block)
    assert len(figures) >= 8, figures
    for number, unit in figures:
        quoted = f"{number}×" if unit == "倍" else f"{number} {unit}"
        assert quoted in lessons, (
            f"首页 README 的 {number} {unit} 在 L1.01、L1.04、L2.06 里都找不到"
        )
