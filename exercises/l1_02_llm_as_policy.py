"""L1.02 LLM 就是一个策略：读 L1_concepts/02_llm_as_policy/README.md，把 None 换成你的答案（如 "B"、"ABC"）。"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
}
