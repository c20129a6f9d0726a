"""L2.08 的两个分析脚本：entropy_t1.py（温度 T 和温度 1 下的熵）、pass_k_seeds.py（几个 seed 的逐题配对 pass@k）。

- 坏输入：中文报错、非零退出，不加载模型；
- 「训练后」就是起点本身（checkpoint 存的是起点的权重）时：熵的比值恰好是 1，pass@k 的差恰好是 0，
  没有题从全错变成采得到。held-out 只取 8 题，在进程内调用 main；要加载模型、采样，标成 slow。
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "L2_algorithm" / "08_reading_the_curves"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"l2_08_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_config() -> dict:
    from common.config.config_cli import preset_config
    from common.config.grpo_config import to_json

    return {**to_json(preset_config("tiny")), "n_heldout": 8}


@pytest.fixture(scope="module")
def start_as_trained(tmp_path_factory):
    """一个运行目录：config.json 是 tiny 的默认设置（held-out 8 题），checkpoint 里就是起点的权重。"""
    from common.model.models import load_model
    from common.run.checkpoint import save_checkpoint

    cfg = _tiny_config()
    run = tmp_path_factory.mktemp("start-as-trained")
    (run / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    model, _ = load_model("tiny", cfg["init"])
    save_checkpoint(run, model=model, optimizer=torch.optim.AdamW(model.parameters()), step=0)
    return run


@pytest.fixture
def keep_threads():
    """两个脚本都 torch.set_num_threads(1)；测试之后还原，不影响别的测试。"""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _exit_message(main, argv) -> str:
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code not in (0, None), "坏输入应该以非零状态退出"
    return str(err.value.code)


def test_bad_inputs_get_a_chinese_message(tmp_path):
    """这些都在加载模型之前就退出。"""
    entropy, pass_k = _load("entropy_t1"), _load("pass_k_seeds")
    empty, one, other = tmp_path / "empty", tmp_path / "one", tmp_path / "other"
    for folder, extra in ((one, {}), (other, {"temperature": 0.3})):
        folder.mkdir()
        cfg = {**_tiny_config(), **extra}
        (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    empty.mkdir()
    assert "不存在" in _exit_message(entropy.main, [str(empty)])
    assert "至少为 1" in _exit_message(entropy.main, [str(one), "--samples", "0"])
    assert "不存在" in _exit_message(pass_k.main, [str(empty)])
    message = _exit_message(pass_k.main, [str(one), str(other)])
    assert "不能逐题配对" in message and "temperature" in message


@pytest.mark.slow
def test_entropy_ratio_is_one_when_nothing_was_trained(start_as_trained, capsys, keep_threads):
    _load("entropy_t1").main([str(start_as_trained), "--samples", "2"])
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.count("（×1.00）") == 2, row


@pytest.mark.slow
def test_paired_differences_are_zero_when_nothing_was_trained(
    start_as_trained, capsys, keep_threads
):
    _load("pass_k_seeds").main([str(start_as_trained), str(start_as_trained), "--pass-k", "2"])
    out = capsys.readouterr().out
    diffs = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(diffs) == 2 and all("+0.000（±0.000）" in line for line in diffs), out
    assert out.count("其中 0 道训练后至少采到一条对的；另有 0 道") == 2, out
