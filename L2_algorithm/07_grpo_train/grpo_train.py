"""L2.07 手写 GRPO：一个文件，从上往下读完就是整个算法。逐段讲解见同目录 README.md。

    python L2_algorithm/07_grpo_train/grpo_train.py                    # tiny，CPU 上几分钟
    python L2_algorithm/07_grpo_train/grpo_train.py --impl exercises   # 用你在 exercises/ 写的函数
    python L2_algorithm/07_grpo_train/grpo_train.py --preset qwen3-0.6b --model ./Qwen3-0.6B  # 5090
    python L2_algorithm/07_grpo_train/grpo_train.py --model ./Qwen2.5-0.5B-Instruct  # 别的 Qwen
    python L2_algorithm/07_grpo_train/grpo_train.py --help             # 每个参数的说明和默认值
    python L2_algorithm/07_grpo_train/grpo_train.py --resume runs/tiny-XXXX --steps 200  # 续跑

配置：每个参数的默认值和说明在 common/config/grpo_config.py（GRPOConfig，默认 = tiny 在 CPU 上）；
5090 上的配方（lr、β、每步多少题、回答多长）在同目录的 presets.toml，--preset 选一个。
"""

import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 仓库根目录：没 pip install 也能跑
# 先于 torch：common 一被 import 就装上 excepthook，之后按 Ctrl-C 只打一行
from common.run.run_folder import RunFolder, exit_cleanly

# isort: split
import torch
from torch.nn.utils import clip_grad_norm_
from tqdm import tqdm

import exercises.l2_07_grpo_train as exercises_impl
import solutions.l2_07_grpo_train as solutions_impl
from common.config.config_cli import (
    RESUME_CAN_CHANGE,
    parse_config,
    refuse_unwritten,
    step_list,
    to_json,
)
from common.config.model_plan import plan_or_exit
from common.decode.evaluate import evaluate, flip_floor
from common.decode.rollout import (
    concat_rollouts,
    generate,
    lend_rollout_memory_to_gradients,
    rollout_engine,
)
from common.gsm8k import data as D
from common.gsm8k.reward import correctness_reward, format_reward, training_rewards
from common.model.models import HIDDEN_CHUNK_ROWS, load_for_training, setup_device


def warmup_lr(step, lr, warmup_steps):
    """第 step 步（从 1 数）的学习率：前 warmup_steps 步从 lr/warmup_steps 线性升到 lr，之后不变。
    只由步数决定（同 nanoGPT 的 get_lr）：checkpoint 里的步数就是它的全部状态，续跑逐位接上。"""
    if warmup_steps > 0 and step < warmup_steps:
        return lr * step / warmup_steps
    return lr


