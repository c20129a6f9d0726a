"""common.stubs：--impl exercises 时先查空桩（连同被调用的别的练习函数），一次列全，不加载任何东西。"""

from __future__ import annotations

import sys
import types

import pytest

from common.stubs import is_stub, require_written, unwritten


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


def test_the_scripts_module_offers_what_grpo_train_uses():
    """grpo_train.py 从 <impl>.l2_07_grpo_train 取函数：两边提供同样的名字，参考答案里没有空桩。"""
    import exercises.l2_07_grpo_train as ex
    import solutions.l2_07_grpo_train as sol

    names = ("group_advantages", "completion_mask", "hidden_token_logprobs", "masked_mean",
             "grpo_loss", "process_logits", "microbatch_weight", "tis_weights")  # fmt: skip
    for name in names:
        assert callable(getattr(sol, name)) and callable(getattr(ex, name)), name
    assert unwritten(sol) == []
