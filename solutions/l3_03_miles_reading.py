"""L3.03 读 Miles 的检查点答案键（与 L3_frameworks/03_miles_reading/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "C",
    "Q2": "B",
    "Q3": "AB",
    "Q4": "A",
    "Q5": "ABD",
    "Q6": "B",
    "Q7": "ABD",
    "Q8": "B",
}
