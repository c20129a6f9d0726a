"""L2.08 读懂曲线：把检查点答案填进来（大写字母，多选按字母顺序）。"""

CHECKPOINT_ANSWERS = {"Q1": None, "Q2": None, "Q3": None, "Q4": None}
