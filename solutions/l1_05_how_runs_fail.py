"""L1.05 训练是怎么坏掉的：检查点答案键（与 L1_concepts/05_how_runs_fail/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "B",
    "Q3": "ABC",
    "Q4": "ABD",
    "Q5": "A",
    "Q6": "B",
}
