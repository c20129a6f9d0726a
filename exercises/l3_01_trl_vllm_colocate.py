"""L3.01 TRL + vLLM colocate：检查点作答。

读 L3_frameworks/01_trl_vllm_colocate/README.md 的「检查点」，把每题的答案写成大写字母串
（多选按字母顺序，如 "AC"），然后运行：

    pytest --impl exercises tests/test_checkpoints.py -k 01_trl

这节课的动手部分用的是你在 L2 写的函数：pytest --impl exercises -m slow tests/L3/test_train_trl.py
"""

CHECKPOINT_ANSWERS = {
    "Q1": None,
    "Q2": None,
    "Q3": None,
    "Q4": None,
    "Q5": None,
    "Q6": None,
    "Q7": None,
}
