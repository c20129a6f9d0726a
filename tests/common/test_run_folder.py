"""common/run/run_folder.py：一个目录同时只许一个进程写；续跑先核对 checkpoint、config、metrics，拒绝时什么都不改。"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from common.run.atomic_io import WriteError
from common.run.checkpoint import CheckpointError, checkpoint_path, save_checkpoint
from common.run.json_files import write_json
from common.run.metrics import MetricsError, MetricsLogger
from common.run.out_dir import out_dir_problem
from common.run.run_folder import (
    LOCK_NAME,
    RunFolder,
    RunFolderError,
    exit_cleanly,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"lr": 3e-5, "steps": 6, "save_every": 3, "out": "runs/x", "resume": None}


def _run_files(folder: Path) -> dict[str, str]:
    """除锁文件外每个文件的 sha256：「目录原样不动」就是它前后相等。"""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != LOCK_NAME
    }


def _finished(folder: Path, step=3, config=CONFIG) -> Path:
    """一个停在第 step 步的运行目录：config.json、每步一行的 metrics、第 step 步的 checkpoint。"""
    run = RunFolder(folder)
    run.open(config, resume=False)
    log = MetricsLogger(folder / "metrics.jsonl")
    for s in range(1, step + 2):  # 最后一行是 checkpoint 之后才记下的（被杀前多跑的一步）
        log.log({"step": s, "reward_mean": s / 10})
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(folder, model=model, optimizer=opt, step=step, extra={"config": config})
    (folder / "eval_before.json").write_text('{"accuracy": 0.1}', encoding="utf-8")
    run.close()
    return folder


def test_out_dir_problem(tmp_path, monkeypatch):
    import common.run.run_folder as R

    assert out_dir_problem(tmp_path / "new" / "deeper") is None
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert "是一个文件" in out_dir_problem(a_file)
    assert "在文件" in out_dir_problem(a_file / "sub" / "run")
    monkeypatch.setattr(R.os, "access", lambda path, mode: False)
    assert "没有权限" in out_dir_problem(tmp_path / "run")
    assert not (tmp_path / "new").exists(), "只检查，不创建"


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_a_second_writer_is_refused_and_the_lock_dies_with_its_process(tmp_path):
    first = RunFolder(tmp_path / "run").lock()
    with pytest.raises(RunFolderError, match=rf"正被另一个训练进程（pid {os.getpid()}）使用"):
        RunFolder(tmp_path / "run").lock()
    first.close()
    RunFolder(tmp_path / "run").lock().close()
    # 持锁的进程被 kill -9：操作系统释放锁，下一个进程直接能用
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from common.run.run_folder import RunFolder
            RunFolder({str(tmp_path / "run")!r}).lock()
            print("locked", flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(RunFolderError, match=f"pid {holder.pid}"):
        RunFolder(tmp_path / "run").lock()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    RunFolder(tmp_path / "run").lock().close()


def test_lock_cleans_leftover_tmp_files(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # 这里开始过一次运行：它的临时文件才是课程的
    for name in ("checkpoint.pt.tmp", "curves.tmp.png", "metrics.jsonl.tmp", "keep.txt"):
        (folder / name).write_bytes(b"")
    (folder / "thesis.tmp").write_bytes(b"a learner's own file")  # 不是课程写的：不许删
    (folder / "notes.png.tmp").write_bytes(b"mine too")
    (tmp_path / "outside").write_bytes(b"x")
    (folder / "eval_after.json.tmp").symlink_to(tmp_path / "outside")  # 链接：不是课程写的文件
    RunFolder(folder).lock().close()
    left = sorted(p.name for p in folder.iterdir())  # close() 也删掉 run.lock
    assert left == ["config.json", "eval_after.json.tmp", "keep.txt", "notes.png.tmp", "thesis.tmp"]
    assert (folder / "thesis.tmp").read_bytes() == b"a learner's own file"
    assert (tmp_path / "outside").read_bytes() == b"x"
    assert "临时文件" in capsys.readouterr().out


def test_a_folder_where_no_run_started_keeps_every_tmp_file(tmp_path):
    """以前：--out 指向一个从没跑过的文件夹，名字像课程临时文件的、学习者自己的文件被删了
    （eval_notes.json.tmp、answers_draft.jsonl.tmp、bad_step_note.pt.tmp、metrics.jsonl.tmp）。"""
    folder = tmp_path / "mine"
    folder.mkdir()
    names = ["answers_draft.jsonl.tmp", "bad_step_note.pt.tmp", "eval_notes.json.tmp",
             "metrics.jsonl.tmp", "thesis.tmp"]  # fmt: skip
    for name in names:
        (folder / name).write_bytes(b"mine")
    RunFolder(folder).open(CONFIG, resume=False)
    assert all((folder / n).read_bytes() == b"mine" for n in names)


def test_a_run_lock_planted_as_a_link_is_refused_not_followed(tmp_path):
    """run.lock 是指向目录外文件的符号链接：拒绝（中文，点名链接），外面的文件一个字节都不变。"""
    folder, victim = tmp_path / "run", tmp_path / "victim.txt"
    folder.mkdir()
    victim.write_bytes(b"precious\n")
    (folder / LOCK_NAME).symlink_to(victim)
    with pytest.raises(WriteError, match="符号链接"):
        RunFolder(folder).open(CONFIG, resume=False)
    assert victim.read_bytes() == b"precious\n"
    assert not (folder / "config.json").exists()


def test_new_run_writes_config_and_refuses_an_existing_run(tmp_path):
    run = RunFolder(tmp_path / "run")
    assert run.open(CONFIG, resume=False) is None and run.needs_eval_before()
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == CONFIG
    run.close()
    with pytest.raises(RunFolderError, match="已经有一次运行（config.json）"):
        RunFolder(tmp_path / "run").open(CONFIG, resume=False)


def test_a_good_resume(tmp_path):
    folder = _finished(tmp_path / "run")
    run = RunFolder(folder)
    edited = {**CONFIG, "steps": 10, "out": "moved/elsewhere", "resume": str(folder)}
    ckpt = run.open(edited, resume=True, may_change=("steps", "resume"))
    assert ckpt.step == 3 and not run.needs_eval_before()


def _refused(folder: Path, error, needle: str, config=CONFIG):
    before = _run_files(folder)
    with pytest.raises(error) as err:
        RunFolder(folder).open(config, resume=True, may_change=("steps", "resume"))
    assert needle in str(err.value), str(err.value)
    assert _run_files(folder) == before, "拒绝续跑时运行目录里的文件必须原样不动"
    return str(err.value)


def test_no_loadable_checkpoint_is_refused_and_nothing_changes(tmp_path):
    """以前：checkpoint 删了 -> 悄悄从第 0 步重来，config/eval_before 被重写、metrics 被清空。"""
    folder = _finished(tmp_path / "run")
    checkpoint_path(folder).unlink()
    msg = _refused(folder, CheckpointError, "不存在")
    assert "都没有动" in msg
    checkpoint_path(folder).mkdir()  # 以前：metrics 6 行 -> 0 行，然后崩溃
    _refused(folder, CheckpointError, "是一个目录")


def test_a_config_that_disagrees_with_the_checkpoint_is_refused(tmp_path):
    """以前：手改 config.json 里的 lr，续跑时悄悄用了新值（或被忽略）。"""
    folder = _finished(tmp_path / "run")
    msg = _refused(
        folder, RunFolderError, "lr = 0.001，checkpoint 里是 3e-05", {**CONFIG, "lr": 1e-3}
    )
    assert "config.json" in msg and "被改过" in msg


def test_metrics_rows_must_match_the_checkpoint(tmp_path):
    folder = _finished(tmp_path / "run")
    path = folder / "metrics.jsonl"
    rows = path.read_text().splitlines()
    path.write_text("\n".join([rows[0], "{broken", *rows[1:]]) + "\n")
    _refused(folder, MetricsError, "第 2 行")
    path.write_text("\n".join([rows[0], rows[2], rows[3]]) + "\n")
    _refused(folder, RunFolderError, "缺第 [2] 步")
    path.write_text("\n".join([rows[0], rows[1], rows[1], rows[2]]) + "\n")
    _refused(folder, RunFolderError, "第 [2] 步出现了不止一次")
    path.unlink()
    _refused(folder, RunFolderError, "metrics.jsonl 不见了")


def test_a_lost_per_question_row_before_the_checkpoint_is_refused(tmp_path):
    """以前：eval_questions.jsonl 的最后一行（第 2 步，<= checkpoint）写了一半，续跑悄悄丢掉它，
    文件从此只有第 1、3 步。那一行只能由第 2 步的权重算出：拒绝，点名文件和行。"""
    folder = _finished(tmp_path / "run")
    metrics = folder / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({**r, "eval_accuracy": 0.5}) + "\n" for r in rows))
    questions = folder / "eval_questions.jsonl"
    lines = [json.dumps({"step": s, "greedy": [1, 0]}) for s in (1, 2, 3, 4)]
    questions.write_text("\n".join(lines) + "\n")
    run = RunFolder(folder)
    assert run.open(CONFIG, resume=True, may_change=("steps", "resume")).step == 3
    run.close()
    questions.write_text("\n".join(lines[:1]) + "\n" + lines[1][:12])  # 第 2 行写了一半
    msg = _refused(folder, RunFolderError, "eval_questions.jsonl")
    assert "缺第 [2, 3] 步" in msg and "第 2 行，最后一行，只写了一半" in msg
    questions.write_text("\n".join([lines[0], lines[0], lines[1], lines[2]]) + "\n")
    _refused(folder, RunFolderError, "第 [1] 步出现了不止一次")
    questions.unlink()
    _refused(folder, RunFolderError, "文件不见了")


def test_a_checkpoint_past_the_target_step_is_refused(tmp_path):
    folder = _finished(tmp_path / "run")
    _refused(
        folder, RunFolderError, "--steps 2 比 checkpoint 的第 3 步还小", {**CONFIG, "steps": 2}
    )


def test_missing_eval_before_is_recomputed_not_a_crash_at_the_end(tmp_path, capsys):
    folder = _finished(tmp_path / "run")
    (folder / "eval_before.json").unlink()
    run = RunFolder(folder)
    run.open(CONFIG, resume=True, may_change=("steps", "resume"))
    assert run.needs_eval_before() and "重新做一次训练前评估" in capsys.readouterr().out


def test_curves_get_config_and_eval_before_from_the_run_folder(tmp_path, monkeypatch):
    import common.run.run_folder as R

    seen = {}
    monkeypatch.setattr(R, "plot_curves", lambda rows, png, **kw: seen.update(kw, png=png))
    write_json(tmp_path / "config.json", {"beta": 0.0, "num_iterations": 1, "temperature": 1.0})
    write_json(tmp_path / "eval_before.json", {"accuracy": 0.06})
    RunFolder(tmp_path).plot_curves("t")
    assert seen["png"] == tmp_path / "curves.png" and seen["title"] == "t"
    assert seen["config"]["beta"] == 0.0 and seen["before"] == {"accuracy": 0.06}


@pytest.mark.slow  # matplotlib：光 import 就约 1 CPU 秒，画图的测试放进 slow（CI 照样跑）
def test_curves_survive_a_broken_config_json(tmp_path):
    (tmp_path / "config.json").write_text('{"beta": 0.0, "num_it', encoding="utf-8")
    (tmp_path / "eval_before.json").write_bytes(b"\xff\xfe")
    MetricsLogger(tmp_path / "metrics.jsonl").log({"step": 1, "reward_mean": 0.3})
    RunFolder(tmp_path).plot_curves("t")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob("*.tmp*"))


def test_cuda_out_of_memory_is_one_chinese_line_with_what_to_change(tmp_path):
    """以前：torch.OutOfMemoryError 是一段英文 traceback。现在一行中文：要了多少、先查什么、改哪个参数、怎么续跑。"""
    import torch

    folder = _finished(tmp_path / "run")
    oom = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 31.35 GiB"
    )
    with pytest.raises(SystemExit) as exc, exit_cleanly(folder, 6):
        raise oom
    msg = exc.value.code
    assert msg.startswith("错误：显存不够（CUDA out of memory）（Tried to allocate 2.00 GiB）")
    assert (
        "--micro-batch 4" in msg and "nvidia-smi" in msg and f"--resume {folder} --steps 6" in msg
    )
    with pytest.raises(RuntimeError, match="别的 RuntimeError"), exit_cleanly(folder, 6):
        raise RuntimeError("别的 RuntimeError 照旧往外抛")


def test_exit_cleanly(tmp_path, capsys):
    folder = _finished(tmp_path / "run")
    with pytest.raises(SystemExit) as exc, exit_cleanly(folder, 6):
        raise KeyboardInterrupt
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert "已中断（Ctrl-C）" in err and f"--resume {folder} --steps 6" in err and "第 3 步" in err
    with pytest.raises(SystemExit) as exc, exit_cleanly(folder, 6):
        raise RunFolderError("说明")
    assert exc.value.code == "错误：说明"
    with pytest.raises(SystemExit) as exc, exit_cleanly(tmp_path / "empty", 6):
        raise KeyboardInterrupt
    assert "还没有这次运行的记录：原样重跑同一条命令即可" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError), exit_cleanly(folder, 6):  # 程序错误照常抛出
        raise ZeroDivisionError


def test_sigterm_is_handled_like_ctrl_c(tmp_path, capsys):
    """以前（issue 35）：SIGTERM（kill、作业调度、关机）-> exit 143，一个字都没有，也没有续跑的提示。"""
    folder = _finished(tmp_path / "run")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exc, exit_cleanly(folder, 6):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # 处理函数在下一条字节码（或打断 sleep）时抛出，不会真睡 5 秒
    assert exc.value.code == 143
    err = capsys.readouterr().err
    assert "已中断（SIGTERM）" in err and f"--resume {folder} --steps 6" in err, err
    assert signal.getsignal(signal.SIGTERM) == before, "离开 exit_cleanly 后恢复原来的处理"


def test_sighup_is_handled_like_sigterm(tmp_path, capsys):
    """issue 44 以前：SSH 断开（SIGHUP）-> exit 129，一个字都没有，run.lock 留在目录里。"""
    folder = _finished(tmp_path / "run")
    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(SystemExit) as exc, exit_cleanly(folder, 6):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)
    assert exc.value.code == 129
    err = capsys.readouterr().err
    assert "已中断（SIGHUP）" in err and f"--resume {folder} --steps 6" in err, err
    assert signal.getsignal(signal.SIGHUP) == before, "离开 exit_cleanly 后恢复原来的处理"


def test_nohup_keeps_sighup_ignored(tmp_path):
    """nohup 把 SIGHUP 设成忽略：exit_cleanly 不能把它改回「收到就停」。"""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with exit_cleanly(_finished(tmp_path / "run"), 6):
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.slow
def test_a_second_ctrl_c_10_ms_later_leaves_no_traceback(tmp_path):
    """以前：Ctrl-C 两次、隔 10 ms：第二次打断了第一次的收尾（traceback）。第二次现在被忽略。"""
    script = tmp_path / "slow_exit.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(ROOT)!r})
            import common.run.run_folder as R
            hint = R.resume_hint
            def slow_hint(*args):  # 收尾慢（读 checkpoint 说怎么续跑）：第二次 Ctrl-C 落在这里
                time.sleep(0.2)
                return hint(*args)
            R.resume_hint = slow_hint
            with R.exit_cleanly({str(tmp_path / "run")!r}, 6):
                print("ready", flush=True)
                time.sleep(30)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err and "已中断（Ctrl-C）" in err, err


def test_the_lock_file_goes_when_the_run_ends(tmp_path):
    """以前（issue 35）：跑完之后 run.lock（里面是 pid）一直留在目录里。"""
    folder = tmp_path / "run"
    with exit_cleanly(folder, 6):
        RunFolder(folder).open(CONFIG, resume=False)
        assert (folder / LOCK_NAME).is_file()
    assert not (folder / LOCK_NAME).exists()
    with pytest.raises(SystemExit), exit_cleanly(folder, 6):  # 出错退出也一样
        RunFolder(folder).lock()
        raise RunFolderError("x")
    assert not (folder / LOCK_NAME).exists()


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path, capsys):
    """以前（issue 35）：第一次存 checkpoint 时被 kill -9（metrics 已有第 1 步那行）：--resume 说
    「checkpoint.pt 不存在」，同一个 --out 重跑又说「续跑用 --resume」，死路。Ctrl-C 在第一次评估时：
    提示说「不能续跑」，--resume 却能从第 0 步开始。现在两者一致：从第 0 步开始。"""
    folder = tmp_path / "run"
    config = {**CONFIG, "save_every": 2}
    RunFolder(folder).open(config, resume=False)
    with pytest.raises(SystemExit), exit_cleanly(folder, 6):
        raise KeyboardInterrupt  # 第一次评估时按了 Ctrl-C：只有 config.json
    assert "续跑会从第 0 步开始" in capsys.readouterr().err
    log = MetricsLogger(folder / "metrics.jsonl")
    for s in (1, 2):  # 第 2 步的行记下了，第 2 步的 checkpoint 没写完（.tmp）
        log.log({"step": s})
    (folder / "checkpoint.pt.tmp").write_bytes(b"PK partial")
    with pytest.raises(SystemExit), exit_cleanly(folder, 6):
        raise KeyboardInterrupt
    assert "续跑会从第 0 步开始" in capsys.readouterr().err
    run = RunFolder(folder)
    assert run.open(config, resume=True, may_change=("steps", "resume")) is None
    assert "metrics.jsonl 有 2 行，都会重算" in capsys.readouterr().out
    run.close()
    log.log({"step": 3})  # 第 3 步的行：第 2 步的 checkpoint 一定存好过，丢了就拒绝
    _refused(folder, CheckpointError, "checkpoint.pt 不存在", config)
    with pytest.raises(SystemExit), exit_cleanly(folder, 6):
        raise KeyboardInterrupt
    assert "不能续跑" in capsys.readouterr().err


@pytest.mark.parametrize(
    "cwd", ["", "L2_algorithm/07_grpo_train", "L2_algorithm/08_reading_the_curves", "L3_frameworks"]
)
def test_default_run_folders_are_ignored_by_git_from_any_folder(cwd):
    """以前（issue 35）：在课的目录里运行脚本，默认的 runs/ 建在那里，.gitignore（只有 /runs/）管不到。"""
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("不在 git 仓库里（解压的源码包）：没有 .gitignore 要管")
    path = (Path(cwd) / "runs" / "tiny-20250101-000000" / "config.json").as_posix()
    proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, f"git 会把 {path} 当成新文件（.gitignore 要有 runs/）"


def test_out_file_problem(tmp_path, monkeypatch):
    """--json / --plot 在干活之前就查：目录、链接、不存在的上级目录、没有写权限，各一句中文。"""
    from common.run.out_dir import out_file_problem

    assert out_file_problem(tmp_path / "r.json", "--json") is None
    assert "是一个已有的目录" in out_file_problem(tmp_path, "--json")
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    assert "符号链接" in out_file_problem(tmp_path / "link.json", "--json")
    assert "不存在" in out_file_problem(tmp_path / "no" / "r.json", "--json")
    monkeypatch.setattr(os, "access", lambda *a: False)  # root 也写得进只读目录：这里模拟
    assert "没有权限" in out_file_problem(tmp_path / "r.json", "--plot")
