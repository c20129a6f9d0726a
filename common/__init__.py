"""Shared library for the course: rewards, data, models, rollout, VRAM ledger."""
