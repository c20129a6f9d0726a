"""L3.01 profile_train_part.py：变体名字、profile 的分析（假的 GPU 事件）；CPU 上 --dry-run 走通（含 TRL 子进程）。"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

ROOT = Path(__file__).resolve().parents[2]
PROF = runpy.run_path(
    str(ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "profile_train_part.py")
)


def test_variant_names():
    parse = PROF["parse_variant"]
    assert parse("base") == dict(head="tf32", chunk=256, sync="per_mb")
    assert parse("nosync+bf16out+c2048") == dict(head="bf16out", chunk=2048, sync="none")
    assert parse("noitem")["sync"] == "end"
    with pytest.raises(ValueError, match="不认识"):
        parse("fp8")
    with pytest.raises(SystemExit) as err:
        PROF["parse_args"](["--out", "x", "--micro-batch", "48", "--no-trl"])  # 48 不整除 64
    assert err.value.code == 2


def test_analyze_counts_syncs_and_the_busy_union():
    ev, n = [], [0]

    def op(name, parent=None):
        n[0] += 1
        e = SimpleNamespace(id=n[0], name=name, device_type=DeviceType.CPU, cpu_parent=parent)
        ev.append(e)
        return e

    def kernel(name, parent, start, end):
        ev.append(SimpleNamespace(
            id=0, name=name, device_type=DeviceType.CUDA, linked_correlation_id=parent.id,
            time_range=SimpleNamespace(start=start, end=end),
        ))  # fmt: skip

    fwd = op("aten::mm", op("body_forward"))
    bwd = op("aten::mm", op("autograd::engine::evaluate_function: MmBackward0"))
    score = op("aten::mm", op("trl.score"))
    kernel("gemm_a", fwd, 0, 100)
    kernel("gemm_a", bwd, 50, 150)  # 与上一个重叠 50 µs：并集 150
    kernel("gemm_b", score, 300, 400)
    for name in ("cudaStreamSynchronize", "cudaStreamSynchronize", "aten::_local_scalar_dense"):
        op(name)
    prof = SimpleNamespace(events=lambda: ev)
    out = PROF["analyze"](prof, wall_s=0.001, dry=False)
    assert out["syncs"] == 2 and out["items"] == 1 and out["kernels"] == 3
    assert out["busy_ms"] == pytest.approx(0.25)
    where = {(k["name"], k["where"]) for k in out["top"]}
    assert ("gemm_a", "前向") in where and ("gemm_a", "反向") in where
    skipped = PROF["analyze"](prof, wall_s=0.001, dry=False, skip_range="trl.score")
    assert skipped["kernels"] == 2 and skipped["busy_ms"] == pytest.approx(0.15)


@pytest.mark.slow
def test_dry_run_on_cpu_with_trl(tmp_path):
    argv = ["--dry-run", "--variants", "base,nosync+bf16+c64", "--micro-batch", "8"]
    assert PROF["main"](argv + ["--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "train_part.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in res["ours"]] == ["base", "nosync+bf16+c64"]
    assert all(r["train_s"] > 0 and set(r["phases"]) == set(PROF["PHASES"]) for r in res["ours"])
    (trl,) = res["trl"]
    assert trl["micro_batch"] == 8 and trl["train_s"] > 0 and trl["profile"]["kernels"] > 0
    assert "TRL（step_s - score_s）" in (tmp_path / "train_part.md").read_text(encoding="utf-8")
