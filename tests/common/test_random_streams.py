"""common.run.random_streams：选题、采样、对照各有自己的随机数流；同一个 seed 永远得到同样的流。"""

from __future__ import annotations

import torch

from common.run.random_streams import STREAMS, random_streams, stream_seeds


def test_same_seed_same_streams_and_different_seeds_differ():
    a, b, c = random_streams(0), random_streams(0), random_streams(1)
    assert set(a) == set(STREAMS) == {"prompts", "sample", "control"}
    for name in STREAMS:
        x, y, z = (torch.randperm(100, generator=s[name]) for s in (a, b, c))
        assert torch.equal(x, y) and not torch.equal(x, z)


def test_the_streams_are_not_one_stream():
    seeds = stream_seeds(0)
    assert len(set(seeds.values())) == 3
    s = random_streams(0)
    draws = {name: torch.rand(5, generator=g).tolist() for name, g in s.items()}
    assert len({tuple(v) for v in draws.values()}) == 3


def test_prompt_order_does_not_depend_on_how_much_was_sampled():
    """运行和对照采样的次数不同（回答不同），选题的顺序仍然一样：这就是分开的原因。"""
    a, b = random_streams(0), random_streams(0)
    torch.rand(1000, generator=a["sample"])  # 一次运行多采了很多
    torch.rand(7, generator=b["control"])  # 对照多打乱了一次
    assert torch.equal(
        torch.randperm(50, generator=a["prompts"]), torch.randperm(50, generator=b["prompts"])
    )


def test_prompt_and_control_streams_live_on_the_cpu():
    s = random_streams(0, device="cpu")
    assert all(g.device.type == "cpu" for g in s.values())
