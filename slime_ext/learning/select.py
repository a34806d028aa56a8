"""The select stage: which judged turns a step may take, which it drops and why, and how many it takes.

``select`` reads examples and returns the candidates (in the order a step takes them) and the
drops with their reasons; it never writes (the driver stores the drops). A turn is dropped for
having no training signal for the method (a zero verdict for Binary RL, no hint for OPD, neither for
Combine), for having been sampled by a version newer than the trainer's, or for what the driver
refuses (on Slime: a turn sampled at another temperature than ``--rollout-temperature``); never for
its age (the policy loss corrects it with its recorded log-probs under a capped ratio).

``step_size`` is the embedded trainer's rule for how many turns the next step takes: ``batch_size``,
or more when a backlog waits (``catchup_size``: enough that no waiting turn is trained more than
``max_staleness`` versions after it was sampled). Two setbacks change it: a turn that was in a step
that raised is taken alone (the store returns such turns first), so a turn that makes the step
raise is found and set aside while the others train; and turns of a catch-up step the canary refused
are retried in regular steps of ``batch_size``, so one refusal costs at most a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from slime_ext.algorithms.staleness import catchup_size, staleness_filter
from slime_ext.learning.example import Example, Key
from slime_ext.types import Method

Drop = tuple[Key, str]  # a turn and why it is not trained


def no_signal(method: str, verdict: int, hint: str | None, hint_judged_at: float | None,
              memory: bool = False) -> str | None:
    """Why a judged turn gives ``method`` nothing to learn from, or None when it does. A turn served with the
    preference memory (``memory``) has a teacher without a hint: the memory's preferences (``learning/memory.py``)."""
    method = Method.parse(method)
    if method is Method.BINARY and verdict == 0:
        return "verdict 0 (ambiguous): no training signal"
    if memory and method.uses_hints:
        return None
    if method is Method.OPD and hint is None:
        return "no hint: nothing to distill" if hint_judged_at else "no hint: not judged for hints"
    if method is Method.COMBINE and verdict == 0 and hint is None:
        return "verdict 0 and no hint: no training signal"
    return None


def select(examples: list[Example], method: Method, version: int,
           refuse: Callable[[Example], str | None] | None = None) -> tuple[list[Example], list[Drop]]:
    """The examples a step may take, in order, and the drops with their reasons (module docstring).
    ``version``: the trainer's (a turn sampled by a newer one is dropped); ``refuse``: the driver's own rule."""
    candidates, dropped = [], []
    newer = staleness_filter([ex.policy_version for ex in examples], version)
    for ex, why in zip(examples, newer):
        why = why or no_signal(method, ex.verdict, ex.hint, ex.hint_judged_at, bool(ex.memory)) or (refuse(ex) if refuse else None)
        if why is None:
            candidates.append(ex)
        else:
            dropped.append((ex.key, why))
    return candidates, dropped


@dataclass(frozen=True)
class StepSize:
    size: int  # turns the step takes at most
    minimum: int  # fewer usable than this: no step
    waiting: int  # turns with a signal waiting


def step_size(waiting: list[dict[str, Any]], method: Method, version: int, batch_size: int,
              max_staleness: int) -> StepSize:
    """How many turns the next embedded step takes (module docstring). ``waiting``: the store's cheap rows
    of every trainable turn, in the order a step takes them (``Store.waiting_turn_versions``)."""
    rows = [r for r in waiting if no_signal(method, r["verdict"], r["hint"], r["hint_judged_at"], bool(r.get("memory"))) is None]
    if rows and rows[0].get("failures"):  # a step raised with it: alone, so it is found
        return StepSize(1, 1, len(rows))
    n = catchup_size([version - r["policy_version"] for r in rows], batch_size, max_staleness)
    if any(r.get("refusals") for r in rows[:n]):  # a refused catch-up: retried in regular steps
        n = batch_size
    return StepSize(n, batch_size, len(rows))
