"""common.config.env_check：GPU 识别、带宽表、预设与装箱表的判断；没有 GPU 时指向「无 GPU 路线」。"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.config import env_check


def test_bandwidth_lookup():
    assert env_check.bandwidth_tbs("NVIDIA GeForce RTX 5090") == 1.79
    assert env_check.bandwidth_tbs("NVIDIA H200") == 4.80
    assert env_check.bandwidth_tbs("NVIDIA A100-SXM4-80GB") == 2.04
    assert env_check.bandwidth_tbs("NVIDIA A100-SXM4-40GB") == 1.56
    assert env_check.bandwidth_tbs("NVIDIA H100 PCIe") == 2.00
    assert env_check.bandwidth_tbs("NVIDIA GeForce RTX 3090 Ti") == 1.01
    assert env_check.bandwidth_tbs("Some Future GPU") is None
    assert "未知" in env_check.bandwidth_class(None)
    assert "1.0 倍" in env_check.bandwidth_class(1.79)


def test_library_versions_lists_installed_and_missing():
    versions = env_check.library_versions()
    assert versions["torch"] == torch.__version__.split("+")[0] or versions["torch"].startswith(
        torch.__version__[:4]
    )
    assert set(versions) == set(env_check.LIBRARIES)


def test_cpu_only_report_points_to_the_no_gpu_route(capsys, monkeypatch):
    monkeypatch.setattr(env_check, "gpu_info", lambda: None)
    assert env_check.main([]) == 0
    out = capsys.readouterr().out
    assert "没有可用的 CUDA GPU" in out
    assert env_check.NO_GPU_ROUTE in out
    assert "tiny" in out and "可以跑" in out
    assert "qwen3-0.6b" in out and "需要 CUDA GPU" in out
    assert "Qwen3-0.6B full" in out  # 32 GiB 参考装箱表


def test_fit_table_names_its_optimizer_and_links_the_vram_table(capsys, monkeypatch):
    """装箱表的 ❌ 说明按哪个优化器记账（fp32 AdamW），1.7B 全参数的 8-bit 实验指向 L1.04 第 7.1 节；
    0.6B 的几个显存数字不在这里并排，指向 L1.01 第 2.1 节那张表（那张表确实在）。"""
    monkeypatch.setattr(env_check, "gpu_info", lambda: None)
    assert env_check.main([]) == 0
    out = capsys.readouterr().out
    assert "vLLM colocate 布局，fp32 AdamW" in out
    assert env_check.FULL_1P7B_NOTE in out and "8-bit AdamW" in env_check.FULL_1P7B_NOTE
    assert "Qwen3-1.7B full" in env_check.runnable_rows(32.0)["no"]
    assert env_check.VRAM_TABLE_NOTE in out
    root = Path(__file__).resolve().parents[2]
    lesson = (root / "L1_concepts" / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    assert "L1_concepts/01_what_you_need/README.md 第 2.1 节" in env_check.VRAM_TABLE_NOTE
    assert "### 2.1 " in lesson and "<!-- vram-story:begin -->" in lesson
    ledger_lesson = (root / "L1_concepts" / "04_vram_ledger" / "README.md").read_text(
        encoding="utf-8"
    )
    assert "### 7.1 实验：Qwen3-1.7B 全参数放进 32 GB" in ledger_lesson


def _fake_gpu(gib, name="NVIDIA GeForce RTX 5090"):
    tbs = env_check.bandwidth_tbs(name)
    return {
        "name": name,
        "count": 1,
        "total_gib": gib,
        "capability": "12.0",
        "bandwidth_tbs": tbs,
        "bandwidth_class": env_check.bandwidth_class(tbs),
        "cuda": "13.0",
        "arch_list": ["sm_80", "sm_90", "sm_100", "sm_120"],
    }


def test_report_for_a_5090(capsys, monkeypatch):
    monkeypatch.setattr(env_check, "gpu_info", lambda: _fake_gpu(32.0))
    assert env_check.main([]) == 0
    out = capsys.readouterr().out
    assert "RTX 5090" in out and "1.79 TB/s" in out
    rows = {r["preset"]: r for r in env_check.preset_report(_fake_gpu(32.0))}
    assert rows["qwen3-0.6b"]["ok"] and rows["qwen3-1.7b-lora"]["ok"] and rows["tiny"]["ok"]
    assert "无 GPU 路线" not in out


def test_a_build_without_the_cards_arch_says_what_to_do(capsys, monkeypatch):
    """issue 44 以前：sm_120 的检查是一行 python -c，不在列表里时什么也不说。"""
    old_build = {**_fake_gpu(32.0), "arch_list": ["sm_80", "sm_86", "sm_90"], "cuda": "12.4"}
    monkeypatch.setattr(env_check, "gpu_info", lambda: old_build)
    assert env_check.main([]) == 1
    captured = capsys.readouterr()
    assert "没有为这张卡（sm_120）编译的 kernel" in captured.err and "cu128" in captured.err
    assert "❌" in captured.out
    assert env_check.arch_problem(_fake_gpu(32.0)) is None
    ptx = {**old_build, "arch_list": ["sm_90", "compute_90"]}  # PTX 能在更新的卡上 JIT
    assert env_check.arch_problem(ptx) is None
    ampere = {**old_build, "capability": "8.6", "arch_list": ["sm_80"]}  # 同一代的旧 minor 能跑
    assert env_check.arch_problem(ampere) is None


def test_small_card_cannot_run_the_full_finetune():
    rows = {r["preset"]: r for r in env_check.preset_report(_fake_gpu(8.0, "NVIDIA T4"))}
    assert not rows["qwen3-0.6b"]["ok"]
    verdicts = env_check.runnable_rows(8.0)
    assert "Qwen3-0.6B full" in verdicts["no"]
    assert env_check.runnable_rows(32.0)["fits"][0] == "Qwen3-0.6B full"


def test_rejects_arguments(capsys):
    assert env_check.main(["--gpu"]) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="需要 CUDA")
def test_real_gpu_is_described():
    info = env_check.gpu_info()
    assert info["total_gib"] > 0 and info["name"]


# 在子进程里挡住 torch 和 transformers 的 import（就像还没安装），再按 README 的方式运行 env_check
_WITHOUT_TORCH = """
import importlib.abc, runpy, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NotInstalled())
sys.argv = ["env_check"]
runpy.run_module("common.config.env_check", run_name="__main__", alter_sys=True)
"""


def test_before_installation_it_says_what_to_install():
    """README 让学习者在安装之前就运行 python -m common.config.env_check：缺库时要说缺什么、怎么装，退出码非 0。"""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
    assert "缺少 torch、transformers" in r.stderr
    for _, command in env_check.INSTALL_STEPS:
        assert command in r.stderr
    assert (
        "https://download.pytorch.org/whl/cpu" in r.stderr and 'pip install -e ".[dev]"' in r.stderr
    )


def test_install_commands_are_the_readmes():
    """env_check 打印的安装命令是 README「安装与测试」里的原样命令（两处必须一起改）。"""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for what, command in env_check.INSTALL_STEPS:
        assert f"\n{command}\n" in readme, f"README 里没有这条安装命令：{command}（{what}）"


@pytest.mark.slow  # 几秒 CPU：默认一档保持在 60 CPU 秒以内（CI 的 slow 一档照样跑）
def test_env_check_reports_a_model_folder(tmp_path, capsys):
    """python -m common.config.env_check --model 目录：目录里是什么模型，grpo_train.py --model 在这张卡上会怎么选。"""
    from small_qwen import make_model_dir

    from common.config import env_check

    folder = make_model_dir(tmp_path / "small-qwen2", family="qwen2")
    assert env_check.main(["--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "qwen2" in out and "grpo_train.py --model" in out and "全参数" in out
    assert env_check.main(["--model", str(tmp_path / "nope")]) == 2
    assert "模型目录不存在" in capsys.readouterr().err


def test_lesson_shows_what_env_check_prints_now(capsys, monkeypatch):
    """L1.01 第 5 节贴的无 GPU 输出就是现在的输出：除了本机的 Python 那一行和版本号换成 … 的库版本那一行，逐行相同。"""
    monkeypatch.setattr(env_check, "gpu_info", lambda: None)
    assert env_check.main([]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    root = Path(__file__).resolve().parents[2]
    lesson = (root / "L1_concepts" / "01_what_you_need" / "README.md").read_text(encoding="utf-8")
    section = lesson.split("## 5. 没有 GPU 怎么办", 1)[1]
    block = section.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    drifts = ("Python ", "库版本：")
    assert [x for x in block if not x.startswith(drifts)] == [
        x for x in printed if not x.startswith(drifts)
    ], (
        "L1.01 第 5 节贴的 env_check 输出过时了：重跑 python -m common.config.env_check，把输出贴回去（库版本那一行的版本号写成 …）"
    )
    versions = next(x for x in block if x.startswith("库版本："))
    assert not any(ch.isdigit() for ch in versions), (
        f"课文的库版本那一行不该写版本号（会过时）：{versions}"
    )
