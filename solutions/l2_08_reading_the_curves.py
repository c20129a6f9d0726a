"""L2.08 读懂曲线：检查点答案。"""

CHECKPOINT_ANSWERS = {"Q1": "B", "Q2": "ABD", "Q3": "B", "Q4": "B"}
