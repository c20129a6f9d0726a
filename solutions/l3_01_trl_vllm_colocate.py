"""L3.01 TRL + vLLM colocate：检查点答案（README「检查点」一节）。

这节课没有要你实现的函数：你在 L2 写的 group_advantages / grpo_loss 会被
L3_frameworks/01_trl_vllm_colocate/train_trl.py 插进 TRL 的 GRPOTrainer，
由 tests/L3/test_train_trl.py 与 TRL 自己的损失逐项对比。
"""

CHECKPOINT_ANSWERS = {
    "Q1": "B",
    "Q2": "ABD",
    "Q3": "A",
    "Q4": "B",
    "Q5": "ACD",
    "Q6": "B",
    "Q7": "B",
}