def main(cfg, spec):
    # 你在 L2 写的函数：--impl 选 solutions/（参考答案）或 exercises/（你自己的）。
    # 先确认要用的都写完了，再加载任何东西（fail fast）；之后每次调用都写成 L.函数名(...)
    L = exercises_impl if cfg.impl == "exercises" else solutions_impl
    refuse_unwritten(L, cfg)
    torch.manual_seed(cfg.seed)
    # GPU：--cap-gb 模拟 5090、TF32 矩阵乘；CPU：单线程（结果与核数无关）
    device = setup_device(spec, cap_gb=cfg.cap_gb)
    cuda = device.type == "cuda"
    # held-out 永远是同一批题：曲线才可比。训练前和最后一步评前 --final-heldout 道（0 = 同
    # n_heldout），训练中评前 n_heldout 道。每步最多抽 P·(1 + D) 道不同的题：训练集不够就拒绝
    P = cfg.prompts_per_step
    per_step = P * (1 + cfg.dynamic_sampling)
    kw = dict(n_train=cfg.n_train, difficulty=cfg.difficulty, per_step=per_step)
    train, final_set = D.load_splits(cfg.data, cfg.n_final, **kw)  # n_final：两者取大
    heldout = final_set[: cfg.n_heldout]
    # 运行目录（L2.07 第 4 节）：加锁，一个目录同时只许一个进程写；新开就写下 config.json（连同
    # provenance：哪个 commit、哪些库、哪台机器、什么命令），续跑先核对 checkpoint（校验和）、
    # config.json 和 metrics.jsonl：哪里不对就在加载模型之前拒绝
    run = RunFolder(cfg.out)
    resuming = cfg.resume is not None
    ckpt = run.open(to_json(cfg), resume=resuming, may_change=RESUME_CAN_CHANGE, device=device)
    # 模型（GPU 上开激活重算）；参考模型 = 起点的冻结副本（beta > 0 或 --eval-kl 才要；LoRA
    # 关掉 adapter 就是起点）；fp32 主权重（bf16 只有 8 位有效数字，lr=1e-6 的更新会被舍入成 0；
    # 计算仍走 bf16 autocast 的 dtype）；优化器
    model, tok, ref, params, dtype, opt = load_for_training(spec, device, cfg)
    half = dtype != torch.float32
    amp = lambda: torch.autocast(device.type, dtype=dtype) if half else nullcontext()
    eos = list(spec.eos_token_ids)
    pad = spec.pad_token_id
    # 采样用谁：vllm = 推理引擎（只管训练时的 rollout）；auto / eager / fast = 策略模型自己生成
    backend = "auto" if cfg.rollout == "vllm" else cfg.rollout

    def rollout(problems, greedy, generator, engine=None):
        """每道题一条回答（要 G 条就把题重复 G 次）-> (Rollout, 解码后的回答文本)。"""
        texts = [D.build_prompt(tok, p.question) for p in problems]
        prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        sampling = dict(max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos, pad_token_id=pad)
        sampling.update(temperature=cfg.temperature, top_p=cfg.top_p, greedy=greedy)
        with torch.no_grad(), amp():  # 采样不需要梯度（generate 内部还会切到 eval 模式）
            if engine is not None:  # 引擎自己采样，还返回它自己的 logp（ro.engine_logp，L2.09）
                ro = engine.generate(prompts, **sampling, device=device)
            else:  # 采样时的 logits 处理用你在 L2.06 写的 process_logits
                own = dict(process_logits=L.process_logits, generator=generator, backend=backend)
                ro = generate(model, prompts, **sampling, **own)
        ids = zip(ro.completion_ids, ro.lengths)
        return ro, [tok.decode(c[:n], skip_special_tokens=True) for c, n in ids]

    complete = lambda problems, greedy, g: rollout(problems, greedy, g)[1]  # 评估只要回答文本

    def heldout_eval(k=cfg.pass_k, answers=False, problems=final_set):
        """贪心正确率（模型「会不会」）+ pass@k（k 条里至少对一条）。用自己的随机数，不动训练的。"""
        b = cfg.eval_batch
        return evaluate(complete, problems, k=k, batch_size=b, device=device, answers=answers)

    def logprobs(net, ro, rows):
        """ro 里第 rows 行回答的逐 token log π(token) 和熵（熵只用来观察）。形状都是 (M, T)。"""
        base = net.get_base_model() if cfg.lora_rank else net  # peft：LoRA 层就在 base 里
        with amp():  # 只跑到最后一层 hidden state（位置编码用 rollout 时的：左填充的 pad 不占位置）
            h = base.model(
                input_ids=ro.sequences[rows],
                attention_mask=ro.attention_mask[rows],
                position_ids=ro.position_ids[rows],
            ).last_hidden_state
        # 从 hidden 分块算，完整的 (M, T, V) logits 从不出现（L2.02 第 6 节）；位置 t 预测第 t+1 个
        # token，所以用回答前一位起的 T 个 hidden。温度：优化的是真正采样用的分布（TRL 同）
        args = (h, base.lm_head.weight, ro.completion_ids[rows], cfg.temperature)
        return L.hidden_token_logprobs(*args, chunk_rows=HIDDEN_CHUNK_ROWS)

    # ---- 训练前评估（新开时；续跑时 eval_before.json 丢了也从起点重算），再读回 checkpoint ----
    if run.needs_eval_before():
        ev = heldout_eval(answers=True)
        if cfg.start_evals == 2:  # 同样的权重换题序、batch 减半再评一次：这次运行自己的翻转底噪
            run.save_eval("floor", flip_floor(complete, final_set, ev, batch_size=cfg.eval_batch))
        run.save_eval("before", ev)  # 含逐题结果 per_question（配对比较靠它）；每题的回答另存
        print(f"训练前 held-out（{ev['n']} 题）贪心正确率 {ev['accuracy']:.3f}")
    # 三个互不相干的随机数流：选题、采样、对照的打乱。同一个 seed 的运行和它的对照，每一步选到的题
    # 完全一样，不管它们采出了什么回答。续跑：读回训练到一半的权重、优化器状态和这三个随机数流
    start, rng = run.restore(ckpt, model=model, optimizer=opt, seed=cfg.seed, device=device)
    if ckpt is not None:
        print(f"从 {ckpt.path} 续跑：已完成 {start} 步，目标 {cfg.steps} 步")
    # 推理引擎只管训练时的 rollout（一批 P·G 条；补采的批也一样大）；评估仍由策略模型自己生成
    G = cfg.group_size
    sizes = dict(shape=spec.shape, dtype=dtype, sequences=P * G, max_new_tokens=cfg.max_new_tokens)
    engine = rollout_engine(cfg.rollout, model, **sizes, seed=cfg.seed)
    early = step_list(cfg.early_evals)
    title = f"{cfg.preset or spec.name} GRPO  {run.path.name}"
    bar = tqdm(range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc="GRPO")
    t_run = time.time()
    ev = None

    for step in bar:
        # 1) 选 P 道题；2) 每道采 G 条。同一题的 G 条在 batch 里相邻：[p0g0..p0g7, p1g0, ...]
        #    dynamic sampling（L2.10）：候选题一次排好（运行和对照一样），最多补采 D 批 P 道新题
        t0 = time.time()
        pick = torch.randperm(len(train), generator=rng["prompts"])[:per_step]
        ros, texts, golds, rewards, t_draws = [], [], [], [], []
        keep = torch.arange(P)  # 训练哪几组：不开 dynamic sampling 就是这 P 组
        for d in range(1 + cfg.dynamic_sampling):
            problems = [train[i] for i in pick[d * P : (d + 1) * P].tolist() for _ in range(G)]
            ro, said = rollout(problems, False, rng["sample"], engine)
            t_draws.append(time.time())
            ros.append(ro)
            texts += said
            golds += [p.gold for p in problems]
            # 3) reward。对照（--reward shuffled / shuffled_batch）：正确率 reward 在组内 / 整批
            #    打乱，更新一样大，只是不再知道哪一条对了（L2.08 第 1.1 节）
            rewards.append(training_rewards(cfg.reward, said, golds[-P * G :], G, rng["control"]))
            if cfg.dynamic_sampling:  # 有信号（组内 reward 不全相同）的组，按先后最多 P 个（L2.10）
                keep = L.select_groups(torch.cat(rewards), G, P, last=d == cfg.dynamic_sampling)
            if len(keep) == P:  # 够了就不再补采（不开 dynamic sampling 时第一批就是）
                break
        rollout_s = t_draws[0] - t0  # 第一批的采样时间；补采的另记（extra_rollout_s）
        extra_s = t_draws[-1] - t_draws[0]
        ro = concat_rollouts(ros, pad)  # 这一步采到的全部回答：第 9) 步的指标按它记
        rewards = torch.cat(rewards)
        # 正确率和格式率总是另记一份：reward hacking 就靠它们看出来（L2.08）
        correct = torch.tensor([correctness_reward(t, g) for t, g in zip(texts, golds)])
        formatted = torch.tensor([format_reward(t) for t in texts])
        rows = (keep[:, None] * G + torch.arange(G)).flatten()  # 训练的行：保留的组
        train_ro = ro.take(rows)

        # 4) 组内 advantage：全对或全错的组 std = 0，advantage 精确为 0，这组对梯度没有贡献
        adv = L.group_advantages(rewards[rows], G).to(device)
        mask = L.completion_mask(train_ro.completion_ids, eos)  # 到第一个 EOS（含）为 1

        # 5)-8) old / 参考 log-probs、micro-batch 的 loss 和 backward、裁剪、AdamW：grpo_update。
        #    这一步的学习率（预热）：前 warmup_steps 步从 lr/warmup_steps 线性升到 lr，之后不变
        for group in opt.param_groups:
            group["lr"] = warmup_lr(step, cfg.lr, cfg.warmup_steps)
        # 10) 的评估在这一步做不做，先定下：--eval-kl 时 grpo_update 要顺便算到起点的 KL
        final = step == cfg.steps  # 最后一步总要评估：和训练前一比就是这次训练的成绩
        periodic = step % cfg.eval_every == 0 or final
        evaluating = periodic or step in early
        t1 = time.time()
        batch = dict(prompt_ids=pick[keep], rollout=train_ro, rewards=rewards[rows], advantages=adv)
        batch["texts"] = [texts[i] for i in rows.tolist()]
        kl = bool(cfg.eval_kl) and evaluating
        upd = grpo_update(L, cfg, model, ref, params, opt, batch, mask, logprobs, run, step, kl)
        stats = upd["stats"]
        grad_norm = upd["grad_norm"]
        train_s = time.time() - t1
        sync_s = engine.sync_weights(model) if engine is not None else None  # 新权重推给引擎

        # 9) 记录。键名约定：计时以 _s/_per_s 结尾、显存以 _gb 结尾；其余值在 CPU 上逐位可复现
        lens = ro.lengths.float()
        mean = {k: sum(float(s[k]) for s in stats) / len(stats) for k in stats[0]}
        row = {
            "step": step,
            "prompt_ids": pick.tolist(),  # 这一步的（候选）题在训练集里的下标：运行和对照应该一样
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std().item(),
            "accuracy": correct.mean().item(),
            "format_rate": formatted.mean().item(),
            "zero_std_frac": (rewards.view(-1, G).std(1) == 0).float().mean().item(),
            "completion_len_mean": lens.mean().item(),
            "completion_len_max": int(lens.max()),
            "truncation_rate": ro.truncated.float().mean().item(),
            "empty_rate": ((ro.lengths == 1) & ~ro.truncated).float().mean().item(),
            "entropy": L.masked_mean(upd["entropy"], mask[upd["seen"]]).item(),
            "kl": mean["kl"] if cfg.beta > 0 else None,
            "clip_fraction": mean["clip_fraction"],
            "loss": mean["loss"],
            "grad_norm": grad_norm,
            "lr": opt.param_groups[0]["lr"],
            "rollout_s": rollout_s,
            "train_s": train_s,
            "sync_s": sync_s,
            "elapsed_s": time.time() - t_run,
            "tokens_per_s": lens.sum().item() / max(rollout_s + extra_s, 1e-9),
            "peak_vram_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        }
        if cfg.dynamic_sampling:  # 采了几组、丢了几组（reward 全相同）、训练了几组；补采花的时间
            dropped = int((rewards.view(-1, G).std(1) == 0).sum())
            row.update(groups_drawn=len(ros) * P, groups_dropped=dropped, groups_kept=len(keep))
            row["extra_rollout_s"] = extra_s
        if engine is not None:  # 引擎和训练端对同一批 token 的 logp 差多少（L2.09）
            seen = upd["seen"]
            row.update(engine.mismatch(train_ro.take(seen), upd["train_logp"], mask[seen]))
        # 10) held-out 评估（有自己的随机数，评估与否不改变训练轨迹）。最后一步评 --final-heldout 道
        if evaluating:  # --early-evals 那几步只评贪心（便宜）；定期的评估加上 pass@k
            problems = final_set if final else heldout
            ev = heldout_eval(cfg.pass_k if periodic else 0, answers=final, problems=problems)
            if kl:  # 到起点权重的 KL（k3，这一步的 rollout 上）：β = 0 时运行和对照各漂了多远
                row["kl_start"] = upd["kl_start"]
            run.log_eval(step, ev)  # 逐题结果：eval_questions.jsonl
            row["eval_accuracy"] = ev["accuracy"]
            row.update({f"eval_pass_at_{k}": v for k, v in ev.get("pass_at", {}).items()})
        run.log(row)
        shown = "-" if ev is None else f"{ev['accuracy']:.2f}"
        bar.set_postfix(
            reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}", heldout=shown
        )
        # 11) checkpoint（原子写入 + 校验和：任何时刻被杀都留下一个完整的，被改过的读不进来）
        if step % cfg.save_every == 0 or step == cfg.steps:
            state = dict(model=model, optimizer=opt, generators=rng)
            run.save_checkpoint(step, **state, config=to_json(cfg))  # 续跑时拿 config 核对
            run.plot_curves(title)

    # 训练后：最后一步的评估就是这次训练的成绩。续跑时 checkpoint 已在最后一步（上次在这之后被杀）：
    # 不再训练，只补齐 eval_after.json、answers_after.jsonl、curves.png 和这一行
    if ev is None or start == cfg.steps:
        ev = heldout_eval(answers=True)
    run.save_eval("after", {**ev, "step": cfg.steps})
    run.plot_curves(title)
    before = run.read_eval("before")["accuracy"]
    after = ev["accuracy"]
    print(f"held-out 贪心正确率 {before:.3f} -> {after:.3f}（{after - before:+.3f}）：{run.path}/")


