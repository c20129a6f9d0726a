"""L2.08：一次运行的训练前 vs 训练后，在同样的 held-out 题上比两样东西。

    python L2_algorithm/08_reading_the_curves/before_after.py runs/bands/default-run-s0
    python L2_algorithm/08_reading_the_curves/before_after.py runs/bands/default-run-s0 --pass-k 64

1. 每种题型的「演算了的比例 / 正确率」（贪心解码）：回答里有 `=` 就算「演算了」（捷径起点的坏习惯是不演算、
   直接框一个数）。CPU 上几秒。
2. --pass-k N：每题按训练的温度采 N 条，pass@1、pass@2、pass@4……pass@N（Chen et al. 2021 的无偏估计，
   common/decode/evaluate.py）——k 越大，量的越是模型「采得到」的范围。N = 64 时 CPU 上约 3 分钟。

读运行目录里的 config.json（哪个起点、哪批题、温度）和 checkpoint.pt（训练后的权重）。只适用于 tiny + 合成题。
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
import torch

from common.decode.evaluate import completer, evaluate
from common.gsm8k import data as D
from common.gsm8k.reward import correctness_reward
from common.model.models import PresetError, load_model, model_spec
from common.options.cli import CourseParser
from common.run.checkpoint import CheckpointError, load_checkpoint
from common.run.json_files import read_run_config
from solutions.l2_06_sampling import process_logits

# 合成题的四种题型（common/gsm8k/data.py 的 _one），按题面里的固定说法认出来；顺序就是表格的行序
KINDS = (("加法", "more. How many"), ("减法", "left?"), ("平分（除法）", "equally"),
         ("先乘再减（两步）", "bags of"))  # fmt: skip


NEEDED = ("model", "init", "data", "n_heldout", "n_train", "difficulty", "max_new_tokens",
          "temperature", "top_p")  # fmt: skip  # config.json 里这个脚本要读的设置


def kind_of(question: str) -> str:
    return next(name for name, marker in KINDS if marker in question)


def greedy_answers(model, tok, preset, problems, max_new_tokens) -> list[str]:
    """贪心回答：和评估（common.decode.evaluate.completer）同一套 prompt、解码。"""
    return completer(model, tok, preset, max_new_tokens=max_new_tokens)(problems, True, None)


def pass_at_table(model, tok, preset, problems, cfg, n: int) -> dict:
    """[pass@k of the start, of the trained model]：每题采 n 条（和 grpo_train.py 的评估同一个函数）。"""
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    complete = completer(model, tok, preset, max_new_tokens=cfg["max_new_tokens"],
                         temperature=cfg["temperature"], top_p=cfg["top_p"],
                         process_logits=process_logits)  # fmt: skip
    return evaluate(complete, problems, k=n, extra_ks=ks)["pass_at"]


def table(problems, before: list[str], after: list[str], step: int) -> str:
    lines = [f"| 题型（题数） | 训练前：演算的比例 / 正确率 | 训练后（第 {step} 步）：演算的比例 / 正确率 |",
             "|---|---:|---:|"]  # fmt: skip
    for name, _ in KINDS:
        rows = [i for i, p in enumerate(problems) if kind_of(p.question) == name]
        if not rows:  # 题少（--n-heldout 8）时有的题型一题都没有
            lines.append(f"| {name}（0） | — | — |")
            continue
        cells = []
        for texts in (before, after):
            worked = sum("=" in texts[i] for i in rows) / len(rows)
            right = sum(correctness_reward(texts[i], problems[i].gold) for i in rows) / len(rows)
            cells.append(f"{worked:.2f} / {right:.2f}")
        lines.append(f"| {name}（{len(rows)}） | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = CourseParser(description="训练前 vs 训练后：每种题型、pass@k（L2.08）")
    ap.add_argument(
        "run", type=Path, help="grpo_train.py 的运行目录（要有 config.json 和 checkpoint.pt）"
    )
    ap.add_argument("--pass-k", type=int, default=0, help="每题采几条算 pass@1..pass@N（0 = 不算）")
    args = ap.parse_args(argv)
    if args.pass_k < 0:
        sys.exit("错误：--pass-k 不能为负")
    try:
        cfg = read_run_config(args.run, NEEDED)
    except ValueError as err:
        sys.exit(f"错误：{err}")
    try:
        preset = model_spec(cfg.get("model"))  # tiny：仓库附带的起点，或 make_warmstart.py 造的目录
    except ValueError as err:
        sys.exit(f"错误：{err}")
    if not preset.tiny or cfg["data"] != "synthetic":
        sys.exit("错误：题型是按合成题的题面认的，只适用于 tiny 模型 + --data synthetic 的运行")
    torch.set_num_threads(1)
    try:
        model, tok = load_model(preset, cfg["init"])
        _, heldout = D.load_splits("synthetic", cfg["n_heldout"], n_train=cfg["n_train"],
                                   difficulty=cfg["difficulty"])  # fmt: skip
        before = greedy_answers(model, tok, preset, heldout, cfg["max_new_tokens"])
        curves = (
            [pass_at_table(model, tok, preset, heldout, cfg, args.pass_k)] if args.pass_k else []
        )
        step = load_checkpoint(args.run, model=model, restore_rngs=False)["step"]
    except (PresetError, CheckpointError, D.DataError) as err:
        sys.exit(f"错误：{err}")
    after = greedy_answers(model, tok, preset, heldout, cfg["max_new_tokens"])
    print(table(heldout, before, after, step))
    if args.pass_k:
        curves.append(pass_at_table(model, tok, preset, heldout, cfg, args.pass_k))
        ks = list(curves[0])
        print(f"\n| | {' | '.join(f'pass@{k}' for k in ks)} |\n|---|{'---:|' * len(ks)}")
        for name, c in zip(("训练前", f"训练后（第 {step} 步）"), curves):
            print(f"| {name} | {' | '.join(f'{c[k]:.3f}' for k in ks)} |")


if __name__ == "__main__":
    main()
