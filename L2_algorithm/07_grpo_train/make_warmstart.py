"""L2.07 warm-start：给 tiny 预设做一次 SFT，得到 GRPO 的起点 checkpoint。

为什么 RL 之前要先 SFT？GRPO 只能「放大」模型已经偶尔做对的事：如果起点正确率是 0，每组 G 条回答
全错，组内 reward 的 std 为 0，advantage 全是 0，梯度也就是 0——模型什么都学不到。真实的 Qwen3
靠预训练获得这个非零起点；我们的 tiny 模型从随机权重开始，所以先用合成题做 SFT。

SFT 的目标回答故意混了三种风格（比例见 STYLES，每道题按题面确定地分到一种）：
- worked：课程格式的标准解答（common.data.reference_completion）：演算一行，最后 \\boxed{答案}；
- hash：同样的演算，但按 GSM8K 的习惯用 `#### 答案` 收尾——答案对，只是不合课程格式；
- guess：不演算，直接把题目里出现的第一个数框起来当答案。这是我们**有意种下的坏习惯**，模拟小模型
  常见的捷径「从题目里抄一个数」：格式对，答案几乎总是错的。
guess 占一半多一点，所以贪心解码几乎总走捷径（起点正确率很低但不为 0）；而 temperature=1 采样时，
同一题的 G 条回答里常常既有 guess 又有演算，演算的那几条 reward 更高——GRPO 靠的正是这个组内差别。
RL 并没有教会模型算术（算术是 SFT 种下的），它学会的是「先演算再回答」这个策略：这就是「RL 放大
预训练/SFT 种下的东西」。hash 风格让 format_only reward 的 reward hacking 实验（L2.08）有东西可看。

    python L2_algorithm/07_grpo_train/make_warmstart.py              # 重新生成仓库附带的 checkpoint
    python L2_algorithm/07_grpo_train/make_warmstart.py --check      # 只测量已有 checkpoint 的起点
    python L2_algorithm/07_grpo_train/make_warmstart.py --out /tmp/ws --steps 400   # 换个配方试试

仓库里已经附带了这个脚本生成的 checkpoint（common/assets/tiny_warmstart/，约 3.4 MB），所以
grpo_train.py 不需要先跑它。重新生成在 2 核 CPU 上要十几分钟（1400 步，每步 64 道题）。配方（下面的常量）
是确定的：同一台机器、同样的线程数重跑得到逐位相同的权重；换机器或线程数，浮点累加顺序不同，权重会有
极小差别，起点正确率也会有几个百分点的出入（guess 的比例离 0.5 越近，贪心选哪种风格就越敏感）。
"""

import argparse
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

# 仓库根目录（没 pip install -e 也能跑）和本目录（同目录的 train_config.py：grpo_train.py 的默认配置）
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]
import torch
import torch.nn.functional as F
from train_config import script_config

from common import data as D
from common.models import TINY_WARMSTART_DIR, get_preset, load_model
from common.reward import correctness_reward
from common.rollout import generate
from solutions.l2_06_sampling import process_logits

