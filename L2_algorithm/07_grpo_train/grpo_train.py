"""L2.07 手写 GRPO：一个文件，从上往下读完就是整个算法。逐段讲解见同目录 README.md。

    python L2_algorithm/07_grpo_train/grpo_train.py                   # tiny 预设，CPU 上几分钟
    python L2_algorithm/07_grpo_train/grpo_train.py --impl exercises  # 用你在 exercises/ 写的函数
    python L2_algorithm/07_grpo_train/grpo_train.py --help            # 每个参数的说明和默认值
    python L2_algorithm/07_grpo_train/grpo_train.py --resume runs/tiny-XXXX --steps 200  # 续跑
"""

import copy
import sys
import time
from contextlib import nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent  # 本目录有 train_config.py；上两级是仓库根目录（没装也能跑）
sys.path[:0] = [str(HERE), str(HERE.parents[1])]
import torch
from tqdm import tqdm
from train_config import RESUME_CAN_CHANGE, parse_config, use_exercises

from common import data as D
from common.checkpoint import apply_checkpoint, save_checkpoint
from common.evaluate import evaluate
from common.fast_decode import host_gradients, rollout_buffers
from common.finite_guard import guard_finite
from common.metrics import MetricsLogger, plot_curves, read_json, read_metrics, write_json
from common.models import PresetError, get_preset, load_model, resolve_device
from common.optim import OptimizerError, make_optimizer
from common.reward import correctness_reward, format_reward, get_reward_fn
from common.rollout import generate
from common.run_folder import RunFolder, exit_cleanly
from common.vllm_rollout import logp_mismatch, training_engine

# 你在 L2 写的函数：默认用参考答案 solutions/；--impl exercises 时换成 exercises/ 里你自己的。
from solutions.l2_01_advantages import group_advantages
from solutions.l2_02_logprobs_and_masks import completion_mask, hidden_token_logprobs, masked_mean
from solutions.l2_05_grpo_loss import grpo_loss
from solutions.l2_06_sampling import process_logits
from solutions.l2_07_grpo_train import microbatch_weight
from solutions.l2_09_train_inference_mismatch import tis_weights

