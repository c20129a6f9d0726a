"""L3.01 第 1.1、1.2 节和第 3 节的选读：TRL + vLLM colocate 在 H100 上的那次运行。课文里的每个数都由
side_by_side.py 或这里从附带的文件（gpu_record/、L2.08 的 real_recipe/）算出来，课文改了或文件改了都会红。"""

from __future__ import annotations

import json
import re
import statistics
import tomllib
from pathlib import Path

import pytest
from ledger_cli import ledger_output
from lesson_scripts import load_script

from common.vram.shapes import shape_for_hub_id

ROOT = Path(__file__).resolve().parents[2]
LESSON_DIR = ROOT / "L3_frameworks" / "01_trl_vllm_colocate"
README = (LESSON_DIR / "README.md").read_text(encoding="utf-8")
GiB = 2**30


@pytest.fixture(scope="module")
def S():
    """side_by_side.py 作为模块（课的文件夹名以数字开头，不能直接 import）。"""
    return load_script(LESSON_DIR / "side_by_side.py")


def _lesson() -> str:
    """课文，去掉 Markdown 的折行（数和它的单位可能被折到两行）。"""
    return re.sub(r"\n(?!\n)\s*", "", README)


def test_the_side_by_side_table_is_built_from_the_shipped_files(S):
    block = README.split("<!-- side-by-side:begin -->\n", 1)[1].split(
        "\n<!-- side-by-side:end -->"
    )[0]
    assert block == S.table(), (
        "L3.01 第 1.1 节的表和 side_by_side.py 从文件算出的不一样：运行 "
        "`python L3_frameworks/01_trl_vllm_colocate/side_by_side.py`，把输出贴回两个标记之间"
    )


def test_the_record_is_a_trl_vllm_run_on_a_gpu_with_enough_steps(S):
    config = json.loads((S.TRL_RUN / "config.json").read_text(encoding="utf-8"))
    prov = config["provenance"]
    libs = prov["libraries"]
    assert (libs["vllm"], libs["trl"], libs["torch"]) == ("0.26.0", "1.16.0", "2.11.0")
    assert "H100" in prov["device"] and config["cap_gb"] == 32.0
    assert config["options"]["vllm"] is True and config["options"]["mask_truncated"] is False
    steps = [r["step"] for r in S.rows(S.TRL_RUN / "metrics.jsonl")]
    assert steps == list(range(1, 101)), "metrics.jsonl 应该是第 1 到 100 步各一行"
    assert [r["step"] for r in S.rows(S.TRL_RUN / "steps.jsonl")] == steps
    assert sorted(S.greedy_by_step(S.TRL_RUN)) == [0, 50, 100]
    # 课文里贴的命令就是这次运行记下的命令
    command = " ".join(prov["command"][1:])
    pasted = re.search(r"```bash\n(python3 L3_frameworks/01_trl_vllm_colocate/train_trl\.py.*?)\n```",
                       README, re.S).group(1)  # fmt: skip
    assert re.sub(r"\s*\\\n\s*", " ", pasted).split(" ", 1)[1] == command
    assert "vLLM 0.26.0" in README and "torch 2.11.0" in README


def test_same_recipe_on_both_sides(S):
    """两边比的是同一个配方：除了 micro-batch（只改显存和速度）、评估的频率和输出目录，数学上的设置都一样。"""
    trl = json.loads((S.TRL_RUN / "config.json").read_text(encoding="utf-8"))
    hw = json.loads((S.HW_RUN / "config.json").read_text(encoding="utf-8"))
    timing = json.loads((S.HW_TIMING / "config.json").read_text(encoding="utf-8"))
    same = ("prompts_per_step", "group_size", "max_new_tokens", "temperature", "top_p", "beta",
            "eps_low", "eps_high", "lr", "warmup_steps", "seed", "n_heldout", "eval_batch", "data",
            "cap_gb", "aggregation", "num_iterations")  # fmt: skip
    for key in same:
        assert trl[key] == hw[key], key
        assert key in ("n_heldout",) or timing[key] == trl[key], key
    assert trl["micro_batch"] == timing["micro_batch"] == 8 and hw["micro_batch"] == 32


def test_the_prose_numbers_come_from_the_files(S):
    lesson = _lesson()
    hw, trl = S.hw_timing(), S.trl_timing()
    acc = S.heldout()
    gains = S.gains()
    metrics = S.rows(S.TRL_RUN / "metrics.jsonl")
    masked = sum(r["is_ratio_min"] == 0 for r in metrics)
    length = statistics.median(r["completion_len_mean"] for r in metrics)
    expected = [
        f"用 {hw['rollout_s']:.2f} s，vLLM 0.26 用 {trl['rollout_s']:.2f} s",
        f"多出来的一次前向（{trl['score_s']:.2f} s）",
        f"（TRL {trl['score_s']:.2f} + {trl['train_s']:.2f} s，手写 {hw['train_s']:.2f} s）",
        f"权重同步只要 {trl['sync_s']:.2f} s",
        f"100 步里有 {masked} 步至少丢了一条",
        f"PyTorch 分配的峰值 {trl['peak_alloc_gb']:.1f} GiB，比手写的 {hw['peak_alloc_gb']:.1f} GiB",
        f"整张卡已用 {trl['device_used_gb']:.1f} GiB，已经贴着 32 GiB",
        f"PyTorch 分配的峰值 {trl['peak_alloc_gb']:.1f} GiB，占着的（reserved）"
        f"{trl['peak_reserved_gb']:.1f} GiB，整张卡已用 {trl['device_used_gb']:.1f} GiB",
        f"多出的 {trl['peak_reserved_gb'] - trl['peak_alloc_gb']:.1f} GiB 是分配器的碎片",
        f"两边的起点都是 {acc['trl'][0]:.3f}",
        f"到第 100 步 TRL 是{acc['trl'][100]:.3f}，手写是 {acc['hw'][100]:.3f}，"
        f"差 {acc['hw'][100] - acc['trl'][100]:.3f}",
        f"TRL 这一次单看也只有 +{gains['trl']['diff']:.3f}（p = {gains['trl']['p']:.2f}）",
        f"平均差 {trl['mismatch_mean']:.3f}，个别 token 差到 {trl['mismatch_max']:.1f} nats",
        f"每步平均回答长度的中位数是 {length:.0f} token",
        f"（让出 {0.05 * 32:.1f} GiB）",
    ]
    missing = [e for e in expected if e not in lesson]
    assert not missing, f"L3.01 第 1.1/1.2 节里这些数和文件算出的不一样（或句子改了）：{missing}"
    assert acc["trl"][0] == acc["hw"][0], "两边的起点是同一个权重、同样的题和 eval batch"


