"""A hard staleness cap: samples generated too many policy versions ago are not trained on.

The PPO ratio is taken against the log-probs recorded at sampling time, which corrects moderate
staleness; beyond ``max_staleness`` versions the importance ratios are too far from 1 for the clip
to be meaningful, so those samples are dropped (and the reason recorded).
"""

from __future__ import annotations


def staleness_filter(sample_versions: list[int], current_version: int, max_staleness: int) -> list[str | None]:
    """For each sample, ``None`` to keep it or the reason it is dropped.

    A sample's version is the oldest policy version that produced any of its tokens.
    """
    reasons: list[str | None] = []
    for v in sample_versions:
        age = current_version - v
        if age < 0:
            reasons.append(f"sampled by version {v}, newer than the trainer's {current_version}")
        elif age > max_staleness:
            reasons.append(f"stale: sampled {age} versions ago (cap {max_staleness})")
        else:
            reasons.append(None)
    return reasons
