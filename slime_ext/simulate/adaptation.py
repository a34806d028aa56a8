"""Sessions to adaptation, as upstream's paper (v2) defines it, with a bootstrap interval over seeds.

A run's training sessions each open with one question; the **first answer** of a session is what the
user gets before saying anything about it (with the memory on: from the preferences stated in
earlier sessions). A run **adapted** at the first session ``s`` whose first answer meets the
preference in ``RUN`` consecutive sessions ``s, s + 1, s + 2`` ("meets": the persona's score at
least ``MEETS``; the one-preference personas score 0 or 1). A run that never does within its
sessions is *censored*: it counts as ``sessions + 1`` (a lower bound), and the table says how many were.

The figure of a (method, persona) is the mean over seeds, with a 95 % percentile bootstrap interval
(seeds resampled with replacement; ``bootstrap_ci``). Pure: the rows come from ``experiment.py``.
"""

from __future__ import annotations

import random
import statistics
from typing import Any, Sequence

MEETS = 0.8  # a first answer meets the preference at this score or above
RUN = 3  # consecutive sessions that meet it: adapted (upstream's definition)
RESAMPLES = 10_000


def sessions_to_adaptation(scores: Sequence[float], run: int = RUN, meets: float = MEETS) -> int | None:
    """The first session (1-based) from which ``run`` consecutive sessions' first answers meet the preference;
    None when none does. ``scores``: each session's first-answer score, in order."""
    ok = [s >= meets for s in scores]
    for i in range(len(ok) - run + 1):
        if all(ok[i:i + run]):
            return i + 1
    return None


def bootstrap_ci(values: Sequence[float], level: float = 0.95, resamples: int = RESAMPLES,
                 seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (resampled with replacement, seeded)."""
    if not values:
        raise ValueError("no values to bootstrap")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


def by_run(sessions: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(method, persona) -> seed -> the first-answer scores of its sessions, in session order."""
    out: dict[tuple[str, str], dict[int, list[tuple[int, float]]]] = {}
    for r in sessions:
        out.setdefault((r["method"], r["persona"]), {}).setdefault(int(r["seed"]), []).append(
            (int(r["session"]), float(r["score"])))
    return {key: {seed: [s for _, s in sorted(rows)] for seed, rows in seeds.items()} for key, seeds in out.items()}


def adaptation(scores_by_seed: dict[int, list[float]]) -> dict[str, Any]:
    """A (method, persona)'s sessions to adaptation over its seeds: mean, interval, censored runs; and the mean
    first-answer score from the second session on (what the user got once they had said it)."""
    values, censored = [], 0
    for scores in scores_by_seed.values():
        s = sessions_to_adaptation(scores)
        censored += s is None
        values.append(float(s if s is not None else len(scores) + 1))
    later = [x for scores in scores_by_seed.values() for x in scores[1:]]
    lo, hi = bootstrap_ci(values)
    return {"seeds": len(values), "mean": statistics.fmean(values), "lo": lo, "hi": hi, "censored": censored,
            "from_second": statistics.fmean(later) if later else float("nan")}


def adaptation_table(sessions: list[dict[str, Any]]) -> str:
    """One Markdown line per (method, persona): seeds, the first answers' mean score from the 2nd session on,
    and sessions to adaptation (mean [95 % CI]; '>' and the count when some runs never adapted)."""
    lines = [f"| method | persona | seeds | first answers from session 2 | sessions to adaptation "
             f"({RUN} in a row >= {MEETS:g}; mean [95 % CI]) | never adapted |",
             "|---|---|---|---|---|---|"]
    for (method, persona), seeds in sorted(by_run(sessions).items()):
        a = adaptation(seeds)
        bound = ">" if a["censored"] else ""
        lines.append(f"| {method} | {persona} | {a['seeds']} | {a['from_second']:.3f} | "
                     f"{bound}{a['mean']:.1f} [{a['lo']:.1f}, {a['hi']:.1f}] | {a['censored']} |")
    return "\n".join(lines) + "\n"
