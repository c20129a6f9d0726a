"""The GSM8K task: the questions and their prompts, the rewards, the control runs' reward shuffle.

And the statistics that compare two held-out evaluations of the same questions.

A lesson imports: `data` (`build_prompt`, `synthetic_problems`, `load_splits`),
`reward.correctness_reward` / `format_reward` / `training_rewards`, `paired_stats.paired` (L2.08).
Modules: data, reward, controls, paired_stats.
"""
