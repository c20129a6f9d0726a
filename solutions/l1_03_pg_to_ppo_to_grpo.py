"""L1.03 从策略梯度到 PPO 到 GRPO：检查点答案键（与 L1_concepts/03_pg_to_ppo_to_grpo/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "B",
    "Q3": "ABC",
    "Q4": "B",
    "Q5": "B",
    "Q6": "B",
    "Q7": "A",
    "Q8": "B",
}
