"""The command line of the training scripts: GRPOConfig from defaults < --preset < flags, or --resume.

    cfg = parse_config(argv)      # every bad value listed at once in Chinese, exit code 1
    cfg = preset_config("tiny")   # the config a preset gives, without a command line
    refuse(["--lr 不合法"])        # the same refusal, for a script's own checks

The model is NOT planned here (which model a preset trains, full fine-tune or LoRA): the scripts
call common.model_plan.plan_model(cfg) themselves, after this. The fields, their help and their
checks live in common/grpo_config.py; this module turns them into flags, layers the preset's
values (common/presets.py) under the command line, applies the resume rules, and names the run
folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from common.cli import CourseParser, did_you_mean
from common.grpo_config import FIELDS, GRPOConfig, cross_errors, field_errors, kind_of
from common.metrics import read_json_object
from common.model_dir import WARMSTART_FILE
from common.presets import DEFAULT_PRESET, PresetError, get_preset, gpu_recipe, preset_names
from common.run_folder import out_dir_problem

# resuming may change only these; the rest would make it a different experiment
RESUME_CAN_CHANGE = ("steps", "eval_every", "early_evals", "save_every", "resume")
_WHAT = {int: "一个整数", float: "一个数", str: "一段文字"}


def refuse(errors: list[str]) -> None:
    """Exit with the Chinese lines of a refused configuration (exit code 1; nothing is written)."""
    sys.exit("配置错误：\n  - " + "\n  - ".join(errors))


def _parse_as(kind):
    """argparse `type=`: the value as `kind`, or a Chinese error (argparse's own is English)."""

    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"要{_WHAT[kind]}，得到 {text!r}") from None

    parse.__name__ = kind.__name__
    return parse


class _Parser(CourseParser):  # no abbreviations: --step 5 is not --steps 5 (issue 35)
    def error(self, message: str):  # unknown flag, a value of the wrong type: one Chinese line
        refuse([did_you_mean(self, message)])


def build_parser(
    defaults: GRPOConfig | None = None, suppress: bool = False
) -> argparse.ArgumentParser:
    """The argparse parser of GRPOConfig (one flag per field, grouped as above, defaults shown)."""
    defaults = defaults or GRPOConfig()
    ap = _Parser(
        description="手写 GRPO（L2.07）。默认值 = tiny 在 CPU 上的那次运行；--preset 叠上 presets.toml 的一组覆盖；"
        "命令行上给的值优先。",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=argparse.SUPPRESS if suppress else None,
        epilog="预设：" + "；".join(f"{n}：{get_preset(n).why}" for n in preset_names()),
    )
    groups = {}
    for name, f in FIELDS.items():
        group = groups.get(f.metadata["group"]) or ap.add_argument_group(f.metadata["group"])
        groups[f.metadata["group"]] = group
        kw = {} if suppress else {"default": getattr(defaults, name)}
        kind = kind_of(f)
        group.add_argument(
            "--" + name.replace("_", "-"), type=_parse_as(kind), metavar=kind.__name__.upper(),
            help=f.metadata["help"], **kw,
        )  # fmt: skip
    return ap


def apply(cfg: GRPOConfig, values: dict, *, where: str) -> GRPOConfig:
    """cfg with `values` on top; an unknown key is a PresetError that names `where` it came from."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise PresetError(f"{where} 里有配置中没有的键：{', '.join(unknown)}")
    return dataclasses.replace(cfg, **values)


def base_config(preset: str | None = None, model: str | None = None) -> GRPOConfig:
    """The defaults a run starts from: the preset's; the GPU recipe for `--model DIR` alone (a
    make_warmstart.py folder keeps the tiny defaults); tiny's when neither is given."""
    name = preset or (None if model else DEFAULT_PRESET)
    if name is not None:
        cfg = apply(GRPOConfig(), get_preset(name).overrides, where=f"预设 {name}")
        return dataclasses.replace(cfg, preset=name, model=model or cfg.model)
    if _is_warm_start(model):
        return GRPOConfig(model=model)
    return apply(GRPOConfig(model=model), gpu_recipe(), where="presets.toml 的 [recipe.gpu]")


def preset_config(name: str = DEFAULT_PRESET) -> GRPOConfig:
    """The config of a preset with nothing on the command line (train_trl.py shares these numbers)."""
    return apply(GRPOConfig(preset=name), get_preset(name).overrides, where=f"预设 {name}")


def _resume(run_dir: str, given: dict) -> GRPOConfig:
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        refuse([f"{path} 不存在：--resume 要指向之前某次运行的目录"])
    try:
        stored = read_json_object(path, "这个运行目录的配置坏了，无法续跑；换一个 --out 重新开始")
    except ValueError as err:
        refuse([str(err)])
    values = {k: v for k, v in stored.items() if k != "provenance"}
    values.setdefault("resume", None)
    missing, unknown = sorted(set(FIELDS) - set(values)), sorted(set(values) - set(FIELDS))
    if missing or unknown:
        refuse(
            [
                f"{path} 缺少 {missing} / 多出 {unknown}：它不是这个版本的 grpo_train.py 写的，无法续跑"
            ]
        )
    changed = [k for k, v in given.items() if k not in RESUME_CAN_CHANGE and v != values[k]]
    if changed:
        refuse([f"续跑时不能改 {changed}（会破坏逐位一致的续跑）；要换设置请开一个新的 --out"])
    kept = {k: given[k] for k in given if k in RESUME_CAN_CHANGE}
    cfg = GRPOConfig(**{**values, **kept, "out": run_dir, "resume": run_dir})  # 目录可以被搬走
    if problem := out_dir_problem(run_dir):  # 只读的盘：不是配置的错
        refuse([problem])
    errors = field_errors(cfg) or cross_errors(cfg, resuming=True)  # 类型不对时规则之间没法比
    if errors:
        refuse([f"{path} 里的值不合法（被手改过？）"] + errors)
    return cfg


def parse_config(argv: list[str] | None = None) -> GRPOConfig:
    """Command line -> GRPOConfig (defaults < preset < command line); bad settings exit with Chinese lines.

    With --resume the settings are the run folder's config.json (only RESUME_CAN_CHANGE may differ).
    A new run gets its folder name (runs/<preset or model>-<time>) and a check that it can be one;
    nothing is created. The model is left as given: common.model_plan.plan_model resolves it.
    """
    pre = _Parser(add_help=False)
    pre.add_argument("--resume")
    pre.add_argument("--preset")
    pre.add_argument("--model")
    first, _ = pre.parse_known_args(argv)
    try:
        cfg = base_config(first.preset, first.model)
    except PresetError as err:
        refuse([str(err)])
    build_parser(cfg).parse_args(argv)  # --help (with this preset's defaults) and type errors
    given = vars(build_parser(suppress=True).parse_args(argv))
    if first.resume:
        return _resume(first.resume, given)
    cfg = apply(cfg, given, where="命令行")
    if cfg.eps_high is None:
        cfg.eps_high = cfg.eps_low
    errors = field_errors(cfg) or cross_errors(cfg)
    if errors:
        refuse(errors)
    label = cfg.preset or Path(cfg.model or "model").name
    cfg.out = cfg.out or f"runs/{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    if problem := out_dir_problem(cfg.out):
        refuse([problem])
    if Path(cfg.out, "config.json").exists():
        refuse([f"{cfg.out} 里已经有一次运行：续跑用 --resume {cfg.out}，否则换一个 --out"])
    return cfg


def _is_warm_start(model: str) -> bool:
    """A folder written by make_warmstart.py: the tiny model, trained with the tiny defaults."""
    return Path(model, WARMSTART_FILE).is_file()
