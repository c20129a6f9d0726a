"""L1.01 这条路需要什么：读 L1_concepts/01_what_you_need/README.md，把 None 换成你的答案（如 "B"、"ACD"）。"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
    "Q6": None,
}
