"""The ledger applied to a training run: its settings, and full fine-tune or LoRA for a model.

    s = run_settings(prompts=8, group=8, max_new_tokens=512, beta=0.04, micro_batch=8)
    d = choose_method(shape, s, gpu_gb=32)      # -> Decision: "full", "lora" or None (neither fits)
    print(d.explain())                          # the decision with the ledger's figures, in Chinese

`run_settings` is how grpo_train.py runs on a GPU (the policy generates its own rollouts with
common.decode.fast_decode, LoRA adapters merged into its decode weights, gradients hosted in its
buffers between rollouts, fp32 master weights under bf16 autocast, log-probs from the hidden states,
gradient checkpointing on, prompts padded to the longest GSM8K prompt). No torch is imported here.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

from common.gsm8k.data import GSM8K_PROMPT_TOKENS_MAX
from common.vram.fit import FITS_MAX_USAGE, TIGHT_MAX_USAGE
from common.vram.ledger import GiB, Ledger, Settings, ledger
from common.vram.shapes import ModelShape, shape_for_hub_id

LORA_RANK = 32  # the rank the script uses when the ledger chooses LoRA (qwen3-1.7b-lora's)
OPTIMIZER_FOR = {"adamw": "fused", "adamw8bit": "adamw8bit"}  # config name -> ledger name (CUDA)


def run_settings(
    *,
    prompts: int,
    group: int,
    max_new_tokens: int,
    beta: float,
    micro_batch: int,
    method: str = "full",
    lora_rank: int = LORA_RANK,
    optimizer: str = "adamw",
    prompt_len: int = GSM8K_PROMPT_TOKENS_MAX,
) -> Settings:
    """The ledger's Settings for grpo_train.py on a GPU with these GRPO values."""
    return Settings(
        method=method,
        lora_rank=lora_rank,
        prompts=prompts,
        group=group,
        max_new_tokens=max_new_tokens,
        beta=beta,
        micro_batch=micro_batch,
        checkpointing=True,  # common.model.models turns it on for every GPU run
        precision="fp32",
        layout="policy",
        rollout_backend="fast",
        prompt_len=prompt_len,  # the longest GSM8K prompt: the batch is padded to it
        logprobs="hidden",  # log-probs straight from the hidden states (L2.02 section 6)
        optimizer=OPTIMIZER_FOR[optimizer],  # common.model.optim: torch's fused AdamW on CUDA
        host_grads=True,  # gradients live in the rollout buffers between rollouts
    )


@dataclass(frozen=True)
class Decision:
    """Full fine-tune if it fits, else LoRA if that fits, else None; with both ledgers behind it."""

    method: str | None  # "full" | "lora" | None
    full: Ledger
    lora: Ledger
    gpu_gb: float

    @property
    def chosen(self) -> Ledger | None:
        return {"full": self.full, "lora": self.lora}.get(self.method)

    def explain(self) -> str:
        """One or two Chinese lines: what was chosen and the ledger's figures for it."""
        f, lo, cap = self.full, self.lora, f"{self.gpu_gb:g} GiB"
        full = f"全参数需要约 {f.total / GiB:.1f} GiB（{f.usage:.0%}）"
        lora = f"LoRA（r={lo.settings.lora_rank}）约 {lo.total / GiB:.1f} GiB（{lo.usage:.0%}）"
        tight = f"（余量不足 {1 - FITS_MAX_USAGE:.0%}，可能 OOM：想稳一点就减小 --micro-batch）"
        if self.method == "full":
            room = "" if f.usage <= FITS_MAX_USAGE else tight
            return f"显存账本：{full}，{cap} 装得下{room} → 全参数微调。"
        if self.method == "lora":
            why = (
                "超出"
                if f.usage > TIGHT_MAX_USAGE
                else f"离 {cap} 不到 {1 - FITS_MAX_USAGE:.0%} 的余量"
            )
            room = "" if lo.usage <= FITS_MAX_USAGE else tight
            return f"显存账本：{full}，{why}；{lora}{room} → 改用 LoRA。"
        return (
            f"显存账本：{full}，{lora}，都超出 {cap}。减小 --max-new-tokens、--prompts-per-step 或"
            " --micro-batch，或换一张显存更大的卡。"
        )


