"""L1.04 第 7.2 节：现在的配方在 H100 上的实测（h100_recipe/）。课文里的每个数都从附带的文件算出来。"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest

from common.vram.decode_shape import static_shape
from common.vram.ledger import GiB
from common.vram.shapes import get_model

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "L1_concepts" / "04_vram_ledger"
RUNS = LESSON / "h100_recipe"
TEXT = (LESSON / "README.md").read_text(encoding="utf-8")
SECTION = TEXT.split("### 7.2 ", 1)[1].split("\n## ", 1)[0]


def _json(name: str) -> dict:
    return json.loads((RUNS / f"{name}.json").read_text(encoding="utf-8"))


def _rollout_s(name: str) -> list[float]:
    """measure_vram.py 每一步打印的 rollout 秒数（第 1 步起）。"""
    text = (RUNS / f"{name}.txt").read_text(encoding="utf-8")
    return [float(x) for x in re.findall(r"步：.*?用时 rollout ([\d.]+)s", text)]


def test_the_ledger_check_quotes_the_shipped_measurements():
    runs = [_json("measure_vram_3steps"), _json("measure_vram_8steps")]
    for r in runs:
        assert "H100" in r["device"] and r["cap_gb"] == 32.0 and r["init"] == "random"
        s = r["settings"]
        assert (s["prompts"], s["group"], s["micro_batch"], s["beta"]) == (16, 8, 8, 0.0)
    peak, ledger = runs[0]["peak_gib"], runs[0]["predicted_peak_gib"]
    assert f"{runs[1]['peak_gib']:.2f}" == f"{peak:.2f}", "课文说两次相同"
    change = f"{(ledger - peak) / peak:+.0%}".replace("-", "−")  # 课文用数学的减号
    quoted = f"整步峰值实测 **{peak:.2f} GiB**，账本 {ledger:.2f} GiB（{change}）"
    assert quoted in SECTION.replace("\n", "")
    assert f"reserved 最高 {runs[0]['max_reserved_gib']:.2f} GiB" in SECTION
    assert f"整张卡已用 {runs[0]['device_used_gib']:.2f} GiB" in SECTION
    assert f"prompt 只有 {runs[0]['settings']['prompt_len']} token" in SECTION


def test_fused_window_in_the_training_loop():
    base, fw = _rollout_s("measure_vram_8steps"), _rollout_s("measure_vram_8steps_fused_win128")
    assert len(base) == len(fw) == 8
    b, f = statistics.median(base[1:]), statistics.median(fw[1:])
    flat = SECTION.replace("\n", "")
    assert f"每步 rollout {f:.1f} s，默认写法 {b:.1f} s（{f / b:.2f} 倍）" in flat
    extra = _json("measure_vram_8steps_fused_win128")["peak_gib"]
    plain = _json("measure_vram_8steps")["peak_gib"]
    assert f"峰值 {extra:.2f} GiB，多 {extra - plain:.2f} GiB" in flat
    assert f"{fw[0]:.1f} s 对 {base[0]:.1f} s" in flat


def test_the_oom_and_its_three_caches():
    oom = RUNS / "grpo_train_oom"
    for name in ("steps2", "steps2_expandable_segments", "steps3", "steps3_pass_k0"):
        assert "Tried to allocate 10.50 GiB" in (oom / f"{name}.txt").read_text(encoding="utf-8")
    rows = [json.loads(x) for x in (oom / "steps3_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1], "第 1 步跑完、第 2 步没有"
    assert f"第 1 步的峰值却是 **{rows[0]['peak_vram_gb']:.2f} GiB**" in SECTION
    per_token = get_model("Qwen3-0.6B").kv_bytes_per_token()
    assert f"每个 token {per_token // 1024} KiB" in SECTION
    for rows_, longest, what in ((64, 156, "评估"), (128, 112, "第 1 步"), (128, 127, "第 2 步")):
        r, slots = static_shape(rows_, longest, 512)
        gib = r * slots * per_token / GiB
        assert f"{r} 行 × {slots} 槽（{gib:.2f} GiB）" in SECTION or (
            f"{r} 行 × {slots} 槽（{gib:.1f} GiB）" in SECTION
        ), f"{what}的解码器 {r} × {slots} = {gib:.2f} GiB 和课文不一致"
    assert static_shape(128, 126, 512)[1] == 640 and static_shape(128, 127, 512)[1] == 768


FIXED = RUNS / "grpo_train_fixed"
# 每步 16 道题里最长的 prompt（slow 测试重算）
LONGEST = [112, 180, 157, 158, 108, 101, 108, 157, 132, 137]
SAME_BUCKET = [3, 4, 7, 9, 10]  # 和上一步同一个桶、中间没有评估的步


def _metrics(name: str) -> list[dict]:
    text = (FIXED / name / "metrics.jsonl").read_text(encoding="utf-8")
    return [json.loads(x) for x in text.splitlines()]


def _row(values) -> str:
    return " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in values)


def _recipe_ledger(prompt_len: int):
    """env_check 给 qwen3-0.6b 算的账（= 第 7 节那条 common.vram 命令）加 --prompt-len。"""
    from common.config.config_cli import preset_config
    from common.vram.ledger import ledger
    from common.vram.plan import training_settings

    shape, settings = training_settings(preset_config("qwen3-0.6b"))
    return ledger(shape, dataclasses.replace(settings, prompt_len=prompt_len))


def test_the_fix_ran_ten_steps_on_the_gpu():
    rows = _metrics("default")
    cfg = json.loads((FIXED / "default" / "config.json").read_text(encoding="utf-8"))
    assert "H100" in cfg["provenance"]["device"] and cfg["cap_gb"] == 32.0
    assert cfg["provenance"]["git"] == {
        "commit": cfg["provenance"]["git"]["commit"],
        "dirty": False,
    }
    assert [r["step"] for r in rows] == list(range(1, 11)), "10 步都跑完"
    peaks = [r["peak_vram_gb"] for r in rows]
    assert len(set(peaks[1:])) == 1, "第 2 步起峰值不再变"
    flat = re.sub(r"\n\s*", "", SECTION)  # 换行和下一行的缩进
    assert (
        f"第 1 步 **{peaks[0]:.2f} GiB**" in flat and f"第 2 步起是 **{peaks[1]:.2f} GiB**" in flat
    )
    before = json.loads((RUNS / "grpo_train_oom" / "steps3_metrics.jsonl").read_text())[
        "peak_vram_gb"
    ]
    assert f"修之前同一步是 {before:.2f} GiB，少的 {before - peaks[0]:.2f} GiB" in flat
    kv = get_model("Qwen3-0.6B").kv_bytes_per_token()
    assert f"{before - peaks[0]:.2f}" == f"{64 * 768 * kv / GiB:.2f}", "少的正好是评估那个桶"
    assert f"（32 GiB 的 {peaks[1] / 32:.0%}；" in flat
    # 表：最长 prompt、槽数、rollout 秒数
    slots = [static_shape(128, n, 512)[1] for n in LONGEST]
    assert f"| 最长 prompt（token） | {_row(LONGEST)} |" in SECTION
    assert f"| 静态 KV 的槽数 | {_row(slots)} |" in SECTION
    assert f"| rollout 秒数（`rollout_s`） | {_row([r['rollout_s'] for r in rows])} |" in SECTION
    # 账本在那一步最长的 prompt 上
    one, two, worst = _recipe_ledger(112), _recipe_ledger(180), _recipe_ledger(240)
    p1, p2 = one.peak_allocated / GiB, two.peak_allocated / GiB
    assert (one.peak_phase, two.peak_phase) == ("backward", "rollout")
    assert (
        f"第 1 步账本的峰值是 {p1:.2f} GiB（在反向），比实测多记 {(p1 - peaks[0]) / peaks[0]:.0%}"
        in flat
    )
    gap = peaks[1] - p2
    assert (
        f"第 2 步账本 {p2:.2f} GiB（在 rollout），**实测多 {gap:.2f} GiB，账本少记了 {gap / peaks[1]:.0%}**"
        in flat
    )
    assert f"合计 {worst.total / GiB:.2f} GiB 还多" in flat and peaks[1] > worst.total / GiB
    # prefill 的动态 KV 按 fp32 记会多出的量（账本按 bf16 记，少一半）
    for n, quoted in ((52, "52 token 时账本少记"), (180, "180 token 时少记")):
        assert f"{quoted} {128 * n * kv / GiB:.2f} GiB" in flat
    rollout_gap = _json("measure_vram_8steps")["phases"][1]
    assert rollout_gap["phase"] == "rollout"
    assert (
        f"多的 {rollout_gap['measured_gib'] - rollout_gap['predicted_gib']:.2f} GiB 对得上" in flat
    )
    # 第 1 步：AdamW 的状态到第一次 step() 才建，最大值在优化器那一步
    opt_state = one.nbytes("optimizer") / GiB
    assert f"AdamW 的 m、v（{opt_state:.2f} GiB）" in flat and one.peak_phase == "backward"
    first = one.phases["optimizer"] / GiB
    assert max(v / GiB - opt_state for k, v in one.phases.items() if k != "optimizer") < first
    assert (
        f"账本在 112 token 时是 {first:.2f} GiB，实测 {peaks[0]:.2f} GiB，少记 {(peaks[0] - first) / peaks[0]:.0%}；多出的 {peaks[0] - first:.1f} GiB"
        in flat
    )
    # 第 2 步：prefill 按 fp32 记
    fixed = p2 + 128 * 180 * kv / GiB
    assert f"第 2 步的账本就是 {fixed:.2f} GiB，实测多 {(peaks[1] - fixed) / peaks[1]:.0%}" in flat
    total = (worst.peak_allocated + 128 * 240 * kv) * 1.05 / GiB + 0.5
    assert worst.peak_phase == "rollout" and f"合计是 {total:.2f} GiB（{total / 32:.0%}）" in flat
    longest = _recipe_ledger(240).phases["rollout"] - two.phases["rollout"]
    extra = (longest / GiB, longest / GiB + 128 * 60 * kv / GiB)
    assert f"还会多 {extra[0]:.1f}–{extra[1]:.1f} GiB" in flat
    low, high = (peaks[1] + e + 2.5 + 0.5 for e in extra)
    assert (
        f"粗估整张卡 {low:.1f}–{high:.1f} GiB（{peaks[1]:.2f} + {extra[0]:.1f}–{extra[1]:.1f} + 2.5 + 0.5）"
        in flat
    )
    assert "一步约 3.2%，1 − 0.968¹⁰⁰" in flat and f"{1 - 0.968**100:.0%}" in flat


def test_fused_window_end_to_end_in_grpo_train():
    base, fw = _metrics("default"), _metrics("fused_win128")
    command = (FIXED / "fused_win128" / "command.txt").read_text(encoding="utf-8")
    assert "f.FUSED = True" in command and "f.WINDOW = 128" in command
    assert [r["step"] for r in fw] == list(range(1, 11))
    evals = [
        json.loads(x)
        for x in (FIXED / "fused_win128" / "eval_questions.jsonl").read_text().splitlines()
    ]
    assert [(e["step"], e["k"], len(e["correct_of_k"])) for e in evals] == [
        (5, 8, 128),
        (10, 8, 128),
    ]
    lesson = (ROOT / "L2_algorithm" / "06_sampling" / "README.md").read_text(encoding="utf-8")
    part = lesson.split("### 第五次（2026-12-08）", 1)[1].split("\n### ", 1)[0]
    flat = part.replace("\n", "")
    b = [r["rollout_s"] for r in base]
    f = [r["rollout_s"] for r in fw]
    assert f"| 默认写法 | {_row(b)} |" in part and f"| `fused` + `window=128` | {_row(f)} |" in part
    slots = [static_shape(128, n, 512)[1] for n in LONGEST]
    assert f"| 静态 KV 的槽数 | {_row(slots)} |" in part
    mb = statistics.median(b[s - 1] for s in SAME_BUCKET)
    mf = statistics.median(f[s - 1] for s in SAME_BUCKET)
    assert f"中位数 {mf:.2f} s 对 {mb:.2f} s，{mf / mb:.2f} 倍" in flat
    assert "0.77 倍" in flat and f"rollout {mf / mb:.2f} 倍" in SECTION.replace("\n", "")
    assert f"合计（不含评估）：`fused` + `window=128` {sum(f):.1f} s，默认 {sum(b):.1f} s" in flat
    later = sum(b[2:]) - sum(f[2:])
    first = sum(f[:2]) - sum(b[:2])
    assert (
        f"第 3–10 步合计省 {later:.1f} s（每步 {later / 8:.2f} s），前两步多花 {first:.1f} s"
        in flat
    )
    assert 40 < first / (later / 8) < 55, "约第 50 步扯平"
    assert f"100 步一共省约 {round((98 * later / 8 - first) / 10) * 10} s" in flat
    pb, pf = base[1]["peak_vram_gb"], fw[1]["peak_vram_gb"]
    assert f"峰值多 {pf - pb:.2f} GiB（{pf:.2f} 对 {pb:.2f} GiB，第 2 步）" in flat


@pytest.mark.slow  # 要真实的 Qwen3 tokenizer
def test_the_longest_prompt_of_each_step(qwen3_tokenizer):
    """表里每步最长的 prompt：grpo_train.py 的选题（CPU 上的随机数流）加 Qwen3 的 tokenizer 重算。"""
    import torch

    from common.gsm8k import data as D
    from common.run.random_streams import random_streams

    cfg = json.loads((FIXED / "default" / "config.json").read_text(encoding="utf-8"))
    P = cfg["prompts_per_step"]
    train, _ = D.load_splits(
        cfg["data"],
        cfg["n_heldout"],
        n_train=cfg["n_train"],
        difficulty=cfg["difficulty"],
        per_step=P,
    )
    tok = qwen3_tokenizer
    count = lambda p: len(
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
    )
    rng = random_streams(cfg["seed"])
    got = []
    for _ in range(cfg["steps"]):
        pick = torch.randperm(len(train), generator=rng["prompts"])[:P]
        got.append(max(count(train[i]) for i in pick.tolist()))
    assert got == LONGEST
