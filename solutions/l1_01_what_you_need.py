"""L1.01 这条路需要什么：检查点答案键（与 L1_concepts/01_what_you_need/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "ACDE",
    "Q3": "B",
    "Q4": "B",
    "Q5": "B",
    "Q6": "C",
}
