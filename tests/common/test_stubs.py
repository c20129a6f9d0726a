"""common.config.stubs：--impl exercises 时先查空桩（连同被调用的别的练习函数），一次列全，不加载任何东西。"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest

from common.config.stubs import is_stub, require_written, unwritten


def _fake_module(name: str, **functions) -> types.ModuleType:
    mod = types.ModuleType(name)
    for fname, fn in functions.items():
        fn.__module__, fn.__name__ = name, fname
        setattr(mod, fname, fn)
    return mod


def test_unwritten_names_every_missing_function_at_once(monkeypatch):
    def stub(x):
        """一个空桩。"""
        raise NotImplementedError("提示")

    def done():  # 每次一个新的「写完了」的函数（_fake_module 会改函数的 __module__/__name__）
        return lambda x: x + 1

    def uses_helper(x):
        return helper(x)  # 模块里 import 进来的另一个练习函数

    def helper(x):
        raise NotImplementedError

    assert is_stub(stub) and is_stub(helper) and not is_stub(uses_helper) and not is_stub(len)
    a = _fake_module("exercises.l9_a", f=stub, g=done())
    b = _fake_module("exercises.l9_b", uses_helper=uses_helper)
    b.helper = _fake_module("exercises.l9_c", helper=helper).helper
    for mod in (a, b):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    script = types.ModuleType("exercises.l9_script")  # 脚本取函数的那个模块（像 l2_07_grpo_train）
    script.f, script.g, script.uses_helper, script.len = a.f, a.g, b.uses_helper, len
    missing = unwritten(script)
    assert missing == ["exercises/l9_a.py 里的 f()", "exercises/l9_c.py 里的 helper()"]
    assert unwritten(script, skip=("f",)) == ["exercises/l9_c.py 里的 helper()"]
    with pytest.raises(SystemExit) as exc:
        require_written(script)
    assert "还没写完" in str(exc.value.code) and "pytest --impl exercises" in str(exc.value.code)
    a.f = script.f = _fake_module("exercises.l9_a", f=done()).f
    b.helper = _fake_module("exercises.l9_c", helper=done()).helper
    require_written(script)  # 都写完了：不退出


ROOT = Path(__file__).resolve().parents[2]
# 从 <impl>.l2_07_grpo_train 取学习者函数的两处：grpo_train.py 写 `L.名字`，CourseGRPOTrainer 写 `self.L.名字`
USERS = {
    ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py": "L",
    ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "course_trainer.py": "self.L",
}


def _offered(module: types.ModuleType) -> set[str]:
    """模块转出的学习者函数：同一个包（solutions / exercises）里定义的可调用对象。"""
    package = module.__name__.split(".")[0] + "."
    return {
        name
        for name, value in vars(module).items()
        if callable(value) and (getattr(value, "__module__", None) or "").startswith(package)
    }


def _used(path: Path, holder: str) -> set[str]:
    """`path` 里 `<holder>.名字` 的所有名字（holder 是 "L" 或 "self.L"）。"""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == holder:
            names.add(node.attr)
    return names


def _module_constant(path: Path, name: str):
    """`path` 里模块级 `name = <字面量>` 的值（不 import 它：course_trainer.py 要 import TRL）。"""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} 里没有模块级的 {name} = ...")


def test_the_scripts_module_offers_what_grpo_train_uses():
    """grpo_train.py / train_trl.py 从 <impl>.l2_07_grpo_train 取函数：两边转出同样的名字，
    脚本里用到的每个 `L.名字` 都转出了，参考答案里没有空桩（名字从代码里找，不用登记）。"""
    import exercises.l2_07_grpo_train as ex
    import solutions.l2_07_grpo_train as sol

    offered = _offered(sol)
    assert _offered(ex) == offered, (
        f"solutions/ 和 exercises/ 的 l2_07_grpo_train.py 转出的函数不一样："
        f"只在 solutions/ 里 {sorted(offered - _offered(ex))}，只在 exercises/ 里 "
        f"{sorted(_offered(ex) - offered)}（两边文件顶上的 import 和 __all__ 要各加一行，MAINTAINING.md 1.6 节）"
    )
    for path, holder in USERS.items():
        missing = sorted(_used(path, holder) - offered)
        assert not missing, (
            f"{path.relative_to(ROOT)} 用了 {holder}.{missing}，"
            f"但 l2_07_grpo_train.py 没有转出它们（MAINTAINING.md 1.6 节）"
        )
    assert _used(next(iter(USERS)), "L"), "在 grpo_train.py 里没找到任何 L.名字：扫描规则漏了"
    course_trainer = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "course_trainer.py"
    uses = _module_constant(course_trainer, "USES")
    assert set(uses) == _used(course_trainer, "self.L"), (
        f"course_trainer.py 的 USES {uses} 要正好是它调用的 self.L.名字"
        f" {sorted(_used(course_trainer, 'self.L'))}：train_trl.py 按它决定先查哪些空桩"
    )
    assert unwritten(sol) == []


@pytest.mark.parametrize("dynamic_sampling, listed", [(0, False), (2, True)])
def test_select_groups_is_required_only_with_dynamic_sampling(
    dynamic_sampling, listed, monkeypatch
):
    """--impl exercises：L2.10 的 select_groups 只在 --dynamic-sampling > 0 时才要先写完（像 --tis 的 tis_weights）。
    看 refuse_unwritten 交给 require_written 的 skip，不看 exercises/ 里写没写：写完练习的学习者这条也是绿的。"""
    import exercises.l2_07_grpo_train as learner
    from common.config import config_cli
    from common.config.grpo_config import GRPOConfig

    seen = []
    monkeypatch.setattr(config_cli, "require_written", lambda fns, skip=(): seen.append(skip))
    config_cli.refuse_unwritten(learner, GRPOConfig(dynamic_sampling=dynamic_sampling))
    assert ("select_groups" not in seen[0]) == listed
    assert "tis_weights" in seen[0]
