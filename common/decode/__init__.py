"""Answers from the policy: the rollout (eager, fast static-cache, vLLM) and held-out evaluation.

Everything that turns prompts into completions, and the greedy / pass@k scores built on them.

A lesson imports: `rollout.generate` / `rollout_engine`, `evaluate.evaluate` / `completer` /
`flip_floor`, `fast_decode` (L2.06), `vllm_rollout.VLLMEngine` (L2.09, L3.01),
`profiler_kernels.kernel_launches` (reading a profiler trace).
Modules: rollout, rollout_batch, eager_decode, fast_decode, vllm_rollout, evaluate,
profiler_kernels.
"""
