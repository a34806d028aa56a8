"""Groups of samples of one prompt: group-normalized advantages (GRPO) and the implicit reward.

A judged turn's **group** is its recorded response plus ``n - 1`` fresh samples of the same
prompt from the current policy. Each member has a scalar reward; its advantage, put on every one
of its response tokens, is relative to the group:

- ``grpo`` (Shao et al. 2024): ``(r_i - mean(r)) / (std(r) + eps)``, ``std`` the unbiased sample
  standard deviation (as Slime and TRL compute it);
- ``drgrpo`` (Dr. GRPO, Liu et al. 2025): ``r_i - mean(r)``, no division by the std (which
  up-weights groups whose rewards barely differ).

A group whose rewards are all equal (within ``constant_tol``) has no relative signal: every
advantage would be 0. Like Slime's ``_drop_constant_reward_groups`` it is dropped from the
policy-gradient term, and the reason is returned so the caller can record it.

**Implicit reward** (for fresh samples no configured judge can score; see ``docs/learning.md``):
the heuristic judge reads only the user's *next* message, which exists for the recorded response
alone, so a fresh sample is scored by how much more likely the hinted teacher finds it than the
student does: the mean over its response tokens of ``teacher_t - student_t`` (log-probs; a
length-normalized sequence log-ratio), mapped into the verdict's range ``(-1, 1)`` by
``tanh(gap / scale)``. Positive: the hint makes this answer more likely, i.e. it already does
more of what the user asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from slime_ext.types import Estimator


@dataclass(frozen=True)
class GroupAdvantages:
    """Per-member advantages of one group, or all zeros and ``dropped`` (why) for a constant group."""

    advantages: list[float]
    dropped: str | None = None


def group_advantages(rewards: Sequence[float], estimator: str = Estimator.GRPO, *, eps: float = 1e-6,
                     constant_tol: float = 1e-6) -> GroupAdvantages:
    """Group-relative advantages of ``rewards`` (one per member; see the module docstring)."""
    estimator = Estimator.parse(estimator, "group estimator")
    n = len(rewards)
    if n < 2:
        raise ValueError(f"a group needs at least 2 members to normalize against; got {n}")
    r = [float(x) for x in rewards]
    if not all(math.isfinite(x) for x in r):
        raise ValueError(f"group rewards must be finite; got {r}")
    if max(r) - min(r) <= constant_tol:
        return GroupAdvantages([0.0] * n, f"constant rewards ({r[0]:+.3g} x {n}): no group signal")
    mean = sum(r) / n
    centered = [x - mean for x in r]
    if estimator is Estimator.DRGRPO:
        return GroupAdvantages(centered)
    std = math.sqrt(sum(c * c for c in centered) / (n - 1))
    return GroupAdvantages([c / (std + eps) for c in centered])


def implicit_reward(teacher_logprobs: Sequence[float], student_logprobs: Sequence[float],
                    scale: float = 1.0) -> float:
    """``tanh(mean_t(teacher_t - student_t) / scale)`` over a response's tokens (module docstring)."""
    if len(teacher_logprobs) != len(student_logprobs) or not teacher_logprobs:
        raise ValueError(f"need one teacher and one student log-prob per response token; got "
                         f"{len(teacher_logprobs)} and {len(student_logprobs)}")
    if scale <= 0:
        raise ValueError(f"implicit reward scale must be > 0; got {scale}")
    gap = sum(float(t) - float(s) for t, s in zip(teacher_logprobs, student_logprobs)) / len(teacher_logprobs)
    return math.tanh(gap / scale)