def grpo_update(L, cfg, model, ref, params, opt, batch, mask, logprobs, run, step, kl_start=False):
    """一步训练的第 5)-8) 段：old / 参考 log-probs、micro-batch 的 loss 与 backward、裁剪、更新。

    L：你在 L2 写的函数（solutions/ 或 exercises/）；batch：这一步的 rollout、rewards、
    advantages 等；logprobs(net, ro, rows) -> (logp, 熵)；run：运行目录（出 NaN 时存证据、停下）。
    kl_start：顺便算到起点权重的 KL（--eval-kl，评估的那几步；β = 0 时也要参考模型）。
    返回每个 micro-batch 的指标、梯度范数、熵和训练端的 logp（seen 那些行，按行序）、
    kl_start（没要时 None）。
    L3.01 的 profile_train_part.py 也调用它。"""
    ro = batch["rollout"]
    adv = batch["advantages"]
    N = len(ro.completion_ids)
    M = cfg.micro_batch
    # --skip-zero-adv 1（β = 0、μ = 1）：advantage 精确为 0 的行梯度为 0，不进 forward/backward。
    # 分母不变：microbatch_weight 拿的仍是整批的 mask，梯度和不跳过时相等（L2.05 第 4 节）。
    # 全批都是 0 时留一行：梯度照样是 0，AdamW 照样走一步，和不跳过时一样
    rows = torch.arange(N)
    kept = rows[adv.cpu() != 0] if cfg.skip_zero_adv else rows
    kept = kept if len(kept) else rows[:1]
    # 跳过的行连不带梯度的 forward 也省掉：熵和训练端 logp 只记训练的行（seen）。
    # 只有要算到起点的 KL（评估步）时它们才做一次 forward：KL 按整批算
    seen = rows if kl_start else kept
    idle = seen[~torch.isin(seen, kept)]
    mbs = kept.split(M)
    # 5) old log-probs（采样时的策略，之后不动）和参考模型的 log-probs（beta > 0 或 kl_start）。
    #    μ = 1 时第一次 forward 的 logp 就是 old（ratio 恒为 1），省掉这次 forward（TRL 同）。
    old = None
    ref_logp = None
    with torch.no_grad():
        if cfg.num_iterations > 1:
            old = torch.cat([logprobs(model, ro, mb)[0] for mb in mbs])
        if cfg.beta > 0 or kl_start:  # 整批的行，按行序（β > 0 时不跳过行：mbs 就是这些）
            ref_net = model if ref is None else ref
            with model.disable_adapter() if cfg.lora_rank else nullcontext():
                ref_logp = torch.cat([logprobs(ref_net, ro, r)[0] for r in rows.split(M)])

    # 6) loss：切成 micro-batch 逐个 backward，梯度在 .grad 里累加；权重保证累加 == 整批一次算
    stats = []
    entropies = []  # 熵和训练端的 logp：取采样时的策略（it = 0，参数还没动），覆盖整批
    train_logp = []
    with torch.no_grad():  # 跳过的行（只在评估步）做一次不带梯度的 forward：只为指标
        for r in idle.split(M) if len(idle) else ():
            logp, ent = logprobs(model, ro, r)
            entropies.append(ent)
            train_logp.append(logp)
    for it in range(cfg.num_iterations):  # μ > 1：同一批数据再更新几次，ratio 才偏离 1
        # GPU 上梯度借住 rollout 专用的显存（KV cache、权重副本），下次生成前就用完
        lend_rollout_memory_to_gradients(model, params)
        for mb in mbs:
            logp, ent = logprobs(model, ro, mb)
            if it == 0:
                entropies.append(ent)
                train_logp.append(logp.detach())
            old_mb = logp.detach() if old is None else old[mb]
            tw = None  # TIS：引擎采样时，给策略项乘上截断的重要性权重（L2.09）
            if cfg.tis != "none":
                tw = L.tis_weights(old_mb, ro.engine_logp[mb], mask[mb], level=cfg.tis)
            loss, m = L.grpo_loss(
                logp,
                old_mb,
                adv[mb],
                mask[mb],
                ref_logp=None if cfg.beta == 0 else ref_logp[mb],
                beta=cfg.beta,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                aggregation=cfg.aggregation,
                token_weights=tw,
                max_completion_length=cfg.max_new_tokens,
            )
            w = L.microbatch_weight(mask[mb], mask, cfg.aggregation)
            (loss * w).backward()
            stats.append({"loss": loss.detach() * w * len(mbs), **m})
        # 7) 梯度裁剪；8) AdamW 更新
        grad_norm = clip_grad_norm_(params, cfg.grad_clip).item()
        if not math.isfinite(grad_norm):  # 更新之前就停：权重还是好的，把这一步存下来离线查
            run.save_bad_step(step, model=model, grad_norm=grad_norm, **batch)
        opt.step()
        opt.zero_grad(set_to_none=True)  # 立刻释放梯度：rollout 时不必常驻（0.6B 是 2.2 GiB）
        # NaN/inf（loss、梯度范数、新权重、AdamW 的 m/v）：停在这一步，什么都不存
        losses = [s["loss"] for s in stats]
        run.check_finite(step, loss=losses, grad_norm=grad_norm, params=model, optimizer=opt)
    seen, back = torch.cat([idle, kept]).sort()  # 排回 rollout 里的行序
    entropy = torch.cat(entropies)[back]
    logp = torch.cat(train_logp)[back]
    kl = L.masked_mean(L.kl_k3(logp, ref_logp), mask).item() if kl_start else None
    return dict(
        stats=stats, grad_norm=grad_norm, entropy=entropy, train_logp=logp, kl_start=kl, seen=seen
    )


if __name__ == "__main__":
    cfg = parse_config()  # 命令行 -> GRPOConfig：默认值 < --preset < 命令行；续跑规则
    # 定下模型：预设的哪一个、全参数还是 LoRA（显存账本）、这台机器跑得动吗；spec = 这个模型的
    # 目录、形状和停止 token（只读目录里的 config.json 等，不读权重）
    cfg, spec = plan_or_exit(cfg)
    # 出错、Ctrl-C：一行中文（和怎么续跑）；数据、预设、优化器的错误都是 ValueError
    with exit_cleanly(cfg.out, cfg.steps, errors=(ValueError,)):
        main(cfg, spec)
