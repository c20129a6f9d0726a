"""L1.05 训练是怎么坏掉的：读 L1_concepts/05_how_runs_fail/README.md，把 None 换成你的答案（如 "B"、"ABC"）。"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
    "Q6": None,
}
