"""Rollout-side reward hooks.

``post_process_rewards(args, samples)``: Slime's default post-process normalizes rewards per prompt
group (GRPO); ours returns the rewards the live rollout set (``hooks/rollout.py``: the learning
pipeline already computed every advantage, and a personal agent's turns are not groups of one
prompt), with each sample's raw reward (its verdict, or a fresh sample's implicit reward:
``metadata["raw_reward"]``) for Slime's logs.

``known_reward(args, sample, **kw)`` (``known_rewards(args, samples, **kw)`` with ``--group-rm``):
for settings whose reward is known when the rollout ends (Track 2 environments put it in
``metadata["reward"]``).
"""

from __future__ import annotations

from typing import Any


def post_process_rewards(args, samples):
    rewards = [float(s.reward) if s.reward is not None else 0.0 for s in samples]
    raw = [float((s.metadata or {}).get("raw_reward", r)) for s, r in zip(samples, rewards)]
    return raw, rewards


def _reward_of(sample: Any) -> float:
    reward = (sample.metadata or {}).get("reward", sample.reward)
    if reward is None:
        raise ValueError(f"sample {getattr(sample, 'index', '?')}: no reward in metadata['reward'] or sample.reward")
    return float(reward)


async def known_reward(args, sample, **kwargs):
    """The reward recorded with the sample (a list in, a list out)."""
    if isinstance(sample, list):
        return [_reward_of(s) for s in sample]
    return _reward_of(sample)


async def known_rewards(args, samples, **kwargs):
    """``known_reward`` for ``--group-rm`` (Slime passes the group as ``samples``)."""
    return [_reward_of(s) for s in samples]
