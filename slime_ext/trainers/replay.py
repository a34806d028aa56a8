"""Preference replay: a user's earlier prompts re-taught under all of that user's standing preferences.

A hint the judge accepted is kept as a preference of the turn's user (``Store.preferences``; standing
when the user stated it as one: "from now on ..."). The regular step teaches a preference on the one
turn it followed; replay makes it hold for every later answer. With ``replay_turns`` N > 0, each
training step adds, for each user of its batch who has standing preferences, up to N of that user's
earlier main-line turns (newest first, none of the batch): the recorded response, scored by the
teacher whose prompt carries **all** of the user's standing preferences, in the order they were first
stated (``slime_ext.teacher.hint_text``). A replayed turn has no verdict (reward 0): it carries the
distillation term only. Another user's preferences never reach it.

``replay_steps`` K > 1 runs K optimizer passes over (batch + replay) per training step, stopping
early once ``replay_budget_s`` seconds are spent (the first pass always runs), so feedback still
reaches the served model within seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from slime_ext.types import JudgedTurn, Method, Sample, TrainingRow


@dataclass
class ReplayConfig:
    turns: int = 0  # earlier turns per user of a batch replayed under the user's preferences (0: off)
    steps: int = 1  # optimizer passes over (batch + replay) per training step
    budget_s: float = 5.0  # no further pass starts after this many seconds of the step's passes

    def validate(self, method: str, distill: str = "token") -> None:
        """Raise ValueError naming the setting that cannot work."""
        if self.turns < 0 or self.steps < 1 or self.budget_s <= 0:
            raise ValueError(f"replay_turns must be >= 0, replay_steps >= 1 and replay_budget_s > 0; got "
                             f"{self.turns}, {self.steps} and {self.budget_s}")
        if self.turns and not Method.parse(method).uses_hints:
            raise ValueError("replay_turns > 0 needs method opd or combine: a replayed turn is taught by the "
                             "teacher under the user's preferences, and binary has no teacher")
        if self.turns and distill == "topk_select":
            raise ValueError("replay_turns > 0 does not work with distill topk_select: a replayed turn has one "
                             "teacher (all the user's preferences), not candidate hints to select among")


def replay_rows(store, batch: list[TrainingRow], limit: int,
                keep: Callable[[str], bool] = lambda hint: True) -> list[tuple[JudgedTurn, list[str]]]:
    """For each user of ``batch`` (first seen first) with standing preferences that ``keep`` accepts (the
    trainer leaves out those the teacher does not follow): up to ``limit`` of the user's earlier main-line
    turns not in ``batch``, newest first, each with those preferences (in the order first stated)."""
    if limit <= 0:
        return []
    exclude = {(r["session_id"], r["idx"]) for r in batch}
    out = []
    for user in dict.fromkeys(r.get("user") for r in batch):
        hints = [p["hint"] for p in store.preferences(user, standing_only=True) if keep(p["hint"])]
        if hints:
            out.extend((row, hints) for row in store.replay_turns(user, exclude, limit))
    return out


def replay_samples(pairs: list[tuple[JudgedTurn, list[str]]],
                   score: Callable[[TrainingRow, list[str]], str | None],
                   to_sample: Callable[[TrainingRow], Sample]) -> tuple[list[Sample], list[str]]:
    """The replayed samples: each row scored by ``score(row, hints)`` (sets its ``teacher_logprobs`` /
    ``teacher_topk`` / ``teacher_prompt_ids``; returns why it cannot be, or None), as a sample with no
    verdict (reward 0) marked ``metadata["replay"]``; and why the others were left out."""
    samples, skipped = [], []
    for row, hints in pairs:
        why = score(row, hints)
        if why is not None:
            skipped.append(f"{row['session_id']}/{row['idx']}: {why}")
            continue
        sample = to_sample(dict(row, verdict=0))
        sample.reward = 0.0
        sample.metadata.update(replay=True, preferences=len(hints), teacher_prompt_ids=row["teacher_prompt_ids"])
        samples.append(sample)
    return samples, skipped


def replay_metrics(samples: list[Sample], skipped: list[str], passes: int, seconds: float) -> dict[str, Any]:
    """A step's replay metrics: turns replayed (which: ``[session_id, turn]``; and those left out, with
    why), optimizer passes, their seconds."""
    out: dict[str, Any] = {"replayed_turns": len(samples), "replay_passes": passes, "replay_s": seconds,
                           "replayed": [[s.metadata["session_id"], s.metadata["turn"]] for s in samples]}
    if skipped:
        out["replay_skipped"] = skipped[:8]
    return out
