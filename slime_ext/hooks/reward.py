"""Rollout-side reward hooks.

``post_process_rewards(args, samples)``: Slime's default post-process normalizes rewards per
prompt group (GRPO); ours returns the verdicts as they are (a personal agent's turns are not
groups of one prompt), and for OPD / Combine fills ``sample.teacher_log_probs``: the teacher's
log-probs scored when the turn was taken (``metadata["teacher_log_probs"]``), or, for a turn
without an accepted hint, the rollout log-probs themselves, so teacher − rollout is 0 and the
turn adds no distillation term.

``known_reward(args, sample, **kw)`` (``known_rewards(args, samples, **kw)`` with ``--group-rm``):
for settings whose reward is known when the rollout ends (Track 2 environments put it in
``metadata["reward"]``).
"""

from __future__ import annotations

from typing import Any

from slime_ext.hooks.config import plugin_config
from slime_ext.types import Method


def post_process_rewards(args, samples):
    cfg = plugin_config(args)
    raw = [float(s.reward) if s.reward is not None else 0.0 for s in samples]
    if Method.parse(cfg.method).uses_hints:
        for s in samples:
            teacher = (s.metadata or {}).get("teacher_log_probs")
            s.teacher_log_probs = list(teacher) if teacher is not None else (
                list(s.rollout_log_probs) if s.rollout_log_probs is not None else None)
    return raw, list(raw)


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
