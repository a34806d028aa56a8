"""The replay stage: a user's earlier prompts re-taught under all of that user's standing preferences.

A hint the judge accepted is kept as a preference of the turn's user (``Store.preferences``; standing
when the user stated it as one: "from now on ..."). The regular step teaches a preference on the one
turn it followed; replay makes it hold for every later answer. With ``replay_turns`` N > 0, each
training step adds, for each user of its batch who has standing preferences, up to N of that user's
earlier main-line turns (newest first, none of the batch): the recorded response, scored by the
teacher whose prompt carries **all** of the user's standing preferences, in the order they were first
stated (``learning/teacher.py: hint_text``). A replayed turn has no verdict (reward 0): it carries the
distillation term only. Another user's preferences never reach it.

``replay_steps`` K > 1 runs K optimizer passes over (batch + replay) per training step, stopping
early once ``replay_budget_s`` seconds are spent (the first pass always runs), so feedback still
reaches the served model within seconds.
"""

from __future__ import annotations

from typing import Any, Callable

from slime_ext.learning.example import Example
from slime_ext.types import Sample


def replay_examples(store, batch: list[Example], limit: int,
                    keep: Callable[[str], bool] = lambda hint: True) -> list[tuple[Example, list[str]]]:
    """For each user of ``batch`` (first seen first) with standing preferences that ``keep`` accepts (the
    pipeline leaves out those the teacher does not follow): up to ``limit`` of the user's earlier main-line
    turns not in ``batch``, newest first, each with those preferences (in the order first stated). ``store``
    is only read."""
    if limit <= 0:
        return []
    exclude = {ex.key for ex in batch}
    out = []
    for user in dict.fromkeys(ex.user for ex in batch):
        hints = [p["hint"] for p in store.preferences(user, standing_only=True, follows=False) if keep(p["hint"])]
        if hints:
            out.extend((Example.from_row(row), hints) for row in store.replay_turns(user, exclude, limit))
    return out


def replay_sample(ex: Example) -> Sample:
    """A taught replayed example as a sample with no verdict (reward 0): the distillation term only."""
    sample = Example.sample(ex)
    sample.reward = 0.0
    sample.metadata.update(replay=True, preferences=len(ex.teaching.hints), teacher_prompt_ids=ex.teaching.prompt_ids)
    return sample


def replay_metrics(samples: list[Sample], skipped: list[str], passes: int, seconds: float) -> dict[str, Any]:
    """A step's replay metrics: turns replayed (which: ``[session_id, turn]``; and those left out, with
    why), optimizer passes, their seconds."""
    out: dict[str, Any] = {"replayed_turns": len(samples), "replay_passes": passes, "replay_s": seconds,
                           "replayed": [[s.metadata["session_id"], s.metadata["turn"]] for s in samples]}
    if skipped:
        out["replay_skipped"] = skipped[:8]
    return out
