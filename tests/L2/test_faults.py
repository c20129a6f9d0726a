"""L2.07 的运行目录在故障下从不说谎（issue 24）：kill -9、Ctrl-C、磁盘满、坏文件、两个进程抢一个目录、坏的值。

每个情形的结局只有两种：
- **正确的结果**：续跑后 metrics.jsonl（去掉计时/显存）、最终权重、eval_after.json 和一口气跑完的那次逐位相同；
- **拒绝**：退出码非 0，stderr 里没有 Traceback，有一句中文点名是哪个文件/哪个值，运行目录里的文件原样不动。

issue 35 加上了运行周围的工具：0 字节的 checkpoint、SIGTERM、第一次存盘/第一次评估时停下、会在运行中途才崩溃的
值和模型目录（都在建运行目录之前拒绝），以及跑完后不留 run.lock。

故障由 tests/fault_inject.py 注入（在某个时刻 SIGKILL / SIGINT / ENOSPC / 往 exp_avg 里放 NaN），
脚本本身原样运行。磁盘满和只读目录在 Linux 上用 user namespace 里的小 tmpfs 真的做出来；做不出来时改为注入。
全部是 slow 测试（CI 跑）：每个子进程都是 tiny 预设的几步，本项目的 2 核机器上整个文件约几分钟。
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.run.metrics import deterministic_part, read_metrics

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
INJECT = Path(__file__).resolve().parents[1] / "fault_inject.py"
STEPS = 4
FAST = [
    "--n-heldout", "4", "--prompts-per-step", "2", "--group-size", "4", "--micro-batch", "8",
    "--max-new-tokens", "12", "--n-train", "100", "--pass-k", "2", "--eval-every", "2",
    "--save-every", "1", "--steps", str(STEPS),
]  # fmt: skip
RUN_FILES = ("config.json", "metrics.jsonl", "eval_before.json", "eval_after.json", "curves.png",
             "checkpoint.pt")  # fmt: skip

pytestmark = pytest.mark.slow


def _env(**extra) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = str(ROOT)
    env.pop("FAULT", None)
    return {**env, **extra}


def run(*args, fault: str | None = None, cwd=ROOT, sighup=None) -> subprocess.CompletedProcess:
    """grpo_train.py（fault 给了就经 fault_inject.py）；返回完成的进程，不检查退出码。
    sighup：子进程开始时 SIGHUP 的处置（SIG_DFL / SIG_IGN）；不给就继承 pytest 的（nohup 下是 SIG_IGN）。"""
    program = [str(INJECT)] if fault else [str(SCRIPT)]
    env = _env(FAULT=fault) if fault else _env()
    start = None if sighup is None else (lambda: signal.signal(signal.SIGHUP, sighup))
    return subprocess.run(
        [sys.executable, *program, *map(str, args)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=600, preexec_fn=start,
    )  # fmt: skip


def ok(proc) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}：\n{proc.stderr[-3000:]}"
    return proc


def refused(proc, *needles) -> str:
    """退出码非 0、没有 traceback、最后一行是中文并且点名了 needles。返回 stderr。"""
    err = proc.stderr
    assert proc.returncode != 0, f"应该拒绝，却 exit 0：\n{proc.stdout[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
    for needle in needles:
        assert needle in err, f"stderr 里没有 {needle!r}：\n{err[-2000:]}"
    return err


def killed(proc) -> None:
    assert proc.returncode == -9, (
        f"应该在注入点被 SIGKILL，却 exit {proc.returncode}：\n{proc.stderr[-2000:]}"
    )


def files_of(folder: Path) -> dict[str, str]:
    """运行文件的 sha256（不含锁文件）：「原样不动」= 前后相等。"""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != "run.lock"
    }


def _weights(folder: Path) -> dict:
    return torch.load(folder / "checkpoint.pt", weights_only=True)["model"]


def assert_same_as(folder: Path, base: Path) -> None:
    """续跑完的目录 == 一口气跑完的目录：每一行（除计时/显存）、最终权重、eval_after.json。"""
    rows, base_rows = read_metrics(folder / "metrics.jsonl"), read_metrics(base / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for a, b in zip(rows, base_rows):
        assert deterministic_part(a) == deterministic_part(b), (
            f"第 {a['step']} 步和不中断的运行不同"
        )
    w, bw = _weights(folder), _weights(base)
    assert w.keys() == bw.keys() and all(torch.equal(w[k], bw[k]) for k in w)
    after = json.loads((folder / "eval_after.json").read_text(encoding="utf-8"))
    assert after == json.loads((base / "eval_after.json").read_text(encoding="utf-8"))
    assert (folder / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name], "留下了临时文件"
    assert not (folder / "run.lock").exists(), "跑完之后 run.lock 应该删掉（issue 35）"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """一口气跑完 STEPS 步的运行目录：所有「正确的结果」都和它比。"""
    out = tmp_path_factory.mktemp("base") / "run"
    proc = ok(run("--out", out, *FAST))
    assert "held-out 贪心正确率" in proc.stdout
    return out


def copy_of(base: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(base, dst)
    return dst


# ---- kill -9 / Ctrl-C 在选定的时刻，然后 --resume：和不中断的运行逐位相同 ----------------------------
def test_kill_chain_checkpoint_rename_half_row_final_outputs(base, tmp_path):
    out = tmp_path / "run"
    # 1) 第 2 个 checkpoint 已完整写进 .tmp、还没改名就被杀：上一个 checkpoint（第 1 步）完好
    killed(run("--out", out, *FAST, fault="kill:replace=checkpoint.pt:2"))
    assert (out / "checkpoint.pt.tmp").is_file()
    # 2) 续跑，在第 3 步的 metrics 行写到一半时被杀
    killed(run("--resume", out, fault="kill:append:2"))
    assert not (out / "checkpoint.pt.tmp").exists(), "续跑时应清掉上次留下的 .tmp"
    # 3) 续跑，最后一个 checkpoint 存好之后、eval_after.json 改名之前被杀
    killed(run("--resume", out, fault="kill:replace=eval_after.json:1"))
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == STEPS
    assert not (out / "eval_after.json").exists()
    # 4) checkpoint 已在最后一步：续跑只补齐 eval_after.json、curves.png 和 before -> after 那行
    proc = ok(run("--resume", out))
    assert "held-out 贪心正确率" in proc.stdout and "临时文件" in proc.stdout
    assert_same_as(out, base)


def test_kill_chain_plot_ctrl_c_truncation(base, tmp_path):
    out = tmp_path / "run"
    # 1) 写 curves.png 的时候被杀（以前留下 0 字节的 curves.tmp.png）：第 2 步的 checkpoint 已存好
    killed(run("--out", out, *FAST, fault="kill:replace=curves.png:2"))
    assert (out / "curves.png.tmp").is_file()
    # 2) 续跑，第 3 步存完 checkpoint 后画图时按了 Ctrl-C（以前：matplotlib 里的 KeyboardInterrupt traceback）
    proc = run("--resume", out, fault="sigint:savefig:1")
    assert proc.returncode == 130
    err = refused(proc, f"--resume {out} --steps {STEPS}")
    assert err.strip().splitlines()[-1].startswith("已中断（Ctrl-C）。checkpoint 停在第 3 步"), err
    # 3) 续跑，第 4 步的行已记下、checkpoint 改名之前被杀：metrics 比 checkpoint 多一行
    killed(run("--resume", out, fault="kill:replace=checkpoint.pt:1"))
    # 4) 续跑时正在截断 metrics.jsonl（删掉 checkpoint 之后那一行）的那一刻被杀：旧文件原样还在
    killed(run("--resume", out, fault="kill:replace=metrics.jsonl:1"))
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4]
    ok(run("--resume", out))
    assert_same_as(out, base)


# ---- 运行目录里的每个文件坏掉：续跑要么给出正确的结果，要么拒绝且什么都不改 -------------------------
def _random_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = os.urandom(4096)
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def _as_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _wrong_structure(path: Path) -> None:
    torch.save({"weights": torch.zeros(3)}, path)


def _nan_in_exp_avg(path: Path) -> None:
    """issue 里的情形：exp_avg 里 7 个 NaN。连校验和一起重算，只剩「含 NaN」这一道关。"""
    import common.run.checkpoint as C

    payload = torch.load(path, weights_only=True)
    payload["optimizer"]["state"][0]["exp_avg"].view(-1)[:7] = float("nan")
    payload["sha256"] = C._digests({k: v for k, v in payload.items() if k != "sha256"})
    torch.save(payload, path)


def _edit_lr(path: Path) -> None:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**cfg, "lr": 1e-3}), encoding="utf-8")


def _bad_middle_line(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join([lines[0], "{not json\n", *lines[1:]]), encoding="utf-8")


def _drop_row(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[2:]), encoding="utf-8")


REFUSALS = [
    ("checkpoint.pt", Path.unlink, "checkpoint.pt 不存在"),
    ("checkpoint.pt", _as_directory, "是一个目录"),
    ("checkpoint.pt", _truncate, "损坏"),
    ("checkpoint.pt", _zero_bytes, "读不出 checkpoint"),  # 以前：EOFError，再 IndexError
    ("checkpoint.pt", _random_middle, "checkpoint.pt"),
    ("checkpoint.pt", _wrong_structure, "不是一个能续跑的 checkpoint"),
    ("checkpoint.pt", _nan_in_exp_avg, "NaN/inf"),
    ("config.json", _truncate, "config.json 读不出"),
    ("config.json", _edit_lr, "lr = 0.001，checkpoint 里是 3e-05"),
    ("config.json", Path.unlink, "config.json 不存在"),
    ("metrics.jsonl", _bad_middle_line, "metrics.jsonl 第 2 行"),
    ("metrics.jsonl", _drop_row, "缺第 [2] 步"),
    ("metrics.jsonl", Path.unlink, "metrics.jsonl 不见了"),
]


@pytest.mark.parametrize(
    "name, corrupt, needle", REFUSALS, ids=[f"{n}-{c.__name__}" for n, c, _ in REFUSALS]
)
def test_a_broken_file_is_refused_and_nothing_changes(base, tmp_path, name, corrupt, needle):
    out = copy_of(base, tmp_path)
    corrupt(out / name)
    before = files_of(out)
    refused(run("--resume", out, "--steps", STEPS + 2), needle)
    assert files_of(out) == before, "拒绝续跑时运行目录里的文件必须原样不动"


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_step_0(base, tmp_path):
    """以前：第 1 步存盘之前就停了（加载模型出错、权重含 NaN、被杀），目录里只剩 config.json：
    同一个 --out 重跑说「续跑用 --resume」，--resume 又说「没有 checkpoint」，死路一条。"""
    out = tmp_path / "run"
    killed(run("--out", out, *FAST, fault="kill:replace=eval_before.json:1"))
    assert (out / "config.json").is_file() and not (out / "checkpoint.pt").exists()
    refused(run("--out", out, *FAST), f"--resume {out}")
    proc = ok(run("--resume", out))
    assert "从第 0 步开始" in proc.stdout
    assert_same_as(out, base)


@pytest.mark.parametrize(
    "fault, exit_code",
    [("kill:torch.save:1", -9), ("sigint:replace=eval_before.json:1", 130),
     ("sigterm:replace=eval_before.json:1", 143)],
    ids=["kill-in-first-checkpoint", "ctrl-c-in-first-eval", "sigterm-in-first-eval"],
)  # fmt: skip
def test_stopped_before_the_first_checkpoint(base, tmp_path, fault, exit_code):
    """issue 35 以前：第一次存 checkpoint 时被 kill -9 -> 既不能续跑（「checkpoint.pt 不存在」）也不能
    重用（「续跑用 --resume」）；第一次评估时 Ctrl-C -> 提示「不能续跑」，--resume 却从第 0 步开始。"""
    out = tmp_path / "run"
    proc = run("--out", out, *FAST, fault=fault)
    assert proc.returncode == exit_code, proc.stderr[-2000:]
    if exit_code > 0:
        refused(proc, "续跑会从第 0 步开始", f"--resume {out} --steps {STEPS}")
    assert not (out / "checkpoint.pt").exists()
    proc = ok(run("--resume", out))
    assert "这次从第 0 步开始" in proc.stdout
    assert_same_as(out, base)


def test_sigterm_is_handled_like_ctrl_c(base, tmp_path):
    """issue 35 以前：SIGTERM -> exit 143，没有一句话，也没有续跑的提示。"""
    out = tmp_path / "run"
    proc = run("--out", out, *FAST, fault="sigterm:replace=checkpoint.pt:2")
    assert proc.returncode == 143
    err = refused(proc, f"--resume {out} --steps {STEPS}")
    assert err.strip().splitlines()[-1].startswith("已中断（SIGTERM）。checkpoint 停在第 1 步"), err
    ok(run("--resume", out))
    assert_same_as(out, base)


def test_sighup_is_handled_like_sigterm(base, tmp_path):
    """issue 44 以前：SSH 断开（SIGHUP）-> exit 129，没有一句话，run.lock 留在目录里。"""
    out = tmp_path / "run"
    proc = run("--out", out, *FAST, fault="sighup:replace=checkpoint.pt:2", sighup=signal.SIG_DFL)
    assert proc.returncode == 129, proc.stderr[-2000:]
    err = refused(proc, f"--resume {out} --steps {STEPS}")
    assert err.strip().splitlines()[-1].startswith("已中断（SIGHUP）。checkpoint 停在第 1 步"), err
    assert not (out / "run.lock").exists(), "SIGHUP 之后 run.lock 应当被删掉"
    ok(run("--resume", out))
    assert_same_as(out, base)


def test_sighup_under_nohup_is_ignored(base, tmp_path):
    """nohup（或 pytest 本身在 nohup 下）让进程从一开始就不理 SIGHUP：运行不停，结果和不受打扰的一样。
    L2.07 第 6.4 节让学习者用 tmux 或 nohup，就是靠这一点。"""
    out = tmp_path / "run"
    proc = ok(
        run("--out", out, *FAST, fault="sighup:replace=checkpoint.pt:2", sighup=signal.SIG_IGN)
    )
    assert "已中断" not in proc.stderr and not (out / "run.lock").exists()
    assert_same_as(out, base)


def test_lost_outputs_and_leftover_tmp_are_completed(base, tmp_path):
    """eval_before.json、eval_after.json、curves.png 丢了，还有上次留下的 .tmp：续跑把它们补齐（结果不变）。"""
    out = copy_of(base, tmp_path)
    for name in ("eval_before.json", "eval_after.json", "curves.png"):
        (out / name).unlink()
    (out / "curves.tmp.png").write_bytes(b"")  # 旧版本留下的 0 字节临时图
    (out / "checkpoint.pt.tmp").write_bytes(b"half")
    proc = ok(run("--resume", out))
    assert "重新做一次训练前评估" in proc.stdout
    assert (out / "eval_before.json").read_bytes() == (base / "eval_before.json").read_bytes()
    assert_same_as(out, base)


# ---- 两个进程写同一个 --out ----------------------------------------------------------------------
def test_two_runs_into_one_folder(tmp_path):
    """以前：两个都 exit 0，步数交错成 [1, 1, 2, 2, 3, 3]。现在：一个跑完，另一个中文拒绝。"""
    out = tmp_path / "run"
    args = [sys.executable, str(SCRIPT), "--out", str(out), *FAST]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(), cwd=ROOT) for _ in range(2)]  # fmt: skip
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0 and codes[1] != 0, [(c, e[-500:]) for c, _, e in results]
    loser = next(err for code, _, err in results if code != 0)
    assert "Traceback" not in loser
    assert "正被另一个训练进程" in loser or "已经有一次运行" in loser, loser
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, STEPS + 1))


# ---- 磁盘满、只读目录 ------------------------------------------------------------------------------
def _namespace_ok() -> bool:
    """能不能在 user namespace 里挂一个 tmpfs（Linux；不需要 root）。"""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
         "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d && rmdir $d"],
        capture_output=True,
    )  # fmt: skip
    return probe.returncode == 0


def _in_small_disk(tmp_path: Path, size: str, script: str) -> subprocess.CompletedProcess:
    """在 user namespace 里把 tmp_path/disk 挂成 size 大的 tmpfs，再跑 script（sh）。"""
    disk = tmp_path / "disk"
    disk.mkdir()
    line = f"mount -t tmpfs -o size={size} tmpfs {disk} && {script}"
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", line],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600,
    )  # fmt: skip


def test_a_full_disk_names_enospc_and_the_run_resumes_after(base, tmp_path):
    """以前：torch.save 报 `unexpected pos …`（traceback），留下写了一半的 .tmp。"""
    argv = " ".join(map(str, [sys.executable, SCRIPT, "--out", tmp_path / "disk" / "run", *FAST]))
    if _namespace_ok():  # 一块 16 MiB 的盘：第 1 步的 checkpoint（约 10 MB）放得下，第 2 步的放不下
        keep = tmp_path / "kept"
        proc = _in_small_disk(
            tmp_path, "16m", f"{argv} ; rc=$? ; cp -a {tmp_path / 'disk' / 'run'} {keep} ; exit $rc"
        )
        out = keep
        err = refused(proc, "ENOSPC", "checkpoint.pt", "需要约", "只剩", "--resume")
    else:  # 挂不了 tmpfs：在 torch.save 写到一半时注入 ENOSPC（torch 报错的原样）
        out = tmp_path / "run"
        proc = run("--out", out, *FAST, fault="enospc:torch.save:2")
        err = refused(proc, "ENOSPC", "checkpoint.pt", "--resume")
    assert "第 1 步" in err
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name], "留下了写了一半的 .tmp"
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 1
    ok(run("--resume", out))  # 腾出空间（这里：换到大盘上）之后接着跑，结果和不中断的一样
    assert_same_as(out, base)


def test_enospc_in_the_middle_of_torch_save(tmp_path):
    """磁盘在 torch.save 写到一半时满了（空间检查之后别的进程占满）：同样一句 ENOSPC，不留 .tmp。"""
    out = tmp_path / "run"
    refused(run("--out", out, *FAST, fault="enospc:torch.save:2"), "ENOSPC", "checkpoint.pt")
    assert not (out / "checkpoint.pt.tmp").exists()
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 1


def test_read_only_or_file_out_is_refused_before_the_model_loads(base, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x", encoding="utf-8")
    refused(run("--out", a_file, *FAST), "是一个文件")
    refused(run("--out", a_file / "run", *FAST), "在文件")
    out = copy_of(base, tmp_path)
    before = files_of(out)
    if _namespace_ok():  # 真的只读：把运行目录复制进 tmpfs，再 remount 成只读
        disk = tmp_path / "disk"
        proc = _in_small_disk(
            tmp_path, "64m",
            f"cp -a {out} {disk}/run && mount -o remount,ro {disk} && "
            f"{sys.executable} {SCRIPT} --resume {disk}/run --steps {STEPS + 2}",
        )  # fmt: skip
    else:
        proc = run("--resume", out, "--steps", STEPS + 2, fault=f"none:access={out}:1")
    refused(proc, "没有权限在", "里写")
    assert files_of(out) == before


# ---- NaN/inf、坏的值、坏的数据 ---------------------------------------------------------------------
def _resume_step_2_with(tmp_path: Path, fault: str, *needles: str) -> Path:
    """停在第 1 步的 checkpoint，再带着 fault 续跑：第 2 步必须被拒绝，第 1 步的 checkpoint 和指标原样还在。"""
    out = tmp_path / "run"
    killed(run("--out", out, *FAST, fault="kill:replace=checkpoint.pt:2"))
    (out / "checkpoint.pt.tmp").unlink()
    good = (out / "checkpoint.pt").read_bytes()
    refused(run("--resume", out, fault=fault), *needles)
    assert (out / "checkpoint.pt").read_bytes() == good, "上一个好的 checkpoint 必须原样还在"
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    return out


def test_nan_in_exp_avg_stops_the_run_before_anything_is_saved(tmp_path):
    """以前：exp_avg 里的 NaN 下一步进了权重、存进 checkpoint，所有回答都是 ''，exit 0。"""
    _resume_step_2_with(tmp_path, "nan:adamw.step:1", "第 2 步出现了 NaN/inf", "优化器状态", "--lr")


def test_nan_in_a_gradient_stops_before_the_update_and_keeps_the_step(tmp_path):
    """梯度里出现 NaN、loss 却是有限的（在反向里才生出来的 NaN，第 86 步那种）：在 AdamW 更新之前停下，
    权重还是更新前的；这一步的回答、reward 和更新前的权重存进 bad_step_2.pt，能离线重放。"""
    from common.run.bad_step import load_bad_step

    needles = ("第 2 步的梯度范数是 nan", "在更新权重之前停了下来", "bad_step_2.pt")
    out = _resume_step_2_with(tmp_path, "nan:backward:1", *needles)  # 第 2 步的第一次 backward
    bad = load_bad_step(out / "bad_step_2.pt")
    weights = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    assert bad["step"] == 2 and set(bad["model"]) == set(weights)
    assert all(torch.isfinite(t).all() for t in bad["model"].values()), "存下的是更新前的好权重"
    n = len(bad["texts"])
    assert bad["rewards"].shape == bad["advantages"].shape == (n,)
    assert bad["rollout"]["completion_ids"].shape[0] == n and len(bad["train_prompt_ids"]) * 4 == n


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--lr", "inf"], "--lr"),
        (["--eps-low", "nan", "--num-iterations", "2"], "--eps-low"),
        (["--save-every", "0"], "--save-every"),
        (["--max-new-tokens", "100000"], "的上下文（max_position_embeddings"),
        # issue 35：以前这些值通过了检查，建好运行目录之后才崩溃（或一声不响地卡住）
        (["--top-p", "1e-300"], "--top-p = 1e-300 不合法"),
        (["--seed", "99999999999999999999"], "--seed = 99999999999999999999 不合法"),
        (["--n-train", "2000000000"], "--n-train = 2000000000 不合法"),
        (["--pass-k", "100000000"], "减小 --pass-k 或 --eval-batch"),
        (["--group-size", "100000000"], "减小 --prompts-per-step 或 --group-size"),
        (["--data", "gsm8k", "--n-heldout", "5000"], "超过了 GSM8K test 的 1319 道题"),
        (["--step", "5"], "是不是 --steps"),
    ],
)
def test_bad_values_end_in_one_chinese_line(tmp_path, argv, needle):
    out = tmp_path / "run"
    refused(run("--out", out, *FAST, *argv), "配置错误", needle)
    assert not out.exists()


def _jsonl(path: Path, rows, encoding="utf-8") -> Path:
    path.write_bytes(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(encoding)
    )
    return path


@pytest.mark.parametrize(
    "rows, encoding, needle",
    [
        ([{"question": f"题 {i}", "answer": f"#### {i}"} for i in range(30)], "gbk", "不是 UTF-8"),
        ([{"question": "q", "answer": "#### 1"}] * 40, "utf-8", "去重后只有 1 道不同的题"),
        ([{"question": f"q{i}", "answer": "#### 1e309" if i == 7 else "#### 2"} for i in range(30)],
         "utf-8", "第 8 行：`####` 后面的 '1e309' 不是一个数"),
    ],
)  # fmt: skip
def test_bad_data_is_refused_before_any_model_loads(tmp_path, rows, encoding, needle):
    data = _jsonl(tmp_path / "data.jsonl", rows, encoding)
    out = tmp_path / "run"
    refused(run("--out", out, *FAST, "--data", data, "--n-heldout", "20"), needle, str(data))
    assert not out.exists(), "数据有错时不应建运行目录"


def _dtype_bfloat17(folder: Path) -> None:
    _edit_json(folder / "config.json", dtype="bfloat17")


def _template_reaching_python(folder: Path) -> None:
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ messages[0]['content'] }}"
    _edit_json(folder / "tokenizer_config.json", chat_template=evil)


def _edit_json(path: Path, **changes) -> None:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**cfg, **changes}), encoding="utf-8")


@pytest.mark.parametrize(
    "break_it, needle",
    [(_dtype_bfloat17, "dtype 是 'bfloat17'"), (_template_reaching_python, "想访问 Python 的内部")],
    ids=["dtype-bfloat17", "template-sandbox"],
)  # fmt: skip
def test_a_model_folder_that_fails_mid_run_is_refused_before_the_run(tmp_path, break_it, needle):
    """issue 35 以前：`model_dir check` 接受 "dtype": "bfloat17"，训练时 AttributeError；想访问 Python 内部的
    chat template 在第一次 rollout 时被沙箱拦下（traceback）。两者都留下只有 config.json 的运行目录。"""
    from small_qwen import make_model_dir

    folder = make_model_dir(tmp_path / "model")
    break_it(folder)
    out = tmp_path / "run"
    refused(run("--out", out, "--model", folder, *FAST), "配置错误", needle, str(folder))
    assert not out.exists(), "模型目录有错时不应建运行目录"


# ---- issue 47：链接、用户自己的文件、逐题结果、奇怪的 stdout ------------------------------------------
def test_a_planted_run_lock_link_and_a_users_tmp_file(tmp_path):
    """run.lock 是指向目录外文件的链接：拒绝，外面的文件不变。--out 指向已有目录：用户自己的 thesis.tmp 不删。"""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.lock").symlink_to(victim)
    refused(run("--out", out, *FAST), "run.lock", "符号链接")
    assert victim.read_text() == "precious\n" and not (out / "config.json").exists()
    (out / "run.lock").unlink()
    (out / "thesis.tmp").write_text("a learner's own file")
    ok(run("--out", out, *FAST))
    assert (out / "thesis.tmp").read_text() == "a learner's own file"


def test_a_cut_per_question_row_before_the_checkpoint_is_refused(base, tmp_path):
    """以前：eval_questions.jsonl 最后一行（第 4 步，<= checkpoint）写了一半，--resume 悄悄丢掉它。"""
    out = copy_of(base, tmp_path)
    path = out / "eval_questions.jsonl"
    text = path.read_bytes()
    path.write_bytes(text[: text.rstrip(b"\n").rfind(b"\n") + 20])  # 最后一行只剩 19 个字节
    before = files_of(out)
    err = refused(run("--resume", out, "--steps", STEPS + 2), "eval_questions.jsonl", "只写了一半")
    assert f"缺第 [{STEPS}] 步" in err
    assert files_of(out) == before, "拒绝续跑时运行目录里的文件必须原样不动"


def test_an_ascii_or_full_stdout(tmp_path):
    """LC_ALL=C、UTF-8 模式关着（ASCII 的 stdout）：照常跑完。stdout 是 /dev/full：一行中文说是 stdout。"""
    env = _env(LC_ALL="C", PYTHONUTF8="0")
    env.pop("LANG", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "a"), *FAST],
                          capture_output=True, env=env, cwd=ROOT, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-2000:]
    assert "held-out 贪心正确率".encode() in proc.stdout
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "b"), *FAST],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=_env(),
                              cwd=ROOT, timeout=600)  # fmt: skip
    refused(proc, "写不了标准输出 stdout", "--resume")


def test_ctrl_c_twice_10_ms_apart(base, tmp_path):
    """Ctrl-C 两次、隔 10 ms：一行中文、退出码 130，续跑和一口气跑完的逐位相同。第二次落在哪里取决于时机；
    落在收尾里（以前多出一个 traceback）的那种情形由 tests/common/test_run_folder.py 里的测试确定地做出来。"""
    out = tmp_path / "run"
    proc = run("--out", out, *FAST, fault="sigint2:replace=checkpoint.pt:2")
    assert proc.returncode == 130
    err = refused(proc, f"--resume {out} --steps {STEPS}")
    assert "已中断（Ctrl-C）" in err
    ok(run("--resume", out))
    assert_same_as(out, base)
