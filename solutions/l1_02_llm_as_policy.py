"""L1.02 LLM 就是一个策略：检查点答案键（与 L1_concepts/02_llm_as_policy/README.md 的「检查点」一致）。"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "ABC",
    "Q3": "C",
    "Q4": "B",
    "Q5": "ABC",
}
