"""L3.03 读 Miles 的检查点：读 L3_frameworks/03_miles_reading/README.md，把 None 换成你的答案（如 "B"、"ABD"）。"""

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
