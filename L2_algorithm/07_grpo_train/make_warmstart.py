"""L2.07 warm-start：给 tiny 预设做一次 SFT，得到 GRPO 的起点 checkpoint。

为什么 RL 之前要先 SFT？GRPO 只能「放大」模型已经偶尔做对的事：如果起点正确率是 0，每组 G 条回答
全错，组内 reward 的 std 为 0，advantage 全是 0，梯度也就是 0——模型什么都学不到。真实的 Qwen3
靠预训练获得这个非零起点；我们的 tiny 模型从随机权重开始，所以先用合成题做 SFT。

两个配方（RECIPES），区别只在 SFT 目标回答的风格（每道题按题面确定地分到一种，见 target_text）：
- worked：老老实实的 SFT，目标全是课程格式的标准解答（演算一行，最后 \\boxed{答案}），步数少、
  停在模型还拿不准的时候。模型的错都是自己的错（算错、抄错数），没有人替它安排。
- shortcut：故意混了三种风格——worked；hash（同样的演算，但用 GSM8K 的 `#### 答案` 收尾）；
  guess（不演算，直接把题目里的第一个数框起来：格式对，答案几乎总是错的）。guess 占 55%，
  于是贪心解码几乎总走这条捷径，起点贪心正确率很低；采样时又常常采到演算。这是**有意种下的坏习惯**，
  GRPO 在它上面的「起飞」主要是把这个习惯关掉——L2.07 第 1 节和 L2.08 用它讲捷径和 reward hacking。

    python L2_algorithm/07_grpo_train/make_warmstart.py                     # 重新生成仓库附带的起点
    python L2_algorithm/07_grpo_train/make_warmstart.py --check             # 只测量已有的起点
    python L2_algorithm/07_grpo_train/make_warmstart.py --recipe shortcut --out runs/ws-shortcut
    python L2_algorithm/07_grpo_train/grpo_train.py --model runs/ws-shortcut  # 从它开始做 GRPO

测量（measure）和 grpo_train.py 训练前的评估是同一个函数、同一批 200 道 held-out 题、同样的采样：
贪心正确率、pass@1 和 pass@8（每题按 T = 1 采 8 条）、8 条全对或全错（GRPO 的组内 std = 0）的题占多少。
配方是确定的：同一台机器、单线程重跑得到逐位相同的权重；换机器，浮点累加顺序不同，权重会有极小差别。
"""

import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录：没 pip install -e 也能跑
import torch
import torch.nn.functional as F

from common.config.config_cli import preset_config
from common.decode.evaluate import completer, evaluate
from common.gsm8k import data as D
from common.model.models import TINY_WARMSTART_DIR, load_model, model_spec
from common.options.cli import CourseParser
from solutions.l2_06_sampling import process_logits

# ---------------------------------------------------------------- 配方 ----------------------------------------------
SFT_SEED = 1000  # 合成题的 seed：和 GRPO 用的题（seed=1）不同
GRPO_DATA_SEED = D.SYNTHETIC_SEED  # grpo_train.py 的训练/held-out 题用这个 seed，SFT 全部排除
BATCH = 64
LR, WARMUP = 3e-3, 30  # 线性 warmup 后余弦衰减到 0（步数不同，衰减得快慢不同）
DIFFICULTIES = (1, 2, 3)  # 三种难度混合：+/-、×再-、除法都见过
N_PER_DIFFICULTY = 20000
# styles：SFT 目标回答的风格比例（target_text）；steps：SFT 步数。
RECIPES = {
    # 只有标准解答；步数少，停在还拿不准的时候（pass@8 远高于 pass@1）。
    "worked": dict(styles={"worked": 1.0}, steps=300),
    # guess 0.50 时贪心有约 40% 的题走演算（起点太高），0.55 时不到 10%：这个比例决定了起点正确率。
    # 演算风格只占 45%，要 1400 步演算的正确率才够高（RL 的上限就是它）。
    "shortcut": dict(styles={"guess": 0.55, "worked": 0.13, "hash": 0.32}, steps=1400),
}
DEFAULT_RECIPE = "shortcut"  # 仓库附带的 common/assets/tiny_warmstart/ 是用它生成的
STYLES = RECIPES["shortcut"]["styles"]  # target_text 不指定风格时用它


def sft_problems(grpo_pool_size):
    """SFT 用的题：三种难度混合，去掉 GRPO 训练/held-out 池里出现过的题面（held-out 不能被 SFT 背下来）。"""
    banned = {
        p.question
        for d in D.DIFFICULTIES
        for p in D.synthetic_problems(grpo_pool_size, GRPO_DATA_SEED, d)
    }
    return [
        p
        for d in DIFFICULTIES
        for p in D.synthetic_problems(N_PER_DIFFICULTY, SFT_SEED, d)
        if p.question not in banned
    ]


