"""TRL（不用 vLLM）和 grpo_train.py 背靠背：同一张卡、同一份合成题、同样的 P×G×新 token，逐个 micro-batch 比。

    python L3_frameworks/01_trl_vllm_colocate/bench_vs_trl.py                       # GPU：0.6B 形状，随机权重
    python L3_frameworks/01_trl_vllm_colocate/bench_vs_trl.py --micro-batch 16 64 --steps 6 --cap-gb 32 --report DIR

每个 micro-batch 先跑 TRL、再跑 grpo_train.py（各自一个子进程，都用 --cap-gb 把 PyTorch 限制在同样的显存），
取第 2 步起的中位数（第 1 步含编译和预热）。β 默认 0.04（两边都带参考模型；TRL 的参考模型前向在它的
打分阶段里，不算进它的「训练部分」，我们的算在 train_s 里）；--beta 0 是 2026-11 那几次测量的设置。
「整步」：TRL 是 steps.jsonl 的 step_s，grpo_train.py 是相邻两步 elapsed_s 之差；「训练部分」：TRL 是
step_s - score_s（全部 micro-batch 的前向反向 + 优化器），grpo_train.py 是 train_s（同样的内容）。没有 GPU 时用 --preset tiny 在 CPU 上只检查流程，时间没有意义。
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from common.gsm8k.data import synthetic_problems  # noqa: E402
from common.options.cli import CourseParser  # noqa: E402
from common.run.checkpoint import checkpoint_path  # noqa: E402

TRL = ROOT / "L3_frameworks" / "01_trl_vllm_colocate" / "train_trl.py"
OURS = ROOT / "L2_algorithm" / "07_grpo_train" / "grpo_train.py"
# grpo_train.py 没有 --cap-gb：用 common.vram.measure.cap_to_gpu_gb 包一层 runpy，和 L3.01 README 的命令一样
CAPPED = (
    "import sys, runpy; from common.vram.measure import cap_to_gpu_gb; cap = float(sys.argv[1]); "
    "cap and cap_to_gpu_gb(cap); sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def run(cmd: list[str], log: Path) -> None:
    t0 = time.time()
    with log.open("w", encoding="utf-8") as f:
        r = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text(encoding="utf-8")[-3000:]
        sys.exit(f"子进程失败（exit {r.returncode}）：{' '.join(cmd)}\n{tail}")
    print(
        f"  {Path(cmd[1]).name if cmd[1] != '-c' else OURS.name}：{time.time() - t0:.0f} s",
        flush=True,
    )


def main(argv=None) -> int:
    p = CourseParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="qwen3-0.6b")
    p.add_argument("--micro-batch", type=int, nargs="+", default=[16, 64])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--cap-gb", type=float, default=None, help="两边都限制在这么多 GiB（5090：32）")
    p.add_argument("--beta", type=float, default=0.04, help="KL 系数，两边相同（0 = 不要参考模型）")
    p.add_argument(
        "--out",
        default="runs/bench_vs_trl",
        help="两边运行目录的上一级（每次新建一个带时间的子目录）",
    )
    p.add_argument(
        "--report", default=None, help="再把 summary.json / summary.md 写进这个目录（只这两个文件）"
    )
    p.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="保留两边的 checkpoint 和随机初始权重（默认读完数据就删掉：0.6B 的每份都有几个 GB）",
    )
    a = p.parse_args(argv)
    n = a.prompts * a.group
    bad = [m for m in a.micro_batch if m < 1 or n % m]
    if bad or a.steps < 2 or a.beta < 0:
        p.error(f"--micro-batch 必须整除 P×G = {n}（得到 {bad}），--steps 至少 2，--beta 不能为负")
    out = ROOT / a.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    data = out / "syn.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": q.question, "answer": q.answer}) + "\n"
            for q in synthetic_problems(2000, seed=1, difficulty=2)
        ),
        encoding="utf-8",
    )
    init = ["--init", "random"] if a.preset != "tiny" else []
    common = [
        "--preset",
        a.preset,
        *init,
        "--data",
        str(data),
        "--prompts-per-step",
        str(a.prompts),
    ]
    common += ["--group-size", str(a.group), "--max-new-tokens", str(a.max_new_tokens)]
    common += ["--beta", str(a.beta)]
    rows = []
    for mb in a.micro_batch:
        print(f"micro-batch {mb}:", flush=True)
        trl_dir, our_dir = out / f"trl-mb{mb}", out / f"ours-mb{mb}"
        cap = ["--cap-gb", str(a.cap_gb)] if a.cap_gb else []
        run(
            [sys.executable, str(TRL), *common, "--steps", str(a.steps), "--micro-batch", str(mb)]
            + ["--no-vllm"]
            + ["--loss-type", "grpo", "--impl", "trl", "--out", str(trl_dir), *cap],
            out / f"trl-mb{mb}.log",
        )
        # --early-evals none：前几步不做额外的评估（评估时间会算进那一步的 elapsed_s）；
        # --pass-k 0 让最后的评估只做贪心
        run(
            [sys.executable, "-c", CAPPED, str(a.cap_gb or 0), str(OURS), *common]
            + ["--steps", str(a.steps), "--micro-batch", str(mb), "--n-heldout", "16"]
            + ["--eval-every", "1000", "--pass-k", "0", "--save-every", "100000"]
            + ["--early-evals", "none"]
            + ["--out", str(our_dir)],
            out / f"ours-mb{mb}.log",
        )
        trl = read_jsonl(trl_dir / "steps.jsonl")
        ours = read_jsonl(our_dir / "metrics.jsonl")
        elapsed = [r["elapsed_s"] for r in ours]
        whole = [b - a_ for a_, b in zip(elapsed, elapsed[1:])]
        peak = lambda rs, k: max((r.get(k) or 0.0) for r in rs)
        row = dict(
            micro_batch=mb,
            trl_step_s=median_after_first([r["step_s"] for r in trl]),
            trl_train_s=median_after_first([r["step_s"] - r["score_s"] for r in trl]),
            trl_generate_s=median_after_first([r["generate_s"] for r in trl]),
            ours_step_s=statistics.median(whole),
            ours_train_s=statistics.median([r["train_s"] for r in ours[1:]]),
            ours_rollout_s=statistics.median([r["rollout_s"] for r in ours[1:]]),
            trl_peak_gib=peak(trl, "peak_alloc_gb"),
            ours_peak_gib=peak(ours, "peak_vram_gb"),
        )
        rows.append(row)
        if not a.keep_checkpoints:  # 数据已读完：checkpoint 和 TRL 落盘的随机初始权重占几个 GB
            shutil.rmtree(trl_dir / "init_random", ignore_errors=True)
            for f in (checkpoint_path(our_dir), *our_dir.glob("*.tmp")):
                f.unlink(missing_ok=True)
    lines = [
        f"{a.preset}，P{a.prompts}×G{a.group}×{a.max_new_tokens} 新 token，β={a.beta:g}，显存上限 "
        f"{a.cap_gb or '不限'} GiB；第 2–{a.steps} 步的中位数（秒）：",
        "mb  整步TRL  整步我们  比值  训练TRL  训练我们  比值  生成TRL  rollout我们  峰值TRL  峰值我们",
    ]
    for r in rows:
        lines.append(
            f"{r['micro_batch']:>2}  {r['trl_step_s']:7.2f}  {r['ours_step_s']:8.2f}  "
            f"{r['ours_step_s'] / r['trl_step_s']:4.2f}  {r['trl_train_s']:7.2f}  {r['ours_train_s']:8.2f}  "
            f"{r['ours_train_s'] / r['trl_train_s']:4.2f}  {r['trl_generate_s']:7.2f}  "
            f"{r['ours_rollout_s']:11.2f}  {r['trl_peak_gib']:7.1f}  {r['ours_peak_gib'] or 0:8.1f}"
        )
    lines.append(f"（峰值：GiB，PyTorch max_memory_allocated；逐步数据在 {out}）")
    for folder in [out] + ([Path(a.report)] if a.report else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
        (folder / "summary.md").write_text(
            "```text\n" + "\n".join(lines) + "\n```\n", encoding="utf-8"
        )
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
