"""Staleness: how many policy versions ago a turn was sampled, and how a backlog is kept fresh.

A turn's **age** is the trainer's current version minus the version that was being served when
the turn was sampled (``policy_version``: the oldest version that produced any of its tokens).
Turns age only while they wait, so when the trainer takes versions faster than it consumes the
queue (a backlog after a restart, a burst of feedback), it takes the backlog in **larger steps**:
``catchup_size`` is the smallest step that trains every waiting turn before it is more than
``max_staleness`` versions old. No turn is dropped for its age: the policy loss takes its ratio
against the log-probs recorded at sampling time and bounds it on both sides (PPO's clip and the
dual clip ``ratio_cap``, see ``ppo.py``), so a turn that is older anyway (on Slime, whose batch
size is fixed, or one already old when the trainer restarted) is corrected, not discarded.
"""

from __future__ import annotations

from typing import Any


def staleness_filter(sample_versions: list[int], current_version: int) -> list[str | None]:
    """For each sample, ``None`` to keep it or the reason it cannot be trained on.

    Age never drops a sample; only a version newer than the trainer's does (the store and the
    checkpoints disagree, e.g. checkpoints were deleted), since its ratio would be meaningless.
    """
    return [None if v <= current_version else
            f"newer than the trainer: sampled by version {v}, the trainer is at version {current_version}"
            for v in sample_versions]


def catchup_size(ages: list[int], batch_size: int, max_staleness: int) -> int:
    """Turns to take in the next step so that no waiting turn is trained more than ``max_staleness``
    versions after it was sampled, at least ``batch_size``.

    ``ages``: the waiting turns' ages in the order they will be taken. The turn at position k is
    trained in step ``k // n`` from now, at age ``ages[k] + k // n``; that is within the cap iff
    ``n > k // (max_staleness - ages[k] + 1)``. A turn already past the cap sets no bound (the
    capped ratio corrects it whenever it is taken), so one very old turn never forces a huge step.
    """
    n = batch_size
    for k, age in enumerate(ages):
        steps_left = max_staleness - age + 1
        if steps_left >= 1:
            n = max(n, k // steps_left + 1)
    return n


def staleness_metrics(ages: list[int], max_staleness: int) -> dict[str, Any]:
    """Step metrics of the turns trained: their mean and largest age, and how many were past the cap."""
    if not ages:
        return {"staleness_mean": 0.0, "staleness_max": 0, "over_cap_turns": 0}
    return {"staleness_mean": sum(ages) / len(ages), "staleness_max": max(ages),
            "over_cap_turns": sum(a > max_staleness for a in ages)}
