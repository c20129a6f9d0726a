"""L1 的课文：贴出来的账本输出必须和 `python -m common.vram` 现在打印的一字不差（改了账本就要重贴）。
课文结尾的三节由 tests/test_lessons.py 对所有课统一检查。"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from ledger_cli import ledger_output

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

# grpo_train.py 在 GPU 上的设定（common.vram.plan.training_settings）写成命令行；L1.04 第 7 节贴了这条命令
PRESET_0P6 = BASE_0P6 + [
    "--micro-batch",
    "8",
    "--logprobs",
    "hidden",
    "--optimizer",
    "fused",
    "--host-grads",
    "--prompts",
    "16",
    "--beta",
    "0",
]
# 第 7 节的实测（measure_vram.py）用的是当时的配方 P8×G8、β=0.04：账本要和实测比，就得用同样的设定算
MEASURED_0P6 = PRESET_0P6[:-4] + ["--prompts", "8", "--beta", "0.04"]
MEASURED_SETTINGS = {"prompts": 8, "group": 8, "beta": 0.04, "prompt_len": 53}

PASTED = [
    ("01_what_you_need", []),
    ("04_vram_ledger", BASE_0P6),
    ("04_vram_ledger", ["--model", "Qwen3-4B", "--method", "lora"]),
]


@pytest.mark.parametrize(
    "lesson,argv", PASTED, ids=lambda x: x if isinstance(x, str) else " ".join(x) or "table"
)
def test_pasted_ledger_output_is_current(lesson, argv):
    readme = (L1 / lesson / "README.md").read_text(encoding="utf-8")
    out = ledger_output(argv)
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
    total = re.search(r"合计 ([\d.]+) GiB / 32 GiB = (\d+)%", ledger_output(argv))
    assert f"{total.group(1)} GiB（{total.group(2)}%" in readme, (
        f"L1.04 引用的 `python -m common.vram {' '.join(argv)}` 合计已经过时："
        f"现在是 {total.group(1)} GiB（{total.group(2)}%），改正文里的数字"
    )


def test_backward_peaks_quoted_in_the_answer_to_q4_are_current():
    """L1 答案页 L1.04 Q4 的 D：题数翻倍时反向峰值怎么变（快速 rollout 升高，eager 不变）。"""
    answers = (L1 / "ANSWERS.md").read_text(encoding="utf-8")

    def backward_peak(argv) -> str:
        return re.search(r"反向峰值\s+([\d.]+) GiB", ledger_output(argv)).group(1)

    fast = [backward_peak(BASE_0P6 + ["--prompts", p]) for p in ("8", "16")]
    eager = BASE_0P6[:-1] + ["eager"]
    slow = [backward_peak(eager + ["--prompts", p]) for p in ("8", "16")]
    assert slow[0] == slow[1], f"eager 时题数翻倍，反向峰值不该变：{slow}"
    for quoted in (f"反向峰值 {fast[0]} → {fast[1]} GiB", f"反向峰值才不变（{slow[0]} GiB）"):
        assert quoted in answers, f"L1 答案页 L1.04 Q4 的数字要按账本改成：{quoted}"


def test_the_preset_command_in_the_ledger_lesson_is_what_env_check_computes():
    """L1.04 第 7 节给的等价命令 = common.vram.plan.training_settings（env_check 用的设定）；
    那一段把账本和实测的差拆成几块，每块都由账本算出。实测（measure_vram.py）是在当时的配方
    P8×G8、β=0.04 下量的；配方改了，实测不变，所以这几块按实测时的设定算（MEASURED_0P6），
    配方自己的账本合计另外核对——拿新配方的账本去和旧设定的实测比，就不诚实了。"""
    from common.config.config_cli import preset_config
    from common.vram.decode_shape import static_shape
    from common.vram.ledger import GiB, ledger
    from common.vram.plan import training_settings
    from common.vram.report import explain

    readme = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    assert "python -m common.vram " + " ".join(PRESET_0P6) in readme
    shape, settings = training_settings(preset_config("qwen3-0.6b"))
    # 带 --model 时输出末尾另有 grpo_train.py --model 的决定（report.training_choice），这里只比账本那一段
    assert ledger_output(PRESET_0P6).startswith(explain(ledger(shape, settings)) + "\n\n"), (
        "L1.04 第 7 节的等价命令和 common.vram.plan.training_settings 对不上了：改命令（和这里的 PRESET_0P6）"
    )
    recipe = ledger(shape, settings)
    assert f"它的合计是 {recipe.total / GiB:.2f} GiB（{recipe.usage:.0%}）" in readme, (
        "L1.04 第 7 节引用的配方账本合计过时了"
    )
    # 实测是在另一套设定下量的（当时的配方 P8×G8、β=0.04，prompt 53）：实测不随配方改，
    # 所以「账本 vs 实测」用实测时的设定算，不用现在的配方，课文里也给出这条命令
    m = MEASURED_SETTINGS
    assert "python -m common.vram " + " ".join(MEASURED_0P6) in readme
    assert f"账本设定：P{m['prompts']}×G{m['group']}，prompt {m['prompt_len']} + 回答 512" in readme
    assert f"β={m['beta']}" in readme
    at_run = dataclasses.replace(settings, prompts=m["prompts"], beta=m["beta"])
    assert ledger_output(MEASURED_0P6).startswith(explain(ledger(shape, at_run)) + "\n\n")
    measured_prompt = m["prompt_len"]
    short = ledger(shape, dataclasses.replace(at_run, prompt_len=measured_prompt))
    full = ledger(shape, at_run)
    rows = m["prompts"] * m["group"]
    for quoted in (
        f"账本的 allocated 峰值是 {short.peak_allocated / GiB:.2f} GiB",
        f"峰值变成 {full.peak_allocated / GiB:.2f} GiB",
        f"{full.peak_allocated / GiB:.2f} + {full.slack / GiB:.2f} + {full.context / GiB:.2f}"
        f" = {full.total / GiB:.2f}",
        f"静态 KV 从 {static_shape(rows, measured_prompt, 512)[1]} 个槽变成"
        f" {static_shape(rows, settings.prompt_len, 512)[1]} 个",
        f"合计是 {full.total / GiB:.2f} GiB（{full.usage:.0%}），比实测的",
    ):
        assert quoted in readme, f"L1.04 第 7 节要按账本改成：{quoted}"


def test_numbers_quoted_in_the_first_lesson_are_current():
    from common.config import env_check

    readme = (L1 / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    row = next(r for r in fit_table(24) if (r["model"], r["method"]) == ("Qwen3-0.6B", "full"))
    assert f"占 {row['usage']:.0%}，回答上限 {row['max_new_tokens_fit']} token" in readme
    for r in env_check.preset_report(None):  # 贴出来的 env_check 输出里，预设那几行来自账本
        assert r["why"] in readme, r["preset"]
    for note in (env_check.FULL_1P7B_NOTE, env_check.VRAM_TABLE_NOTE):  # 装箱表下面的两行说明
        assert f"  {note}\n" in readme, f"第 5 节贴的 env_check 输出过时了：少了「{note}」"
    # 第 5 节：同一个预设改用普通的 HF 生成
    from common.config.config_cli import preset_config
    from common.vram.ledger import ledger
    from common.vram.plan import training_settings

    shape, settings = training_settings(preset_config("qwen3-0.6b"))
    eager = ledger(shape, dataclasses.replace(settings, rollout_backend="eager"))
    assert f"改用普通的 HF 生成，同一个预设只要 {eager.usage:.0%}" in readme


# L3.01 第 3 节的账本命令：TRL + vLLM colocate 的 32 GB 配置
TRL_COLOCATE = [
    "--model",
    "Qwen3-0.6B",
    "--precision",
    "fp32",
    "--layout",
    "colocate",
    "--engine-gb",
    "9.6",
    "--prompts",
    "16",
    "--micro-batch",
    "8",
    "--beta",
    "0",
    "--prompt-len",
    "256",
    "--max-new-tokens",
    "512",
    "--logprobs",
    "chunked_ckpt",
    "--ref-bytes",
    "4",
]


def _side_by_side():
    """L3.01 的 side_by_side.py（按路径 import：它不在包里）。"""
    from lesson_scripts import load_script

    return load_script(ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "side_by_side.py")


def _vram_table_rows() -> dict[str, str]:
    """L1.01 第 2.1 节那张表：{第一格的数字: 整行}。"""
    readme = (L1 / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- vram-story:begin -->", 1)[1].split("<!-- vram-story:end -->", 1)[0]
    rows = {}
    for line in block.splitlines():
        m = re.match(r"\| \*\*(?:约 )?([\d.]+ GiB)", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_the_vram_table_in_the_first_lesson_is_current():
    """L1.01 第 2.1 节：课程里 Qwen3-0.6B 的显存数字只在这张表里并排出现。账本的几行等于账本现在算出的，
    实测的几行等于它们出处的课文里贴的数字；首页 README 只引用实测那一个，并链到这张表。"""
    from common.config import env_check

    rows = _vram_table_rows()
    assert len(rows) == 8, f"第 2.1 节的表应该是 8 行数字，现在是：{list(rows)}"
    ledger_lesson = (L1 / "04_vram_ledger" / "README.md").read_text(encoding="utf-8")
    trl_lesson = (ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "README.md").read_text(
        encoding="utf-8"
    )

    # 实测：手写脚本的整步峰值，就是 L1.04 第 7 节贴的 measure_vram.py 输出
    measured = next(v for v in rows if f"整步峰值（allocated）：实测 {v}" in ledger_lesson)
    assert "**实测**" in rows[measured] and "L1.04 第 7 节" in rows[measured]

    # 实测：现在的配方，L1.04 第 7.2 节附带的 measure_vram.py 输出（h100_recipe/）
    recipe = json.loads(
        (L1 / "04_vram_ledger" / "h100_recipe" / "measure_vram_8steps.json").read_text("utf-8")
    )
    now = f"{recipe['peak_gib']:.2f} GiB"
    assert "**实测**" in rows.get(now, "") and "L1.04 第 7.2 节" in rows[now], (
        f"表里要有 L1.04 第 7.2 节实测的现在配方的峰值 {now}"
    )
    assert f"算出 {recipe['predicted_peak_gib']:.2f} GiB" in rows[now]

    # 账本：env_check 的 qwen3-0.6b 那一行
    why = next(r["why"] for r in env_check.preset_report(None) if r["preset"] == "qwen3-0.6b")
    gib, pct = re.search(r"账本算出 ([\d.]+) GiB / 32 GiB = (\d+%)", why).groups()
    assert f"| **{gib} GiB（{pct}）**" in rows.get(f"{gib} GiB", ""), (
        f"表里要有 env_check 的 qwen3-0.6b 账本数字 {gib} GiB（{pct}）"
    )

    # 账本：装箱表的 Qwen3-0.6B full
    fit = next(r for r in fit_table(32) if (r["model"], r["method"]) == ("Qwen3-0.6B", "full"))
    colocate = f"{fit['total_gb']:.1f} GiB"
    assert f"| **{colocate}（{fit['usage']:.0%}）**" in rows.get(colocate, ""), (
        f"表里要有装箱表 Qwen3-0.6B full 的合计 {colocate}（{fit['usage']:.0%}）"
    )

    # 账本：L3.01 第 3 节的 TRL colocate 命令（现在的 GPU 配方），原样的合计
    assert "python -m common.vram " + " ".join(TRL_COLOCATE[:2]) in trl_lesson
    assert " ".join(TRL_COLOCATE[6:12]) in trl_lesson.replace("\\\n    ", ""), (
        "第 3 节的账本命令变了"
    )
    total, usage = re.search(
        r"合计 ([\d.]+) GiB / 32 GiB = (\d+)%", ledger_output(TRL_COLOCATE)
    ).groups()
    assert f"{total} GiB，占 32 GiB 的 {usage}%" in trl_lesson, "L3.01 第 3 节的账本合计过时了"
    assert f"| **{total} GiB（{usage}%）**" in rows.get(f"{total} GiB", ""), (
        f"表里要有 L3.01 第 3 节的账本合计 {total} GiB（{usage}%）"
    )
    # 实测：TRL + vLLM colocate 在 H100 上（L3.01 第 1.1 节，side_by_side.py 从附带的运行目录算）
    side = _side_by_side()
    peak = f"{side.trl_timing()['peak_alloc_gb']:.1f} GiB"
    assert "**实测**" in rows.get(peak, ""), (
        f"表里要有 L3.01 第 1.1 节实测的 TRL + vLLM 峰值 {peak}"
    )

    # 实测：TRL 不用 vLLM（L3.01「在 H200 上实测」的「峰值 TRL」）
    trl_peaks = set(re.findall(r"\| ([\d.]+ GiB) \| [\d.]+ GiB \|$", trl_lesson, re.M))
    assert len(trl_peaks) == 1 and trl_peaks <= set(rows), (
        f"表里要有 L3.01 实测的 TRL 峰值 {trl_peaks}"
    )

    # 首页 README：实测那一个数 + 链到这张表，不再并排列账本的数字
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    assert measured in front, f"首页 README 引用的实测峰值应该是 {measured}"
    assert "L1_concepts/01_what_you_need/README.md" in front and "第 2.1 节" in front
    others = [v for v in rows if v != measured and re.search(rf"(?<![\d.]){re.escape(v)}", front)]
    assert not others, f"首页 README 不要并排列这些数字，链到 L1.01 第 2.1 节：{others}"
    lesson = (ROOT / "L2_algorithm" / "07_grpo_train" / "README.md").read_text(encoding="utf-8")
    assert measured in lesson, f"L2.07 引用的实测峰值应该是 {measured}"


def test_gpu_figures_on_the_front_page_come_from_the_lessons():
    """首页 README「在 5090 上能跑到哪一步」里的每个数字，都要在它引用的课文里出现（数字只在课文里测、在这里转述）：
    显存（GiB）、时间（ms）、倍数（倍或 ×），以及三位小数的正确率（真实模型那次运行，L2.08 第 6 节）。"""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    block = front.split("在 5090 上能跑到哪一步", 1)[1].split("每次运行都会在输出目录里留下", 1)[0]
    lessons = "\n".join(
        (ROOT / path / "README.md").read_text(encoding="utf-8")
        for path in (
            "L1_concepts/01_what_you_need",
            "L1_concepts/04_vram_ledger",
            "L2_algorithm/06_sampling",
            "L2_algorithm/07_grpo_train",
            "L2_algorithm/08_reading_the_curves",
            "L2_algorithm/10_dynamic_sampling",
            "L3_frameworks/01_trl_vllm_colocate",
        )
    )
    figures = re.findall(r"(?<![\d.])(\d+(?:\.\d+)?) ?(GiB|ms|倍|×)", block)
    accuracies = re.findall(r"(?<![\d.])(0\.\d{3})(?![\d])", block)
    assert len(figures) >= 8 and len(accuracies) >= 3, (figures, accuracies)
    missing = [
        f"{number} {unit}"
        for number, unit in figures
        if not any(
            form in lessons
            for form in (
                (f"{number}×", f"{number} 倍") if unit in ("倍", "×") else (f"{number} {unit}",)
            )
        )
    ]
    missing += [a for a in accuracies if a not in lessons]
    assert not missing, (
        f"首页 README 的这些数字在 L1.01、L1.04、L2.06、L2.07、L2.08、L2.10、L3.01 里都找不到：{missing}"
    )
