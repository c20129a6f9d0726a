"""L2.07 第 6、7 节（5090 一页走完、换一个模型）：页上的每条命令都在 CPU 上用替身跑一遍，课文才不会过时。

命令从 README 里 `<!-- tested-commands:begin` 和 `<!-- tested-commands:end -->` 之间的 ```bash 块原样取出
（读的是 Markdown，不是 Python 源码）。每条命令按程序分类，换上 CPU 上能跑的替身：

- 模型目录（页上是 `./Qwen3-0.6B` 这样的相对路径）：每条命令在自己的临时目录里跑，目录名和页上一模一样，指向
  - 小号随机 Qwen3 / Qwen2 目录（tests/small_qwen.py，约 10M 参数，真实的 tokenizer 文件；名字里有 2.5 的用 Qwen2）：
    给不带 --preset 的训练（grpo_train.py、train_trl.py）和 measure_vram.py，它们在 CPU 上真的跑完；
  - 「只有文件头」的真形状目录：config.json 和 tokenizer 与真模型的形状相同，model.safetensors 只有文件头，
    数据区是稀疏文件（不占磁盘，也没有权重）：给 python -m common.vram、model_dir check，以及带 --preset 的训练命令。
    后者在 CPU 上照真模型的形状一路查到「这台机器没有 GPU」为止（中文报错、带账本的数字、不建运行目录）。
- 训练缩成 1 步、每步 2 题 × 2 条、回答最多 8 token、held-out 2 题、不做 pass@k（train_trl 同样缩小）。
- 下载命令只核对写法（这台机器不联网）：`hf download --help`（huggingface_hub 已安装，离线也能跑）里有页上用到的
  每个参数，`HF_ENDPOINT` 确实是 huggingface_hub 读的环境变量；modelscope 没有安装，只核对它的参数在
  `modelscope download` 的参数表里（见 MODELSCOPE_DOWNLOAD_FLAGS 的出处）；`pip install -e ".[x]"` 的 extra 在 pyproject.toml 里。
- GGUF 转换：输入文件不存在时要报「GGUF 文件不存在」，这证明命令的写法被接受；真正的转换在 tests/common/test_gguf.py。

所有子进程都设 CUDA_VISIBLE_DEVICES=""：在有 GPU 的机器上也按 CPU 的行为检查。页上多了一条这里不认识的命令，
测试就失败：给它配一个替身。另外几个测试核对页上贴出来的输出（配方表、账本的决定、报错原文、两种 chat template）
等于代码现在算出的。
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from small_qwen import header_only_dir

from common.config.grpo_config import GRPOConfig
from common.options.presets import get_preset, gpu_recipe
from common.vram.plan import choose_method, run_settings
from common.vram.shapes import MODELS, SHAPES, get_model, shape_for_hub_id

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "L2_algorithm" / "07_grpo_train" / "README.md"
PAGE = "L2.07 第 6、7 节（5090 一页走完 / 换一个模型）"
BEGIN, END = "<!-- tested-commands:begin", "<!-- tested-commands:end -->"
HUB_IDS = {SHAPES[m].hub_id for m in MODELS}
# `modelscope download --help` 列出的参数（modelscope 1.40.2，它的命令行来自 PyPI 上的 modelscope-hub 0.5.1：
# modelscope_hub/cli/download.py 的 DownloadCommand.register；模型名是第一个位置参数 repo_id）。
# modelscope 没装在课程的环境里，所以只能对着这张表核对写法。旧的 --model、--local_dir 还认，但已标为 deprecated。
MODELSCOPE_DOWNLOAD_FLAGS = (
    "--repo-type", "--revision", "--cache-dir", "--local-dir", "--max-workers", "--include",
    "--exclude", "--force", "--continue-on-error", "--tracker-path", "--retry-failed",
)  # fmt: skip
PIP_PACKAGES = ("modelscope",)  # 页上允许直接 pip install 的包（不是本仓库的 extra）
# 训练类命令在 CPU 上的缩小：1 步，每步 2 题 × 2 条，回答最多 8 token，held-out 2 题
SHRINK = {
    "grpo_train.py": {
        "--steps": "1", "--prompts-per-step": "2", "--group-size": "2", "--micro-batch": "4",
        "--max-new-tokens": "8", "--n-heldout": "2", "--pass-k": "0", "--eval-every": "1",
    },
    "measure_vram.py": {
        "--steps": "1", "--prompts": "2", "--group": "2", "--micro-batch": "4", "--max-new-tokens": "8",
    },
    "train_trl.py": {
        "--steps": "1", "--prompts-per-step": "2", "--group-size": "2", "--micro-batch": "4",
        "--max-new-tokens": "8", "--n-heldout": "2",
    },
}  # fmt: skip
SCRIPTS = {
    "L2_algorithm/07_grpo_train/grpo_train.py",
    "L2_algorithm/08_reading_the_curves/compare_runs.py",
    "L1_concepts/04_vram_ledger/measure_vram.py",
    "L3_frameworks/01_trl_vllm_colocate/train_trl.py",
}
MODULES = {"common.config.env_check", "common.vram", "common.model.model_dir"}
# compare_runs.py 的替身：仓库附带的真模型运行（两个 seed，各一个跑到那一步的对照）
REAL_RUNS = ROOT / "L2_algorithm" / "08_reading_the_curves" / "real_recipe"
SHIPPED_PAIRS = {
    "50": (("recipe-s0", "control-s0"), ("recipe-s1", "control-s1")),
    "100": (("recipe-s0", "control100-s0"), ("recipe-s1", "control100-s1")),
}
# 只核对写法的 shell 命令（空机器上的准备、tmux）：程序名 -> 种类
SHELL = {"git": "git", "cd": "cd", "source": "source", "tmux": "tmux", "tar": "tar", "df": "df"}


# ---------------------------------------------------------------- 从课文里取命令 ----------------------------------------
def _page() -> str:
    text = README.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{PAGE}：README 里找不到 {BEGIN} … {END} 标记"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def page_commands() -> list[str]:
    """页上 ```bash 块里的每条命令（续行 `\\` 拼起来，注释去掉），按出现的顺序。"""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", _page(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(shlex.join(argv))
    return commands


def _kind(argv: list[str]) -> str:
    """命令归哪一类替身；不认识的命令是 "?"（测试会失败：给它配一个替身）。"""
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Z_]+=.*", argv[i]):
        i += 1
    prog = argv[i:]
    if prog[:2] == ["hf", "download"]:
        return "hf"
    if prog[:2] == ["modelscope", "download"]:
        return "modelscope"
    if prog[:2] == ["pip", "install"]:
        return "pip"
    if prog[:1] == ["python3"]:  # 空机器上还没有虚拟环境：系统的 python3
        return {"--version": "python-version", "-m": "venv"}.get(
            prog[1] if len(prog) > 1 else "", "?"
        )
    if prog and prog[0] in SHELL:
        return SHELL[prog[0]]
    if prog[:2] == ["python", "-m"] and len(prog) > 2 and prog[2] in MODULES:
        return prog[2]
    if prog[:1] == ["python"] and len(prog) > 1 and prog[1] in SCRIPTS:
        return Path(prog[1]).name
    return "?"


# 其余的要起 hf 的命令行、import torch 或真的训练：slow
FAST = {"modelscope", "pip", "common.vram", "python-version", "venv", *SHELL.values()}


def _params():
    out = []
    for cmd in page_commands():
        marks = () if _kind(shlex.split(cmd)) in FAST else (pytest.mark.slow,)
        out.append(pytest.param(cmd, marks=marks, id=cmd[:80]))
    return out


# ---------------------------------------------------------------- 替身：模型目录 ---------------------------------------
def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _set(argv: list[str], name: str, value: str) -> list[str]:
    """argv 里 name 的值换成 value（没有就加上）。"""
    argv = list(argv)
    if name in argv:
        argv[argv.index(name) + 1] = value
    else:
        argv += [name, value]
    return argv


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """按需造替身目录（同一个模块里只造一次）：("tiny", family) 或 ("header", 形状名)。"""
    root = tmp_path_factory.mktemp("stand_ins")
    made: dict[tuple[str, str], Path] = {}

    def get(kind: str, name: str) -> Path:
        if (kind, name) not in made:
            target = root / f"{kind}-{name}"
            if kind == "tiny":
                from small_qwen import make_model_dir

                made[kind, name] = make_model_dir(target, family=name)
            else:
                made[kind, name] = header_only_dir(target, SHAPES[name])
        return made[kind, name]

    return get


def _model_dirs(argv: list[str]) -> list[str]:
    """命令里的本地模型目录（`./名字`）：--model 的值，model_dir 的位置参数。"""
    dirs = [_flag(argv, "--model")]
    if "common.model.model_dir" in argv:
        dirs += [
            a for a in argv[argv.index("common.model.model_dir") + 2 :] if not a.startswith("-")
        ]
    return [d for d in dirs if d and d.startswith("./")]


def _stand_in(folders, name: str, *, real_shape: bool) -> Path:
    """名字是课程认识形状的模型（SHAPES）且要真形状：只有文件头的目录；否则小号随机目录。"""
    if real_shape and name in SHAPES:
        return folders("header", name)
    return folders("tiny", "qwen2" if "2.5" in name else "qwen3")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
        if argv[1] in SCRIPTS:
            argv[1] = str(ROOT / argv[1])
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


def _fail_text(cmd: str, why: str, proc=None) -> str:
    text = f"{PAGE}的命令跑不通：{cmd}\n  {why}"
    if proc is not None:
        text += f"\n  exit {proc.returncode}\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}"
    return text


# ---------------------------------------------------------------- 每条命令 ----------------------------------------------
def test_the_page_has_the_commands_of_its_seven_steps():
    """页上至少有这七步的命令；每条都有替身（不认识的命令让下面的测试失败）。"""
    kinds = [_kind(shlex.split(c)) for c in page_commands()]
    for kind in ("common.config.env_check", "hf", "modelscope", "measure_vram.py", "grpo_train.py",
                 "train_trl.py", "common.vram"):  # fmt: skip
        assert kind in kinds, f"{PAGE}：页上少了 {kind} 那一步的命令"


@pytest.mark.parametrize("cmd", _params())
def test_every_command_on_the_page_runs_with_its_stand_in(cmd, folders, tmp_path):
    argv = shlex.split(cmd)
    kind = _kind(argv)
    assert kind != "?", _fail_text(
        cmd, "测试不认识这条命令：在 tests/L2/test_5090_page.py 里给它配一个替身"
    )
    check = {
        "hf": _check_hf,
        "modelscope": _check_modelscope,
        "pip": _check_pip,
        "python-version": _check_python_version,
        "venv": _check_shell,
        **dict.fromkeys(SHELL.values(), _check_shell),
    }.get(kind)
    if check is not None:
        check(cmd, argv)
        return
    preset = _flag(argv, "--preset")
    for d in _model_dirs(argv):  # 在 tmp_path 里放一个同名的替身（符号链接）
        name = Path(d).name
        if kind == "common.model.model_dir" and argv[argv.index(kind) + 1] == "from-gguf":
            continue  # from-gguf 的两个位置参数是输入文件和输出目录：都不该预先存在
        real = kind in ("common.vram", "common.model.model_dir") or preset is not None
        if preset is not None:  # 带预设：目录要有预设那个模型的形状
            name = shape_for_hub_id(get_preset(preset).model).name
        (tmp_path / d).symlink_to(_stand_in(folders, name, real_shape=real))
    script = Path(argv[1]).name if kind.endswith(".py") else None
    out = _flag(argv, "--out")
    if (
        script == "compare_runs.py"
    ):  # 替身：页上的运行目录指向仓库附带的真模型运行（L2.08 第 6.2 节）
        pairs = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--pair"]
        step = _flag(argv, "--step")
        assert step in SHIPPED_PAIRS, _fail_text(cmd, f"--step 应当是 {sorted(SHIPPED_PAIRS)} 之一")
        assert len(pairs) == 2, _fail_text(cmd, "页上应当比两个 seed 的运行和对照")
        for names, shipped in zip(pairs, SHIPPED_PAIRS[step]):
            for name, folder in zip(names, shipped):
                (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / name).symlink_to(REAL_RUNS / folder)
        proc = _run(argv, tmp_path)
        assert proc.returncode == 0 and "运行 − 对照" in proc.stdout, _fail_text(
            cmd, "比较失败", proc
        )
        plot = _flag(argv, "--plot")
        assert plot is None or (tmp_path / plot).is_file(), _fail_text(cmd, "没有画出图", proc)
        return
    if script and preset is None:
        for flag, value in SHRINK[script].items():
            argv = _set(argv, flag, value)
    proc = _run(argv, tmp_path)
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, _fail_text(cmd, "出现了 Traceback（应该是一行中文）", proc)
    if script and preset is not None:  # CPU 上：走到「需要 GPU」为止，带账本的决定，什么都不写
        assert proc.returncode != 0 and "需要 NVIDIA GPU" in proc.stderr, _fail_text(
            cmd, "替身是只有文件头的真形状目录：应当在加载之前报「需要 NVIDIA GPU」", proc
        )
        assert "显存账本：" in proc.stderr, _fail_text(cmd, "报错里应当带上显存账本的决定", proc)
        assert out is None or not (tmp_path / out).exists(), _fail_text(
            cmd, f"被拒绝了却建出了运行目录 {out}", proc
        )
        return
    if kind == "common.model.model_dir" and argv[argv.index(kind) + 1] == "from-gguf":
        # 输入文件不存在：报这一句说明参数的写法被接受了（gguf 装没装都一样）
        assert proc.returncode == 2 and "GGUF 文件不存在" in proc.stderr, _fail_text(
            cmd, "文件不存在时应当报「GGUF 文件不存在」", proc
        )
        assert not (tmp_path / argv[-1]).exists(), _fail_text(cmd, "报错了却建出了输出目录", proc)
        return
    assert proc.returncode == 0, _fail_text(cmd, "替身上运行失败", proc)
    if kind == "common.model.model_dir":  # 第 6.2 节：「下完整的 <模型> 应当看到 `…`、`…`」
        name = Path(_model_dirs(argv)[0]).name
        said = re.search(rf"下完整的 {re.escape(name)} 应当看到(.*?)；", _page(), flags=re.S)
        for quoted in re.findall(r"`([^`]+)`", said.group(1)) if said else ():
            assert quoted in proc.stdout, _fail_text(cmd, f"课文说应当看到「{quoted}」", proc)
    if kind == "common.vram":
        assert "grpo_train.py --model 用 GPU 配方" in proc.stdout, _fail_text(
            cmd, "少了训练脚本的决定", proc
        )
    if script == "grpo_train.py":
        run = tmp_path / (out or "")
        assert out and (run / "answers_after.jsonl").is_file(), _fail_text(
            cmd, "运行目录不完整", proc
        )
        assert json.loads((run / "config.json").read_text())["provenance"], _fail_text(
            cmd, "缺 provenance"
        )
    if script == "train_trl.py":
        assert list(tmp_path.glob("runs/*/metrics.jsonl")), _fail_text(
            cmd, "没有写出 metrics.jsonl", proc
        )


def _check_hf(cmd: str, argv: list[str]) -> None:
    env = {}
    while re.fullmatch(r"[A-Z_]+=.*", argv[0]):
        key, value = argv.pop(0).split("=", 1)
        env[key] = value
    assert set(env) <= {"HF_ENDPOINT"}, _fail_text(cmd, f"不认识的环境变量 {sorted(env)}")
    if "HF_ENDPOINT" in env:  # huggingface_hub 真的从这个变量读镜像地址
        read = subprocess.run(
            [sys.executable, "-c", "from huggingface_hub import constants; print(constants.ENDPOINT)"],
            capture_output=True, text=True, env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        assert read.stdout.strip() == env["HF_ENDPOINT"], _fail_text(
            cmd, "huggingface_hub 不读 HF_ENDPOINT 了", read
        )
    helps = subprocess.run(
        [sys.executable, "-m", "huggingface_hub.cli.hf", "download", "--help"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert helps.returncode == 0, _fail_text(cmd, "hf download --help 跑不起来", helps)
    flags = [a for a in argv if a.startswith("--")]
    missing = [f for f in flags if f not in helps.stdout]
    assert not missing, _fail_text(cmd, f"hf download 没有这些参数：{missing}")
    _check_repo_and_dir(cmd, argv[2], _flag(argv, "--local-dir"))


def _check_modelscope(cmd: str, argv: list[str]) -> None:
    flags = [a for a in argv if a.startswith("-")]
    wrong = [f for f in flags if f not in MODELSCOPE_DOWNLOAD_FLAGS]
    assert not wrong, _fail_text(
        cmd, f"modelscope download --help 里没有这些参数：{wrong}（目录是 --local-dir）"
    )
    repo = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else None
    assert repo, _fail_text(cmd, "模型名是 modelscope download 的第一个位置参数")
    _check_repo_and_dir(cmd, repo, _flag(argv, "--local-dir"))


def _check_python_version(cmd: str, argv: list[str]) -> None:
    """页上说要 3.11 或更新：和 pyproject.toml 的 requires-python 一致。"""
    need = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert argv == ["python3", "--version"] and need == ">=3.11", _fail_text(cmd, need)
    assert "Python 的版本（课程要 3.11 或更新" in README.read_text(encoding="utf-8")


def _check_shell(cmd: str, argv: list[str]) -> None:
    """空机器上的准备和 tmux：只核对写法（这台机器上不 clone、不建虚拟环境、不开 tmux 会话）。"""
    ok = {
        "git": len(argv) == 4 and argv[1] == "clone" and argv[2] == "$COURSE_REPO",
        "cd": len(argv) == 2,
        "python3": argv[1:3] == ["-m", "venv"] and len(argv) == 4 and _ignored(argv[3]),
        "source": len(argv) == 2 and argv[1].endswith("/bin/activate"),
        "tmux": argv[1:-1] in (["new", "-s"], ["new", "-A", "-s"]),
        # 还卡之前拷走结果：不带 checkpoint 和 TRL 的 final/（每个几 GB），别的都很小
        "tar": argv[1] == "czf" and "--exclude=checkpoint*" in argv and argv[-1] == "runs/",
        "df": argv == ["df", "-h", "."],  # clone 之前先看这块盘有多少空间
    }[argv[0]]
    assert ok, _fail_text(cmd, "写法不是测试认得的那一种（见 _check_shell）")


def _ignored(path: str) -> bool:
    """git 不跟踪这个目录（虚拟环境、下载的权重不该被 git add . 加进去）。"""
    proc = subprocess.run(["git", "check-ignore", "-q", f"{path}/x"], cwd=ROOT)
    return proc.returncode == 0


def _check_repo_and_dir(cmd: str, repo: str | None, local_dir: str | None) -> None:
    assert repo in HUB_IDS, _fail_text(cmd, f"{repo} 不是课程认识形状的模型：{sorted(HUB_IDS)}")
    assert local_dir == "./" + repo.split("/")[1], _fail_text(
        cmd, "下到的目录名应当和模型名相同（后面的命令按这个名字找它）"
    )


def _check_pip(cmd: str, argv: list[str]) -> None:
    rest = argv[2:]
    if rest[:1] == ["-e"]:  # pip install -e ".[extra]"：extra 要在 pyproject.toml 里
        match = re.fullmatch(r"\.\[([a-z0-9,-]+)\]", rest[1]) if len(rest) == 2 else None
        assert match, _fail_text(cmd, '只认 pip install -e ".[extra]" 这种写法')
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]
        missing = [e for e in match.group(1).split(",") if e not in extras]
        assert not missing, _fail_text(cmd, f"pyproject.toml 里没有这些 extra：{missing}")
    else:
        assert rest and all(p in PIP_PACKAGES for p in rest), _fail_text(cmd, f"不认识的包 {rest}")


# ---------------------------------------------------------------- 页上贴出来的输出 ---------------------------------------
def _section(begin: str, end: str) -> str:
    text = README.read_text(encoding="utf-8")
    assert begin in text, f"L2.07 的 README 里找不到 {begin}"
    return text.split(begin, 1)[1].split(end, 1)[0]


def _recipe_settings():
    r = gpu_recipe()
    return run_settings(
        prompts=r["prompts_per_step"], group=r["group_size"], max_new_tokens=r["max_new_tokens"],
        beta=r["beta"], micro_batch=r["micro_batch"],
    )  # fmt: skip


def test_the_recipe_table_is_the_config_and_presets_toml():
    """第 2.1 节那张表：左列是 GRPOConfig 的默认值，右列是 [recipe.gpu]；[recipe.gpu] 的每个键都在表里。"""
    rows = re.findall(r"^\| `(\w+)` \| `?([^|`]+?)`? \| `?([^|`]+?)`? \|$", _section(
        "<!-- gpu-recipe:begin -->", "<!-- gpu-recipe:end -->"), flags=re.M)  # fmt: skip
    table = {k: (tiny, gpu) for k, tiny, gpu in rows}
    recipe, defaults = gpu_recipe(), GRPOConfig()
    assert set(recipe) <= set(table), f"L2.07 第 2.1 节的配方表漏了：{set(recipe) - set(table)}"
    for key, (tiny, gpu) in table.items():
        assert tiny == str(getattr(defaults, key)), (
            f"L2.07 第 2.1 节：{key} 的 tiny 默认值应为 {getattr(defaults, key)}"
        )
        assert gpu == str(recipe.get(key, getattr(defaults, key))), (
            f"L2.07 第 2.1 节：{key} 的 GPU 配方值应为 {recipe.get(key)}（presets.toml 的 [recipe.gpu]）"
        )


def test_the_ledger_decisions_shown_are_what_the_ledger_says():
    """第 6.3 节贴的最后两行、第 7.1 节的三行决定：等于账本现在对 GPU 配方、32 GiB 算出的。"""
    from common.vram.report import training_choice

    text = README.read_text(encoding="utf-8")
    choice = training_choice(get_model("Qwen3-0.6B"), 32)
    assert choice in text, f"L2.07 第 6.3 节贴的账本决定过时了，现在是：\n{choice}"
    block = _section("<!-- ledger-lines:begin -->", "<!-- ledger-lines:end -->")
    lines = re.findall(r"^(\S+) +(显存账本：.*)$", block, flags=re.M)
    assert len(lines) >= 3
    for name, quoted in lines:
        now = choose_method(get_model(name), _recipe_settings(), 32).explain()
        assert quoted == now, f"L2.07 第 7.1 节 {name} 那一行过时了，现在是：{now}"


@pytest.mark.parametrize(
    "folder, model_type", [("Qwen3-30B-A3B", "qwen3_moe"), ("Llama-3.2-1B-Instruct", "llama")]
)
def test_the_refusals_quoted_are_the_messages(folder, model_type, tmp_path, monkeypatch):
    """第 7.2 节贴的报错原文 = common.model.model_dir 现在说的（在同名的目录里、同样的相对路径下生成）。"""
    from common.model.model_dir import ModelDirError, inspect_model_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(ModelDirError) as err:
        inspect_model_dir(f"./{folder}")
    assert f"  - {err.value}" in README.read_text(encoding="utf-8"), (
        f"L2.07 第 7.2 节贴的 {model_type} 报错过时了，现在是：{err.value}"
    )


@pytest.mark.slow  # 要 import torch（common.model.models）
def test_the_no_gpu_refusal_quoted_is_the_message(folders, tmp_path, monkeypatch):
    """第 6.4 节贴的「需要 NVIDIA GPU」报错 = 现在在没有 CUDA 的机器上对 ./Qwen3-0.6B 说的。"""
    import torch

    from common.config.config_cli import parse_config
    from common.config.model_plan import plan_or_exit

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen3-0.6B").symlink_to(folders("header", "Qwen3-0.6B"))
    with pytest.raises(SystemExit) as exc:
        plan_or_exit(parse_config(["--model", "./Qwen3-0.6B", "--out", "runs/x"]))
    quoted = str(exc.value.code).split("\n", 1)[1]
    assert quoted in README.read_text(encoding="utf-8"), (
        f"L2.07 第 6.4 节贴的报错过时了，现在是：\n{quoted}"
    )


@pytest.mark.slow  # 要 import transformers
def test_the_two_chat_templates_render_as_shown(folders):
    """第 7.3 节：同一道题在 Qwen3 和 Qwen2.5 的模板下渲染出的 prompt（真实的 tokenizer 文件），以及 token 数。"""
    from transformers import AutoTokenizer

    from common.gsm8k.data import build_prompt

    text = README.read_text(encoding="utf-8")
    question = "Leo has 20 stickers and gives 5 to Anna. How many stickers does Leo have left?"
    counts = []
    for family in ("qwen3", "qwen2"):
        tok = AutoTokenizer.from_pretrained(folders("tiny", family))
        prompt = build_prompt(tok, question)
        assert f"```text\n{prompt}```" in text, (
            f"L2.07 第 7.3 节 {family} 的 prompt 过时了，现在是：\n{prompt}"
        )
        counts.append(len(tok(prompt, add_special_tokens=False)["input_ids"]))
    assert f"{counts[1] - counts[0]} 个 token（上面这道题：{counts[0]} 对 {counts[1]}" in text, (
        counts
    )


def test_the_ledger_figures_in_the_presets_are_current():
    """presets.toml 每个 GPU 预设的 why 里写的「账本 X GiB」= 按这个预设自己的设定算出的全参数合计（32 GiB）；
    第 7.4 节表里两个 Qwen2.5 预设的数字也是它。"""
    from common.config.config_cli import preset_config
    from common.options.presets import preset_names
    from common.vram.ledger import GiB
    from common.vram.plan import training_settings

    table = _section("### 7.4", "```bash")
    for name in preset_names():
        planned = training_settings(preset_config(name))
        if planned is None:  # tiny：CPU 上的模型，不进账本
            continue
        full = choose_method(*planned, 32).full.total / GiB
        quoted = re.search(r"账本 ([\d.]+) GiB", get_preset(name).why)
        assert quoted and quoted.group(1) == f"{full:.1f}", (
            f"presets.toml 里 {name} 的 why 引用的账本数字过时了：全参数现在是 {full:.1f} GiB"
        )
        row = next((line for line in table.splitlines() if f"`{name}`" in line), None)
        if row is not None:
            assert f"{full:.1f} GiB" in row, (
                f"L2.07 第 7.4 节 {name} 那一行的账本数字应为 {full:.1f} GiB"
            )


# ---------------------------------------------------------------- 一条路、一套命令（issue 44） ----------------------------
L208 = ROOT / "L2_algorithm" / "08_reading_the_curves" / "README.md"
FRONT = ROOT / "README.md"


def _argvs(kind: str) -> list[list[str]]:
    return [a for a in map(shlex.split, page_commands()) if _kind(a) == kind]


def _bash_commands(text: str) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(shlex.join(argv))
    return out


def test_every_compare_command_names_its_step():
    """issue 44 以前：页上的比较命令没有 --step，compare_runs.py 就比最后一个共同的步（150），那里没有证据。"""
    compares = _argvs("compare_runs.py")
    assert compares, f"{PAGE}：页上没有 compare_runs.py 的命令"
    missing = [shlex.join(a) for a in compares if "--step" not in a]
    assert not missing, f"{PAGE}：这些比较命令没有写 --step：{missing}"
    steps = sorted(int(_flag(a, "--step")) for a in compares)
    assert steps == [50, 100], f"{PAGE}：课文的结论绑在第 50 步（运行 − 对照）和第 100 步（比起点）"


def test_the_runs_are_started_in_a_named_tmux_session():
    """训练命令之前先开一个有名字的 tmux 会话，页上说怎么回到它（SSH 断开时进程不被 SIGHUP 停下）。"""
    commands = [shlex.split(c) for c in page_commands()]
    kinds = [_kind(a) for a in commands]
    assert "tmux" in kinds, f"{PAGE}：页上没有 tmux new -s 名字"
    name = commands[kinds.index("tmux")][-1]
    first_run = kinds.index("grpo_train.py")
    assert kinds.index("tmux") < first_run, f"{PAGE}：tmux 会话要在第一条训练命令之前开"
    text = _page()
    assert f"tmux attach -t {name}" in text, f"{PAGE}：要说怎么回到会话（tmux attach -t {name}）"


def test_the_setup_commands_fit_together():
    """clone 到的目录就是 cd 进去的目录；虚拟环境建在哪就从哪 source。"""
    clone, cd = _argvs("git")[0], _argvs("cd")[0]
    assert clone[3] == cd[1], f"{PAGE}：git clone 到 {clone[3]}，却 cd {cd[1]}"
    venv, source = _argvs("venv")[0], _argvs("source")[0]
    assert source[1] == f"{venv[3]}/bin/activate", (
        f"{PAGE}：venv 建在 {venv[3]}，却 source {source[1]}"
    )
    kinds = [_kind(shlex.split(c)) for c in page_commands()]
    order = ["python-version", "df", "git", "cd", "venv", "source", "pip",
             "common.config.env_check"]  # fmt: skip
    assert kinds[: len(order)] == order, (
        f"{PAGE}：第 6.1 节应当按 {order} 的顺序，现在是 {kinds[: len(order)]}"
    )


def test_the_model_folders_the_page_downloads_are_ignored_by_git():
    """issue 44 以前：./Qwen3-0.6B 不在 .gitignore 里，git add . 会把 1.5 GB 的权重加进去。"""
    folders = {_flag(a, "--local-dir") for a in _argvs("hf") + _argvs("modelscope")}
    folders |= {d for a in map(shlex.split, page_commands()) for d in _model_dirs(a)}
    assert folders
    tracked = [d for d in sorted(folders) if not _ignored(d)]
    assert not tracked, f"这些模型目录不在 .gitignore 里：{tracked}"


def test_the_page_states_the_disk_per_run_folder_in_gb():
    """checkpoint.pt = 可训练参数 × 12 B（fp32 权重 + AdamW 的 m、v）：Qwen3-0.6B 和 L2.08 的代理。"""
    from common.run.checkpoint import checkpoint_bytes

    text = _page()
    qwen3 = checkpoint_bytes(SHAPES["Qwen3-0.6B"].n_params()) / 1e9
    # L2.08 的代理：Qwen2.5-0.5B-Instruct 的形状，输出矩阵和词嵌入不共享（L2.08 第 6.1 节「存储的参数 630.2M」）
    proxy_shape = dataclasses.replace(SHAPES["Qwen2.5-0.5B-Instruct"], tied=False)
    assert f"存储的参数 {proxy_shape.n_params() / 1e6:.1f}M" in L208.read_text(encoding="utf-8")
    proxy = checkpoint_bytes(proxy_shape.n_params()) / 1e9
    runs = len([a for a in _argvs("grpo_train.py") if _flag(a, "--out").startswith("runs/q3")])
    quotes = [
        f"每个运行目录约 {qwen3:.2f} GB（Qwen3-0.6B）",
        f"Qwen3-0.6B 是 {SHAPES['Qwen3-0.6B'].n_params() / 1e6:.1f}M 参数 × 12 B = {qwen3:.2f} GB",
        f"{proxy_shape.n_params() / 1e6:.1f}M 参数（输出矩阵和词嵌入不共享）× 12 B = {proxy:.2f} GB",
        f"那几秒一个目录要 {2 * qwen3:.1f} GB",
        f"跑完是 {runs} × {qwen3:.2f} = {runs * qwen3:.1f} GB，最后一次存盘时最多 {(runs + 1) * qwen3:.1f} GB",
    ]
    # 第 6.7 节的 TRL 运行：两个 checkpoint-N（权重 + m、v）和 final/（fp32 权重）
    final = SHAPES["Qwen3-0.6B"].n_params() * 4 / 1e9
    trl = 2 * qwen3 + final
    quotes += [
        f"最后的 `final/` 是 fp32 权重（596.0M × 4 B = {final:.2f} GB）：约 {trl:.1f} GB",
        f"全部加起来约 {runs * qwen3:.1f} + {trl:.1f} + 1.2 = {runs * qwen3 + trl + 1.2:.1f} GB",
    ]
    for quote in quotes:
        assert quote in text, f"{PAGE}第 6.5 节的磁盘数字应该写：{quote}"
    assert f"{proxy:.2f} GB" == "7.56 GB", (
        "审稿人在 H100 上量到的 checkpoint.pt 是 7.56 GB（issue 44）"
    )
    biggest = max(
        sum(f.stat().st_size for f in d.iterdir()) for d in REAL_RUNS.iterdir() if d.is_dir()
    )
    assert f"附带的 `real_recipe/` 目录最大的 {biggest / 1e6:.1f} MB" in text and biggest < 2e6


def _gpu_train_commands(commands: list[str]) -> set[str]:
    """给 GPU 的 grpo_train.py 命令（带 --model 或 tiny 以外的 --preset）。"""
    out = set()
    for cmd in commands:
        argv = shlex.split(cmd)
        if _kind(argv) == "grpo_train.py" and (
            "--model" in argv or _flag(argv, "--preset") not in (None, "tiny")
        ):
            out.add(shlex.join(argv))
    return out


def test_l2_08_and_the_readme_have_no_training_command_the_page_lacks():
    """issue 44 以前：L2.08 第 6.8 节有另一套命令（--preset qwen3-0.6b，pass@8 和前几步的评估都开着）。"""
    page = _gpu_train_commands(page_commands())
    l208 = L208.read_text(encoding="utf-8")
    part = l208.split("### 6.8 ", 1)[1].split("\n### ", 1)[0]
    assert "07_grpo_train/README.md" in part, "L2.08 第 6.8 节要链到 L2.07 第 6 节"
    for where, text in (
        ("L2.08 第 6.8 节", part),
        ("首页 README", FRONT.read_text(encoding="utf-8")),
    ):
        extra = _gpu_train_commands(_bash_commands(text)) - page
        assert not extra, f"{where} 有 L2.07 第 6 节没有的训练命令：{sorted(extra)}"


# ---------------------------------------------------------------- 命令之间对得上、数字对得上记录（冷读） --------------------
def _train_configs() -> dict[str, tuple[int, object]]:
    """页上每条 grpo_train.py 命令：--out -> (它在页上的位置, 解析出的 GRPOConfig)。"""
    from common.config.config_cli import parse_config

    out = {}
    for i, argv in enumerate(map(shlex.split, page_commands())):
        if _kind(argv) == "grpo_train.py" and _flag(argv, "--out"):
            out[_flag(argv, "--out")] = (i, parse_config(argv[2:]))
    return out


def _evaluated(cfg) -> set[int]:
    """grpo_train.py 在哪几步做 held-out 评估（0 = 训练前）：每 eval_every 步、最后一步、early_evals 那几步。"""
    early = {int(s) for s in cfg.early_evals.split(",")} if cfg.early_evals != "none" else set()
    steps = range(1, cfg.steps + 1)
    return {0} | {s for s in steps if s % cfg.eval_every == 0 or s == cfg.steps or s in early}


def test_the_compare_commands_pair_the_runs_the_page_starts():
    """比较命令的每个 --pair 都是页上前面的训练命令建出的目录：同一个 seed，一个正常 reward、一个 shuffled，
    其余设置相同；--step 是两边都评估过的步。"""
    runs = _train_configs()
    commands = list(map(shlex.split, page_commands()))
    for i, argv in enumerate(commands):
        if _kind(argv) != "compare_runs.py":
            continue
        step = int(_flag(argv, "--step"))
        pairs = [argv[j + 1 : j + 3] for j, a in enumerate(argv) if a == "--pair"]
        seeds = []
        for run, control in pairs:
            for name in (run, control):
                assert name in runs and runs[name][0] < i, (
                    f"{PAGE}：比较命令里的 {name} 不是它前面哪条训练命令的 --out"
                )
            a, b = runs[run][1], runs[control][1]
            assert (a.reward, b.reward) == ("correctness", "shuffled"), (
                f"{PAGE}：--pair {run} {control} 应当是运行在前、--reward shuffled 的对照在后"
            )
            differ = {
                k
                for k, v in dataclasses.asdict(a).items()
                if v != getattr(b, k) and k not in ("reward", "out", "start_evals")
            }
            assert not differ, f"{PAGE}：{run} 和它的对照 {control} 还有这些设置不同：{differ}"
            assert step in _evaluated(a) & _evaluated(b), (
                f"{PAGE}：{run}、{control} 不在第 {step} 步评估（--eval-every/--steps/--early-evals）"
            )
            seeds.append(a.seed)
        assert len(set(seeds)) == len(seeds) >= 2, f"{PAGE}：两对应当是不同的 seed：{seeds}"
    text = _page()
    for hint in re.findall(r"--resume (runs/[\w.-]+)", text):  # 课文里提到的续跑目录
        outs = set(runs) | {_flag(a, "--out") for a in _argvs("train_trl.py")}
        assert hint in outs, f"{PAGE}：课文里的 --resume {hint} 不是页上哪条命令的 --out"


def test_the_tar_leaves_out_every_big_file_the_page_writes():
    """拷走结果的 tar 不带 checkpoint.pt（和存盘时的 .tmp）、TRL 的 checkpoint-N/ 和 final/（每个几 GB）。
    GNU tar 的 --exclude 默认对路径的每一段做通配匹配，这里用 fnmatch 对每个名字核对。"""
    from fnmatch import fnmatch

    from common.run.atomic_io import TMP_SUFFIX
    from common.run.checkpoint import CHECKPOINT_NAME

    (tar,) = _argvs("tar")
    patterns = [a.split("=", 1)[1] for a in tar if a.startswith("--exclude=")]
    (trl,) = _argvs("train_trl.py")
    save, steps = int(_flag(trl, "--save-steps")), int(_flag(trl, "--steps"))
    # train_trl.py 把最后的模型存进 out / "final"；TRL 的 checkpoint 目录是 checkpoint-<步>
    source = (ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py").read_text()
    assert 'out / "final"' in source
    big = [CHECKPOINT_NAME, CHECKPOINT_NAME + TMP_SUFFIX, "final"]
    big += [f"checkpoint-{s}" for s in range(save, steps + 1, save)]
    missed = [n for n in big if not any(fnmatch(n, p) for p in patterns)]
    assert not missed, f"{PAGE}：tar 会把这些几 GB 的东西也打进去：{missed}"


def test_the_front_page_asks_for_the_same_free_disk():
    """首页 README 和 L2.07 第 6.1、6.5 节说的空闲磁盘是同一个数。"""
    need = re.findall(r"至少有 (\d+) GB 空闲的盘", _page())
    assert need and f"至少 {need[0]} GB" in _page(), f"{PAGE}：第 6.1 节要说同样的 {need} GB"
    assert f"至少有 {need[0]} GB 空闲的盘" in FRONT.read_text(encoding="utf-8"), (
        f"首页 README 的磁盘要求应当和 L2.07 第 6.5 节一样：{need[0]} GB"
    )
