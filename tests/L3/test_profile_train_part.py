"""L3.01 profile_train_part.py：变体名字、profile 的分析（假的 GPU 事件）；CPU 上 --dry-run 走通（含 TRL 子进程）。"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from profiler_fakes import SHAPES, FakeProfile

ROOT = Path(__file__).resolve().parents[2]
PROF = runpy.run_path(
    str(ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "profile_train_part.py")
)


def test_variant_names():
    parse = PROF["parse_variant"]
    base = dict(head="tf32", chunk=256, sync="metrics", zero=0, skip=0)
    assert parse("base") == base
    assert parse("nosync+bf16out+c2048") == dict(base, head="bf16out", chunk=2048, sync="none")
    assert parse("skip+z44") == dict(base, zero=44, skip=1)
    for unknown in ("fp8", "noitem", "z101"):  # noitem：2026-12 的变体，今天的 base 就是它
        with pytest.raises(ValueError, match="不认识"):
            parse(unknown)
    with pytest.raises(SystemExit) as err:
        PROF["parse_args"](["--out", "x", "--micro-batch", "48", "--no-trl"])  # 48 不整除 64
    assert err.value.code == 2
    with pytest.raises(SystemExit) as err:  # skip 只在 β = 0 时成立（默认 β 0.04）
        PROF["parse_args"](["--out", "x", "--variants", "skip+z44", "--no-trl"])
    assert err.value.code == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_analyze_counts_syncs_and_the_busy_union(shape):
    """profile 的事件有 torch 2.13 和 torch 2.11（GPU 机器上的版本，device 事件没有 linked_correlation_id）两种形状。"""
    prof = FakeProfile(shape)
    op, kernel = prof.op, prof.kernel
    fwd = op("aten::mm", op("body_forward"))
    bwd = op("aten::mm", op("autograd::engine::evaluate_function: MmBackward0"))
    score = op("aten::mm", op("trl.score"))
    kernel("gemm_a", fwd, 100, start=0)
    kernel("gemm_a", bwd, 100, start=50)  # 与上一个重叠 50 µs：并集 150；同名同长，按时间先后对上
    kernel("gemm_b", score, 100, start=300)
    prof.gpu_range(
        "body_forward", 0, 290
    )  # GPU 上的 record_function 区间：不是 kernel，不能填满空隙
    for name in ("cudaStreamSynchronize", "cudaStreamSynchronize", "aten::_local_scalar_dense"):
        op(name)
    out = PROF["analyze"](prof, wall_s=0.001, dry=False)
    assert out["syncs"] == 2 and out["items"] == 1 and out["kernels"] == 3
    assert out["busy_ms"] == pytest.approx(0.25)
    where = {(k["name"], k["where"]) for k in out["top"]}
    assert ("gemm_a", "前向") in where and ("gemm_a", "反向") in where
    skipped = PROF["analyze"](prof, wall_s=0.001, dry=False, skip_range="trl.score")
    assert skipped["kernels"] == 2 and skipped["busy_ms"] == pytest.approx(0.15)


@pytest.mark.parametrize("worker", ["its_analysis_failed", "it_crashed_after_training"])
def test_trl_timing_is_written_even_when_its_profile_fails(tmp_path, monkeypatch, worker):
    """TRL 子进程跑完了训练、只是 profile 的分析失败（GPU 上 torch 2.11 就这样）：它的训练部分照样进表，
    「vs TRL」一栏有数，train_part.json 里有 TRL 这一行。子进程整个失败时，它已经写下的步数也不丢。"""
    # 6 步、profile 第 5 步：干净的是第 3、4、6 步（训练部分 1.5、1.6、1.55）
    steps = [{"step": i + 1, "step_s": a, "score_s": b} for i, (a, b) in
             enumerate([(3.0, 1.0), (4.0, 1.0), (2.5, 1.0), (2.8, 1.2), (9.0, 1.0), (2.6, 1.05)])]  # fmt: skip
    crash = "AttributeError: 'FunctionEvent' object has no attribute 'linked_correlation_id'"

    def fake_run(cmd, cwd, stdout, stderr):
        out = Path(cmd[cmd.index("--trl-out") + 1])
        out.mkdir(parents=True)
        (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
        if worker == "its_analysis_failed":
            res = dict(micro_batch=8, steps=steps, score_logp_s=[0.5, 0.9, 0.2, 0.4, 2.0, 0.3],
                       profiled_step=5,
                       profile={"error": f"Traceback ...\n{crash}"})  # fmt: skip
            (out / "trl_result.json").write_text(json.dumps(res))
            return SimpleNamespace(returncode=0)
        stdout.write(f"Traceback ...\n{crash}\n")
        return SimpleNamespace(returncode=1)

    monkeypatch.setattr(PROF["subprocess"], "run", fake_run)
    a = PROF["parse_args"](
        ["--out", str(tmp_path), "--no-trl", "--micro-batch", "8", "--trl-steps", "6"]
    )
    (tmp_path / "work").mkdir()
    trl = PROF["run_trl"](a, 8, tmp_path / "work", tmp_path / "syn.jsonl")
    assert trl["clean_steps"] == [3, 4, 6], "前 2 步（预热）和 profile 的第 5 步不该计时"
    assert trl["train_s"] == pytest.approx(1.55)  # 1.5、1.6、1.55 的中位数
    assert trl["step_s"] == pytest.approx(2.6)
    assert ("error" in trl) == (worker == "it_crashed_after_training")
    ours = {"name": "base", "micro_batch": 8, "train_s": 3.1, "head_s": 0.5,
            "phases": dict.fromkeys(PROF["PHASES"], 0.1)}  # fmt: skip
    env = dict(model="m", date="d", device="cpu", torch="t", transformers="x")
    PROF["write_outputs"](tmp_path, env, [ours], [trl], a)
    table = (tmp_path / "train_part.md").read_text(encoding="utf-8")
    assert "| base | — | 3.100 | 1.00 | 2.00 |" in table, "我们这一行的「vs TRL」应当是 3.1 / 1.55"
    assert "| TRL（step_s - score_s，3 个干净步的中位数） | — | 1.550 |" in table
    assert "第 5 步 8.000（profile 的那一步，不算）" in table
    saved = json.loads((tmp_path / "train_part.json").read_text(encoding="utf-8"))
    assert saved["trl"][0]["train_s"] == pytest.approx(1.55)
    if worker == "its_analysis_failed":
        profile_md = (tmp_path / "train_part_profile.md").read_text(encoding="utf-8")
        assert (
            crash in profile_md and "每步 0.300 s" in table
        )  # ref log-prob：干净的第 3、4、6 步 0.2、0.4、0.3 的中位数
    else:
        assert crash in table


@pytest.mark.slow
def test_dry_run_on_cpu_with_trl(tmp_path):
    argv = ["--dry-run", "--variants", "base,nosync+bf16+c64", "--micro-batch", "8"]
    assert PROF["main"](argv + ["--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "train_part.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in res["ours"]] == ["base", "nosync+bf16+c64"]
    assert all(r["train_s"] > 0 and set(r["phases"]) == set(PROF["PHASES"]) for r in res["ours"])
    (trl,) = res["trl"]
    assert trl["micro_batch"] == 8 and trl["train_s"] > 0 and trl["profile"]["kernels"] > 0
    assert trl["profiled_step"] == 4 and trl["clean_steps"] == [3, 5], "5 步：profile 第 4 步"
    table = (tmp_path / "train_part.md").read_text(encoding="utf-8")
    assert "TRL（step_s - score_s，2 个干净步的中位数）" in table


# 2026-12-02 在 H200 上真跑出来的 TRL 4 步（train_part.json，micro-batch 64，--trl-steps 4，profile 第 3 步）：
# 训练部分 = step_s - score_s = 0.848、3.659、1.735（profile 的那一步）、0.708 s
REAL_TRL_STEPS = [
    dict(step=1, step_s=35.28184080699998, score_s=34.433831085000065),
    dict(step=2, step_s=21.072253849000163, score_s=17.41371943299987),
    dict(step=3, step_s=19.725404562999984, score_s=17.99048205700001),
    dict(step=4, step_s=17.093624749000128, score_s=16.385774473000083),
]


def test_the_profiled_step_is_not_in_the_trl_median(tmp_path):
    """回归：原先取第 2 步起的中位数，把 profile 的第 3 步（1.735 s）当成了 TRL 的训练部分，表里印出「vs TRL 0.56」；
    不 profile 的干净一步是 0.708 s，base 0.967 s 对它是 1.37 倍。只剩 1 个干净步时不给比值，明说为什么。"""
    res = dict(micro_batch=64, steps=REAL_TRL_STEPS, profiled_step=3,
               score_logp_s=[0.1889, 0.2138, 1.4786, 0.1845])  # fmt: skip
    t = dict(res, **PROF["trl_times"](res))
    assert t["clean_steps"] == [4], "第 1、2 步是预热、第 3 步被 profile 拉长，只有第 4 步干净"
    assert t["train_s"] == pytest.approx(0.708, abs=5e-4)
    assert t["score_logp_median_s"] == pytest.approx(0.1845)
    assert 0.967 / t["train_s"] == pytest.approx(1.37, abs=5e-3)

    a = PROF["parse_args"](["--out", str(tmp_path), "--no-trl", "--micro-batch", "64"])
    ours = {"name": "base", "micro_batch": 64, "train_s": 0.967, "head_s": 0.219,
            "phases": dict.fromkeys(PROF["PHASES"], 0.1)}  # fmt: skip
    env = dict(model="m", date="d", device="cpu", torch="t", transformers="x")
    PROF["write_outputs"](tmp_path, env, [ours], [t], a)
    table = (tmp_path / "train_part.md").read_text(encoding="utf-8")
    assert "| base | — | 0.967 | 1.00 | — |" in table, (
        "只有 1 个干净步：「vs TRL」不该给比值（原先印的是 0.56）"
    )
    assert "0.56" not in table
    assert "| TRL（step_s - score_s，1 个干净步的中位数） | — | 0.708 | — | — |" in table
    assert "第 3 步 1.735（profile 的那一步，不算）" in table and "第 4 步 0.708。" in table
    assert "干净的步只有 1 个" in table


def test_too_few_trl_steps_are_refused():
    """--trl-steps 少于 5（2 步预热 + profile 的 1 步 + 至少 2 个干净步）时直接拒绝，默认值剩 3 个干净步。"""
    with pytest.raises(SystemExit) as err:
        PROF["parse_args"](["--out", "x", "--trl-steps", "4"])
    assert err.value.code == 2
    a = PROF["parse_args"](["--out", "x", "--no-trl"])
    fake = dict(steps=[dict(step=n, step_s=2.0, score_s=1.0) for n in range(1, a.trl_steps + 1)])
    fake["profiled_step"] = PROF["trl_profile_target"](a.trl_steps)
    assert len(PROF["trl_times"](fake)["clean_steps"]) == 3


@pytest.mark.slow  # tiny 模型真的走几步：约 8 CPU-s
def test_skipping_zero_advantage_rows_is_timed_side_by_side(tmp_path):
    """z50 对 skip+z50：同一批 rollout，一半以上的组 advantage 为 0；两行都计时，比值以 z50 为分母。"""
    argv = ["--dry-run", "--no-trl", "--no-profile", "--beta", "0", "--variants", "z50,skip+z50"]
    assert PROF["main"](argv + ["--micro-batch", "4", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "train_part.json").read_text(encoding="utf-8"))["ours"]
    assert [r["name"] for r in rows] == ["z50", "skip+z50"]
    assert [r["options"]["skip"] for r in rows] == [0, 1]
    assert all(r["zero_std_frac"] >= 0.5 and r["train_s"] > 0 for r in rows)
    table = (tmp_path / "train_part.md").read_text(encoding="utf-8")
    assert "| 变体 | 组全相同 | 训练部分 s | vs z50 |" in table
    assert "| z50 |" in table and "| skip+z50 |" in table
