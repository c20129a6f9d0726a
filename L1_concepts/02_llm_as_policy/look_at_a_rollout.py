"""L1.02 看一组 rollout：一道题、G 条回答、每个 token 的 log 概率、可验证的 reward 和组内 advantage。

    python L1_concepts/02_llm_as_policy/look_at_a_rollout.py            # tiny 预设（warm-start 模型），CPU 几秒
    python L1_concepts/02_llm_as_policy/look_at_a_rollout.py --problem-seed 7 --group 8

用的全是训练脚本里的同一套函数：common.decode.rollout.generate 采样（L2.06 的 process_logits 处理 temperature），L2.02 的 token_logprobs 算 log π，
common.gsm8k.reward 判分，L2.01 的 group_advantages 算 advantage。
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # 仓库根目录：没 pip install -e 也能跑
import torch  # noqa: E402

from common.config.config_cli import preset_config  # noqa: E402
from common.decode.rollout import generate  # noqa: E402
from common.gsm8k.data import build_prompt, synthetic_problems  # noqa: E402
from common.gsm8k.reward import correctness_reward  # noqa: E402
from common.model.models import load_model, model_spec  # noqa: E402
from common.options.cli import CourseParser  # noqa: E402
from solutions.l2_01_advantages import group_advantages  # noqa: E402
from solutions.l2_02_logprobs_and_masks import token_logprobs  # noqa: E402
from solutions.l2_06_sampling import process_logits  # noqa: E402


def main(argv=None) -> int:
    ap = CourseParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--problem-seed", type=int, default=4, help="合成题的随机种子（换一道题）")
    ap.add_argument("--group", type=int, default=4, help="每道题采几条回答 G（>= 2）")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0, help="采样的随机种子")
    a = ap.parse_args(argv)
    if a.group < 2 or a.temperature <= 0:
        ap.error("--group 至少为 2，--temperature 必须 > 0")

    spec = model_spec(None)  # tiny
    model, tok = load_model(spec)  # warm-start 过的 tiny 模型：会做一部分题
    problem = synthetic_problems(1, seed=a.problem_seed, difficulty=1)[0]
    prompt_ids = tok(build_prompt(tok, problem.question), add_special_tokens=False)["input_ids"]
    print(f"题目：{problem.question}（正确答案 {problem.gold}）")
    print(f"状态 = prompt：{len(prompt_ids)} 个 token（聊天模板 + 题目 + 指令）\n")

    gen = torch.Generator().manual_seed(a.seed)
    ro = generate(
        model,
        [prompt_ids] * a.group,
        max_new_tokens=preset_config("tiny").max_new_tokens,
        eos_token_ids=spec.eos_token_ids,
        pad_token_id=spec.pad_token_id,
        temperature=a.temperature,
        process_logits=process_logits,  # temperature（和 top-p）怎么作用在 logits 上：L2.06
        generator=gen,
    )
    with torch.no_grad():  # 与训练时同样的前向：只取回答位置的 logits
        T = ro.completion_ids.shape[1]
        logits = (
            model(
                input_ids=ro.sequences,
                attention_mask=ro.attention_mask,
                position_ids=ro.position_ids,
                logits_to_keep=T + 1,
            ).logits[:, :-1]
            / a.temperature
        )
        logp = token_logprobs(logits, ro.completion_ids)

    texts = [
        tok.decode(ro.completion_ids[i, : int(ro.lengths[i])], skip_special_tokens=True)
        for i in range(a.group)
    ]
    rewards = torch.tensor([correctness_reward(t, problem.gold) for t in texts])
    adv = group_advantages(rewards, a.group)
    print(f"{a.group} 条轨迹（同一个策略、同一个状态，采样不同）：")
    for i, text in enumerate(texts):
        n = int(ro.lengths[i])
        print(f"  [{i}] {text!r}")
        print(
            f"      {n} 个动作{'（被截断）' if ro.truncated[i] else ''}，log π(回答) = Σ log π(token) = "
            f"{logp[i, :n].sum().item():.2f}，reward = {rewards[i].item():g}，advantage = {adv[i].item():+.2f}"
        )

    n = int(ro.lengths[0])
    print("\n第 0 条回答逐个动作（token 与它的 log π）：")
    pieces = [
        f"{tok.decode([t])!r}:{v:.2f}"
        for t, v in zip(ro.completion_ids[0, :n].tolist(), logp[0, :n].tolist())
    ]
    for start in range(0, len(pieces), 7):
        print("  " + "  ".join(pieces[start : start + 7]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
