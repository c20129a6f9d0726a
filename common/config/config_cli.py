"""The command line of the training scripts: GRPOConfig from defaults < --preset < flags, or --resume.

    cfg = parse_config(argv)      # every bad value listed at once in Chinese, exit code 1
    cfg = preset_config("tiny")   # the config a preset gives, without a command line
    refuse(["--lr 不合法"])        # the same refusal, for a script's own checks
    refuse_unwritten(L, cfg)      # --impl exercises: a stub the run would call

The model is NOT planned here (which model a preset trains, full fine-tune or LoRA): the scripts
call common.config.model_plan.plan_model(cfg) themselves, after this. The fields, their help and
their checks live in common/config/grpo_config.py; this module turns them into flags, layers the
preset's values (common/options/presets.py) under the command line, applies the resume rules, and
names the run folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from common.config.grpo_config import (  # noqa: F401  (offered: the config's text forms)
    FIELDS,
    GRPOConfig,
    cross_errors,
    field_errors,
    kind_of,
    step_list,
    to_json,
)
from common.config.stubs import require_written
from common.model.model_dir import WARMSTART_FILE
from common.options.cli import CourseParser, did_you_mean
from common.options.presets import DEFAULT_PRESET, PresetError, get_preset, gpu_recipe, preset_names
from common.run.json_files import read_json_object
from common.run.out_dir import CONFIG_NAME, out_dir_problem

# resuming may change only these; the rest would make it a different experiment
RESUME_CAN_CHANGE = ("steps", "eval_every", "early_evals", "save_every", "resume")
OPTIONS_KEY = "options"  # config.json: a script's own options (train_trl.py's TRLOptions)
_WHAT = {int: "一个整数", float: "一个数", str: "一段文字"}
DESCRIPTION = (
    "手写 GRPO（L2.07）。默认值 = tiny 在 CPU 上的那次运行；--preset 叠上 presets.toml 的一组覆盖；"
    "命令行上给的值优先。"
)


def refuse(errors: list[str]) -> None:
    """Exit with the Chinese lines of a refused configuration (exit code 1; nothing is written)."""
    sys.exit("配置错误：\n  - " + "\n  - ".join(errors))


def refuse_unwritten(functions, cfg) -> None:
    """``--impl exercises`` before anything loads: exit in Chinese when a function of ``functions``
    (the learner's module) that this config uses is still a stub (common.config.stubs.require_written);
    tis_weights counts only with ``--tis``, select_groups only with ``--dynamic-sampling``."""
    skip = ("tis_weights",) if cfg.tis == "none" else ()
    skip += ("select_groups",) if cfg.dynamic_sampling == 0 else ()
    require_written(functions, skip=skip)


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
    defaults: GRPOConfig | None = None,
    suppress: bool = False,
    *,
    fields: tuple[str, ...] | None = None,
    options: type | None = None,
    description: str = DESCRIPTION,
) -> argparse.ArgumentParser:
    """The argparse parser of GRPOConfig (one flag per field, grouped as above, defaults shown).

    fields: the GRPOConfig fields a script offers (all by default); options: a dataclass of the
    script's own knob() fields (train_trl.py's TRLOptions), added after them. A bool is a switch.
    """
    defaults = defaults or GRPOConfig()
    ap = _Parser(
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=argparse.SUPPRESS if suppress else None,
        epilog="预设：" + "；".join(f"{n}：{get_preset(n).why}" for n in preset_names()),
    )
    chosen = [(f, getattr(defaults, f.name)) for f in FIELDS.values()]
    if fields is not None:
        chosen = [(f, value) for f, value in chosen if f.name in fields]
    if options is not None:
        chosen += [(f, f.default) for f in dataclasses.fields(options)]
    groups = {}
    for f, default in chosen:
        group = groups.get(f.metadata["group"]) or ap.add_argument_group(f.metadata["group"])
        groups[f.metadata["group"]] = group
        kw = {} if suppress else {"default": default}
        flag, kind = "--" + f.name.replace("_", "-"), kind_of(f)
        if kind is bool:
            group.add_argument(flag, action="store_true", help=f.metadata["help"], **kw)
            continue
        group.add_argument(
            flag, type=_parse_as(kind), metavar=kind.__name__.upper(), help=f.metadata["help"],
            **kw,
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


def _resume(run_dir: str, given: dict, can_change: tuple, options: type | None):
    path = Path(run_dir) / CONFIG_NAME
    if not path.is_file():
        refuse([f"{path} 不存在：--resume 要指向之前某次运行的目录"])
    try:
        stored = read_json_object(path, "这个运行目录的配置坏了，无法续跑；换一个 --out 重新开始")
    except ValueError as err:
        refuse([str(err)])
    values = {k: v for k, v in stored.items() if k not in ("provenance", OPTIONS_KEY)}
    values.setdefault("resume", None)
    own = _names(options)
    stored_options = stored.get(OPTIONS_KEY, {}) if options is not None else {}
    missing, unknown = sorted(set(FIELDS) - set(values)), sorted(set(values) - set(FIELDS))
    if isinstance(stored_options, dict):
        unknown += sorted(set(stored_options) - own)
    if missing or unknown or not isinstance(stored_options, dict):
        refuse([f"{path} 缺少 {missing} / 多出 {unknown}：它不是这个版本的课程脚本写的，无法续跑"])
    before = {**values, **stored_options}  # an option shadows a field of the same name
    changed = [k for k, v in given.items() if k not in can_change and v != before.get(k)]
    if changed:
        refuse([f"续跑时不能改 {changed}（会破坏逐位一致的续跑）；要换设置请开一个新的 --out"])
    kept = {k: given[k] for k in given if k in can_change}
    cfg_kept = {k: v for k, v in kept.items() if k not in own}
    cfg = GRPOConfig(**{**values, **cfg_kept, "out": run_dir, "resume": run_dir})  # 目录可以被搬走
    if problem := out_dir_problem(run_dir):  # 只读的盘：不是配置的错
        refuse([problem])
    opts = None
    if options is not None:
        opts = options(**{**stored_options, **{k: v for k, v in kept.items() if k in own}})
    errors = field_errors(cfg) or cross_errors(cfg, resuming=True)  # 类型不对时规则之间没法比
    errors = errors or (field_errors(opts) if opts is not None else [])
    if errors:
        refuse([f"{path} 里的值不合法（被手改过？）"] + errors)
    return cfg if options is None else (cfg, opts)


def _names(options: type | None) -> set[str]:
    return {f.name for f in dataclasses.fields(options)} if options is not None else set()


def parse_config(
    argv: list[str] | None = None,
    *,
    fields: tuple[str, ...] | None = None,
    options: type | None = None,
    can_change: tuple[str, ...] = RESUME_CAN_CHANGE,
    out_prefix: str = "",
    description: str = DESCRIPTION,
    script_defaults=None,
):
    """Command line -> GRPOConfig (defaults < preset < command line); bad settings exit with Chinese lines.

    With --resume the settings are the run folder's config.json (only `can_change` may differ).
    A new run gets its folder name (runs/<out_prefix><preset or model>-<time>) and a check that it
    can be one; nothing is created. The model is left as given: common.config.model_plan plans it.
    fields, options: as in build_parser; with options the answer is (GRPOConfig, options), and a
    run stores them under config.json's OPTIONS_KEY.
    script_defaults(cfg, given) -> cfg: a script's own defaults for what the command line left out
    (given: the values it gave), applied before the checks so that they are checked like the rest.
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
    shape = dict(fields=fields, options=options, description=description)
    build_parser(cfg, **shape).parse_args(argv)  # --help (this preset's defaults), type errors
    given = vars(build_parser(suppress=True, **shape).parse_args(argv))
    if first.resume:
        return _resume(first.resume, given, can_change, options)
    own = _names(options)  # a script's own option wins over a GRPOConfig field of that name
    cfg = apply(cfg, {k: v for k, v in given.items() if k not in own}, where="命令行")
    opts = None if options is None else options(**{k: v for k, v in given.items() if k in own})
    if cfg.eps_high is None:
        cfg.eps_high = cfg.eps_low
    if script_defaults is not None:
        cfg = script_defaults(cfg, given)
    errors = field_errors(cfg) or cross_errors(cfg)
    errors += field_errors(opts) if opts is not None else []
    if errors:
        refuse(errors)
    label = cfg.preset or Path(cfg.model or "model").name
    cfg.out = cfg.out or f"runs/{out_prefix}{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    if problem := out_dir_problem(cfg.out):
        refuse([problem])
    if Path(cfg.out, CONFIG_NAME).exists():
        refuse([f"{cfg.out} 里已经有一次运行：续跑用 --resume {cfg.out}，否则换一个 --out"])
    return cfg if options is None else (cfg, opts)


def _is_warm_start(model: str) -> bool:
    """A folder written by make_warmstart.py: the tiny model, trained with the tiny defaults."""
    return Path(model, WARMSTART_FILE).is_file()
