"""tests/tier_budget.py（CI 用它检查默认一档的用时预算）：解析 junit 报告、找课的测试文件、超预算时 exit 1。"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "tier_budget.py"


@pytest.fixture(scope="module")
def tb():
    spec = importlib.util.spec_from_file_location("tier_budget", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.a" name="test_fast" time="0.010" />
<testcase classname="tests.b" name="test_slow[x]" time="2.500" />
<testcase classname="tests.c" name="test_skipped" time="0.000"><skipped /></testcase>
</testsuite></testsuites>
"""


def test_slowest_test_is_read_from_the_junit_report(tb, tmp_path):
    (tmp_path / "j.xml").write_text(JUNIT)
    assert tb.slowest_test(tmp_path / "j.xml") == (2.5, "tests.b::test_slow[x]")


def test_lesson_files_are_found_without_a_list(tb):
    files = {p.relative_to(tb.ROOT).as_posix() for p in tb.lesson_test_files()}
    assert "tests/L2/test_l2_01_advantages.py" in files and "tests/L3/test_train_trl.py" in files
    assert all(f.startswith(("tests/L1/", "tests/L2/", "tests/L3/")) for f in files)


def _fake_runs(tb, monkeypatch, tmp_path, *, tier_cpu, test_s, file_s):
    def run_pytest(args):
        if args and args[0].startswith("--junitxml="):
            Path(args[0].split("=", 1)[1]).write_text(JUNIT.replace("2.500", str(test_s)))
            return 0, tier_cpu, tier_cpu, "10 passed in 1.00s"
        if not args:  # 默认一档超预算时的再量一次（不带 junit）
            return 0, tier_cpu, tier_cpu, "10 passed in 1.00s"
        return 0, file_s, file_s, "3 passed in 0.10s"

    monkeypatch.setattr(tb, "run_pytest", run_pytest)
    monkeypatch.setattr(tb, "warm_caches", lambda: None)
    monkeypatch.setattr(tb, "LESSON_FILE_WALL_S", 6.0)  # 这里的数按 6 s 的预算写
    monkeypatch.setattr(tb, "torch_import_s", lambda: tb.TORCH_IMPORT_QUIET_S)  # 机器安静
    monkeypatch.setattr(tb, "lesson_test_files", lambda: [tb.ROOT / "tests/L2/test_x.py"])


def test_within_budget_passes(tb, monkeypatch, tmp_path, capsys):
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=30.0, test_s=1.0, file_s=4.0)
    assert tb.main(["--check"]) == 0
    assert "都在预算之内" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tier_cpu, test_s, file_s, needle",
    [
        (61.0, 1.0, 4.0, "默认一档用了 61.0 CPU 秒"),
        (30.0, 5.5, 4.0, "tests.b::test_slow[x] 用了 5.50 s"),
        (30.0, 1.0, 6.5, "tests/L2/test_x.py 单独运行用了 6.5 s"),
    ],
)
def test_over_budget_fails_only_with_check(
    tb, monkeypatch, tmp_path, capsys, tier_cpu, test_s, file_s, needle
):
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=tier_cpu, test_s=test_s, file_s=file_s)
    assert tb.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("超出预算：") and needle in err and "@pytest.mark.slow" in err
    assert tb.main([]) == 0  # 不带 --check：只打印


def test_a_file_over_budget_is_retried_and_the_fastest_run_counts(
    tb, monkeypatch, tmp_path, capsys
):
    """墙钟有噪声：超预算的文件最多再跑 RETRIES 次，取最快的；一直超才算超。"""
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=30.0, test_s=1.0, file_s=4.0)
    fake = tb.run_pytest
    times = iter([7.0, 6.6, 5.2])

    def run_pytest(args):
        if args and args[0].startswith("--junitxml="):
            return fake(args)
        s = next(times)
        return 0, s, s, "3 passed"

    monkeypatch.setattr(tb, "run_pytest", run_pytest)
    assert tb.main(["--check"]) == 0
    assert (
        "（7.0 / 6.6 / 5.2 s；重跑的折算成安静的机器：6.6 / 5.2 s；取最小的）"
        in capsys.readouterr().out
    )
    times = iter([7.0, 6.6, 6.2])
    assert tb.main(["--check"]) == 1
    assert "单独运行用了 6.2 s" in capsys.readouterr().err


def test_a_busy_machine_is_measured_with_an_import_torch_ruler(tb, monkeypatch, tmp_path, capsys):
    """机器整体慢了（import torch 要安静时的 1.25 倍）：重跑的墙钟按尺子折算回安静的机器，7.0 s 算 5.6 s；
    折扣最多 25%：尺子慢一倍时 7.0 s 也只算 5.25 s，9.0 s 算 6.75 s 照样失败；尺子显示机器不忙时照样失败。"""
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=30.0, test_s=1.0, file_s=7.0)
    monkeypatch.setattr(tb, "torch_import_s", lambda: 1.25 * tb.TORCH_IMPORT_QUIET_S)
    assert tb.main(["--check"]) == 0
    assert "（7.0 / 7.0 s；重跑的折算成安静的机器：5.6 s；取最小的）" in capsys.readouterr().out
    monkeypatch.setattr(tb, "torch_import_s", lambda: 2 * tb.TORCH_IMPORT_QUIET_S)
    assert tb.main(["--check"]) == 0
    assert "重跑的折算成安静的机器：5.2 s；" in capsys.readouterr().out
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=30.0, test_s=1.0, file_s=9.0)
    monkeypatch.setattr(tb, "torch_import_s", lambda: 2 * tb.TORCH_IMPORT_QUIET_S)
    assert tb.main(["--check"]) == 1
    assert "单独运行用了 6.8 s" in capsys.readouterr().err
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=30.0, test_s=1.0, file_s=7.0)
    assert tb.main(["--check"]) == 1
    assert "单独运行用了 7.0 s" in capsys.readouterr().err


def test_an_over_budget_default_tier_is_measured_again_with_the_ruler(
    tb, monkeypatch, tmp_path, capsys
):
    """默认一档超了 60 CPU 秒：带 import torch 的尺子再量一次；机器慢 1.25 倍时 70 算 56，照样最多打 25% 的折扣。"""
    _fake_runs(tb, monkeypatch, tmp_path, tier_cpu=70.0, test_s=1.0, file_s=4.0)
    fake = tb.run_pytest
    monkeypatch.setattr(
        tb, "run_pytest", lambda args: (0, 70.0, 70.0, "x") if not args else fake(args)
    )
    monkeypatch.setattr(tb, "torch_import_s", lambda: 1.25 * tb.TORCH_IMPORT_QUIET_S)
    assert tb.main(["--check"]) == 0
    assert "按尺子折算成安静的机器 56.0 s" in capsys.readouterr().out
    monkeypatch.setattr(tb, "torch_import_s", lambda: 4 * tb.TORCH_IMPORT_QUIET_S)
    monkeypatch.setattr(
        tb, "run_pytest", lambda args: (0, 90.0, 90.0, "x") if not args else fake(args)
    )
    assert tb.main(["--check"]) == 1  # 90 × 0.75 = 67.5：折扣到头，还是超
    assert "默认一档用了 67.5 CPU 秒" in capsys.readouterr().err
