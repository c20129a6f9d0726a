"""The names a run's settings can take, each defined here once (torch-free).

common/config/grpo_config.py offers them as a knob's choices; the modules that act on a name import
it from here (common/model/optim.py, common/gsm8k/data.py, common/gsm8k/controls.py), and so do
solutions/ and exercises/ (L2.05's aggregations, L2.09's TIS levels). Reward function names live
with the functions: common/gsm8k/reward.py's REWARD_FUNCS.
"""

from __future__ import annotations

# L2.05: how grpo_loss averages over tokens -> the paper / framework that uses it (for error messages)
AGGREGATIONS = {
    "sequence_mean": "原版 GRPO；TRL loss_type='grpo'；slime 默认",
    "token_mean": "DAPO；TRL loss_type='dapo'/'bnpo'（单进程）；slime --calculate-per-token-loss",
    "constant": "Dr. GRPO；TRL loss_type='dr_grpo'",
}
TIS_LEVELS = ("none", "token", "sequence")  # L2.09: "none" = no correction, else tis_weights' level
OPTIMIZERS = ("adamw", "adamw8bit")  # common/model/optim.py
DATA_SOURCES = (
    "synthetic",
    "gsm8k",
    "hub",
)  # what --data can name (or a jsonl path); common/gsm8k/data.py
CONTROLS = ("shuffled", "shuffled_batch")  # correctness rewards, then shuffled (L2.08 1.1)
ROLLOUTS = ("auto", "eager", "fast", "vllm")
INITS = ("pretrained", "random")
IMPLS = ("solutions", "exercises")