# ----------------------------------------------------------------------------------- 配置 ----
# 默认值 = tiny 在 CPU 上的默认运行；每行的注释就是 --help 里的说明。命令行 --名字 值 覆盖它。
# --preset 选一个预设，预设只覆盖它写出的几项（common/models.py 的 PRESETS，如 0.6B 的 lr、beta）。
CONFIG = dict(
    # -- 模型与数据
    preset="tiny",  # 模型：tiny（CPU）| qwen3-0.6b | qwen3-1.7b-lora（后两个要 NVIDIA GPU）
    init="pretrained",  # pretrained：预设的权重（tiny = 仓库附带的 warm start）| random：随机权重
    model=None,  # 模型目录：下载好的 Qwen3 | make_warmstart.py 造的 tiny 起点；None = hub / 附带的
    data="synthetic",  # synthetic（合成题）| gsm8k（仓库附带）| hub（从 HF 下载）| jsonl 路径
    n_train=5000,  # synthetic：合成题池的大小（held-out 从中切出）
    difficulty=2,  # synthetic：题目难度 1–3（common/data.py）
    n_heldout=200,  # held-out 评估的题数（GSM8K 取 test 的前 n 道：每次运行都是同一批）
    # -- 每一步的 rollout（L2.06）
    steps=100,  # 训练多少步：每步一次 rollout + 一次参数更新
    prompts_per_step=16,  # P：每步几道题
    group_size=8,  # G：每道题采几条回答；每步 N = P·G 条
    max_new_tokens=40,  # 回答最多多少 token，写不完算截断
    temperature=1.0,  # 采样温度；训练时的 log π 也按它算：优化的就是采样用的那个分布
    top_p=1.0,  # nucleus 采样的累计概率阈值，1 = 不截
    rollout="auto",  # auto（GPU 上走快速路径）| eager | fast | vllm（推理引擎采样，L2.09）
    tis="none",  # vllm：截断重要性采样（cap 2）修正训推不一致（L2.09）：none | token | sequence
    reward="correctness",  # correctness | correctness_plus_format | format_only | shuffled（对照）
    # -- GRPO 损失（L2.01–L2.05）
    beta=0.0,  # KL 系数；0 = 不要参考模型（TRL 默认）
    eps_low=0.2,  # ratio 的下界 1 - eps_low
    eps_high=None,  # ratio 的上界 1 + eps_high；None = 同 eps_low（DAPO 的 clip-higher 用 0.28）
    aggregation="sequence_mean",  # sequence_mean（GRPO）| token_mean（DAPO）| constant（Dr. GRPO）
    num_iterations=1,  # μ：每批 rollout 上更新几次；1 时 ratio 恒为 1，clip 不起作用
    # -- 优化
    lr=3e-5,  # AdamW 学习率。tiny 用 1e-4 时，reward 打乱的对照也会把正确率推动 0.1–0.2
    micro_batch=32,  # 每次前向/反向几条回答；梯度在 .grad 里累加到 N 条再更新
    grad_clip=1.0,  # 梯度范数上限：一批异常样本不至于把模型一步推飞
    weight_decay=0.0,  # advantage 全为 0 时 weight decay 照样改权重，RL 里关掉
    optimizer="adamw",  # adamw | adamw8bit（m、v 存 8 bit，要 torchao；L1.04 的 1.7B 全参实验）
    # -- 评估、保存、运行
    eval_every=20,  # 每隔几步做一次 held-out 评估，含 pass@k（第 1、2、3、5、10 步只评贪心）
    pass_k=8,  # 评估时每题按采样温度采几条，算 pass@1 和 pass@k（0 = 只评贪心）
    save_every=10,  # 每隔几步存 checkpoint 和 curves.png
    impl="solutions",  # L2 的函数用谁的：solutions（参考答案）| exercises（你写的）
    seed=0,  # 选题和采样的随机种子
    out=None,  # 运行目录；None = runs/<预设>-<时间>
)
EARLY_EVALS = (1, 2, 3, 5, 10)  # 前几步密集评估：看清行为是在哪几步变的