# ---------------------------------------------------------------- 配方 ----------------------------------------------
SFT_SEED = 1000  # 合成题的 seed：和 GRPO 用的题（seed=1）不同
GRPO_DATA_SEED = D.SYNTHETIC_SEED  # grpo_train.py 的训练/held-out 题用这个 seed，SFT 全部排除
STEPS = 1400  # 演算风格只占 45%：要这么多步，演算的正确率才够高（RL 的上限就是它）
BATCH = 64
LR, WARMUP = 3e-3, 30  # 线性 warmup 后余弦衰减到 0
DIFFICULTIES = (1, 2, 3)  # 三种难度混合：+/-、×再-、除法都见过
N_PER_DIFFICULTY = 20000
# SFT 目标回答的风格比例（见 target_text 和文件开头）。guess 0.50 时贪心有约 40% 的题走演算（起点太高），
# 0.55 时不到 10%：这个比例决定了起点正确率。
STYLES = {"guess": 0.55, "worked": 0.13, "hash": 0.32}
N_SAMPLED = 64  # 测量采样多样性用的题数（每题 G 条）


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
    """这道题的 SFT 目标回答。按题面确定地（与 seed、步数无关）抽一种风格，比例见 STYLES：
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


def sft(model, tok, problems, steps, seed, log_every=25):
    """标准的 SFT：只在回答部分的 token 上算交叉熵（prompt 部分不算 loss）。返回每步 loss。"""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.0)
    pad, losses, t0 = get_preset("tiny").pad_token_id, [], time.time()
    model.train()
    for step in range(1, steps + 1):
        lr = LR * min(1.0, step / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        pairs = [
            encode(tok, problems[i])
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
            print(
                f"  SFT 第 {step}/{steps} 步  loss {loss.item():.3f}  已用 {time.time() - t0:.0f} s",
                flush=True,
            )
    return losses


@torch.no_grad()
def measure(model, tok, heldout, group_size, max_new_tokens, temperature, seed=0):
    """起点体检：held-out 贪心正确率；采样时每组 G 条的正确率、全对/全错（std=0）组的比例、pass@G。"""
    preset = get_preset("tiny")
    kw = dict(
        max_new_tokens=max_new_tokens,
        eos_token_ids=preset.eos_token_ids,
        pad_token_id=preset.pad_token_id,
    )

    def rewards(problems, repeat, **sample):
        out = []
        for i in range(0, len(problems), 64):
            chunk = [p for p in problems[i : i + 64] for _ in range(repeat)]
            ro = generate(model, [encode(tok, p)[0] for p in chunk], **kw, **sample)
            texts = [
                tok.decode(ids[:n], skip_special_tokens=True)
                for ids, n in zip(ro.completion_ids, ro.lengths)
            ]
            out += [correctness_reward(t, p.gold) for t, p in zip(texts, chunk)]
        return out

    greedy = rewards(heldout, 1, greedy=True)
    sampled = rewards(
        heldout[:N_SAMPLED],
        group_size,
        temperature=temperature,
        process_logits=process_logits,
        generator=torch.Generator().manual_seed(seed),
    )
    groups = [sampled[i : i + group_size] for i in range(0, len(sampled), group_size)]
    return {
        "heldout_greedy_accuracy": sum(greedy) / len(greedy),
        "n_heldout": len(greedy),
        "sampled_accuracy": sum(sampled) / len(sampled),
        "zero_std_group_fraction": sum(len(set(g)) == 1 for g in groups) / len(groups),
        "pass_at_group": sum(any(g) for g in groups) / len(groups),
        "group_size": group_size,
        "temperature": temperature,
        "n_sampled_prompts": len(groups),
    }


def grpo_heldout(defaults):
    """和 grpo_train.py 的 tiny 默认设置完全相同的 held-out 题。"""
    pool = D.synthetic_problems(
        defaults["n_train"], seed=GRPO_DATA_SEED, difficulty=defaults["difficulty"]
    )
    return D.split_train_heldout(pool, defaults["n_heldout"])[1]


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
    ap = argparse.ArgumentParser(
        description="为 tiny 预设生成 GRPO 的 warm-start checkpoint（短 SFT）"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=TINY_WARMSTART_DIR,
        help=f"输出目录（默认 {TINY_WARMSTART_DIR}）",
    )
    ap.add_argument("--steps", type=int, default=STEPS, help=f"SFT 步数（默认 {STEPS}）")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="不训练，只测量 --out 里已有的 checkpoint")
    args = ap.parse_args(argv)
    if args.steps < 1:
        sys.exit(f"配置错误：--steps 必须 >= 1，得到 {args.steps}")
    defaults = script_config("tiny")
    heldout = grpo_heldout(defaults)
    probe = dict(
        group_size=defaults["group_size"],
        max_new_tokens=defaults["max_new_tokens"],
        temperature=defaults["temperature"],
    )

    if args.check:
        if not (args.out / "model.safetensors").is_file():
            sys.exit(f"错误：{args.out} 里没有 model.safetensors；先不带 --check 运行本脚本生成它")
        from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

        model = Qwen3ForCausalLM.from_pretrained(args.out)
        tok = PreTrainedTokenizerFast.from_pretrained(args.out)
        print(json.dumps(measure(model, tok, heldout, **probe), ensure_ascii=False, indent=2))
        return

    model, tok = load_model("tiny", init="random")
    problems = sft_problems(defaults["n_train"])
    print(
        f"随机初始化的 tiny 模型：{sum(p.numel() for p in model.parameters()):,} 个参数；SFT 题目 {len(problems)} 道"
    )
    t0, c0 = time.time(), time.process_time()
    losses = sft(model, tok, problems, args.steps, args.seed)
    sft_s, sft_cpu_s = time.time() - t0, time.process_time() - c0
    print("测量起点（held-out 贪心正确率、采样多样性）……", flush=True)
    stats = measure(model, tok, heldout, **probe)
    info = dict(
        recipe=dict(
            steps=args.steps,
            batch=BATCH,
            lr=LR,
            warmup=WARMUP,
            seed=args.seed,
            sft_seed=SFT_SEED,
            difficulties=list(DIFFICULTIES),
            styles=STYLES,
            n_sft_problems=len(problems),
        ),
        loss_first=losses[0],
        loss_last=sum(losses[-10:]) / len(losses[-10:]),
        sft_s=sft_s,
        sft_cpu_s=sft_cpu_s,
        torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        **stats,
    )
    save_atomically(model, tok, info, args.out)
    print(
        f"SFT {args.steps} 步用时 {sft_s:.0f} s；held-out 贪心正确率 {stats['heldout_greedy_accuracy']:.3f}，"
        f"T={probe['temperature']} 采样正确率 {stats['sampled_accuracy']:.3f}，"
        f"G={probe['group_size']} 时 std=0 的组占 {stats['zero_std_group_fraction']:.2f}。已保存到 {args.out}"
    )


if __name__ == "__main__":
    main()