def target_text(p, styles=None):
    """这道题的 SFT 目标回答。按题面确定地（与 seed、步数无关）抽一种风格，比例见 styles：
    worked = 课程格式的标准解答（演算 + \\boxed{}）；hash = 同样的演算，但用 GSM8K 的 `#### N` 收尾（对，但不合格式）；
    guess = 不演算，直接把题目里的第一个数当答案框起来（偷懒的捷径：几乎总是错的，格式却是对的）。"""
    styles = STYLES if styles is None else styles
    u, acc = random.Random(f"style:{p.question}").random(), 0.0
    for style, share in styles.items():  # noqa: B007 循环结束后还要用 style
        acc += share
        if u < acc:
            break
    worked = D.reference_completion(p)
    if style == "worked":
        return worked
    if style == "hash":
        return worked.rsplit("\n", 1)[0] + f"\n#### {p.gold}"
    guess = re.search(r"\d+", p.question).group()
    # "The answer is \\boxed{guess}."
    return worked.rsplit("\n", 1)[1].replace(f"{{{p.gold}}}", f"{{{guess}}}")


def encode(tok, p, styles=None):
    """(prompt 的 token, 目标回答的 token)；目标回答后面接 <|im_end|>，让模型学会停下。"""
    prompt = tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
    target = tok(target_text(p, styles) + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return prompt, target


def sft(model, tok, problems, steps, seed, styles=None, log_every=25, probe=None, probe_every=0):
    """标准的 SFT：只在回答部分的 token 上算交叉熵（prompt 部分不算 loss）。返回每步 loss。

    probe_every > 0：每隔这么多步调用一次 probe(step)（测量起点会怎样随 SFT 步数变化）。"""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.0)
    pad, losses, t0 = model_spec(None).pad_token_id, [], time.time()
    model.train()
    for step in range(1, steps + 1):
        lr = LR * min(1.0, step / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        pairs = [
            encode(tok, problems[i], styles)
            for i in torch.randint(len(problems), (BATCH,), generator=gen).tolist()
        ]
        # 训练时右填充即可：因果注意力看不到右边的 pad
        width = max(len(p) + len(t) for p, t in pairs)
        ids = torch.full((BATCH, width), pad)
        mask = torch.zeros((BATCH, width), dtype=torch.long)
        labels = torch.full((BATCH, width), -100)  # -100 = 不算 loss
        for r, (p, t) in enumerate(pairs):
            ids[r, : len(p) + len(t)] = torch.tensor(p + t)
            mask[r, : len(p) + len(t)] = 1
            labels[r, len(p) : len(p) + len(t)] = torch.tensor(t)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]  # 位置 t 预测 t+1
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == steps:
            used = time.time() - t0
            print(
                f"  SFT 第 {step}/{steps} 步  loss {loss.item():.3f}  已用 {used:.0f} s", flush=True
            )
        if probe and probe_every and step % probe_every == 0 and step < steps:
            probe(step)
            model.train()
    return losses


@torch.no_grad()
def measure(model, tok, heldout, group_size, max_new_tokens, temperature):
    """起点体检，和 grpo_train.py 训练前的评估完全相同（common.decode.evaluate）：贪心正确率、
    pass@1 / pass@G（每题按 temperature 采 G 条）、G 条全对或全错（组内 std = 0）的题的比例。"""
    complete = completer(model, tok, model_spec(None), max_new_tokens=max_new_tokens,
                         temperature=temperature, process_logits=process_logits)  # fmt: skip
    ev = evaluate(complete, heldout, k=group_size)
    keep = ("accuracy", "pass_at", "zero_std_frac", "format_rate", "n")  # group_size 0：只评贪心
    return {**{k: ev[k] for k in keep if k in ev}, "k": group_size, "temperature": temperature}


def describe(stats):
    p = stats["pass_at"]
    k = stats["k"]
    return (
        f"贪心 {stats['accuracy']:.3f}，pass@1 {p['1']:.3f}，pass@{k} {p[str(k)]:.3f}，"
        f"{k} 条全对或全错的题 {stats['zero_std_frac']:.2f}（{stats['n']} 道 held-out，T={stats['temperature']}）"
    )


def grpo_heldout(defaults):
    """和 grpo_train.py 的 tiny 默认设置完全相同的 held-out 题。"""
    return D.load_splits(
        "synthetic", defaults.n_heldout, n_train=defaults.n_train, difficulty=defaults.difficulty,
    )[1]  # fmt: skip


