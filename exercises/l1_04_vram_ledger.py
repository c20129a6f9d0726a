"""L1.04 显存账本：读 L1_concepts/04_vram_ledger/README.md，把 None 换成你的答案（如 "B"、"ABC"）。"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
    "Q6": None,
    "Q7": None,
}
