"""L2.07 手写 GRPO：一个文件，从上往下读完就是整个算法。逐段讲解见同目录 README.md。

    python L2_algorithm/07_grpo_train/grpo_train.py                          # tiny 预设，CPU 上几分钟
    python L2_algorithm/07_grpo_train/grpo_train.py --impl exercises         # 用你自己在 exercises/ 写的函数训练
    python L2_algorithm/07_grpo_train/grpo_train.py --resume runs/tiny-XXXX --steps 200   # 续跑到第 200 步
"""
import argparse, copy, importlib, json, sys, time, traceback
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # 没 pip install -e 也能从仓库根目录运行
import torch
from tqdm import tqdm

from common import data as D
from common.checkpoint import CheckpointError, checkpoint_path, load_checkpoint, save_checkpoint
from common.fast_decode import host_gradients, rollout_buffers
from common.metrics import MetricsLogger, plot_curves, read_metrics, write_json
from common.models import PresetError, get_preset, load_model, resolve_device
from common.optim import OPTIMIZERS, make_optimizer
from common.reward import correctness_reward, format_reward, get_reward_fn
from common.rollout import generate

# ---------------------------------------------------------------- 配置 ----------------------------------------------
# 优先级：命令行 > 预设推荐值（common/models.py 里的 Preset.defaults）> 这里的兜底值。
DEFAULTS = dict(
    steps=100, group_size=8, prompts_per_step=16, max_new_tokens=40,  # G 条/题、P 题/步：每步 N = P·G 条回答
    lr=1e-6, beta=0.0, eps_low=0.2, eps_high=None,  # beta=0：不要参考模型（TRL 默认）；eps_high=None 即等于 eps_low
    aggregation="sequence_mean", temperature=1.0, top_p=1.0, num_iterations=1,  # 每批 rollout 做几次优化（GRPO 论文的 μ）
    micro_batch=32, grad_clip=1.0, weight_decay=0.0,  # weight decay 会在 advantage 全为 0 时照样改动权重，RL 里关掉
    optimizer="adamw",  # adamw：fp32 的 m、v | adamw8bit：8-bit 的 m、v（torchao；L1.04 的 1.7B 全参实验）
    reward="correctness", eval_every=10, save_every=10, n_heldout=200, difficulty=2, n_train=5000,
)
RESUME_CAN_CHANGE = ("resume", "steps", "eval_every", "save_every")  # 续跑时只有这些能改，其余改了就不是同一个实验


