"""手写 GRPO ↔ TRL GRPOConfig ↔ slime ↔ Miles 的参数对照表：唯一的数据源。

README 里那张表是从这里渲染出来的（两个 HTML 注释标记之间），tests/L3/test_mapping_table.py 检查：
- 每个 TRL 名字都是 trl 1.16.0 `GRPOConfig` 的字段（`dataclasses.fields`），字符串取值在 TRL 源码里真的出现；
- 每个"手写"名字都真实存在：`l2_xx_模块.函数(参数)` 用 inspect 查签名，`--flag` 解析
  L2_algorithm/07_grpo_train/grpo_train.py 的 argparse，`common.模块.名字` 直接 import；
- README 里的表和 render_markdown() 的输出一字不差。
- 每一行「--参数 ↔ TRL 字段」和 train_trl.py 的 to_trl_config 一致：train_trl.py 也接受的参数换个值，
  那个 TRL 字段跟着变；它写死的字段，写死的值就是 grpo_train.py 的默认值。

slime / Miles 的参数名核对过 THUDM/slime@624b824a:slime/utils/arguments.py 和
radixark/miles@31f1ca96:miles/utils/arguments.py（`--sglang-*` 是 SGLang 参数加前缀透传，见
THUDM/slime@624b824a:slime/backends/sglang_utils/arguments.py）。CI 离线拿不到这两个仓库，所以这一列不在测试里。

改了表以后重新渲染 README：

    python3 L3_frameworks/01_trl_vllm_colocate/mapping_table.py --write-readme
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- mapping-table:begin -->", "<!-- mapping-table:end -->"


@dataclass(frozen=True)
class Row:
    key: str  # 稳定的英文 id，测试用它找"种子课的五行"
    concept: str  # 中文概念名
    ours: tuple[
        str, ...
    ]  # 手写实现里的名字：`l2_01_advantages.group_advantages(scale)`、`--group-size`、`common.gsm8k.reward.REWARD_FUNCS`
    trl: tuple[str, ...]  # GRPOConfig 字段，可带取值：`loss_type="grpo"`、`beta`
    slime: str  # slime 启动参数（空串 = 没有对应物，原因写在 note）
    miles: str  # Miles 启动参数（同上；"同 slime" 不省略，照抄一遍方便查）
    note: str  # 一句话说明差异


ROWS: tuple[Row, ...] = (
    Row(
        "advantage_estimator",
        "优势估计方法（advantage estimator）",
        ("l2_01_advantages.group_advantages",),
        (),
        "--advantage-estimator grpo",
        "--advantage-estimator grpo",
        "TRL 没有这个字段：用 GRPOTrainer 这个类本身就选定了组内相对优势（RLOO 是另一个类 RLOOTrainer）",
    ),
    Row(
        "samples_per_prompt",
        "每个 prompt 采几条（组大小 G）",
        ("--group-size", "l2_01_advantages.group_advantages(group_size)"),
        ("num_generations",),
        "--n-samples-per-prompt",
        "--n-samples-per-prompt",
        "slime/Miles 的默认值是 1（即不分组），跑 GRPO 必须显式给；TRL 默认 8",
    ),
    Row(
        "adv_scale",
        "优势要不要除以 std",
        ("l2_01_advantages.group_advantages(scale)",),
        ('scale_rewards="group"', 'scale_rewards="batch"', 'scale_rewards="none"'),
        "--disable-grpo-std-normalization",
        "--disable-grpo-std-normalization",
        '我们的 scale="none" 就是 Dr. GRPO；slime/Miles 只有开/关两档，没有 batch 档',
    ),
    Row(
        "adv_eps",
        "std 分母上的 eps",
        ("l2_01_advantages.group_advantages(eps)",),
        (),
        "",
        "",
        "TRL 写死 1e-4，slime/Miles 写死 1e-6，都不是参数；train_trl.py 用我们的函数时传 eps=1e-4 才和 TRL 逐位一致",
    ),
    Row(
        "prompts_per_step",
        "每步多少个 prompt",
        ("--prompts-per-step",),
        ("generation_batch_size",),
        "--rollout-batch-size",
        "--rollout-batch-size",
        "单位不同：TRL 的 generation_batch_size 数的是回答条数（= prompt 数 × G），slime 数的是 prompt 数",
    ),
    Row(
        "micro_batch",
        "一次前向/反向放几条回答",
        ("--micro-batch",),
        ("per_device_train_batch_size",),
        "--micro-batch-size",
        "--micro-batch-size",
        "TRL 的 per_device_train_batch_size 数的也是回答条数，不是 prompt 数",
    ),
    Row(
        "grad_accum",
        "梯度累积几次再更新",
        ("--micro-batch",),
        ("gradient_accumulation_steps", "steps_per_generation"),
        "--global-batch-size",
        "--global-batch-size",
        "我们的累积次数 = prompts×G / micro-batch；slime 由 global-batch-size ÷（micro-batch-size × DP）推出",
    ),
    Row(
        "updates_per_rollout",
        "一批 rollout 切成几份、各做一次优化步",
        (),
        ("steps_per_generation",),
        "--num-steps-per-rollout",
        "--num-steps-per-rollout",
        "我们每批 rollout 只做一次优化步；TRL 在 gradient_accumulation_steps 不是 steps_per_generation 的整数倍时才会切（比如 steps_per_generation 更大）",
    ),
    Row(
        "num_iterations",
        "同一批数据重复优化几遍（μ）",
        ("--num-iterations",),
        ("num_iterations",),
        "",
        "",
        "μ=1 时 old_logp 就是当前 logp 的 detach，ratio≡1、clip 不起作用；slime/Miles 没有 μ，用切分代替",
    ),
    Row(
        "kl_coef",
        "KL 惩罚系数 β",
        ("--beta", "l2_05_grpo_loss.grpo_loss(beta)"),
        ("beta",),
        "--use-kl-loss --kl-loss-coef",
        "--use-kl-loss --kl-loss-coef",
        "三家默认都不开 KL（TRL beta=0.0）；β=0 时 TRL 根本不加载参考模型，省一份权重",
    ),
    Row(
        "kl_estimator",
        "KL 估计器",
        ("l2_04_kl.kl_k3", "l2_04_kl.kl_k1", "l2_04_kl.kl_k2"),
        ("use_bias_correction_kl",),
        "--kl-loss-type",
        "--kl-loss-type",
        "TRL 固定用 k3，另乘重要性比（use_bias_correction_kl，默认开）；slime/Miles 默认 k1，要 k3 得写 --kl-loss-type k3",
    ),
    Row(
        "clip_eps",
        "clip 下界 ε",
        ("--eps-low", "l2_05_grpo_loss.grpo_loss(eps_low)"),
        ("epsilon",),
        "--eps-clip",
        "--eps-clip",
        "三家默认都是 0.2",
    ),
    Row(
        "clip_eps_high",
        "clip 上界 ε_high（DAPO clip-higher）",
        ("--eps-high", "l2_05_grpo_loss.grpo_loss(eps_high)"),
        ("epsilon_high",),
        "--eps-clip-high",
        "--eps-clip-high",
        "不给就等于下界；DAPO 建议 0.28",
    ),
    Row(
        "loss_aggregation",
        "逐 token 损失怎么聚合成一个数",
        ("--aggregation", "l2_05_grpo_loss.grpo_loss(aggregation)"),
        ('loss_type="grpo"', 'loss_type="dapo"', 'loss_type="bnpo"', 'loss_type="dr_grpo"'),
        "--calculate-per-token-loss",
        "--calculate-per-token-loss",
        "sequence_mean↔grpo（slime 默认）；token_mean↔dapo/bnpo（单进程、不累积时相等）↔slime 加这个开关（Miles 的 FSDP 后端上这个开关给的是 token 之和、不是均值，见 L3.03）；constant↔dr_grpo",
    ),
    Row(
        "dr_grpo_constant",
        "Dr. GRPO 的常数分母",
        ("l2_05_grpo_loss.grpo_loss(max_completion_length)",),
        ("max_completion_length",),
        "",
        "",
        "TRL 的 dr_grpo 除以 B × max_completion_length；slime/Miles 没有这种聚合",
    ),
    Row(
        "max_new_tokens",
        "回答最长多少 token",
        ("--max-new-tokens",),
        ("max_completion_length",),
        "--rollout-max-response-len",
        "--rollout-max-response-len",
        "TRL 1.16 已删掉 max_prompt_length（传了直接 TypeError），prompt 不截断",
    ),
    Row(
        "truncated",
        "被截断的回答算不算进损失",
        ("l2_02_logprobs_and_masks.completion_mask(eos_token_ids)",),
        ("mask_truncated_completions",),
        "",
        "",
        "我们的 completion_mask 对没有 EOS 的行保留全 1（算进损失）；TRL 打开这个开关就把整行置 0（DAPO §3.4 的 overlong filtering：去掉 reward 噪声，也去掉了对超长回答的负信号，L1.05）",
    ),
    Row(
        "temperature",
        "采样温度",
        ("--temperature", "l2_06_sampling.process_logits(temperature)"),
        ("temperature",),
        "--rollout-temperature",
        "--rollout-temperature",
        "TRL 算 logp 时也除以同一个温度（fused lm head 的 temperature 参数），我们的 grpo_train.py 同理",
    ),
    Row(
        "top_p",
        "nucleus 采样 top-p",
        ("--top-p", "l2_06_sampling.process_logits(top_p)"),
        ("top_p",),
        "--rollout-top-p",
        "--rollout-top-p",
        "RL 里一般保持 1.0：截掉尾部会让采样分布和训练时算 logp 的分布不一致",
    ),
    Row(
        "logprobs",
        "逐 token log 概率（不展开整张 V 维 log_softmax）",
        ("l2_02_logprobs_and_masks.token_logprobs",),
        ("cast_lm_head_to_fp32",),
        "",
        "",
        "TRL 1.16 用 fused lm head 分块算 logp，不物化 (B,T,V) logits；cast_lm_head_to_fp32 只管那一层的精度",
    ),
    Row(
        "entropy",
        "熵：监控 + 可选的熵奖励",
        ("l2_02_logprobs_and_masks.token_entropy",),
        ("entropy_coef",),
        "--entropy-coef",
        "--entropy-coef",
        "我们只记录熵不加奖励；三家的熵奖励默认都是 0",
    ),
    Row(
        "reward",
        "奖励函数",
        ("--reward", "common.gsm8k.reward.REWARD_FUNCS"),
        ("reward_weights",),
        "--rm-type / --custom-rm-path",
        "--rm-type / --custom-rm-path",
        "TRL 的奖励函数本身是 GRPOTrainer(reward_funcs=...) 的参数，不在 GRPOConfig 里；config 只管权重",
    ),
    Row(
        "lr",
        "学习率",
        ("--lr",),
        ("learning_rate",),
        "--lr",
        "--lr",
        "TRL 和 slime 的默认都是 1e-6（slime 重设了 Megatron 的默认值）",
    ),
    Row(
        "steps",
        "训练多少步",
        ("--steps",),
        ("max_steps",),
        "--num-rollout",
        "--num-rollout",
        "slime 数的是 rollout 次数；每次 rollout 内还可以有多个优化步",
    ),
    Row(
        "rollout_engine",
        "谁来采样",
        ("l2_06_sampling.process_logits",),
        ("use_vllm", 'vllm_mode="colocate"', 'vllm_mode="server"'),
        "--rollout-num-gpus",
        "--rollout-num-gpus",
        "我们用训练中的同一个 HF 模型采样；TRL 可切到 vLLM；slime/Miles 永远用单独的 SGLang 引擎",
    ),
    Row(
        "colocate",
        "训练和推理挤在同一张卡上",
        (),
        ('vllm_mode="colocate"',),
        "--colocate",
        "--colocate",
        "我们天然是'同卡同进程同一份权重'，无需任何开关；slime 的 --colocate 会顺带打开 --offload",
    ),
    Row(
        "engine_memory",
        "推理引擎占多少显存",
        (),
        ("vllm_gpu_memory_utilization", "vllm_max_model_length"),
        "--sglang-mem-fraction-static",
        "--sglang-mem-fraction-static",
        "都是'占整卡显存的比例'；slime 文档常用 0.8 是因为训练已被 offload 出去，单卡 colocate 的 TRL 只能给 0.3 左右",
    ),
    Row(
        "offload",
        "不用时把推理引擎/训练状态挪出显存",
        (),
        ("vllm_enable_sleep_mode",),
        "--offload-train / --offload-rollout",
        "--offload-train / --offload-rollout",
        "TRL 只能让 vLLM 睡眠（sleep level 2）；slime 两边都能 offload（torch_memory_saver）",
    ),
    Row(
        "weight_sync",
        "训练完把权重推给推理引擎（weight sync）",
        (),
        ("vllm_mode", "vllm_group_port"),
        "--update-weight-mode / --update-weight-transport",
        "--update-weight-transfer-mode",
        "我们用同一个模型采样，同步是零成本；TRL 每个优化步自动 sync_weights()：colocate 进程内 load_weights，server 走 NCCL（vllm_group_port）；Miles 多了 p2p",
    ),
    Row(
        "is_correction",
        "采样引擎与训练引擎的 logp 不一致时的修正（TIS）",
        (),
        ("vllm_importance_sampling_correction", 'vllm_importance_sampling_mode="sequence_mask"'),
        "--use-tis",
        "--use-tis",
        "我们采样和训练是同一套前向，没有这个偏差；用了 vLLM/SGLang 就有，TRL 默认开",
    ),
    Row(
        "dynamic_sampling",
        "dynamic sampling（DAPO）：丢掉 reward 全相同的组，补采到 P 个有信号的组",
        ("--dynamic-sampling", "l2_10_dynamic_sampling.select_groups(target)"),
        (),
        "--over-sampling-batch-size / --dynamic-sampling-filter-path",
        "--over-sampling-batch-size / --dynamic-sampling-filter-path",
        "TRL 1.16 没有对应物（只记 frac_reward_zero_std，全相同的组照样训练）；slime 一次多采一批，"
        "用 filter_hub.dynamic_sampling_filters.check_reward_nonzero_std 过滤（出自 slime 的 examples，"
        "没有在上面那个 commit 上核对）",
    ),
    Row(
        "act_ckpt",
        "激活重算（activation checkpointing）",
        (),
        ("gradient_checkpointing",),
        "",
        "",
        "transformers 5.17 里字段名仍是 gradient_checkpointing（TRL 默认 True）；slime 用 Megatron 自己的 --recompute-* 参数",
    ),
    Row(
        "grad_clip",
        "梯度裁剪",
        ("--grad-clip",),
        ("max_grad_norm",),
        "--clip-grad",
        "--clip-grad",
        "三家默认都是 1.0（slime 重设了 Megatron 的默认值）",
    ),
    Row(
        "weight_decay",
        "AdamW 的 weight decay",
        ("--weight-decay",),
        ("weight_decay",),
        "",
        "",
        "advantage 全为 0 时 weight decay 照样改权重；我们和 TRL 默认都是 0（slime 走 Megatron 自己的优化器参数）",
    ),
    Row(
        "seed",
        "随机种子",
        ("--seed",),
        ("seed",),
        "--seed / --rollout-seed",
        "--seed / --rollout-seed",
        "slime 把训练和采样的种子分开",
    ),
    Row(
        "checkpoint",
        "存 checkpoint / 续训",
        ("--out", "--resume"),
        ("output_dir", "save_steps", "resume_from_checkpoint"),
        "--save / --save-interval / --load",
        "--save / --save-interval / --load",
        "slime 续训：把 --load 指向 --save 的目录，数据游标也一起恢复",
    ),
)

SEED_FIVE = ("advantage_estimator", "samples_per_prompt", "kl_coef", "clip_eps", "weight_sync")


def trl_field(entry: str) -> tuple[str, str | None]:
    """'loss_type="grpo"' -> ("loss_type", "grpo")；'beta' -> ("beta", None)。"""
    m = re.fullmatch(r'([a-z_0-9]+)(?:="([^"]*)")?', entry)
    if not m:
        raise ValueError(f'TRL 列的写法不对：{entry!r}（应是 字段名 或 字段名="取值"）')
    return m.group(1), m.group(2)


def _cell(items, sep="<br>") -> str:
    return sep.join(f"`{x}`" for x in items) if items else "—"


def render_markdown() -> str:
    """整张表的 Markdown（不含首尾标记）。"""
    lines = [
        "| 概念 | 手写（我们的名字） | TRL `GRPOConfig` | slime | Miles | 说明 |",
        "|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        slime = f"`{r.slime}`" if r.slime else "—"
        miles = f"`{r.miles}`" if r.miles else "—"
        lines.append(
            f"| {r.concept} | {_cell(r.ours)} | {_cell(r.trl)} | {slime} | {miles} | {r.note} |"
        )
    return "\n".join(lines)


def readme_section(text: str) -> str:
    """README 里两个标记之间的内容（去掉首尾空行）。"""
    if BEGIN not in text or END not in text:
        raise ValueError(f"README 里找不到 {BEGIN} … {END} 标记")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def write_readme() -> None:
    text = README.read_text(encoding="utf-8")
    readme_section(text)  # 标记不全就报错
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(f"{head}{BEGIN}\n{render_markdown()}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录
    from common.options.cli import CourseParser

    parser = CourseParser(
        allow_abbrev=False, description="打印（或写回 README）手写 ↔ TRL ↔ slime ↔ Miles 参数对照表"
    )
    parser.add_argument(
        "--write-readme", action="store_true", help="把渲染结果写进 README 的标记之间"
    )
    args = parser.parse_args()
    if args.write_readme:
        write_readme()
        print(f"已更新 {README}")
    else:
        print(render_markdown())
