"""common.gsm8k.reward 在 ~1 MB 对抗输入上的耗时（不是 pytest 测试：文件名没有 test_ 前缀）。

    python3 tests/common/bench_reward.py [--repeat 5]

对每个输入、每个函数（extract_answer / correctness_reward / format_reward）各跑 --repeat 次，
打印每个输入的中位数（三个函数里最大的）和最慢的一次，最后一行是所有调用里最慢的一次。
灾难性回溯会让某一行变成几秒到几分钟。在多人共用的 CPU 上，"最慢"会混进调度抖动，中位数更稳定。
tests/common/test_reward.py 复用这里的 adversarial_inputs()。
"""

from __future__ import annotations

import argparse
import statistics
import time

MB = 1_000_000


def adversarial_inputs() -> dict[str, str]:
    """每个约 1 MB：重复的标记、未闭合的括号、超长数字串、形似答案的短语。"""
    return {
        "1,*500000": "1," * 500_000,
        "\\boxed{*200000": "\\boxed{" * 200_000,
        "####*250000": "####" * 250_000,
        "digits": "9" * MB,
        "1.*500000": "1." * 500_000,
        "a1*500000": "a1" * 500_000,
        "open braces": "{" * MB,
        "\\boxed{ + open braces": "\\boxed{" + "{" * MB,
        "nested balanced": "\\boxed{" + "{" * (MB // 2) + "}" * (MB // 2),
        "}{*500000": "}{" * 500_000,
        "\\boxed{1*125000": "\\boxed{1" * 125_000,
        "\\boxed{1}*111111": "\\boxed{1}" * 111_111,
        "#### 1\\n*142857": "#### 1\n" * 142_857,
        "answer is *100000": "answer is " * 100_000,
        "answer is 1 + *71428": "answer is 1 + " * 71_428,
        "答案是*333333": "答案是" * 333_333,
        "\\frac{*166666": "\\frac{" * 166_666,
        "<think>*142857": "<think>" * 142_857,
        "</think>*125000 + tail": "</think>" * 125_000 + "\\boxed{1}",
        "spaces": " " * MB,
        "minus signs": "-" * MB,
        "dollars": "$" * MB,
        "1\\u2009000*200000": "1\u2009000" * 200_000,
        "CJK letters": "中" * MB,
        "text then box": "She has 3 apples. " * 55_000 + "\\boxed{7}",
    }


FUNCS = {
    "extract_answer": lambda reward, text: reward.extract_answer(text),
    "correctness_reward": lambda reward, text: reward.correctness_reward(text, "7"),
    "format_reward": lambda reward, text: reward.format_reward(text),
}


def time_calls(repeat: int = 5) -> dict[str, dict[str, list[float]]]:
    """{输入名: {函数名: [每次调用的秒数, ...]}}。"""
    from common.gsm8k import reward

    out = {}
    for name, text in adversarial_inputs().items():
        out[name] = {}
        for fn_name, fn in FUNCS.items():
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn(reward, text)
                times.append(time.perf_counter() - t0)
            out[name][fn_name] = times
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="每个输入、每个函数重复几次（默认 5）"
    )
    args = parser.parse_args()
    results = time_calls(args.repeat)
    sizes = {name: len(text) for name, text in adversarial_inputs().items()}
    slowest = (0.0, "", "")
    for name, per_fn in results.items():
        fn_max, worst = max(((fn, max(ts)) for fn, ts in per_fn.items()), key=lambda x: x[1])
        median = max(statistics.median(ts) for ts in per_fn.values())
        print(
            f"{name:26s} {sizes[name] / MB:5.2f} MB  中位数 {median * 1000:6.2f} ms  最慢 {worst * 1000:6.2f} ms ({fn_max})"
        )
        slowest = max(slowest, (worst, fn_max, name))
    sec, fn_name, name = slowest
    print(
        f"最慢的一次调用：{sec * 1000:.2f} ms（{fn_name}，输入 {name!r}，{sizes[name] / MB:.2f} MB）"
    )


if __name__ == "__main__":
    main()