def test_the_ledger_check_against_the_measured_peak(S):
    """第 3 节的选读：同一条账本命令换成代理模型的形状，加上它不共享的 lm_head，和实测的峰值比。"""
    argv = ["--model", "Qwen2.5-0.5B-Instruct", "--precision", "fp32", "--layout", "colocate",
            "--engine-gb", "9.6", "--prompts", "16", "--micro-batch", "8", "--beta", "0",
            "--prompt-len", "256", "--max-new-tokens", "512", "--logprobs", "chunked_ckpt",
            "--ref-bytes", "4"]  # fmt: skip
    backward = float(re.search(r"反向峰值\s+([\d.]+) GiB", ledger_output(argv)).group(1))
    shape = shape_for_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    extra = shape.vocab * shape.hidden  # 代理模型的 lm_head 单独一份
    extra_gib = extra * 16 / GiB  # fp32 权重 4 B + 梯度 4 B + AdamW m、v 8 B
    ledger = backward + extra_gib
    measured = S.trl_timing()["peak_alloc_gb"]
    lesson = _lesson()
    for text in (
        f"给出反向峰值 {backward:.2f} GiB",
        f"151,936 × 896 = {extra / 1e8:.2f} 亿个参数",
        f"再多约 {extra_gib:.1f} GiB：约 {ledger:.1f} GiB",
        f"实测 PyTorch 分配的峰值是 {measured:.1f} GiB，差 {abs(measured - ledger) / measured:.0%}",
    ):
        assert text in lesson, f"L3.01 第 3 节选读里这一句和算出的不一样：{text}"
    assert (shape.vocab, shape.hidden) == (151936, 896)


def test_the_vllm_extra_resolves_to_the_pinned_versions():
    """第 1.2 节：`[vllm]` extra 在 CPU 上做过一次依赖解析，解析出的版本就是 pyproject.toml 钉的那些。"""
    record = json.loads(
        (LESSON_DIR / "gpu_record" / "vllm_extra_resolution.json").read_text("utf-8")
    )
    resolved = record["resolved"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [*project["dependencies"], *project["optional-dependencies"]["vllm"]]

    def pinned(name):
        spec = next(p for p in pins if re.match(rf"{name}\b", p))
        return re.search(r"==([\d.]+)", spec).group(1)

    assert resolved["vllm"] == pinned("vllm") == "0.31.0"
    assert resolved["torch"].split("+")[0] == pinned("torch") == "2.13.0"
    assert resolved["trl"] == pinned("trl") == "1.16.0"
    assert resolved["transformers"].startswith("5.17.")
    assert "vLLM 0.31.0 + torch 2.13.0 + transformers 5.17 + trl 1.16.0" in README


def test_the_front_page_quotes_the_record(S):
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    acc = S.heldout()
    hw, trl = S.hw_timing(), S.trl_timing()
    line = (f"500 题贪心 {acc['trl'][0]:.3f} → {acc['trl'][50]:.3f}（第 50 步）→ {acc['trl'][100]:.3f}"
            f"（第 100 步），同一个 seed 的手写脚本是")  # fmt: skip
    assert line in front.replace("\n  ", "")
    hand = (
        f"{acc['hw'][0]:.3f} → {acc['hw'][50]:.3f}（第 50 步）→ {acc['hw'][100]:.3f}（第 100 步）"
    )
    assert hand in front.replace("\n  ", ""), f"首页 README 引用手写脚本的那一行应该是：{hand}"
    assert f"每步 {trl['step_s']:.1f} s 对手写的 {hw['step_s']:.1f} s" in front


def test_the_qwen3_figure_with_the_engine_it_really_gets():
    """第 1.2 节：第 3 节的账本按 128 条写满所需计 vLLM；按它实际拿到的 0.3 × 32 GiB 算，反向峰值少这个差。"""
    argv = ["--model", "Qwen3-0.6B", "--precision", "fp32", "--layout", "colocate", "--engine-gb",
            "9.6", "--prompts", "16", "--micro-batch", "8", "--beta", "0", "--prompt-len", "256",
            "--max-new-tokens", "512", "--logprobs", "chunked_ckpt", "--ref-bytes", "4"]  # fmt: skip
    out = ledger_output(argv)
    backward = float(re.search(r"反向峰值\s+([\d.]+) GiB", out).group(1))
    engine = float(re.search(r"同卡推理引擎（vLLM colocate）\s+([\d.]+) GiB", out).group(1))
    real = backward - (engine - 0.3 * 32)
    assert (
        f"约 {real:.1f} GiB（PyTorch allocated，按 128 条写满所需算是 {backward:.2f} GiB）"
        in _lesson()
    )
