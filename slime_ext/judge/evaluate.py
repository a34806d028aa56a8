"""Scoring a judge on a labelled set of follow-ups: per-class accuracy and hint matches.

The set (``tests/data/followups.jsonl``, one JSON object a line) holds realistic messages a user
sends after an assistant's answer (or a tool's result), each with the request it follows, the
reply, the expected score (``label``: +1 / 0 / -1), a ``cls`` (thanks, preference, tool_error,
...), a ``split`` (``dev``: the part rules were tuned on; ``test``, ``fresh``, ``fresh2``, ``fresh3``: held
out, each written later than the one before) and, where the message carries an instruction, the
expected ``hint`` with its ``hint_keys``.

Hint-match rule (``hint_matches``): a hint matches when it is given, contains every key phrase
(case-insensitive, curly apostrophes made straight) and does not open with the user's framing
("from now on", "next time", "I wanted", "thanks", ...): the teacher gets the preference itself,
as an instruction.

Pure functions only; the backends are run by ``bench/judge_eval.py`` and ``tests/test_judge_eval.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

NEGATIVE_CLASSES = ("correction", "preference", "thanks_but", "redo", "complaint", "rephrase")

# The user's framing, which a hint must not open with: the teacher needs the instruction itself.
_FRAMING_LEAD = re.compile(
    r"^\W*(?:from now on|next time|going forward|moving forward|in (?:the )?future|for future\b|remember\b"
    r"|i(?:'d| would)? (?:prefer|rather|like|wanted|want|just wanted|only wanted)\b|my preference\b"
    r"|it would be better\b|thanks?\b|thank you\b|thx\b|great\b|nice\b|ok\b|okay\b|(?:no|nope)\b(?=\s*[,.!]))",
    re.I,
)


@dataclass(frozen=True)
class FollowUp:
    """One labelled follow-up: the turn it follows and what a judge should say about it."""

    id: str
    split: str
    cls: str
    label: int
    role: str
    request: str
    response: str
    next: str
    hint: str | None = None
    hint_keys: tuple[str, ...] = ()


def load_followups(path: str | Path) -> list[FollowUp]:
    """The labelled set at ``path`` (JSON lines); a bad line raises ``ValueError`` naming it."""
    rows: list[FollowUp] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            d["hint_keys"] = tuple(d.get("hint_keys") or ())
            rows.append(FollowUp(**d))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a follow-up row ({exc})") from exc
    return rows


def _straight(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("\u2018", "'")


def hint_matches(hint: str | None, keys: Iterable[str]) -> bool:
    """Whether ``hint`` states the expected instruction (the rule in the module docstring)."""
    if not hint:
        return False
    text = _straight(hint)
    return all(_straight(k) in text for k in keys) and not _FRAMING_LEAD.match(text)


@dataclass
class ClassScore:
    """One class's tally: votes right, negatives judged +1, hints expected and matched."""

    n: int = 0
    correct: int = 0
    negative_as_positive: int = 0
    hints_expected: int = 0
    hints_matched: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        """The share of the class's rows judged with the expected score (0 for an empty class)."""
        return self.correct / self.n if self.n else 0.0


Vote = Callable[[FollowUp], "int | None"]
Hint = Callable[[FollowUp], "str | None"]


def score_rows(rows: Iterable[FollowUp], votes: dict[str, int | None],
               hints: dict[str, str | None] | None = None) -> dict[str, ClassScore]:
    """Per-class tallies of ``votes`` (and ``hints``), both keyed by row id; plus ``"all"``."""
    table: dict[str, ClassScore] = {}
    for row in rows:
        for key in (row.cls, "all"):
            s = table.setdefault(key, ClassScore())
            s.n += 1
            vote = votes.get(row.id)
            if vote == row.label:
                s.correct += 1
            elif key != "all":
                s.misses.append(f"{row.id} [{row.split}] {row.next!r}: {vote} (want {row.label})")
            if row.label == -1 and vote == 1:
                s.negative_as_positive += 1
            if hints is not None and row.hint_keys:
                s.hints_expected += 1
                got = hints.get(row.id)
                if hint_matches(got, row.hint_keys):
                    s.hints_matched += 1
                elif key != "all":
                    s.misses.append(f"{row.id} [{row.split}] hint {got!r} (want {row.hint!r})")
    return table


def format_table(columns: dict[str, dict[str, ClassScore]]) -> str:
    """A plain-text table: one row per class, one accuracy column per named tally (e.g. dev, test)."""
    names = list(columns)
    classes = sorted({c for t in columns.values() for c in t if c != "all"}) + ["all"]
    head = f"{'class':<14}" + "".join(f"{n:>16}" for n in names) + "   neg->+1   hints"
    lines = [head, "-" * len(head)]
    for c in classes:
        cells = []
        for n in names:
            s = columns[n].get(c)
            cells.append(f"{s.correct:>3}/{s.n:<3} {s.accuracy:5.2f}  " if s else " " * 16)
        tallies = [columns[n][c] for n in names if c in columns[n] and n != "all"]  # "all" repeats the parts
        neg = sum(s.negative_as_positive for s in tallies)
        exp, got = sum(s.hints_expected for s in tallies), sum(s.hints_matched for s in tallies)
        lines.append(f"{c:<14}" + "".join(f"{x:>16}" for x in cells) + f"{neg:>9}   "
                     + (f"{got}/{exp}" if exp else "-"))
    return "\n".join(lines)


def run_heuristic(rows: Iterable[FollowUp]) -> tuple[dict[str, int | None], dict[str, str | None]]:
    """The heuristic judge's votes and hints for ``rows``, keyed by row id."""
    from slime_ext.judge.heuristic import heuristic_hint, heuristic_vote
    from slime_ext.judge.prompts import MAX_HINT_CHARS

    votes: dict[str, int | None] = {}
    hints: dict[str, str | None] = {}
    for row in rows:
        votes[row.id] = heuristic_vote(row.next, row.role, row.request)
        hints[row.id] = heuristic_hint(row.next, row.role, MAX_HINT_CHARS)
    return votes, hints