def main(cfg):
    if cfg.impl == "exercises":  # 换成你写的同名函数；先确认都写完了，再加载任何东西（fail fast）
        use_exercises(globals(), skip=("tis_weights",) if cfg.tis == "none" else ())
    torch.manual_seed(cfg.seed)
    preset = get_preset(cfg.preset)
    device = resolve_device(preset)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # GPU：log-prob 分块的 fp32 矩阵乘（L2.02）
    if not cuda:  # tiny 的矩阵太小，多线程的同步比计算还贵；单线程也让结果与核数无关
        torch.set_num_threads(1)
    train, heldout = D.load_splits(cfg.data, cfg.n_heldout, n_train=cfg.n_train,
                                   difficulty=cfg.difficulty)  # held-out 永远是同一批：曲线才可比
    # 运行目录（第 4 节）：加锁，一个目录同时只许一个进程写；新开就写下 config.json，续跑先核对
    # checkpoint（校验和）、config.json 和 metrics.jsonl，哪里不对就在加载模型之前拒绝，什么都不改
    run = RunFolder(cfg.out)
    ckpt = run.open(vars(cfg), resume=cfg.resume is not None, may_change=RESUME_CAN_CHANGE)
    model, tok = load_model(preset, cfg.init, device, model_path=cfg.model)  # GPU 上开激活重算
    # 参考模型 = 起点的冻结副本（只在 beta > 0 时需要）。LoRA 不用复制：关掉 adapter 就是起点。
    frozen_copy = cfg.beta > 0 and not preset.lora_rank
    ref = copy.deepcopy(model).eval().requires_grad_(False) if frozen_copy else None
    # fp32 主权重：bf16 只有 8 位有效数字，lr=1e-6 的更新会被舍入成 0。计算仍走 bf16 autocast。
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    half = preset.dtype != torch.float32
    amp = lambda: torch.autocast(device.type, dtype=preset.dtype) if half else nullcontext()
    opt = make_optimizer(params, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)  # 选题和采样共用；checkpoint 存它
    eos, pad = list(preset.eos_token_ids), preset.pad_token_id
    train_reward = get_reward_fn("correctness" if cfg.reward == "shuffled" else cfg.reward)

    def rollout(problems, greedy=False, generator=gen, engine=None):
        """每道题一条回答（要 G 条就把题重复 G 次）-> (Rollout, 解码后的回答文本)。"""
        prompts = [tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
                   for p in problems]
        with torch.no_grad(), amp():  # 采样不需要梯度（generate 内部还会切到 eval 模式）
            ro = generate(model, prompts, max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos,
                          pad_token_id=pad, temperature=cfg.temperature, top_p=cfg.top_p,
                          greedy=greedy, process_logits=process_logits, generator=generator,
                          backend=engine or cfg.rollout.replace("vllm", "auto"))
        ids = zip(ro.completion_ids, ro.lengths)
        return ro, [tok.decode(c[:n], skip_special_tokens=True) for c, n in ids]

    def heldout_eval(k=cfg.pass_k):
        """贪心正确率（模型「会不会」）+ pass@k（k 条里至少对一条）。用自己的随机数，不动 gen。"""
        complete = lambda problems, greedy, g: rollout(problems, greedy, g)[1]
        return evaluate(complete, heldout, k=k, device=device)

    def logprobs(net, ro, rows):
        """ro 里第 rows 行回答的逐 token log π(token) 和熵（熵只用来观察）。形状都是 (M, T)。"""
        base = net.get_base_model() if preset.lora_rank else net  # peft：LoRA 层就在 base 里
        with amp():  # 只跑到最后一层 hidden state（位置编码用 rollout 时的：左填充的 pad 不占位置）
            h = base.model(input_ids=ro.sequences[rows], attention_mask=ro.attention_mask[rows],
                           position_ids=ro.position_ids[rows]).last_hidden_state
        # 从 hidden 分块算，完整的 (M, T, V) logits 从不出现（L2.02 第 6 节）；位置 t 预测第 t+1 个
        # token，所以用回答前一位起的 T 个 hidden。温度：优化的是真正采样用的分布（TRL 同）
        return hidden_token_logprobs(h, base.lm_head.weight, ro.completion_ids[rows],
                                     cfg.temperature, chunk_rows=256)

    # ---- 训练前评估（新开时；续跑时 eval_before.json 丢了也从起点重算），再读回 checkpoint ----
    out, start = run.path, 0
    if run.needs_eval_before():
        ev = heldout_eval()
        write_json(out / "eval_before.json", ev)
        print(f"训练前 held-out（{ev['n']} 题）贪心正确率 {ev['accuracy']:.3f}")
    if ckpt is not None:  # 续跑：读回训练到一半的权重、优化器状态和随机数
        start = apply_checkpoint(ckpt, model=model, optimizer=opt,
                                 generators={"sample": gen})["step"]
        print(f"从 {ckpt.path} 续跑：已完成 {start} 步，目标 {cfg.steps} 步")
    engine = training_engine(model, preset, cfg) if cfg.rollout == "vllm" else None  # 评估不用它
    logger = MetricsLogger(out / "metrics.jsonl", resume_from_step=start)
    N, M, G = cfg.prompts_per_step * cfg.group_size, cfg.micro_batch, cfg.group_size
    mbs = [slice(i, i + M) for i in range(0, N, M)]
    bar = tqdm(range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc="GRPO")
    t_run, ev = time.time(), None

    for step in bar:
        # 1) 选 P 道题；2) 每道采 G 条。同一题的 G 条在 batch 里相邻：[p0g0..p0g7, p1g0, ...]
        t0 = time.time()
        pick = torch.randperm(len(train), generator=gen, device=device)[: cfg.prompts_per_step]
        problems = [train[i] for i in pick.tolist()]
        ro, texts = rollout([p for p in problems for _ in range(G)], engine=engine)
        rollout_s = time.time() - t0

        # 3) reward。正确率和格式率总是另记一份：reward hacking 就靠它们看出来（L2.08）
        golds = [p.gold for p in problems for _ in range(G)]
        correct = torch.tensor([correctness_reward(t, g) for t, g in zip(texts, golds)])
        formatted = torch.tensor([format_reward(t) for t in texts])
        rewards = torch.tensor([train_reward(t, g) for t, g in zip(texts, golds)])
        if cfg.reward == "shuffled":  # 对照实验：reward 在回答之间随机打乱——流程不变，信息全无
            rewards = rewards[torch.randperm(N, generator=gen, device=device).cpu()]

        # 4) 组内 advantage：全对或全错的组 std = 0，advantage 精确为 0，这组对梯度没有贡献
        adv = group_advantages(rewards, G).to(device)
        mask = completion_mask(ro.completion_ids, eos)  # 到第一个 EOS（含）为 1；不能从 pad 推断

        # 5) old log-probs（采样时的策略，之后不动）和参考模型的 log-probs（beta > 0 时）。
        #    μ = 1 时第一次 forward 的 logp 就是 old（ratio 恒为 1），省掉这次 forward（TRL 同）。
        t1 = time.time()
        old = ref_logp = None
        with torch.no_grad():
            if cfg.num_iterations > 1:
                old = torch.cat([logprobs(model, ro, mb)[0] for mb in mbs])
            if cfg.beta > 0:
                with model.disable_adapter() if preset.lora_rank else nullcontext():
                    ref_net = model if ref is None else ref
                    ref_logp = torch.cat([logprobs(ref_net, ro, mb)[0] for mb in mbs])

        # 6) loss：切成 micro-batch 逐个 backward，梯度在 .grad 里累加；权重保证累加 == 整批一次算
        stats, ents, lps = [], [], []  # 熵、训练端的 logp：取采样时的策略（it = 0，参数还没动）
        for it in range(cfg.num_iterations):  # μ > 1：同一批数据再更新几次，ratio 才偏离 1
            if cuda:  # 梯度借住 rollout 专用的显存（KV cache、权重副本），下次生成前就用完
                host_gradients(params, rollout_buffers(model))
            for mb in mbs:
                logp, ent = logprobs(model, ro, mb)
                ents, lps = (ents + [ent], lps + [logp.detach()]) if it == 0 else (ents, lps)
                tw = None if cfg.tis == "none" else tis_weights(  # TIS：只乘策略项（L2.09）
                    logp if old is None else old[mb], ro.engine_logp[mb], mask[mb], level=cfg.tis)
                loss, m = grpo_loss(logp, logp.detach() if old is None else old[mb], adv[mb],
                                    mask[mb], ref_logp=None if ref_logp is None else ref_logp[mb],
                                    beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                    aggregation=cfg.aggregation, token_weights=tw,
                                    max_completion_length=cfg.max_new_tokens)
                w = microbatch_weight(mask[mb], mask, cfg.aggregation)
                (loss * w).backward()
                stats.append({"loss": loss.item() * w * len(mbs), **m})
            # 7) 梯度裁剪；8) AdamW 更新
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip).item()
            opt.step()
            opt.zero_grad(set_to_none=True)  # 立刻释放梯度：rollout 时不必常驻（0.6B 是 2.2 GiB）
            # NaN/inf（loss、梯度范数、新权重、AdamW 的 m/v）：停在这一步，什么都不存
            guard_finite(step, loss=[s["loss"] for s in stats], grad_norm=grad_norm, params=model,
                         optimizer=opt)
        train_s, sync_s = time.time() - t1, engine and engine.sync_weights(model)  # 新权重推给引擎

        # 9) 记录。键名约定：计时以 _s/_per_s 结尾、显存以 _gb 结尾；其余值在 CPU 上逐位可复现
        lens = ro.lengths.float()
        mean_of = {k: sum(s.get(k, 0.0) for s in stats) / len(stats) for k in stats[0]}.get
        row = dict(
            step=step, reward_mean=rewards.mean().item(), reward_std=rewards.std().item(),
            accuracy=correct.mean().item(), format_rate=formatted.mean().item(),
            zero_std_frac=(rewards.view(-1, G).std(1) == 0).float().mean().item(),
            completion_len_mean=lens.mean().item(), completion_len_max=int(lens.max()),
            truncation_rate=ro.truncated.float().mean().item(),
            empty_rate=((ro.lengths == 1) & ~ro.truncated).float().mean().item(),
            entropy=masked_mean(torch.cat(ents), mask).item(),
            kl=mean_of("kl") if cfg.beta > 0 else None, clip_fraction=mean_of("clip_fraction"),
            loss=mean_of("loss"), grad_norm=grad_norm, lr=opt.param_groups[0]["lr"],
            rollout_s=rollout_s, train_s=train_s, elapsed_s=time.time() - t_run,
            tokens_per_s=lens.sum().item() / max(rollout_s, 1e-9),
            peak_vram_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else None, sync_s=sync_s,
            **(logp_mismatch(ro.engine_logp, torch.cat(lps), mask) if engine else {}),
        )
        # 10) held-out 评估（有自己的随机数，评估与否不改变训练轨迹）
        periodic = step % cfg.eval_every == 0
        if periodic or step in EARLY_EVALS:  # 前几步只评贪心（便宜）；定期的评估加上 pass@k
            ev = heldout_eval(cfg.pass_k if periodic else 0)
            row["eval_accuracy"] = ev["accuracy"]
            row.update({f"eval_pass_at_{k}": v for k, v in ev.get("pass_at", {}).items()})
        logger.log(row)
        bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}",
                        heldout="-" if ev is None else f"{ev['accuracy']:.2f}")
        # 11) checkpoint（原子写入 + 校验和：任何时刻被杀都留下一个完整的，被改过的读不进来）
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_checkpoint(out, model=model, optimizer=opt, step=step, generators={"sample": gen},
                            extra={"config": vars(cfg)})  # 续跑时拿它核对 config.json
            plot_curves(read_metrics(out / "metrics.jsonl"), out / "curves.png",
                        title=f"{cfg.preset} GRPO  {out.name}")

    # 训练后：同一批题、同样的评估，和训练前一比就是这次训练的成绩。checkpoint 已在最后一步的
    # 续跑（上次在这之后被杀）不再训练，只补齐 eval_after.json、curves.png 和这一行
    ev = ev if ev is not None and cfg.steps % cfg.eval_every == 0 else heldout_eval()
    write_json(out / "eval_after.json", {**ev, "step": cfg.steps})
    plot_curves(read_metrics(out / "metrics.jsonl"), out / "curves.png",
                title=f"{cfg.preset} GRPO  {out.name}")
    before, after = read_json(out / "eval_before.json")["accuracy"], ev["accuracy"]
    print(f"held-out 贪心正确率 {before:.3f} -> {after:.3f}（{after - before:+.3f}）：{out}/")


if __name__ == "__main__":
    cfg = parse_config()
    with exit_cleanly(cfg.out, cfg.steps, errors=(D.DataError, PresetError, OptimizerError)):
        main(cfg)  # 出错、Ctrl-C：一行中文说明（和怎么续跑），不打印 traceback
