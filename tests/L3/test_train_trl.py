"""L3.01 train_trl.py：奖励包装、对话 prompt、GRPOConfig 字段、坏输入报错，以及"你的 L2 损失插进 TRL 后与 TRL 自己的损失一致"。

`pytest --impl exercises -m slow tests/L3/test_train_trl.py` 会把你在 exercises/ 里写的 group_advantages / grpo_loss
插进 GRPOTrainer，和 TRL 1.16 自己的 _compute_loss 逐项对比（loss 值、对每个参数的梯度、clip 比例、熵、KL）。
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from common.options.presets import get_preset, gpu_recipe

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py"

# 整个文件在 slow 一档：import GRPOTrainer 就要约 5 s（transformers 的 Trainer、accelerate、datasets），
# 默认一档每个课的测试文件要在 7.5 s 内跑完。CI 的 slow 一档照样跑；自己跑：pytest -m slow 这个文件
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def T():
    """train_trl.py 作为模块（目录名以数字开头，不能直接 import；它同目录的 course_trainer.py 也要能 import）。"""
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("l3_01_train_trl", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _tiny_args(T, tmp_path, *extra):
    return T.parse_args(["--preset", "tiny", "--out", str(tmp_path / "run"), *extra])


# ---------------------------------------------------------------- 数据与奖励 -----------------------------------------
def test_prompt_messages_render_exactly_like_build_prompt(T, qwen3_tokenizer):
    """对话格式的 "prompt" 列经 TRL 的 chat template（enable_thinking=False）渲染后，与 common.gsm8k.data.build_prompt 逐字相同。"""
    from common.gsm8k import data as D
    from common.model.tokenizer import build_tiny_tokenizer

    q = D.synthetic_problems(1, seed=3, difficulty=2)[0].question
    for tok in (build_tiny_tokenizer(), qwen3_tokenizer):
        rendered = tok.apply_chat_template(
            D.prompt_messages(q), tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert rendered == D.build_prompt(tok, q)
    ds = T.build_dataset(D.synthetic_problems(3, seed=0))
    assert ds.column_names == ["prompt", "gold"] and ds[0]["prompt"][0]["role"] == "user"


def test_reward_wrappers_follow_common_reward(T):
    from common.gsm8k.reward import correctness_reward, format_reward

    texts = ["所以答案是 \\boxed{12}。", "12", "The answer is 13.", ""]
    golds = ["12", "12", "12", "12"]
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    expected_c = [correctness_reward(t, g) for t, g in zip(texts, golds)]
    expected_f = [format_reward(t) for t in texts]
    assert (
        T.correctness(completions=conversational, gold=golds, prompts=None, trainer_state=None)
        == expected_c
    )
    assert T.correctness(completions=texts, gold=golds) == expected_c  # 纯文本格式的数据集也能用
    assert T.format_boxed(completions=conversational) == expected_f
    # 上面的例子确实区分得开
    assert expected_c[0] == 1.0 and expected_f[0] == 1.0 and expected_c[2] == 0.0


# ---------------------------------------------------------------- GRPOConfig ------------------------------------------
def test_gpu_config_uses_only_real_grpoconfig_fields(T, tmp_path, monkeypatch):
    """32 GB 配置里的每个键都是 trl 1.16 GRPOConfig 的字段（这台机器没有 GPU，所以只收集参数，不真的构造）。"""
    import trl

    import common.config.model_plan

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(common.config.model_plan, "gpu_gib", lambda cap_gb: 32.0)  # 一张 5090
    cfg, opts = T.parse_args(
        ["--preset", "qwen3-0.6b", "--no-vllm", "--out", str(tmp_path / "gpu")]
    )
    opts.vllm = True
    seen = {}
    monkeypatch.setattr(T, "TRLConfig", lambda **kw: seen.update(kw) or kw)
    T.to_trl_config(cfg, opts, n_proc=1, gpu=True)
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert not set(seen) - fields, f"不是 GRPOConfig 字段：{set(seen) - fields}"
    assert (
        seen["use_vllm"] is True
        and seen["vllm_mode"] == "colocate"
        and seen["vllm_enable_sleep_mode"] is False
    )
    assert seen["vllm_max_model_length"] == 1024 and seen["vllm_gpu_memory_utilization"] == 0.3
    assert seen["chat_template_kwargs"] == {"enable_thinking": False}
    assert seen["bf16"] and seen["gradient_checkpointing"] and seen["mask_truncated_completions"]
    # 每步 P·G 条回答 = micro-batch × 累积次数（× 进程数）
    assert seen["generation_batch_size"] == cfg.prompts_per_step * cfg.group_size
    assert (
        seen["per_device_train_batch_size"] * seen["gradient_accumulation_steps"]
        == seen["generation_batch_size"]
    )
    assert seen["reward_weights"] == [1.0, 0.0]
    # 配方预热 10 步：TRL 里是 constant_with_warmup + 同样的步数（grpo_train.py 的 warmup_lr 同样线性升到 lr）
    assert cfg.warmup_steps == get_preset("qwen3-0.6b").overrides["warmup_steps"] > 0
    assert seen["lr_scheduler_type"] == "constant_with_warmup"
    assert seen["warmup_steps"] == cfg.warmup_steps
    assert cfg.lr == get_preset("qwen3-0.6b").overrides["lr"]  # 和 grpo_train.py 同一个预设的值


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--group-size", "1"], "--group-size = 1 不合法：至少为 2"),
        (
            ["--prompts-per-step", "3", "--group-size", "4", "--micro-batch", "5"],
            "必须能被 --micro-batch",
        ),
        (["--data", "no/such/file.jsonl"], "--data"),
        (["--steps", "0"], "--steps = 0 不合法：要 >= 1 的整数"),
        (["--format-weight", "-1"], "--format-weight = -1.0 不合法：不能为负"),
        (["--lr", "nan"], "--lr = nan 不合法：要在 (0, 1) 里"),
        (["--vllm-mem", "1.5"], "--vllm-mem = 1.5 不合法：必须在 (0, 1) 之间"),
        (["--preset", "qwen3-0.6b", "--no-vllm"], "需要 NVIDIA GPU"),
        (["--impl", "mine"], "--impl 只能是 solutions | exercises | trl"),
        (["--steps", "many"], "--steps: 要一个整数，得到 'many'"),
        (["--step", "5"], "不认识的参数: --step 5（是不是 --steps？）"),  # 以前：前缀匹配成 --steps
        (["--setps", "5"], "（是不是 --steps？）"),
        (["--preset", "qwen3-0.6b", "--no-vllm", "--model", "no/such/dir"], "模型目录不存在"),
        (["--preset", "tiny", "--model", "./no/such/dir"], "make_warmstart.py --out"),
        (["--resume", "no/such/run"], "--resume 要指向之前某次运行的目录"),
    ],
)
def test_bad_input_is_a_clear_error(T, tmp_path, argv, needle):
    with pytest.raises(SystemExit) as info:
        T.parse_args([*argv, "--out", str(tmp_path / "bad")])
    err = str(info.value.code)  # sys.exit(中文) 打印在 stderr，退出码 1
    assert needle in err and "配置错误" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists(), "报错之前不能留下半截的输出目录"


def test_cuda_out_of_memory_is_one_chinese_line(T, tmp_path, monkeypatch):
    """TRL 的训练里 CUDA 显存不够：和 grpo_train.py 一样是一行中文（要了多少、改哪个参数），不是英文 traceback。"""
    args = _tiny_args(T, tmp_path)
    monkeypatch.setattr(T, "parse_args", lambda: args)

    def out_of_memory(cfg, opts):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 ...")

    monkeypatch.setattr(T, "main", out_of_memory)
    with pytest.raises(SystemExit) as exc:
        T.cli()
    assert exc.value.code.startswith(
        "错误：显存不够（CUDA out of memory）（Tried to allocate 1.50 GiB）"
    )
    assert "--micro-batch 4" in exc.value.code


def test_model_folder_is_validated_in_parse_args(T, tmp_path):
    """--model 目录在 parse_args 里就查完（不加载权重，不建输出目录）；只给 --model：GPU 配方，CPU 上小模型全参数。"""
    from small_qwen import make_model_dir

    folder = make_model_dir(tmp_path / "small-qwen2", family="qwen2")
    a, _ = T.parse_args(["--model", str(folder), "--out", str(tmp_path / "run"), "--no-vllm"])
    assert a.model == str(folder) and a.init == "pretrained" and a.lora_rank == 0
    assert a.data == gpu_recipe()["data"] and a.group_size == gpu_recipe()["group_size"]
    (folder / "config.json").unlink()
    with pytest.raises(SystemExit) as info:
        T.parse_args(["--model", str(folder), "--no-vllm"])
    assert "没有 config.json" in str(info.value.code)
    assert not (tmp_path / "run").exists()


def test_refusal_on_a_cpu_box_prices_the_gpu_recipe(T, tmp_path):
    """没有 GPU 的机器上给一个要 GPU 的模型：拒绝的那一行按它在 GPU 上的样子算显存账（配方的 micro-batch），
    不是 tiny 那样一次算完整批（以前 P·G = 128 条一起算，说 41.1 GiB、装不下 5090）。"""
    from common.vram.plan import choose_method, run_settings
    from common.vram.shapes import shape_for_hub_id

    if torch.cuda.is_available():
        pytest.skip("这台机器有 CUDA")
    recipe = gpu_recipe()
    P, G, T_new = recipe["prompts_per_step"], recipe["group_size"], recipe["max_new_tokens"]

    def line(micro_batch):
        settings = run_settings(prompts=P, group=G, max_new_tokens=T_new, beta=recipe["beta"],
                                micro_batch=micro_batch, optimizer="adamw")  # fmt: skip
        return choose_method(shape_for_hub_id("Qwen/Qwen3-0.6B"), settings, 32.0).explain()

    with pytest.raises(SystemExit) as info:
        T.parse_args(["--preset", "qwen3-0.6b", "--out", str(tmp_path / "run")])
    msg = str(info.value.code)
    assert "需要 NVIDIA GPU" in msg
    assert line(recipe["micro_batch"]) in msg, f"拒绝里的显存账要按配方的 micro-batch 算：\n{msg}"
    assert line(P * G) not in msg
    assert not (tmp_path / "run").exists()


def test_train_trl_sets_up_the_device_like_grpo_train(T, tmp_path):
    """train_trl.py 走的路径和 grpo_train.py 一样设置设备（common.model.models.setup_device）：cuDNN 的 attention
    被关掉（它的反向在 H100/H200 上带 mask 时出 NaN，L2.08 第 6 节），fp32 矩阵乘用 TF32。"""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    try:
        cfg, opts = _tiny_args(T, tmp_path, "--steps", "1", "--no-vllm")
        T.build_trainer(cfg, opts)
        assert not torch.backends.cuda.cudnn_sdp_enabled(), (
            "train_trl.py 建好 trainer 以后 cuDNN 的 attention 还开着：它要和 grpo_train.py 一样调用 "
            "common.model.models.setup_device"
        )
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_the_within_group_control_keeps_each_groups_rewards(T):
    """--reward shuffled：每组 G 条的正确率原样留在组里（对错各几条不变），只是换了回答；同一个 seed 换法相同。"""
    G = 4
    gold = ["1", "2", "3", "4"] * 2
    texts = ["答案是 1", "2", "x", "4", "1", "y", "3", "z"]  # 组 0：对 对 错 对；组 1：错 错 对 错
    correct = T.correctness(texts, gold)
    shuffled = [T.shuffled_within_groups(G, seed=0)(texts, gold) for _ in range(2)]
    for rewards in shuffled:
        for g in range(2):
            assert sorted(rewards[g * G : (g + 1) * G]) == sorted(correct[g * G : (g + 1) * G])
    first = T.shuffled_within_groups(G, seed=0)
    draws = [first(texts, gold) for _ in range(20)]
    assert any(d != correct for d in draws), "20 次都没换过：没有打乱"
    again = T.shuffled_within_groups(G, seed=0)
    assert [again(texts, gold) for _ in range(20)] == draws, "同一个 seed 要给出同样的打乱"


@pytest.mark.parametrize(
    "argv, needle",
    [(["--reward", "format_only"], "train_trl.py 只支持 correctness | shuffled")],
)
def test_rewards_train_trl_cannot_do_are_refused(T, tmp_path, argv, needle):
    with pytest.raises(SystemExit) as info:
        _tiny_args(T, tmp_path, *argv)
    assert needle in str(info.value.code)


def test_settings_the_course_loss_cannot_do_are_refused(T, tmp_path):
    from trl import GRPOConfig

    ok = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    from course_trainer import _unsupported_for_course_loss

    assert _unsupported_for_course_loss(ok) == []
    bad = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to=[],
        loss_type="cispo",
        beta=0.1,
    )
    problems = _unsupported_for_course_loss(bad)
    assert any("cispo" in p for p in problems) and any(
        "use_bias_correction_kl" in p for p in problems
    )


# ---------------------------------------------------------------- 你的损失 == TRL 的损失 -------------------------------
@pytest.fixture(scope="module")
def course_trainer(T, impl_name, tmp_path_factory):
    """tiny 随机权重的 CourseGRPOTrainer（不训练），梯度累积 2 次：P=2, G=4, micro-batch 4。"""
    out = tmp_path_factory.mktemp("trl_loss")
    a = T.parse_args(
        [
            "--preset",
            "tiny",
            "--init",
            "random",
            "--impl",
            impl_name,
            "--out",
            str(out / "run"),
            "--prompts-per-step",
            "2",
            "--group-size",
            "4",
            "--micro-batch",
            "4",
            "--max-new-tokens",
            "8",
        ]
    )
    trainer = T.build_trainer(*a)
    assert trainer.args.gradient_accumulation_steps == 2 and trainer.args.steps_per_generation == 2
    return trainer


def _inputs(trainer, beta, seed=0):
    """一个 micro-batch：左填充的 prompt、带 EOS 后 padding 的回答（含一条空回答）、偏离当前策略的 old/ref logp。"""
    g = torch.Generator().manual_seed(seed)
    B, Tp, Tc, V = 4, 5, 7, trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, V, (B, Tp), generator=g)
    prompt_mask = torch.ones(B, Tp, dtype=torch.long)
    prompt_mask[1, :2] = 0  # 左填充
    completion_ids = torch.randint(3, V, (B, Tc), generator=g)
    completion_mask = torch.ones(B, Tc, dtype=torch.long)
    completion_mask[0, 4:] = 0
    completion_mask[2, 1:] = 0
    completion_mask[3, :] = 0  # 空回答（被 mask_truncated_completions 整行置 0 的情形）
    inputs = dict(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        advantages=torch.tensor([1.2, -0.7, 0.4, -1.5]),
        # 整个生成批次的 token 数（另一个 micro-batch 里还有 token）
        num_items_in_batch=completion_mask.sum() * 2 + 5,
    )
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1),
            Tc,
        )
    # ratio 偏离 1 足够远，两侧的 clip 都会触发
    inputs["old_per_token_logps"] = logp + 0.4 * torch.randn(logp.shape, generator=g)
    if beta > 0:
        inputs["ref_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=g)
    return inputs


def _run(trainer, loss_fn, inputs):
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.model.train()
    trainer.model.zero_grad(set_to_none=True)
    loss = loss_fn(trainer, trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics


@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
def test_course_loss_inside_trl_matches_trl_loss(T, course_trainer, loss_type, beta):
    from trl import GRPOTrainer

    tr = course_trainer
    tr.loss_type, tr.beta, tr.epsilon_low, tr.epsilon_high = loss_type, beta, 0.2, 0.28
    tr.current_gradient_accumulation_steps = 2
    inputs = _inputs(tr, beta)
    ref_loss, ref_grads, ref_metrics = _run(tr, GRPOTrainer._compute_loss, inputs)
    loss, grads, metrics = _run(tr, type(tr)._compute_loss, inputs)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
    assert ref_loss.abs() > 1e-4, "测试数据太平凡：TRL 的损失几乎为 0"
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(
            grads[name], ref_grads[name], rtol=1e-4, atol=1e-7, msg=f"参数 {name} 的梯度不一致"
        )
    assert ref_metrics["clip_ratio/region_mean"] > 0, "测试数据里应该有被 clip 的 token"
    for key in ("clip_ratio/region_mean", "entropy") + (("kl",) if beta > 0 else ()):
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("loss_type,beta", [("dapo", 0.1), ("grpo", 0.0)])
def test_vllm_importance_weights_folded_into_advantages_match_trl(course_trainer, loss_type, beta):
    """用 vLLM 时 TRL 把每条回答的重要性权重 w ≥ 0 乘在 surrogate 上；我们把 w 乘进 advantage，两者必须相同。"""
    from trl import GRPOTrainer

    tr = course_trainer
    tr.loss_type, tr.beta, tr.epsilon_low, tr.epsilon_high = loss_type, beta, 0.2, 0.28
    tr.current_gradient_accumulation_steps = 2
    inputs = _inputs(tr, beta, seed=1)
    # sequence_mask 模式：(B, 1)，被 mask 的是 0
    inputs["importance_sampling_ratio"] = torch.tensor([[1.3], [0.0], [0.8], [2.0]])
    tr.use_vllm, tr.vllm_importance_sampling_correction = True, True
    try:
        ref_loss, ref_grads, _ = _run(tr, GRPOTrainer._compute_loss, inputs)
        loss, grads, _ = _run(tr, type(tr)._compute_loss, inputs)
    finally:
        tr.use_vllm = False
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
    for name in ref_grads:
        torch.testing.assert_close(
            grads[name], ref_grads[name], rtol=1e-4, atol=1e-7, msg=f"参数 {name} 的梯度不一致"
        )


# ---------------------------------------------------------------- CI 冒烟：两步真的在训练 ------------------------------
@pytest.mark.slow
def test_two_steps_on_cpu_change_every_parameter(T, tmp_path, impl_name):
    from common.model.models import TINY_WARMSTART_DIR

    # 仓库自带这个 checkpoint（setuptools package-data）；不在就是安装坏了，要报错而不是跳过
    assert (TINY_WARMSTART_DIR / "model.safetensors").is_file(), (
        f"tiny 的 warm-start checkpoint 不在 {TINY_WARMSTART_DIR}：重新 pip install -e . ，"
        "或运行 L2_algorithm/07_grpo_train/make_warmstart.py 重新生成"
    )
    a = _tiny_args(
        T,
        tmp_path,
        "--steps",
        "2",
        "--prompts-per-step",
        "4",
        "--group-size",
        "4",
        "--micro-batch",
        "8",
        "--max-new-tokens",
        "24",
        "--impl",
        impl_name,
    )
    trainer = T.build_trainer(*a)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    unchanged = [
        n for n, p in trainer.model.named_parameters() if torch.equal(before[n], p.detach())
    ]
    assert not unchanged, f"两步之后这些参数没变：{unchanged[:5]}"
    from common.run.metrics import read_metrics

    rows = read_metrics(Path(a[0].out) / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["adv_max_abs_diff_vs_trl"] <= 1e-6 for r in rows), (
        "我们算的 advantage 与 TRL 的不一致"
    )
    assert any(r["reward_std"] > 0 for r in rows), "两步里 reward 都没有差异：梯度不可能非零"
    steps = read_metrics(Path(a[0].out) / "steps.jsonl")
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["step_s"] >= r["score_s"] >= r["generate_s"] > 0 for r in steps), steps


@pytest.mark.slow
def test_the_control_run_learns_from_shuffled_rewards(T, tmp_path, monkeypatch):
    """--reward shuffled 跑两步：记下的 accuracy 是真的正确率，训练用的 reward 是组内打乱的；组内打乱不改
    每组的均值，所以整批的 reward 均值等于正确率，而 advantage（从打乱后的 reward 算）一般不同。
    顺带：训练题和 held-out 只读一次（自己的 jsonl 去重时的那行提示不会打两遍）。"""
    import json

    from common.run.metrics import read_metrics

    reads = []
    load_splits = T.D.load_splits
    monkeypatch.setattr(T.D, "load_splits", lambda *a, **k: reads.append(a) or load_splits(*a, **k))
    small = ["--prompts-per-step", "2", "--group-size", "4", "--micro-batch", "8",
             "--max-new-tokens", "8", "--n-heldout", "4", "--pass-k", "0"]  # fmt: skip
    cfg, opts = _tiny_args(T, tmp_path, "--steps", "2", "--reward", "shuffled", *small)
    T.main(cfg, opts)
    assert len(reads) == 1, f"train_trl.py 读了 {len(reads)} 次数据：训练题和 held-out 应该一次读出"
    rows = read_metrics(Path(cfg.out) / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(abs(r["reward_mean"] - r["accuracy"]) < 1e-6 for r in rows)
    assert json.loads((Path(cfg.out) / "config.json").read_text())["reward"] == "shuffled"


@pytest.mark.slow
def test_resume_continues_from_trls_checkpoint(T, tmp_path):
    """--resume：TRL 自己的 resume_from_checkpoint；续跑前多记的行先删掉，设置只许改 --steps。"""
    import json

    from common.run.metrics import read_metrics

    small = ["--prompts-per-step", "2", "--group-size", "4", "--micro-batch", "8",
             "--max-new-tokens", "8", "--save-steps", "1"]  # fmt: skip
    a, opts = _tiny_args(T, tmp_path, "--steps", "2", *small)
    T.main(a, opts)
    run = Path(a.out)
    assert (run / "checkpoint-2").is_dir() and json.loads((run / "config.json").read_text())[
        "provenance"
    ]
    b, b_opts = T.parse_args(["--resume", str(run), "--steps", "3"])
    assert b.steps == 3 and b.group_size == a.group_size and b.out == str(run)
    assert b_opts == opts
    T.main(b, b_opts)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
    assert [r["step"] for r in read_metrics(run / "steps.jsonl")] == [1, 2, 3]
    # 课程自己的 held-out 评估：训练前一次、每次运行的最后一步一次；续跑不重做训练前的那次
    assert [r["step"] for r in read_metrics(run / "eval_questions.jsonl")] == [0, 2, 3]
    after = json.loads((run / "eval_after.json").read_text())
    assert after["step"] == 3 and after["n"] == a.n_heldout
    before = json.loads((run / "eval_before.json").read_text())
    assert len(before["per_question"]["greedy"]) == a.n_heldout
    assert "eval_accuracy" in read_metrics(run / "metrics.jsonl")[-1]
    with pytest.raises(SystemExit):
        T.parse_args(["--resume", str(run), "--lr", "0.5"])


@pytest.mark.parametrize(
    "flag, value",
    [("--lr", "1.0"), ("--beta", "-1"), ("--group-size", "1"), ("--temperature", "0")],
)
def test_both_trainers_refuse_a_bad_value_with_the_same_line(T, tmp_path, flag, value):
    """一个配置、两个训练脚本：grpo_train.py 和 train_trl.py 对同一个坏值说同一行中文（同一个 GRPOConfig 的检查）。"""
    from common.config.config_cli import parse_config

    lines = []
    for parse in (parse_config, T.parse_args):
        with pytest.raises(SystemExit) as info:
            parse([flag, value, "--out", str(tmp_path / "bad")])
        lines.append([line for line in str(info.value.code).splitlines() if flag in line])
    assert lines[0] and lines[0] == lines[1], lines
    assert not (tmp_path / "bad").exists()
