"""L1.03 从策略梯度到 PPO 到 GRPO：读 L1_concepts/03_pg_to_ppo_to_grpo/README.md，把 None 换成你的答案（如 "B"、"ABC"）。"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
    "Q6": None,
    "Q7": None,
    "Q8": None,
}
