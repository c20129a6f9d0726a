"""L3.02 读 slime 的检查点答案键（与 L3_frameworks/02_slime_reading/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "A",
    "Q3": "C",
    "Q4": "ABC",
    "Q5": "B",
    "Q6": "ABD",
    "Q7": "B",
    "Q8": "ABC",
    "Q9": "ABC",
    "Q10": "B",
}