def choose_method(shape: ModelShape, settings: Settings, gpu_gb: float) -> Decision:
    """Ask the ledger: full fine-tuning if it leaves the fit table's headroom (usage <= 85 %), else
    LoRA if that does; else the first of the two that is within the card at all ("tight"); else None.

    The headroom is the fit table's rule (common.vram.fit): a ledger 15 % too low must not mean an
    out-of-memory crash halfway through a run.
    """
    full = ledger(shape, dataclasses.replace(settings, method="full"), gpu_gb)
    lora = ledger(shape, dataclasses.replace(settings, method="lora"), gpu_gb)
    for limit in (FITS_MAX_USAGE, TIGHT_MAX_USAGE):
        for method, L in (("full", full), ("lora", lora)):
            if L.usage <= limit:
                return Decision(method, full, lora, gpu_gb)
    return Decision(None, full, lora, gpu_gb)


def config_settings(cfg) -> Settings:
    """run_settings for a training config (a common.config.grpo_config.GRPOConfig)."""
    return run_settings(
        prompts=cfg.prompts_per_step,
        group=cfg.group_size,
        max_new_tokens=cfg.max_new_tokens,
        beta=cfg.beta,
        micro_batch=cfg.micro_batch,
        method="lora" if cfg.lora_rank else "full",
        lora_rank=cfg.lora_rank or LORA_RANK,
        optimizer=cfg.optimizer,
    )


def training_settings(cfg) -> tuple[ModelShape, Settings] | None:
    """(shape, settings) of a training config as grpo_train.py runs it on a GPU; None when its
    model is not a hub id the ledger knows (tiny: a CPU model). cfg: a common.config.grpo_config.GRPOConfig,
    e.g. common.config.config_cli.preset_config(name)."""
    shape = shape_for_hub_id(cfg.model) if cfg.model else None
    return None if shape is None else (shape, config_settings(cfg))


# ---- how many answers can be generated at once on this machine (issue 35) ----------------------
def host_memory_gib() -> float | None:
    """Physical memory of this machine in GiB; None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        pass
    if sys.platform == "win32":
        import ctypes

        sizes = ("total", "avail", "page", "avail_page", "virtual", "avail_virtual", "ext")

        class Status(ctypes.Structure):  # MEMORYSTATUSEX
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong)] + [
                (name, ctypes.c_ulonglong) for name in sizes
            ]

        status = Status(length=ctypes.sizeof(Status))
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return status.total / GiB
    return None


def generation_bytes(shape: ModelShape, rows: int, max_new_tokens: int) -> float:
    """A lower bound on the memory to generate `rows` answers at once: the ledger's rollout lines
    (KV cache, prefill, the sampling logits) for one-token prompts, bf16 (a CPU uses fp32: twice)."""
    s = Settings(
        prompts=rows, group=1, prompt_len=1, max_new_tokens=max_new_tokens, micro_batch=1,
        rollout_backend="eager", method="full",
    )  # fmt: skip
    L = ledger(shape, s)
    return L.nbytes("kv_cache") + L.nbytes("rollout_workspace")


def generation_problem(shape: ModelShape, cfg, memory_gib: float | None, memory: str) -> str | None:
    """Why this run's biggest generation batch cannot fit `memory_gib` (the card, or the RAM on a
    CPU); None when it may. Training generates P·G answers at once; the evaluation up to
    --eval-batch greedy answers, and the k samples of a question always in one batch."""
    if memory_gib is None:
        return None
    k, b, n = cfg.pass_k, cfg.eval_batch, cfg.n_heldout
    batches = [
        (
            cfg.prompts_per_step * cfg.group_size,
            f"每步 P·G = {cfg.prompts_per_step}×{cfg.group_size} 条回答一起生成",
            "减小 --prompts-per-step 或 --group-size",
        ),
        (
            max(min(b, n), min(max(1, b // k) * k, n * k) if k else 0),
            f"评估时一批一起生成（--eval-batch {b}；--pass-k {k} 条同一道题的采样总在同一批，"
            f"held-out {n} 道）",
            "减小 --pass-k 或 --eval-batch",
        ),
    ]
    for rows, what, fix in batches:
        need = generation_bytes(shape, rows, cfg.max_new_tokens) / GiB
        if need > memory_gib:
            return (
                f"{what}：{rows} 条回答的 KV cache 和采样用的 logits 按显存账本至少要 "
                f"{need:,.1f} GiB，这台机器的{memory}只有 {memory_gib:.1f} GiB。{fix}"
            )
    return None
