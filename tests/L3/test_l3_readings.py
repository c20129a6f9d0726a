"""L3.02 / L3.03 源码导读的离线检查：引用格式与数量、统一的 commit、必需的章节和主题。

引用是否真的存在于上游仓库，需要联网拿到 git 仓库后用 tests/L3/check_cited_paths.py 核对；
这里只做 CI 能离线完成的部分。检查点题目本身由 tests/test_checkpoints.py 检查。
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from check_cited_paths import citations

ROOT = Path(__file__).resolve().parents[2]

READINGS = {
    "slime": (ROOT / "L3_frameworks/02_slime_reading/README.md", "THUDM/slime"),
    "miles": (ROOT / "L3_frameworks/03_miles_reading/README.md", "radixark/miles"),
}
MIN_DISTINCT_PATHS = 15

# 每篇导读必须讲到的主题（issue 8）：(说明, 正则)
TOPICS = {
    "slime": [
        ("一个 rollout_id 走过 train.py", r"rollout_id.*train\.py|train\.py.*rollout_id"),
        ("Ray placement group", r"placement group"),
        ("colocated 与 disaggregated", r"colocate"),
        ("offload / torch_memory_saver", r"torch_memory_saver"),
        ("CUDA IPC 权重同步", r"CUDA IPC"),
        ("NCCL broadcast 权重同步", r"NCCL broadcast"),
        ("磁盘与 delta 权重同步", r"UpdateWeightFromDiskDelta"),
        ("组内归一化的位置", r"_post_process_rewards"),
        ("loss 归约与 grpo_loss 对账", r'"sequence_mean"'),
        ("token_mean 对应开关", r"--calculate-per-token-loss"),
        ("动态采样", r"check_reward_nonzero_std"),
        ("partial rollout", r"--partial-rollout"),
        ("容错与续训", r"--use-fault-tolerance"),
        ("同步 / one-step-off / 全异步", r"train_async\.py"),
        ("off-policy 修正", r"--use-tis"),
        ("实读启动脚本", r"scripts/run-qwen3-4B\.sh"),
        (
            "batch 恒等式",
            r"rollout-batch-size × n-samples-per-prompt = global-batch-size × num-steps-per-rollout",
        ),
        ("L2.06 的 rollout 数字占位", r"\.\./\.\./L2_algorithm/06_sampling/README\.md"),
        ("对照到 grpo_train.py 的步骤", r"grpo_train\.py"),
    ],
    "miles": [
        ("与 slime 的分叉点", r"fcce96ca0"),
        ("FSDP 后端", r"FSDPTrainRayActor"),
        ("P2P 权重传输", r"UpdateWeightP2P"),
        ("P2P 公布的数字", r"53,279\.1"),
        ("全异步", r"--fully-async"),
        ("staleness 控制", r"--max-weight-staleness"),
        ("off-policy 修正", r"--use-tis"),
        ("异步 off-policy 检查", r"validate_async_off_policy_correction"),
        ("Router", r"MilesRouter"),
        ("容错", r"--use-fault-tolerance"),
        ("组内归一化的位置", r"_normalize_rewards_by_rollout"),
        ("loss 归约与 grpo_loss 对账", r'"sequence_mean"'),
        ("实读启动脚本", r"scripts/run_qwen3_0_6b_fsdp\.py"),
        ("Miles 比 slime 多了什么", r"Miles 比 slime 多了什么"),
        ("对照到 grpo_train.py 的步骤", r"grpo_train\.py"),
    ],
}


def _text(name: str) -> str:
    path, _ = READINGS[name]
    assert path.is_file(), f"缺少导读：{path.relative_to(ROOT)}"
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(READINGS))
def test_cites_at_least_15_distinct_paths_of_one_commit(name):
    _, repo = READINGS[name]
    cites = citations(_text(name))
    own = [(c, p) for r, c, p in cites if r == repo]
    others = sorted({r for r, _, _ in cites} - {repo})
    assert not others, f"{name} 导读里出现了别的仓库的 repo@commit:path 引用：{others}"
    commits = {c for c, _ in own}
    assert len(commits) == 1, f"{name} 导读必须全部引用同一个 commit，实际出现了 {sorted(commits)}"
    paths = {p for _, p in own}
    assert len(paths) >= MIN_DISTINCT_PATHS, (
        f"{name} 导读只引用了 {len(paths)} 个不同的源码路径，至少需要 {MIN_DISTINCT_PATHS} 个"
    )


@pytest.mark.parametrize("name", sorted(READINGS))
def test_short_commit_matches_the_declared_full_hash(name):
    text = _text(name)
    _, repo = READINGS[name]
    (short,) = {c for r, c, _ in citations(text) if r == repo}
    full = re.findall(r"\b[0-9a-f]{40}\b", text)
    assert full, f"{name} 导读要在「版本」处写出完整的 40 位 commit hash"
    assert all(h.startswith(short) for h in full), (
        f"{name} 导读的完整 hash {full} 与引用里的短 hash {short} 不一致"
    )


@pytest.mark.parametrize("name", sorted(READINGS))
def test_covers_required_topics(name):
    text = _text(name)
    missing = [label for label, pattern in TOPICS[name] if not re.search(pattern, text)]
    assert not missing, f"{name} 导读缺少这些主题：{missing}"


def test_citation_parser_handles_backticks_and_trailing_period():
    text = "见 `THUDM/slime@624b824a:train.py` 和 radixark/miles@31f1ca96:miles/router/router.py。以及 a/b@abcdef1:x/y.py."
    assert citations(text) == [
        ("THUDM/slime", "624b824a", "train.py"),
        ("radixark/miles", "31f1ca96", "miles/router/router.py"),
        ("a/b", "abcdef1", "x/y.py"),
    ]
