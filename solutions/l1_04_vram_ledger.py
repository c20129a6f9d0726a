"""L1.04 显存账本：检查点答案键（与 L1_concepts/04_vram_ledger/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "C",
    "Q2": "B",
    "Q3": "C",
    "Q4": "ABC",
    "Q5": "B",
    "Q6": "B",
    "Q7": "B",
}
