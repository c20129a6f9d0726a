"""L3.01 参数对照表：表里每个 TRL 名字都是 GRPOConfig 的字段，每个手写名字都真实存在，README 与数据源一致。"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import io
import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE_PY = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "mapping_table.py"
GRPO_TRAIN = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"


def _load_table():
    spec = importlib.util.spec_from_file_location("l3_01_mapping_table", TABLE_PY)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclass 需要能在 sys.modules 里找到自己的模块
    spec.loader.exec_module(mod)
    return mod


mt = _load_table()


@pytest.fixture(scope="module")
def trl_facts():
    """(trl 版本, GRPOConfig 的字段名, GRPOConfig 和 GRPOTrainer 的源码)。

    import GRPOTrainer 要约 5 s（transformers 的 Trainer、accelerate、datasets），所以用到它的测试在 slow 一档。
    """
    import trl
    import trl.trainer.grpo_config
    import trl.trainer.grpo_trainer

    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    source = inspect.getsource(trl.trainer.grpo_config) + inspect.getsource(
        trl.trainer.grpo_trainer
    )
    return trl.__version__, fields, source


def _refs(kind: str) -> list[tuple[str, str]]:
    """(行 key, 名字)：kind="flag" 取 --xxx，kind="api" 取其余的手写名字。"""
    out = []
    for row in mt.ROWS:
        for ref in row.ours:
            if ref.startswith("--") == (kind == "flag"):
                out.append((row.key, ref))
    return out


def test_table_has_enough_rows_and_the_seed_five():
    keys = [r.key for r in mt.ROWS]
    assert len(keys) >= 20, f"对照表至少 20 行，现在 {len(keys)} 行"
    assert len(set(keys)) == len(keys), "行 key 重复了"
    missing = [k for k in mt.SEED_FIVE if k not in keys]
    assert not missing, f"种子课里的五行缺了：{missing}"
    for row in mt.ROWS:
        assert row.ours or row.trl or row.slime, f"{row.key}: 一行里至少要有一个框架名字"
        assert row.note.strip(), f"{row.key}: 说明不能空"


@pytest.mark.slow
@pytest.mark.parametrize("row", mt.ROWS, ids=lambda r: r.key)
def test_trl_names_are_grpoconfig_fields(row, trl_facts):
    version, fields, source = trl_facts
    for entry in row.trl:
        name, value = mt.trl_field(entry)
        assert name in fields, f"{row.key}: {name!r} 不是 trl {version} GRPOConfig 的字段"
        if value is not None:
            # 字符串取值（如 loss_type="dr_grpo"）必须是 TRL 源码里真的处理的值
            assert f'"{value}"' in source, (
                f"{row.key}: {name}={value!r} 在 TRL 源码里找不到这个取值"
            )


@pytest.mark.slow
def test_removed_and_renamed_fields_are_as_the_lesson_says(trl_facts):
    # 课文说：1.16 删掉了 max_prompt_length；transformers 5.17 下激活重算的字段名是 gradient_checkpointing
    _, fields, _ = trl_facts
    assert "max_prompt_length" not in fields
    assert "gradient_checkpointing" in fields


@pytest.mark.parametrize("key,ref", _refs("api"), ids=lambda x: x if isinstance(x, str) else None)
def test_handwritten_api_names_exist(key, ref, impl):
    """`l2_xx.func(param)` -> 模块里有 func 且签名里有 param；`common.mod.NAME` -> 能 import 到。"""
    if ref.startswith("common."):
        module, name = ref.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), name), f"{key}: {ref} 不存在"
        return
    target, _, param = ref.partition("(")
    module, func = target.split(".")
    fn = getattr(impl(module), func, None)
    assert callable(fn), f"{key}: {module}.{func} 不存在"
    if param:
        param = param.rstrip(")")
        assert param in inspect.signature(fn).parameters, (
            f"{key}: {module}.{func} 没有参数 {param!r}"
        )


def _help_flags(script: Path, monkeypatch) -> set[str]:
    """在本进程里执行 `script --help`（runpy，和命令行上一样走 __main__），从帮助文本里抽出所有长选项。

    不解析源码：参数可能是循环里拼出来的（grpo_train.py 就是从 DEFAULTS 生成 --group-size 等），只有 argparse 自己最清楚。
    """
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    # 脚本会往 sys.path 里插仓库根目录，测试结束后还原
    monkeypatch.setattr(sys, "path", list(sys.path))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_info.value.code in (0, None), f"{script.name} --help 失败：{buf.getvalue()[-500:]}"
    return set(re.findall(r"--[a-z][a-z0-9-]*", buf.getvalue()))


def test_handwritten_flags_exist_in_grpo_train(monkeypatch):
    flags = _help_flags(GRPO_TRAIN, monkeypatch)
    missing = [(k, f) for k, f in _refs("flag") if f not in flags]
    assert not missing, f"grpo_train.py 的命令行参数里没有这些：{missing}（它有：{sorted(flags)}）"


def test_readme_table_is_rendered_from_the_source():
    text = mt.README.read_text(encoding="utf-8")
    assert mt.readme_section(text) == mt.render_markdown(), (
        "README 里的对照表和 mapping_table.py 不一致；运行 "
        "python3 L3_frameworks/01_trl_vllm_colocate/mapping_table.py --write-readme 重新渲染"
    )


# 表里一行把 grpo_train.py 的参数对到 TRL 的字段：to_trl_config 真的这样映射吗
TRAIN_TRL = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py"
# train_trl.py 也接受的参数：换一个值，表里那几个 TRL 字段里至少一个跟着变
NEW_VALUE = {
    "group_size": lambda v: v * 2,
    "prompts_per_step": lambda v: v * 2,
    "micro_batch": lambda v: v // 2,
    "max_new_tokens": lambda v: v + 8,
    "temperature": lambda v: 0.7,
    "beta": lambda v: v + 0.01,
    "eps_high": lambda v: 0.28,
    "lr": lambda v: v / 2,
    "steps": lambda v: v + 1,
    "seed": lambda v: v + 1,
    "out": lambda v: f"{v}-other",
}
NOT_IN_TO_TRL_CONFIG = {
    "resume": "续跑交给 trainer.train(resume_from_checkpoint=...)，不在 TRL 的 GRPOConfig 里",
    "reward": "奖励是 reward_funcs + reward_weights（--format-weight），不是一个名字",
    "aggregation": "由 --loss-type 选（course_trainer.AGGREGATION），下面单独核对",
}


@pytest.mark.slow
def test_the_table_matches_to_trl_config(tmp_path):
    """每一行「--参数 ↔ TRL 字段」：train_trl.py 也接受的参数，换个值，表里的 TRL 字段跟着变；
    train_trl.py 不接受的（它写死的），to_trl_config 写死的值就是 GRPOConfig 的默认值。"""
    sys.path.insert(0, str(TRAIN_TRL.parent))
    spec = importlib.util.spec_from_file_location("l3_01_train_trl_for_table", TRAIN_TRL)
    T = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = T
    spec.loader.exec_module(T)
    from common.config.grpo_config import GRPOConfig

    cfg, opts = T.parse_args(["--preset", "tiny", "--out", str(tmp_path / "run")])
    base = T.to_trl_config(cfg, opts)
    defaults = GRPOConfig()
    checked = 0
    for row in mt.ROWS:
        fields = [o[2:].replace("-", "_") for o in row.ours if o.startswith("--")]
        trl_names = [t.split("=")[0] for t in row.trl]
        for name in fields if trl_names else ():
            if name in NOT_IN_TO_TRL_CONFIG:
                continue
            if name in T.TRL_FIELDS:
                changed = dataclasses.replace(cfg, **{name: NEW_VALUE[name](getattr(cfg, name))})
                other = T.to_trl_config(changed, opts)
                moved = [t for t in trl_names if getattr(other, t) != getattr(base, t)]
                assert moved, (
                    f"表的 {row.key} 行：--{name.replace('_', '-')} 变了，to_trl_config 的 {trl_names} 都没变"
                )
            else:
                got = {t: getattr(base, t) for t in trl_names}
                want = getattr(defaults, name)
                assert all(v == want for v in got.values()), (
                    f"表的 {row.key} 行：train_trl.py 写死 {got}，grpo_train.py 的 --{name.replace('_', '-')} 默认是 {want}"
                )
            checked += 1
    assert checked >= 15, f"只核对了 {checked} 个参数：表的格式变了？"
    from course_trainer import AGGREGATION

    (row,) = [r for r in mt.ROWS if "--aggregation" in r.ours]
    loss_types = [t.split("=")[1].strip('"') for t in row.trl]
    assert sorted(loss_types) == sorted(AGGREGATION), "表里的 loss_type 要正好是 --loss-type 能选的"
    assert set(AGGREGATION.values()) == set(
        GRPOConfig.__dataclass_fields__["aggregation"].metadata["choices"]
    )
