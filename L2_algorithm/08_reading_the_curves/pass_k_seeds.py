"""L2.08 第 5 节：同一个起点、几个 seed 的运行，逐题配对地比 pass@k：训练前 vs 训练后，差多少、噪声多大。

    python L2_algorithm/08_reading_the_curves/pass_k_seeds.py runs/bands/default-run-s0 runs/bands/default-run-s1 runs/bands/default-run-s2
    python L2_algorithm/08_reading_the_curves/pass_k_seeds.py runs/starts/worked-start-honest-sft-300-steps-s{0,1,2} --pass-k 64

before_after.py 只给每个运行一张汇总表。这里把几个 seed 放在一起，回答两个问题：

1. 训练前后 pass@k 的差，有多少是噪声？同一批 200 道 held-out 题上、训练前后配对地比，噪声有两种：
   - 换一个 seed（选题、采样都不同）结果就会变：看各个 seed 的差的范围；
   - 题目抽样：每个 seed 里，逐题的差（训练后 − 训练前）的标准差 / √题数，就是配对比较的标准误。
2. 起点每题 N 条全错的题，训练后有多少采到了对的？这些 held-out 题从没被训练过，能变好只能是学到的东西迁移过来了。

每题按运行的温度采 N 条（和 grpo_train.py 的评估同一个函数、同一个随机种子，所以数字和 before_after.py 的一样）；
起点只评一次。所有运行必须来自同一个起点、同一批题、同样的采样设置。只适用于 tiny + 合成题；
N = 64 时 CPU 上每个模型一两分钟（单线程）。
"""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
import torch

from common.decode.evaluate import completer, evaluate, pass_at_k
from common.gsm8k import data as D
from common.gsm8k.reward import correctness_reward
from common.model.models import PresetError, load_model, model_spec
from common.options.cli import CourseParser
from common.run.checkpoint import CheckpointError, load_checkpoint
from common.run.json_files import read_run_config
from solutions.l2_06_sampling import process_logits

# 这些设置不同，逐题配对就没有意义
SAME = ("init", "model", "n_heldout", "n_train", "difficulty", "temperature", "top_p",
        "max_new_tokens")  # fmt: skip


def correct_counts(model, tok, preset, problems, cfg, n: int) -> list[int]:
    """每题 n 条采样里答对几条（和 grpo_train.py 的评估同一个 evaluate、同一个随机种子）。"""
    complete = completer(model, tok, preset, max_new_tokens=cfg["max_new_tokens"],
                         temperature=cfg["temperature"], top_p=cfg["top_p"],
                         process_logits=process_logits)  # fmt: skip
    sampled: list[str] = []

    def recording(chunk, greedy, generator):  # 记下采样的回答（evaluate 按题的顺序、每题 n 条相邻）
        texts = complete(chunk, greedy, generator)
        if not greedy:
            sampled.extend(texts)
        return texts

    evaluate(recording, problems, k=n)
    return [
        sum(correctness_reward(sampled[i * n + j], p.gold) for j in range(n))
        for i, p in enumerate(problems)
    ]


def per_question(counts: list[int], n: int, k: int) -> list[float]:
    return [pass_at_k(n, c, k) for c in counts]


def mean(xs) -> float:
    return sum(xs) / len(xs)


def main(argv=None) -> None:
    ap = CourseParser(
        allow_abbrev=False, description="几个 seed、逐题配对的 pass@k 前后对比（L2.08 第 5 节）"
    )
    ap.add_argument("runs", type=Path, nargs="+", help="同一个起点的几个 grpo_train.py 运行目录")
    ap.add_argument("--pass-k", type=int, default=64, help="每题采几条（默认 64）")
    args = ap.parse_args(argv)
    n = args.pass_k
    if n < 1:
        sys.exit("错误：--pass-k 至少为 1")
    try:
        cfgs = [read_run_config(run, ("model", "data")) for run in args.runs]
        specs = [
            model_spec(c.get("model")) for c in cfgs
        ]  # tiny：附带的起点或 make_warmstart.py 的
    except ValueError as err:
        sys.exit(f"错误：{err}")
    if any(not s.tiny or c["data"] != "synthetic" for s, c in zip(specs, cfgs)):
        sys.exit("错误：只适用于 tiny 模型 + --data synthetic 的运行")
    differ = [key for key in SAME if len({json.dumps(c.get(key)) for c in cfgs}) > 1]
    if differ:
        sys.exit(f"错误：这些运行的 {differ} 不同，不是同一个起点、同一批题，不能逐题配对")
    cfg = cfgs[0]
    torch.set_num_threads(1)  # 和 grpo_train.py 在 CPU 上一样：结果与核数无关
    preset = specs[0]
    try:
        start, tok = load_model(preset, cfg["init"])
        _, heldout = D.load_splits("synthetic", cfg["n_heldout"], n_train=cfg["n_train"],
                                   difficulty=cfg["difficulty"])  # fmt: skip
        before = correct_counts(start, tok, preset, heldout, cfg, n)
        after = []
        for run in args.runs:
            trained = copy.deepcopy(start)
            load_checkpoint(run, model=trained, restore_rngs=False)
            after.append(correct_counts(trained, tok, preset, heldout, cfg, n))
    except (PresetError, CheckpointError, D.DataError) as err:
        sys.exit(f"错误：{err}")

    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    names = [run.name for run in args.runs]
    print(f"| 每题采 {n} 条 | " + " | ".join(f"pass@{k}" for k in ks) + " |")
    print("|---|" + "---:|" * len(ks))
    for name, counts in (("训练前", before), *zip(names, after)):
        print(
            f"| {name} | "
            + " | ".join(f"{mean(per_question(counts, n, k)):.3f}" for k in ks)
            + " |"
        )

    print(
        f"\n训练后 − 训练前（逐题配对）：各 seed 的差；括号里是这个 seed 内题目抽样的标准误（{len(heldout)} 题）"
    )
    print("| k | " + " | ".join(names) + " | seed 均值（最小–最大） |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for k in ks:
        p0 = per_question(before, n, k)
        diffs, cells = [], []
        for counts in after:
            d = [b - a for a, b in zip(p0, per_question(counts, n, k))]
            m = mean(d)
            se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
            diffs.append(m)
            cells.append(f"{m:+.3f}（±{se:.3f}）")
        print(
            f"| {k} | "
            + " | ".join(cells)
            + f" | {mean(diffs):+.3f}（{min(diffs):+.3f}–{max(diffs):+.3f}） |"
        )

    print(f"\n起点每题 {n} 条全错的题：{sum(c == 0 for c in before)} 道")
    for name, counts in zip(names, after):
        up = sum(a == 0 and b > 0 for a, b in zip(before, counts))
        down = sum(a > 0 and b == 0 for a, b in zip(before, counts))
        print(f"  {name}：其中 {up} 道训练后至少采到一条对的；另有 {down} 道从「采得到」变成 {n} 条全错；"
              f"训练后全错的共 {sum(c == 0 for c in counts)} 道")  # fmt: skip


if __name__ == "__main__":
    main()
