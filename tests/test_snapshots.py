"""快照测试：被测实现在快照里**存下的输入**上的输出，必须与参考实现（生成快照时）的输出在容差内一致。

存下的输入不在这台机器上重新造，所以换一台 CPU 也不会因为造输入时的舍入而变红（见 tests/snapshots.py）。
"""

from __future__ import annotations

import shutil
import sys
import types

import pytest
import torch
from snapshots import (
    REGENERATE,
    SNAPSHOT_DIR,
    all_cases,
    assert_same,
    inputs_mismatch,
    load,
    output_mismatch,
    run,
)

CASES = all_cases()


def _saved(case):
    if not case.path.exists():
        pytest.fail(f"缺少快照 {case.path.name}：运行 {REGENERATE} --only {case.id}", pytrace=False)
    return load(case.path)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_snapshot(case, impl_name):
    saved = _saved(case)
    where = f"{impl_name}.{case.module}.{case.func} 在快照 {case.name} 上的输出"
    assert_same(run(case, impl_name, saved["inputs"]), saved["output"], case.rtol, case.atol, where)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_snapshot_inputs_follow_their_recipe(case):
    """存下的输入就是 tests/snapshot_cases/ 的造法现在造出来的（容差内）：改了造法却没重新生成，这里报出来。"""
    msg = inputs_mismatch(case.inputs(), _saved(case)["inputs"], case)
    if msg is not None:
        pytest.fail(
            f"快照 {case.path.name} 存的输入和 tests/snapshot_cases/{case.module}.py 现在造出来的不一样"
            f"（{msg}）：造法改了就重新生成，运行 {REGENERATE} --only {case.id}",
            pytrace=False,
        )


# ---------------------------------------------------------------- tests/make_snapshots.py 本身


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_make_snapshots_rewrites_only_what_changed_beyond_tolerance(tmp_path, capsys):
    import make_snapshots

    for p in SNAPSHOT_DIR.glob("*.pt"):
        shutil.copy(p, tmp_path / p.name)
    committed = _files(tmp_path)
    # 提交的快照就是本仓库的 solutions 现在生成的：一个文件都不重写（在另一台 CPU 上也是）
    assert make_snapshots.main([], snapshot_dir=tmp_path) == 0
    assert _files(tmp_path) == committed, "提交的快照已经过时：运行 python tests/make_snapshots.py"

    case = next(c for c in CASES if c.id == "l2_04_kl::kl_k3")
    target = tmp_path / case.path.name
    saved = load(target)
    for nudge, rewritten in ((case.atol / 10, False), (1.0, True)):
        torch.save({**saved, "output": saved["output"] + nudge}, target)
        nudged = target.read_bytes()
        assert make_snapshots.main(["--only", case.id], snapshot_dir=tmp_path) == 0
        assert (target.read_bytes() != nudged) is rewritten, f"偏差 {nudge}：重写={not rewritten}"
    # 重写出的是参考实现的输出（容差内：这台 CPU 的舍入可能和生成快照的那台不同）
    assert output_mismatch(load(target)["output"], saved["output"], case) is None

    # 缺的文件补上；--only 不删别的文件，不带 --only 时删掉没有用例的文件
    target.unlink()
    (tmp_path / "l2_00_gone__old.pt").write_bytes(b"")
    assert make_snapshots.main(["--only", "kl_k3"], snapshot_dir=tmp_path) == 0
    assert target.exists() and (tmp_path / "l2_00_gone__old.pt").exists()
    assert make_snapshots.main([], snapshot_dir=tmp_path) == 0
    assert not (tmp_path / "l2_00_gone__old.pt").exists()
    after = _files(tmp_path)
    assert make_snapshots.main([], snapshot_dir=tmp_path) == 0
    assert _files(tmp_path) == after  # 运行两次，第二次什么也不改

    assert make_snapshots.main(["--only", "no_such_case"], snapshot_dir=tmp_path) == 2
    assert "没有匹配任何用例" in capsys.readouterr().err


def test_make_snapshots_refuses_a_solutions_from_another_checkout(monkeypatch, tmp_path):
    import make_snapshots

    other = types.ModuleType("solutions")
    other.__file__ = str(tmp_path / "elsewhere" / "solutions" / "__init__.py")
    monkeypatch.setitem(sys.modules, "solutions", other)
    with pytest.raises(SystemExit) as err:
        make_snapshots.main([], snapshot_dir=tmp_path)
    assert "要用本仓库的" in str(err.value.code) and not list(tmp_path.iterdir())
