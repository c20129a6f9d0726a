"""账本里新路径的几项：块的行数与脚本一致；借住的梯度不占显存；8-bit AdamW 的状态和临时量。"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from common.vram import ledger as L
from common.vram.fit import lab_rows
from common.vram.shapes import get_model

ROOT = Path(__file__).resolve().parents[2]
BASE = L.Settings(layout="policy", rollout_backend="fast", precision="fp32", micro_batch=8)


def test_hidden_path_has_no_per_element_term():
    m = get_model("Qwen3-0.6B")
    small = L.ledger(m, dataclasses.replace(BASE, logprobs="hidden", micro_batch=2))
    big = L.ledger(m, dataclasses.replace(BASE, logprobs="hidden", micro_batch=16))
    # 一块 256 行 × V × 16 B + 一块给 lm_head 的 fp32 梯度 V × H × 4 B：与 micro-batch 无关
    want = 256 * m.vocab * L.CHUNK_BACKWARD_BYTES + m.vocab * m.hidden * 4
    assert small.lines["logits"].nbytes == big.lines["logits"].nbytes == want


def test_hosted_gradients_take_no_memory_of_their_own():
    plain = L.ledger("Qwen3-0.6B", BASE)
    hosted = L.ledger("Qwen3-0.6B", dataclasses.replace(BASE, host_grads=True))
    grads = plain.lines["gradients"].nbytes
    assert grads < plain.lines["fast_decoder"].nbytes
    for phase in ("backward", "optimizer"):
        assert plain.phases[phase] - hosted.phases[phase] == grads
    assert plain.phases["rollout"] == hosted.phases["rollout"]


def test_adamw8bit_states_and_temporary():
    m = get_model("Qwen3-1.7B")
    led = L.ledger(m, dataclasses.replace(BASE, optimizer="adamw8bit", beta=0.0))
    n = m.n_params()
    assert led.lines["optimizer"].nbytes == n * (2 + 8 / 256)
    assert led.lines["optimizer_temp"].nbytes == m.vocab * m.hidden * 8  # embedding 的 fp32 m、v


def test_lab_row_is_the_measured_setting_and_fits():
    (row,) = lab_rows()
    s = row["settings"]
    assert (s["optimizer"], s["beta"], s["logprobs"], s["host_grads"]) == (
        "adamw8bit",
        0.0,
        "hidden",
        True,
    )
    assert row["verdict"] != "no"
