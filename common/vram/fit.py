"""Does a GRPO step fit on one card? The verdict rule, the searches behind it, and the fit table.

Verdict (`assess`): usage = (peak allocated + allocator slack + CUDA context) / gpu, from
common.vram.ledger.
    no     usage > 1.00
    tight  usage <= 1.00, but either usage > 0.85 (less than 15 % headroom) or the answer budget
           cannot grow to 1024 tokens with the other settings unchanged (no room to tune)
    fits   usage <= 0.85 and answers can grow to 1024 tokens. 15 % headroom means the verdict
           survives a ledger that is 15 % too low.

The answer budget is found by a search over ledgers (`max_new_tokens_that_fit`): `assess` runs it
once and returns it with the verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from common.vram.ledger import METHODS, GiB, Ledger, Settings, ledger
from common.vram.shapes import MODELS, ModelShape, get_model

FITS_MAX_USAGE = 0.85  # "fits": at least 15 % of the card left over ...
# ... and answers can grow to 1024 tokens on the same card ("room to tune")
ANSWER_ROOM_TOKENS = 1024
TIGHT_MAX_USAGE = 1.00  # "tight": runs, but one of the two fails; above 100 % of the card: "no"
ANSWER_STEP = 64  # the answer budget is searched in multiples of this many tokens

# The table answers the course's first question: can GRPO on this model run on one card with
# training and inference sharing it (TRL + vLLM colocate, the framework route of L3)? Every row
# uses the same course recipe; only the model and the method change. The engine keeps its own copy
# of the base weights (bf16; the 4-bit base for QLoRA) and the KV cache of all concurrent rollouts.
TABLE_BASE = Settings(layout="colocate")


def verdict(usage: float, answer_limit: int | None = None) -> str:
    """no (> 100 % of the card) / tight (> 85 %, or answers capped below 1024 tokens) / fits."""
    if usage > TIGHT_MAX_USAGE:
        return "no"
    if usage > FITS_MAX_USAGE or (answer_limit is not None and answer_limit < ANSWER_ROOM_TOKENS):
        return "tight"
    return "fits"


def _largest(ok, hi: int) -> int:
    """Largest n in [1, hi] with ok(n) true, assuming ok is monotone (true, ..., true, false, ...); 0 if none."""
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def max_new_tokens_that_fit(
    model: ModelShape | str, settings: Settings, gpu_gb: float = 32.0, step: int = ANSWER_STEP
) -> int:
    """Largest max_new_tokens (a multiple of `step`) that keeps the step within the card; 0 if none."""
    m = get_model(model) if isinstance(model, str) else model

    def fits(n: int) -> bool:
        longer = dataclasses.replace(settings, max_new_tokens=n * step)
        return ledger(m, longer, gpu_gb).usage <= TIGHT_MAX_USAGE

    return step * _largest(fits, (m.max_position - settings.prompt_len) // step)


def max_prompts_that_fit(
    model: ModelShape | str, settings: Settings, gpu_gb: float = 32.0, limit: int = 256
) -> int:
    """Largest number of prompts P per step (G and the rest unchanged, all P*G generated at once)
    that keeps the step within the card; 0 if none."""
    m = get_model(model) if isinstance(model, str) else model

    def fits(p: int) -> bool:
        more = dataclasses.replace(settings, prompts=p, rollout_batch=None)
        return ledger(m, more, gpu_gb).usage <= TIGHT_MAX_USAGE

    return _largest(fits, limit)


@dataclass(frozen=True)
class Assessment:
    """The verdict on one ledger, the answer budget it rests on, and the reason in Chinese."""

    verdict: str  # fits | tight | no
    answer_limit: int  # largest max_new_tokens that still fits, other settings unchanged (0: none)
    note: str


def assess(L: Ledger) -> Assessment:
    """Judge one ledger: runs the answer-budget search once."""
    limit = max_new_tokens_that_fit(L.model, L.settings, L.gpu_gb)
    if L.usage > TIGHT_MAX_USAGE:
        return Assessment("no", limit, _why_not(L))
    return Assessment(verdict(L.usage, limit), limit, _why(L, limit))


def _why_not(L: Ledger) -> str:
    top = max(L.lines, key=L.nbytes)
    moe = "；专家全部驻留" if L.model.is_moe else ""
    return (
        f"超出 {L.total / GiB - L.gpu_gb:.1f} GiB；"
        f"最大的一项：{L.lines[top].label} {L.gib(top):.1f} GiB{moe}"
    )


def _why(L: Ledger, answer_limit: int) -> str:
    notes = []
    if L.usage > FITS_MAX_USAGE:
        notes.append(f"余量不足 {1 - FITS_MAX_USAGE:.0%}")
    if answer_limit < ANSWER_ROOM_TOKENS:
        notes.append(f"回答最多 {answer_limit} token")
    if L.model.is_moe:
        notes.append("专家全部驻留")
    return "；".join(notes) or "有余量调参"


def _row(name: str, s: Settings, gpu_gb: float, method: str, note: str = "") -> dict:
    L = ledger(name, s, gpu_gb)
    a = assess(L)
    return {
        "model": name,
        "method": method,
        "verdict": a.verdict,
        "total_gb": L.total / GiB,
        "usage": L.usage,
        "peak_phase": L.peak_phase,
        "breakdown": {k: line.nbytes / GiB for k, line in L.lines.items()},
        "overheads": {"allocator_slack": L.slack / GiB, "cuda_context": L.context / GiB},
        "settings": dataclasses.asdict(s),
        "max_new_tokens_fit": a.answer_limit,
        "max_prompts_fit": max_prompts_that_fit(name, s, gpu_gb),
        "note": note + a.note,
    }


def fit_table(gpu_gb: float = 32.0, base: Settings = TABLE_BASE) -> list[dict]:
    """One row per model x method (same recipe `base` for all): verdict, breakdown in GiB, settings."""
    return [
        _row(name, dataclasses.replace(base, method=method), gpu_gb, method)
        for name in MODELS
        for method in METHODS
    ]


# L1.04's lab: Qwen3-1.7B full-parameter GRPO on 32 GB. Not the table's colocate recipe: the policy
# generates itself (fast rollout, gradients hosted in its buffers), 8-bit AdamW states, beta = 0 (no
# reference copy), log-probs from hidden states. Measured on the H200 at these settings (L1.04 §7.1).
LAB_ROWS: tuple[tuple[str, Settings], ...] = (
    (
        "Qwen3-1.7B",
        Settings(
            layout="policy",
            rollout_backend="fast",
            precision="fp32",
            beta=0.0,
            micro_batch=8,
            logprobs="hidden",
            optimizer="adamw8bit",
            host_grads=True,
        ),
    ),
)


def lab_rows(gpu_gb: float = 32.0) -> list[dict]:
    """The LAB_ROWS as fit-table rows (method shown as "full8": full fine-tune, 8-bit AdamW)."""
    note = "实验：8-bit AdamW、β=0、hidden log-prob、快速 rollout（不是上面的 colocate 配方）；"
    return [_row(name, s, gpu_gb, "full8", note) for name, s in LAB_ROWS]
