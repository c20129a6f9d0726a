"""L2.08 第 4 节：把「采样温度下的熵」和「温度 1 下的熵」分开量，训练前 vs 训练后。

    python L2_algorithm/08_reading_the_curves/entropy_t1.py runs/lab-temp runs/lab-temp-control
    python L2_algorithm/08_reading_the_curves/entropy_t1.py runs/bands/default-run-s0 --samples 8

metrics.jsonl 里的 `entropy` 是按训练的温度 T 算的：采样用 softmax(z/T)，熵也是 softmax(z/T) 的熵。
T = 0.3 时这个分布本来就尖，熵天生就低，所以不能直接拿它和 T = 1 的运行比。这个脚本对每个运行目录，
在同一批 held-out 题上、起点模型和训练后的 checkpoint 各采 --samples 条回答，算回答里各位置熵的平均
（只算到第一个 EOS，和训练时一样用 completion_mask）：

- 「按运行的温度」：按 config.json 里的温度采样，熵也按它算——就是 metrics.jsonl 里的那个量，换成 held-out 题；
- 「温度 1」：按 T = 1 采样，熵按 softmax(z) 算——策略本身有多确定，和训练时用什么温度采样无关。

两种熵都给出「训练后 / 起点」的比值：比的是同一个运行自己的前后变化。采样用固定的随机种子（与评估相同），
所以同一台机器上重跑结果相同。只适用于 tiny + 合成题；CPU 上每个运行目录几十秒（单线程）。
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能 import common
import torch

from common.decode.evaluate import EVAL_SEED
from common.decode.rollout import generate
from common.gsm8k import data as D
from common.model.models import PresetError, load_model, model_spec
from common.options.cli import CourseParser
from common.run.checkpoint import CheckpointError, load_checkpoint
from common.run.json_files import read_run_config
from solutions.l2_02_logprobs_and_masks import completion_mask, hidden_token_logprobs, masked_mean
from solutions.l2_06_sampling import process_logits

BATCH = 128  # 每次生成、前向多少条回答


@torch.no_grad()
def mean_entropy(model, tok, preset, problems, *, temperature, samples, max_new_tokens) -> float:
    """按 temperature 每题采 samples 条，返回回答里各位置 softmax(z / temperature) 熵的 masked 平均。"""
    eos, pad = list(preset.eos_token_ids), preset.pad_token_id
    ids = [
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    prompts = [x for x in ids for _ in range(samples)]  # 同一题的几条相邻
    gen = torch.Generator().manual_seed(EVAL_SEED)
    total, count = 0.0, 0.0
    for i in range(0, len(prompts), BATCH):
        ro = generate(model, prompts[i : i + BATCH], max_new_tokens=max_new_tokens,
                      eos_token_ids=eos, pad_token_id=pad, temperature=temperature,
                      process_logits=process_logits, generator=gen, backend="eager")  # fmt: skip
        h = model.model(input_ids=ro.sequences, attention_mask=ro.attention_mask,
                        position_ids=ro.position_ids).last_hidden_state  # fmt: skip
        _, ent = hidden_token_logprobs(h, model.lm_head.weight, ro.completion_ids, temperature)
        mask = completion_mask(ro.completion_ids, eos)
        n = mask.sum().item()
        total += masked_mean(ent, mask).item() * n  # 所有批次合起来按 token 数加权
        count += n
    return total / count


def one_run(run: Path, samples: int) -> dict:
    try:
        cfg = read_run_config(run, ("model", "data"))
        preset = model_spec(cfg.get("model"))  # tiny：仓库附带的起点，或 make_warmstart.py 造的目录
    except ValueError as err:
        sys.exit(f"错误：{err}")
    if not preset.tiny or cfg["data"] != "synthetic":
        sys.exit(f"错误：{run} 不是 tiny 模型 + --data synthetic 的运行；这个脚本只适用于它们")
    try:
        start, tok = load_model(preset, cfg["init"])
        _, heldout = D.load_splits("synthetic", cfg["n_heldout"], n_train=cfg["n_train"],
                                   difficulty=cfg["difficulty"])  # fmt: skip
        trained = copy.deepcopy(start)
        step = load_checkpoint(run, model=trained, restore_rngs=False)["step"]
    except (PresetError, CheckpointError, D.DataError) as err:
        sys.exit(f"错误：{err}")
    start.eval()
    trained.eval()
    row = {"run": str(run), "temperature": cfg["temperature"], "lr": cfg["lr"], "step": step}
    for key, temp in (("at_1", 1.0), ("at_T", cfg["temperature"])):
        if key == "at_T" and temp == 1.0:  # 用 T = 1 训练的运行：两种熵是同一个量
            row[key] = row["at_1"]
            continue
        row[key] = [
            mean_entropy(
                m,
                tok,
                preset,
                heldout,
                temperature=temp,
                samples=samples,
                max_new_tokens=cfg["max_new_tokens"],
            )
            for m in (start, trained)
        ]
    return row


def main(argv=None) -> None:
    ap = CourseParser(
        allow_abbrev=False, description="温度 T 下的熵 vs 温度 1 下的熵，训练前后（L2.08 第 4 节）"
    )
    ap.add_argument(
        "runs",
        type=Path,
        nargs="+",
        help="grpo_train.py 的运行目录（要有 config.json 和 checkpoint.pt）",
    )
    ap.add_argument("--samples", type=int, default=8, help="每题采几条回答（默认 8）")
    args = ap.parse_args(argv)
    if args.samples < 1:
        sys.exit("错误：--samples 至少为 1")
    torch.set_num_threads(1)  # 和 grpo_train.py 在 CPU 上一样：结果与核数无关
    rows = [one_run(r, args.samples) for r in args.runs]
    print(
        "| 运行 | 温度 T / lr | 按 T 采样、softmax(z/T) 的熵：起点 → 训练后（比值） "
        "| T = 1 采样、softmax(z) 的熵：起点 → 训练后（比值） |"
    )
    print("|---|---|---:|---:|")
    for r in rows:
        cells = [f"{a:.3f} → {b:.3f}（×{b / a:.2f}）" for a, b in (r["at_T"], r["at_1"])]
        print(f"| {r['run']}（第 {r['step']} 步） | {r['temperature']:g} / {r['lr']:g} | "
              f"{cells[0]} | {cells[1]} |")  # fmt: skip


if __name__ == "__main__":
    main()
