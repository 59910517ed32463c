"""Rollout orchestration: collections of prompt groups, advantages, filtering, async buffer."""
