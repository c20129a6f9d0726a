"""L2.06 bench_rollout.py：变体名字的解析、profile 的 kernel 分类（用假的 GPU 事件，torch 2.13 / 2.11 两种形状）、默认值的挑法；CPU 上 --dry-run 走通。

GPU 上的计时本身不在这里测（CPU 没有 CUDA graph）；这里测的是脚本在 GPU 上要走的那几段纯 Python 逻辑，
免得一次借来的 GPU 运行因为一个笔误白跑。
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from profiler_fakes import SHAPES, FakeProfile

ROOT = Path(__file__).resolve().parents[2]
BENCH = runpy.run_path(str(ROOT / "L2_algorithm" / "06_sampling" / "bench_rollout.py"))


def test_variant_names():
    parse = BENCH["parse_variant"]
    assert parse("base") == BENCH["BASE"]
    assert parse("fused+win64+sdpa+k32") == dict(
        attention="sdpa", fused=True, window=64, steps_per_graph=32, compile_mode=None
    )
    assert parse("autotune")["compile_mode"] == "max-autotune-no-cudagraphs"
    for bad in ("fast", "win0", "k", "fused+winX"):
        with pytest.raises(ValueError, match="不认识"):
            parse(bad)
    with pytest.raises(SystemExit) as err:  # 命令行上：argparse 的用法错误，退出码 2
        BENCH["parse_args"](["--out", "x", "--variants", "base,fastest"])
    assert err.value.code == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_categories_come_from_the_launching_op(shape):
    """不用 CUDA graph 的那次运行：同名的 cuBLAS kernel 由 aten::bmm 发射算 attention，由 aten::mm 发射算矩阵乘。
    CUDA graph 的那次运行里 kernel 只对得上 fast_decode.decode，按对照表分类，对不上的按名字猜；prefill 单独一类。
    profile 的事件有 torch 2.13 和 torch 2.11（GPU 机器上的版本，device 事件没有 linked_correlation_id）两种形状。"""
    eager = FakeProfile(shape)
    dec = eager.op("fast_decode.decode")
    eager.kernel("nvjet_tst_64x8_NNT", eager.op("aten::bmm", eager.op("aten::einsum", dec)), 10)
    eager.kernel("nvjet_tst_256x8_TNT", eager.op("aten::mm", dec), 20)
    eager.kernel("triton_per_fused__softmax_0", eager.op("Torch-Compiled Region", dec), 3)
    eager.kernel("reduce_kernel_argmax", eager.op("aten::argmax", dec), 2)
    mapping = BENCH["name_map"](BENCH["kernel_records"](eager, dry=False))
    assert mapping["nvjet_tst_64x8_NNT"] == "attention"
    assert mapping["nvjet_tst_256x8_TNT"] == BENCH["CATEGORIES"][0]
    assert mapping["triton_per_fused__softmax_0"] == "attention"
    assert mapping["reduce_kernel_argmax"] == BENCH["CATEGORIES"][2]

    graph = FakeProfile(shape)
    replay, prefill = graph.op("fast_decode.decode"), graph.op("fast_decode.prefill")
    for name, us in [("nvjet_tst_64x8_NNT", 100), ("nvjet_tst_256x8_TNT", 200)]:
        graph.kernel(name, replay, us)
    graph.kernel("triton_poi_fused_add_mul_rsqrt_7", replay, 30)  # 对照表里没有：按名字归「其它」
    graph.kernel("sm90_xmma_gemm_bf16", replay, 40)  # 没有：名字像矩阵乘
    graph.kernel("flash_fwd_kernel", graph.op("aten::_flash_attention_forward", prefill), 50)
    out = BENCH["breakdown"](
        BENCH["kernel_records"](graph, dry=False), mapping, steps=4, wall_ms=1.0
    )
    cats = out["categories_ms"]
    assert cats["attention"] == pytest.approx(0.1) and cats[BENCH["PREFILL"]] == pytest.approx(0.05)
    assert cats[BENCH["CATEGORIES"][0]] == pytest.approx(0.24)
    assert cats[BENCH["CATEGORIES"][3]] == pytest.approx(0.03)
    assert out["busy_ms"] == pytest.approx(0.42) and out["idle_ms"] == pytest.approx(0.58)
    assert out["kernels"][0]["name"] == "nvjet_tst_256x8_TNT"
    assert out["kernels"][0]["calls_per_step"] == pytest.approx(0.25)


def test_the_default_is_the_fastest_greedy_identical_variant():
    opts = BENCH["parse_variant"]
    same = {"fp32": {"identical": True}}
    rows = [
        {"name": "base", "median_s": 1.0, "identity": same, "options": opts("base")},
        {"name": "win128", "median_s": 0.5, "identity": {"fp32": {"identical": False}},
         "options": opts("win128")},
        {"name": "fused", "median_s": 0.8, "identity": same, "options": opts("fused")},
        {"name": "sdpa", "error": "..."},
    ]  # fmt: skip
    best = BENCH["choose_default"](rows, {"median_s": 8.0})
    assert best["name"] == "fused" and best["speedup"] == pytest.approx(10.0)
    assert "FUSED = True" in best["text"] and "没有达到" in best["text"]


@pytest.mark.slow
def test_dry_run_on_cpu_writes_the_tables(tmp_path):
    code = BENCH["main"](["--dry-run", "--variants", "fused+win16+sdpa", "--out", str(tmp_path)])
    assert code == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "rollout_table.md",
        "rollout_profile.md",
        "rollout_kernels.csv",
        "rollout_results.json",
    }
    table = (tmp_path / "rollout_table.md").read_text(encoding="utf-8")
    assert "HF generate 默认" in table and "逐 token 相同" in table
    assert "fused+win16+sdpa，采样 T=1" in table


@pytest.mark.slow
def test_eval_schedule_dry_run_runs_every_variant(tmp_path):
    """--eval-schedule：grpo_train 的 held-out 评估顺序（贪心两批、采样一批）；CPU 上是小形状、不录 graph。"""
    argv = ["--dry-run", "--eval-schedule", "3", "--variants", "base,fused+win16+sdpa"]
    assert BENCH["main"]([*argv, "--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"eval_schedule.json"}
    results = json.loads((tmp_path / "eval_schedule.json").read_text())["results"]
    assert set(results) == {"base", "fused+win16+sdpa"}
    for r in results.values():
        assert r["greedy_identical"] and r["repeat_identical"] and r["sampled_in_vocab"], r
        assert r["rows_differing"] == 0 and r["first_difference"] is None and r["captures"] == 0, r


def test_eval_schedule_must_be_a_row_count(capsys):
    with pytest.raises(SystemExit):
        BENCH["parse_args"](["--eval-schedule", "-1"])
    assert "--eval-schedule 是行数" in capsys.readouterr().err