def get_config(argv=None):
    ap = argparse.ArgumentParser(description="手写 GRPO（L2.07）")
    ap.add_argument("--preset", help="tiny（默认）| qwen3-0.6b | qwen3-1.7b-lora")
    ap.add_argument("--init", choices=["pretrained", "random"], help="random：同形状随机权重，只测显存/速度")
    ap.add_argument("--impl", choices=["solutions", "exercises"], help="L2 函数用谁的实现（默认 solutions）")
    ap.add_argument("--out", help="运行目录，默认 runs/<preset>-<时间>")
    ap.add_argument("--resume", metavar="DIR", help="从 DIR 的 checkpoint 续跑到 --steps")
    ap.add_argument("--data", help="本地 GSM8K 格式 jsonl（默认：tiny 用合成题，其它预设用 GSM8K）")
    ap.add_argument("--seed", type=int)
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=float if v is None else type(v))
    given = {k: v for k, v in vars(ap.parse_args(argv)).items() if v is not None}  # 命令行上真正给了的
    if "resume" in given:  # 续跑：沿用原来的 config.json，只允许改 --steps（和不影响结果的保存/评估频率）
        cfg_path = Path(given["resume"]) / "config.json"
        if not cfg_path.is_file():
            sys.exit(f"配置错误：{cfg_path} 不存在，--resume 要指向之前某次运行的目录")
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        changed = [k for k, v in given.items() if k not in RESUME_CAN_CHANGE and v != cfg.get(k)]
        if changed:
            sys.exit(f"配置错误：续跑时不能改 {changed}（会破坏逐位一致的续跑）；要换设置请开一个新的 --out")
        cfg.update({k: v for k, v in given.items() if k in RESUME_CAN_CHANGE}, out=given["resume"])
        return argparse.Namespace(**cfg)
    try:
        preset = get_preset(given.get("preset", "tiny"))
    except PresetError as err:
        sys.exit(f"配置错误：{err}")
    cfg = {"preset": "tiny", "init": "pretrained", "impl": "solutions", "seed": 0, "data": None,
           **DEFAULTS, **preset.defaults, **given}
    cfg.setdefault("out", f"runs/{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    cfg["eps_high"] = cfg["eps_high"] if cfg["eps_high"] is not None else cfg["eps_low"]
    c, N = argparse.Namespace(**cfg), cfg["prompts_per_step"] * cfg["group_size"]
    errors = [msg for bad, msg in [
        (c.group_size < 2, f"--group-size 至少为 2（得到 {c.group_size}）：只有一条回答就没有组内比较，advantage 恒为 0"),
        (c.micro_batch < 1 or N % c.micro_batch, f"每步回答数 P·G = {c.prompts_per_step}×{c.group_size} = {N} 必须能被 --micro-batch={c.micro_batch} 整除"),
        (c.prompts_per_step < 1 or c.steps < 1 or c.max_new_tokens < 1, "--prompts-per-step、--steps、--max-new-tokens 都必须 >= 1"),
        (not c.temperature > 0 or not 0 < c.top_p <= 1, "--temperature 必须 > 0，--top-p 必须在 (0, 1]"),
        (c.aggregation not in ("sequence_mean", "token_mean", "constant"), "--aggregation 只能是 sequence_mean | token_mean | constant"),
        (c.beta < 0 or c.lr <= 0 or c.eps_low <= 0, "--beta 不能为负，--lr 和 --eps-low 必须 > 0"),
        (c.optimizer not in OPTIMIZERS, f"--optimizer 只能是 {' | '.join(OPTIMIZERS)}"),
        (c.data is not None and not Path(c.data).is_file(), f"--data 指向的文件不存在：{c.data}"),
        (Path(c.out, "config.json").exists(), f"{c.out} 里已经有一次运行：续跑用 --resume {c.out}，否则换一个 --out"),
    ] if bad]
    try:
        get_reward_fn(c.reward), resolve_device(preset)
    except ValueError as err:  # 未知的 reward 名；GPU 预设却没有 CUDA（PresetError 也是 ValueError）
        errors.append(str(err))
    if errors:
        sys.exit("配置错误：\n  - " + "\n  - ".join(errors))
    return c


def main(cfg):
    out, resuming = Path(cfg.out), checkpoint_path(cfg.out).is_file()
    A, LM, G_LOSS, S, TR = (importlib.import_module(f"{cfg.impl}.{m}") for m in (  # --impl：用谁写的 L2 函数来训练
        "l2_01_advantages", "l2_02_logprobs_and_masks", "l2_05_grpo_loss", "l2_06_sampling", "l2_07_grpo_train"))
    torch.manual_seed(cfg.seed)
    preset = get_preset(cfg.preset)
    device = resolve_device(preset)
    if device.type == "cpu":  # tiny 的矩阵太小，多线程的同步开销比计算还大；单线程也让结果与机器核数无关
        torch.set_num_threads(1)
    model, tok = load_model(preset, init=cfg.init, device=device)
    # 参考模型 = 起点模型的冻结副本（只在 beta > 0 时需要）。LoRA 不用复制：关掉 adapter 就是起点模型。
    ref = None if cfg.beta == 0 or preset.lora_rank else copy.deepcopy(model).eval().requires_grad_(False)
    # 可训练参数一律用 fp32 主权重：bf16 只有 8 位有效位，lr=1e-6 的更新会被直接舍入成 0。计算仍走 bf16 autocast。
    for p in model.parameters():
        p.data = p.data.float() if p.requires_grad else p.data
    if device.type == "cuda":  # GPU：重算激活换显存（L1.04 的账本按开着算）；tiny 在 CPU 上不需要
        model.gradient_checkpointing_enable()
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # log-prob 块的 fp32 矩阵乘走 tensor core
    amp = (lambda: torch.autocast(device.type, dtype=preset.dtype)) if preset.dtype != torch.float32 else nullcontext
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)  # 采样和选题共用的随机数发生器，checkpoint 会保存它

    # ---- 数据：训练题 + 固定的 held-out 题（评估永远用同一批题，曲线才可比）----
    if cfg.data:
        train, heldout = D.split_train_heldout(D.load_jsonl(cfg.data), cfg.n_heldout)
    elif preset.hub_id is None:  # tiny：合成题（与 warm-start SFT 用的 seed 不同）
        train, heldout = D.split_train_heldout(D.synthetic_problems(cfg.n_train, seed=1, difficulty=cfg.difficulty), cfg.n_heldout)
    else:
        train, heldout = D.load_gsm8k("train"), D.load_gsm8k("test", limit=cfg.n_heldout)
    encode = lambda p: tok(D.build_prompt(tok, p.question), add_special_tokens=False)["input_ids"]
    eos, pad = list(preset.eos_token_ids), preset.pad_token_id

    def logprobs(net, ro, rows):
        """ro 里第 rows 行回答的逐 token log π(token) 和熵（熵不参与求导，只用来观察）。形状都是 (M, T)。"""
        T = ro.completion_ids.shape[1]  # 位置编码用 rollout 时的（左填充的 pad 不占位置），否则算的不是采样时的概率
        base = net.get_base_model() if preset.lora_rank else net  # peft：LoRA 层就在 base 里，照样生效
        with amp():  # 只跑到最后一层 hidden state（最后 T+1 个位置）：完整的 (M, T, V) logits 从不出现
            h = base.model(input_ids=ro.sequences[rows], attention_mask=ro.attention_mask[rows],
                           position_ids=ro.position_ids[rows]).last_hidden_state[:, -(T + 1):]
        # lm_head 分块在 fp32 里算（L2.02 第 6 节）；温度：被优化的是真正采样用的分布（TRL 同）
        return LM.hidden_token_logprobs(h, base.lm_head.weight, ro.completion_ids[rows], cfg.temperature,
                                        256 if device.type == "cuda" else LM.CHUNK_ROWS)

    @torch.no_grad()
    def evaluate(problems, batch=64):
        """贪心解码（无随机性）在固定题目上的正确率：这才是「模型会不会」，训练 batch 上的正确率含采样运气。"""
        right = fmt = 0.0
        for i in range(0, len(problems), batch):
            chunk = problems[i:i + batch]
            with amp():
                ro = generate(model, [encode(p) for p in chunk], max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos,
                              pad_token_id=pad, greedy=True)
            for p, ids, n in zip(chunk, ro.completion_ids, ro.lengths):
                text = tok.decode(ids[:n], skip_special_tokens=True)
                right, fmt = right + correctness_reward(text, p.gold), fmt + format_reward(text)
        return {"accuracy": right / len(problems), "format_rate": fmt / len(problems), "n": len(problems)}

    # ---- 运行目录：新开 or 续跑 ----
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    if resuming:  # 续跑：先有了起点模型和参考模型，再把训练到一半的权重、优化器、随机数状态读回来
        start = load_checkpoint(out, model=model, optimizer=opt, generators={"sample": gen})["step"]
        print(f"从 {checkpoint_path(out)} 续跑：已完成 {start} 步，目标 {cfg.steps} 步")
    else:
        write_json(out / "config.json", vars(cfg))
        ev = evaluate(heldout)
        write_json(out / "eval_before.json", ev)
        print(f"训练前 held-out 正确率（贪心，{ev['n']} 题）：{ev['accuracy']:.3f}")
    logger = MetricsLogger(out / "metrics.jsonl", resume_from_step=start)
    reward_fn = get_reward_fn(cfg.reward)
    N, M, G = cfg.prompts_per_step * cfg.group_size, cfg.micro_batch, cfg.group_size
    bar = tqdm(range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc="GRPO", dynamic_ncols=True)
    t_run, ev = time.time(), None

    for step in bar:
        # 1) 选 P 道题；2) 每道题采 G 条。同一题的 G 条在 batch 里相邻：[p0g0..p0g{G-1}, p1g0, ...]
        t0 = time.time()
        problems = [train[i] for i in torch.randperm(len(train), generator=gen, device=device)[:cfg.prompts_per_step].tolist()]
        with torch.no_grad(), amp():  # 采样不需要梯度（generate 内部还会切到 eval 模式）
            ro = generate(model, [encode(p) for p in problems for _ in range(G)], max_new_tokens=cfg.max_new_tokens,
                          eos_token_ids=eos, pad_token_id=pad, temperature=cfg.temperature, top_p=cfg.top_p,
                          process_logits=S.process_logits, generator=gen)
        rollout_s = time.time() - t0

        # 3) reward：用选定的 reward 训练；正确率和格式率总是另外记下来（reward hacking 就靠它们看出来）
        texts = [tok.decode(ids[:n], skip_special_tokens=True) for ids, n in zip(ro.completion_ids, ro.lengths)]
        golds = [p.gold for p in problems for _ in range(G)]
        rewards = torch.tensor([reward_fn(t, g) for t, g in zip(texts, golds)], dtype=torch.float32)
        correct = torch.tensor([correctness_reward(t, g) for t, g in zip(texts, golds)])
        formatted = torch.tensor([format_reward(t) for t in texts])

        # 4) 组内 advantage：全对或全错的组 std=0，advantage 精确为 0 —— 这一组对梯度没有贡献
        adv = A.group_advantages(rewards, G).to(device)
        mask = LM.completion_mask(ro.completion_ids, eos)  # 到第一个 EOS（含）为 1；不能从 pad 推断，pad == eos

        # 5) old log-probs（采样时的策略，之后固定不动）和参考模型的 log-probs（beta > 0 时）。
        #    μ = 1 时第一次 forward 算出的 logp 就是 old（ratio 恒为 1），省掉这次 forward，TRL 也这么做。
        t1 = time.time()
        mbs = [slice(i, i + M) for i in range(0, N, M)]
        old = ref_logp = None
        with torch.no_grad():
            if cfg.num_iterations > 1:
                old = torch.cat([logprobs(model, ro, mb)[0] for mb in mbs])
            if cfg.beta > 0:
                with (model.disable_adapter() if preset.lora_rank else nullcontext()):
                    ref_logp = torch.cat([logprobs(model if ref is None else ref, ro, mb)[0] for mb in mbs])

        # 6) loss：切成 micro-batch 逐个 backward，梯度在 .grad 里累加；权重保证累加结果 == 整批一次算
        stats, ents = [], []
        for it in range(cfg.num_iterations):  # μ > 1 时同一批数据再优化几次，ratio 才会偏离 1、clip 才起作用
            if device.type == "cuda":  # 梯度借住 rollout 专用的显存（KV cache、bf16 权重副本）：下次生成前用完
                host_gradients(params, rollout_buffers(model))
            for mb in mbs:
                logp, ent = logprobs(model, ro, mb)
                ents += [ent] if it == 0 else []  # 熵：采样时策略的熵（第一次 forward 时参数还没动）
                loss, m = G_LOSS.grpo_loss(logp, logp.detach() if old is None else old[mb], adv[mb], mask[mb],
                                           ref_logp=None if ref_logp is None else ref_logp[mb],
                                           beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                           aggregation=cfg.aggregation, max_completion_length=cfg.max_new_tokens)
                w = TR.microbatch_weight(mask[mb], mask, cfg.aggregation)
                (loss * w).backward()
                stats.append({"loss": loss.item() * w * len(mbs), **m})
            # 7) 梯度裁剪：一批异常样本不至于把模型一步推飞；8) AdamW 更新
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip).item()
            opt.step()
            opt.zero_grad(set_to_none=True)  # 用完立刻释放梯度：下一步 rollout 时这份显存（0.6B 是 2.2 GiB）不必常驻
        train_s = time.time() - t1

        # 9) 记录（键名约定：计时以 _s/_per_s 结尾，显存以 _gb 结尾；其余值在 CPU 上可逐位复现）
        lens, grouped = ro.lengths.float(), rewards.view(-1, G)
        mean_of = lambda k: sum(s.get(k, 0.0) for s in stats) / len(stats)
        row = dict(step=step, reward_mean=rewards.mean().item(), reward_std=rewards.std().item(),
                   accuracy=correct.mean().item(), format_rate=formatted.mean().item(),
                   zero_std_frac=(grouped.std(1) == 0).float().mean().item(),
                   completion_len_mean=lens.mean().item(), completion_len_max=int(lens.max()),
                   truncation_rate=ro.truncated.float().mean().item(), empty_rate=((ro.lengths == 1) & ~ro.truncated).float().mean().item(),
                   entropy=LM.masked_mean(torch.cat(ents), mask).item(), kl=mean_of("kl") if cfg.beta > 0 else None,
                   clip_fraction=mean_of("clip_fraction"), loss=mean_of("loss"), grad_norm=grad_norm,
                   lr=opt.param_groups[0]["lr"], rollout_s=rollout_s, train_s=train_s,
                   tokens_per_s=lens.sum().item() / max(rollout_s, 1e-9), elapsed_s=time.time() - t_run,
                   peak_vram_gb=torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None)  # 整个进程的峰值
        # 10) 定期在 held-out 上贪心评估（贪心不消耗随机数，所以评估与否不改变训练轨迹）
        if step % cfg.eval_every == 0:
            ev = evaluate(heldout)
            row["eval_accuracy"] = ev["accuracy"]
        logger.log(row)
        bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}",
                        heldout="-" if ev is None else f"{ev['accuracy']:.2f}")
        # 11) checkpoint（原子写入：先写临时文件再改名，任何时刻被杀都留下一个完整的 checkpoint）
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_checkpoint(out, model=model, optimizer=opt, step=step, generators={"sample": gen})
            plot_curves(read_metrics(out / "metrics.jsonl"), out / "curves.png", title=f"{cfg.preset} GRPO  {out.name}")

    if start < cfg.steps:  # 训练后评估：与训练前同一批题、同样贪心解码，两者之差就是这次训练的成绩
        ev = ev if cfg.steps % cfg.eval_every == 0 else evaluate(heldout)
        write_json(out / "eval_after.json", {**ev, "step": cfg.steps})
        before = json.loads((out / "eval_before.json").read_text(encoding="utf-8"))["accuracy"]
        print(f"held-out 正确率：{before:.3f} -> {ev['accuracy']:.3f}（{ev['accuracy'] - before:+.3f}）；结果在 {out}/")


if __name__ == "__main__":
    try:
        main(get_config())
    except (D.DataError, PresetError, CheckpointError) as err:
        sys.exit(f"错误：{err}")
    except NotImplementedError as err:  # --impl exercises 而练习还没写完：指出是哪个文件的哪个函数
        frame = [f for f in traceback.extract_tb(err.__traceback__) if "exercises" in f.filename][-1:]
        where = f"{Path(frame[0].filename).name} 里的 {frame[0].name}()" if frame else "某个练习函数"
        sys.exit(f"还没实现：exercises/{where}。{err} 先让 pytest --impl exercises tests/L2 通过再来训练。")
