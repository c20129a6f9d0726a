"""The config of a training run, and every check made before its first step.

GRPOConfig (defaults < --preset < flags, or --resume), the model plan, the stub and machine checks.

A lesson imports: `config_cli.parse_config` / `preset_config` (the scripts' command line),
`grpo_config.GRPOConfig`, `model_plan.plan_or_exit`, `stubs.require_written`;
a learner runs `python -m common.config.env_check` (what this machine can run).
Modules: grpo_config, config_cli, config_checks, model_plan, stubs, env_check.
"""