def save_atomically(model, tok, info, out):
    """先写进同目录下的临时文件夹，写完再整体换上：中途被杀也不会留下半个 checkpoint。"""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)  # model.safetensors + config.json（+ generation_config.json）
        tok.save_pretrained(tmp)  # tokenizer.json + tokenizer_config.json（含 chat template）
        (tmp / "warmstart.json").write_text(
            json.dumps(info, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
        tmp.chmod(0o755)  # mkdtemp 建的是 0700；checkpoint 是要随仓库分发、给别人读的
        for f in tmp.iterdir():
            f.chmod(0o644)
        old = out.with_name(out.name + ".old")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv=None):
    ap = CourseParser(
        allow_abbrev=False, description="为 tiny 预设生成 GRPO 的 warm-start checkpoint（短 SFT）"
    )
    ap.add_argument("--recipe", choices=list(RECIPES), default=DEFAULT_RECIPE,
                    help=f"SFT 配方（默认 {DEFAULT_RECIPE}：仓库附带的那个）")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None,
                    help=f"输出目录（默认：{DEFAULT_RECIPE} 写到 {TINY_WARMSTART_DIR}，"
                         "其余写到 runs/warmstart-<配方>）")  # fmt: skip
    ap.add_argument("--steps", type=int, default=None, help="SFT 步数（默认：配方里的）")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe-every", type=int, default=0,
                    help="每隔几步测一次起点（贪心、pass@1、pass@8、全对/全错的比例）；0 = 只在最后测")  # fmt: skip
    ap.add_argument("--check", action="store_true", help="不训练，只测量 --out 里已有的 checkpoint")
    args = ap.parse_args(argv)
    recipe = RECIPES[args.recipe]
    steps = recipe["steps"] if args.steps is None else args.steps
    if args.out is None:
        default = args.recipe == DEFAULT_RECIPE
        args.out = TINY_WARMSTART_DIR if default else Path("runs") / f"warmstart-{args.recipe}"
    if steps < 1 or args.probe_every < 0:
        sys.exit(f"配置错误：--steps 必须 >= 1（得到 {steps}），--probe-every 不能为负")
    torch.set_num_threads(1)  # 单线程：结果与机器核数无关（和 grpo_train.py 在 CPU 上一样）
    defaults = preset_config(
        "tiny"
    )  # grpo_train.py 的 tiny 默认配置（common/config/config_cli.py）
    heldout = grpo_heldout(defaults)
    probe = dict(group_size=defaults.pass_k, max_new_tokens=defaults.max_new_tokens,
                 temperature=defaults.temperature)  # fmt: skip

    if args.check:
        if not (args.out / "model.safetensors").is_file():
            sys.exit(f"错误：{args.out} 里没有 model.safetensors；先不带 --check 运行本脚本生成它")
        model, tok = load_model("tiny", model_path=args.out)
        stats = measure(model, tok, heldout, **probe)
        print(f"{args.out}：{describe(stats)}")
        print(json.dumps(stats, ensure_ascii=False, indent=2))
        return

    model, tok = load_model("tiny", init="random")
    problems = sft_problems(defaults.n_train)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"配方 {args.recipe}：随机初始化的 tiny 模型 {n_params:,} 个参数；SFT 题目 {len(problems)} 道"
    )

    def probe_at(step):
        print(
            f"  第 {step} 步的起点：{describe(measure(model, tok, heldout, **probe))}", flush=True
        )

    t0, c0 = time.time(), time.process_time()
    losses = sft(model, tok, problems, steps, args.seed, recipe["styles"],
                 probe=probe_at, probe_every=args.probe_every)  # fmt: skip
    sft_s, sft_cpu_s = time.time() - t0, time.process_time() - c0
    print("测量起点……", flush=True)
    stats = measure(model, tok, heldout, **probe)
    info = dict(
        recipe=dict(
            name=args.recipe, steps=steps, batch=BATCH, lr=LR, warmup=WARMUP, seed=args.seed,
            sft_seed=SFT_SEED, difficulties=list(DIFFICULTIES), styles=recipe["styles"],
            n_sft_problems=len(problems),
        ),
        loss_first=losses[0], loss_last=sum(losses[-10:]) / len(losses[-10:]),
        sft_s=sft_s, sft_cpu_s=sft_cpu_s, torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__, start=stats,
    )  # fmt: skip
    save_atomically(model, tok, info, args.out)
    print(
        f"SFT {steps} 步用时 {sft_s:.0f} s（CPU {sft_cpu_s:.0f} s）；起点：{describe(stats)}。已保存到 {args.out}"
    )


if __name__ == "__main__":
    main()
