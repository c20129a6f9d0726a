"""L2.08 第 6.2 节：真模型的运行死在第 86 步，NaN 从哪来。只能在 NVIDIA GPU 上跑。

    python L2_algorithm/08_reading_the_curves/cudnn_nan.py                    # 只测 attention kernel，几秒
    python L2_algorithm/08_reading_the_curves/cudnn_nan.py --model DIR         # 再加真模型的训练 forward+backward
    python L2_algorithm/08_reading_the_curves/cudnn_nan.py --model DIR --old-steps 100  # 再查旧运行每一步的宽度

它比较同样的输入在两种 attention kernel 下的梯度：cuDNN（torch 在 H100/H200 上带 mask 时默认选它）和
memory-efficient（课程现在用的，common/model/models.setup_device 关掉了 cuDNN）。结果写进 --json。
"""

import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.utils import clip_grad_norm_

from common.options.cli import CourseParser
from common.run.atomic_io import WriteError, atomic_write
from common.run.json_files import read_json_object
from common.run.metrics import MetricsError, read_whole_rows
from common.run.out_dir import out_file_problem


class RunWidthsError(ValueError):
    """A run folder --run-widths cannot read; the message names the file and the line."""


def _run_rows(run: Path) -> tuple[dict, list[dict]]:
    """(config.json, metrics.jsonl's rows) of a run, each row with prompt_ids and completion_len_max."""
    config = read_json_object(
        run / "config.json", "要指向 grpo_train.py 的运行目录", RunWidthsError
    )
    for key in ("data", "n_heldout"):
        if key not in config:
            raise RunWidthsError(
                f"{run / 'config.json'} 里没有 {key}：要指向 grpo_train.py 的运行目录"
            )
    path = run / "metrics.jsonl"
    try:  # 写了一半的最后一行：那一步的宽度算不出来，不悄悄少一步
        rows = read_whole_rows(path, "删掉这半行再算（会少最后一步的宽度）")
    except MetricsError as err:
        raise RunWidthsError(str(err)) from None
    for line, r in enumerate(rows, start=1):
        ids, longest = r.get("prompt_ids"), r.get("completion_len_max")
        if not isinstance(ids, list) or not isinstance(longest, int):
            raise RunWidthsError(
                f"{path} 第 {line} 行（第 {r['step']} 步）没有 prompt_ids 和 completion_len_max："
                "这个目录是旧版 grpo_train.py 写的，算不出宽度"
            )
    return config, rows


WIDTHS = (640, 704, 768)  # 704 = 5 × 128 + 64；640、768 是 128 的整数倍
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def kernel_case(width: int, backend: str, left_pad: int, seed: int = 0) -> dict:
    """一层 attention：(1, 2, width, 64) 的 q/k/v，前 left_pad 个位置是 pad（左填充）。

    mask = 因果 且 key 不是 pad：pad 位置上的 query 一个 key 都看不到（整行被遮住，logsumexp = -inf），
    正是训练 forward 里左填充的那几行。返回 q/k/v 梯度里非有限值的个数。"""
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (1, 2, width, 64)
    q, k, v = (torch.randn(shape, device="cuda", generator=g, dtype=torch.bfloat16) for _ in "qkv")
    for t in (q, k, v):
        t.requires_grad_(True)
    real = torch.arange(width, device="cuda") >= left_pad  # (width,) key 是不是真 token
    causal = torch.ones(width, width, dtype=torch.bool, device="cuda").tril()
    mask = (causal & real[None, :])[None, None]  # (1, 1, width, width)
    with sdpa_kernel([BACKENDS[backend]]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.backward(torch.randn(shape, device="cuda", generator=g, dtype=torch.bfloat16))
    bad = {n: int((~torch.isfinite(t.grad)).sum()) for n, t in zip("qkv", (q, k, v))}
    return {"width": width, "backend": backend, "left_pad": left_pad, "nonfinite_grad": bad}


def build_batch(tok, spec, problems, width: int, device):
    """8 道 GSM8K 题的 prompt（左填充）+ 回答，拼成总宽度正好是 width 的一批（和 rollout 的形状一样）。

    回答用题目自己的文字凑长度：前一半行写满（截断，没有 EOS），后一半行在不同位置结束。"""
    from common.decode.rollout_batch import finish_rollout, left_pad
    from common.gsm8k import data as D

    prompts = [
        tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    prompt_ids, prompt_mask = left_pad(prompts, spec.pad_token_id, device=device)
    n_new = width - prompt_ids.shape[1]
    eos = spec.eos_token_ids[0]
    rows = []
    for i, p in enumerate(problems):
        text = tok(p.question * 20, add_special_tokens=False)["input_ids"][:n_new]
        if i >= len(problems) // 2:  # 后一半：在 1/4 … 3/4 处结束
            end = n_new * (i - len(problems) // 2 + 1) // (len(problems) // 2 + 1)
            text = text[:end] + [eos] + [spec.pad_token_id] * (n_new - end - 1)
        rows.append(text)
    completion = torch.tensor(rows, device=device)
    return finish_rollout(
        prompt_ids, prompt_mask, completion, spec.eos_token_ids, spec.pad_token_id
    )


def train_pass(model, params, ro, dtype) -> tuple[float, float, float]:
    """训练的一次 forward + backward（和 grpo_train.py 的 logprobs 一样的路径）-> (loss, 梯度范数, 秒)。"""
    from common.model.models import HIDDEN_CHUNK_ROWS
    from solutions.l2_02_logprobs_and_masks import hidden_token_logprobs

    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=dtype):
        h = model.model(
            input_ids=ro.sequences, attention_mask=ro.attention_mask, position_ids=ro.position_ids
        ).last_hidden_state
    logp, _ = hidden_token_logprobs(
        h, model.lm_head.weight, ro.completion_ids, 1.0, chunk_rows=HIDDEN_CHUNK_ROWS
    )
    mask = ro.completion_mask
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    norm = clip_grad_norm_(params, float("inf")).item()
    torch.cuda.synchronize()
    return loss.item(), norm, time.perf_counter() - t0


def model_cases(model_dir: str, cap_gb: float | None, repeats: int) -> dict:
    """真模型：每个宽度、每种 kernel 各做 repeats 次 forward + backward，记 loss、梯度范数、时间。"""
    from common.gsm8k import data as D
    from common.model.models import compute_dtype, load_model, model_spec, setup_device

    spec = model_spec(model_dir)
    device = setup_device(spec, cap_gb=cap_gb)
    model, tok = load_model(spec, "pretrained", device)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # 和 grpo_train.py 一样：fp32 主权重 + bf16 autocast
        p.data = p.data.float()
    dtype = compute_dtype(spec, device)
    problems = D.load_gsm8k("train")[:8]
    rows = []
    built = []  # 每个宽度实际拼出来的 (prompt 宽度, 总宽度)
    for width in WIDTHS:
        ro = build_batch(tok, spec, problems, width, device)
        built.append((int(ro.prompt_ids.shape[1]), int(ro.sequences.shape[1])))
        for cudnn in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            for r in range(repeats):
                loss, norm, sec = train_pass(model, params, ro, dtype)
                rows.append(
                    {"width": width, "cudnn": cudnn, "repeat": r, "loss": loss,
                     "grad_norm": norm, "finite": math.isfinite(norm), "seconds": sec}
                )  # fmt: skip
                print(
                    f"  宽度 {width}  cuDNN {'开' if cudnn else '关'}  loss {loss:.4f}  梯度范数 {norm:.4g}  {sec:.3f} s"
                )
    torch.backends.cuda.enable_cudnn_sdp(False)
    return {"model": spec.name, "rows": rows, "batch_rows": len(problems),
            "widths_built": [w for _, w in built], "prompt_width": built[0][0]}  # fmt: skip


def prompt_width(tok, problems, ids, cache: dict) -> int:
    """这几道题（训练集下标 ids）里最长的 prompt 有多少 token；cache 记着算过的题。"""
    from common.gsm8k import data as D

    for i in ids:
        if i not in cache:
            text = D.build_prompt(tok, problems[i].question)
            cache[i] = len(tok(text, add_special_tokens=False)["input_ids"])
    return max(cache[i] for i in ids)


def old_run_widths(
    model_dir: str, steps: int, seed: int, n_heldout: int, per_step: int, max_new: int
) -> dict:
    """旧代码（commit 10eb0ae 之前的 grpo_train.py）每一步选的题：一个 seed 过的 CUDA generator 每步一次
    randperm（快速采样路径用全局 CUDA 随机数，不碰它）。算出每一步 prompt 的宽度 Tp，以及假定有一条回答
    写满 max_new 个 token 时训练 forward 的宽度 Tp + max_new。"""
    from transformers import AutoTokenizer

    from common.gsm8k import data as D

    tok = AutoTokenizer.from_pretrained(model_dir)
    train, _ = D.load_splits("gsm8k", n_heldout)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lengths = {}
    out = []
    for step in range(1, steps + 1):
        pick = torch.randperm(len(train), generator=gen, device="cuda")[:per_step].tolist()
        tp = prompt_width(tok, train, pick, lengths)
        out.append(
            {
                "step": step,
                "prompt_ids": pick,
                "prompt_width": tp,
                "width_if_truncated": tp + max_new,
            }
        )
    hits = [r["step"] for r in out if r["width_if_truncated"] % 128 == 64]
    return {"seed": seed, "n_train": len(train), "per_step": per_step, "max_new_tokens": max_new,
            "steps": out, "steps_width_64_mod_128": hits}  # fmt: skip


def run_widths(model_dir: str, runs: list[Path]) -> dict:
    """附带的运行每一步训练 forward 的宽度 = 这一步 prompt 的最大长度 + 最长的回答（metrics 的
    completion_len_max）；只要 tokenizer，CPU 上就能算。返回每个目录每一步的宽度和 ≡ 64 (mod 128) 的步。"""
    from transformers import AutoTokenizer

    from common.gsm8k import data as D

    tok = AutoTokenizer.from_pretrained(model_dir)
    lengths = {}
    out = {}
    for run in runs:
        config, rows = _run_rows(run)
        train, _ = D.load_splits(config["data"], config["n_heldout"])
        widths = []
        for r in rows:
            widths.append(
                prompt_width(tok, train, r["prompt_ids"], lengths) + r["completion_len_max"]
            )
        hits = [r["step"] for r, w in zip(rows, widths) if w % 128 == 64]
        out[run.name] = {"widths": widths, "steps_width_64_mod_128": hits}
    return out


def summary_table(result: dict) -> str:
    """--json 的结果 -> L2.08 第 6.4 节的表（Markdown）：每个宽度，单层 attention 和真模型各一栏。"""
    kernel = {
        (r["width"], r["backend"], r["left_pad"]): r["nonfinite_grad"] for r in result["kernel"]
    }
    rows = result["model_cases"]["rows"]
    lines = [
        "| 宽度 | 单层 attention，cuDNN：grad_q 里的非有限值（无填充 / 左填充 32 行） "
        "| 单层，memory-efficient | 真模型，cuDNN：梯度范数，时间 | 真模型，关掉 cuDNN |",
        "|---:|---:|---:|---:|---:|",
    ]
    for width in WIDTHS:
        cudnn = f"{kernel[width, 'cudnn', 0]['q']} / {kernel[width, 'cudnn', 32]['q']}"
        eff = sum(sum(kernel[width, "efficient", pad].values()) for pad in (0, 32))
        cells = []
        for on in (True, False):
            case = [r for r in rows if r["width"] == width and r["cudnn"] == on]
            norm = case[-1]["grad_norm"]
            sec = sorted(r["seconds"] for r in case)[len(case) // 2]
            cells.append(f"{'NaN' if math.isnan(norm) else f'{norm:.3f}'}，{sec:.3f} s")
        lines.append(f"| {width} | {cudnn} | {eff} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> int:
    ap = CourseParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="真模型的目录（不给：只测 kernel）")
    ap.add_argument(
        "--cap-gb", type=float, default=None, help="PyTorch 最多用多少 GiB（模拟 5090）"
    )
    ap.add_argument("--repeats", type=int, default=3, help="真模型每种情况做几次（计时取中位数）")
    ap.add_argument(
        "--old-steps", type=int, default=0, help="查旧运行前多少步的宽度（要 --model 的 tokenizer）"
    )
    ap.add_argument("--json", type=Path, default=None, help="结果写到这个 JSON 文件")
    ap.add_argument("--run-widths", type=Path, nargs="+", default=None,
                    help="只算这些运行目录每一步的宽度（要 --model 的 tokenizer，CPU 上就行）")  # fmt: skip
    args = ap.parse_args()
    for flag, given in (("--run-widths", args.run_widths), ("--old-steps", args.old_steps)):
        if given and not args.model:
            ap.error(f"{flag} 要 --model DIR（用它的 tokenizer 数 token）")
    problem = args.json and out_file_problem(args.json, "--json")  # 跑之前就查：别白跑
    if problem:
        ap.error(problem)
    if args.run_widths:
        try:
            for run in args.run_widths:
                _run_rows(run)  # 先读全部目录，再加载 tokenizer
            result = run_widths(args.model, args.run_widths)
            for name, r in result.items():
                print(
                    f"  {name}：{len(r['widths'])} 步，宽度 ≡ 64 (mod 128) 的步："
                    f"{r['steps_width_64_mod_128']}"
                )
            if args.json:
                atomic_write(args.json, json.dumps(result, ensure_ascii=False))
        except (RunWidthsError, WriteError) as err:
            print(f"错误：{err}", file=sys.stderr)
            return 1
        return 0
    if not torch.cuda.is_available():
        print(
            "这个脚本只能在 NVIDIA GPU 上跑（它查的是 cuDNN 的 attention kernel）。",
            file=sys.stderr,
        )
        return 1
    result = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "gpu": torch.cuda.get_device_name(), "kernel": []}  # fmt: skip
    print(f"torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}  {result['gpu']}")
    for width in WIDTHS:
        for backend in BACKENDS:
            for left_pad in (0, 32):
                row = kernel_case(width, backend, left_pad)
                result["kernel"].append(row)
                print(
                    f"  kernel 宽度 {width}  {backend:9s}  左填充 {left_pad:2d}  非有限梯度 {row['nonfinite_grad']}"
                )
    if args.model:
        if args.old_steps:  # 先查这个（只要 tokenizer，不占显存）
            result["old_run"] = old_run_widths(args.model, args.old_steps, 0, 500, 16, 512)
            print(
                f"  旧运行里宽度 ≡ 64 (mod 128) 的步：{result['old_run']['steps_width_64_mod_128']}"
            )
        result["model_cases"] = model_cases(args.model, args.cap_gb, args.repeats)
    if args.json:
        atomic_write(args.json, json.dumps(result, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
