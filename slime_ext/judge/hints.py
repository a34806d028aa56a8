"""The hint judge (On-Policy Distillation): the hindsight hint that a turn's next state carries.

m votes answer ``build_hint_messages``: does the next state hold an instruction or fact that
would have made the response better? A vote that says so gives a short hint between
``HINT_START`` and ``HINT_END`` and ends with ``\\boxed{1}``; one that does not ends with
``\\boxed{-1}``. The chosen hint is appended to the request to make the teacher's prompt.

Reading one vote (``parse_hint``): a vote gives a hint only when its LAST complete ``\\boxed{}``
is 1 (``parse_vote``) AND it has a hint between the markers: the text between the last
``HINT_END`` and the last ``HINT_START`` before it (markers matched case-insensitively),
whitespace stripped. The hint is rejected when it is shorter than ``MIN_HINT_CHARS``, has no
letter or digit, is a placeholder ("none", "N/A", ...), or is longer than ``MAX_HINT_CHARS``. An
over-long hint is rejected, not cut: the prompt asks for one to three sentences, so a longer
block is reasoning or the next state pasted between the markers, and any cut would keep an
arbitrary part of it. A truncated answer (no closing marker, or no final box) gives no hint.

Choosing among the m votes (``select_hint``):

1. Accept a hint only when a strict majority of the m votes asked for gave one (``2k > m``).
   Votes that failed, timed out, did not parse, said ``\\boxed{-1}``, or said ``\\boxed{1}``
   without a usable hint all count against. With m = 1 (the heuristic) its hint is accepted;
   with m = 3, two votes must give a hint.
   Why: the original accepted any single positive vote. Sampled at temperature 1, one vote in
   three inventing a hint for "thanks!" is common, and an invented hint conditions the teacher
   on an instruction the user never gave, which distillation then teaches the policy to follow.
   The majority asks "is there hindsight?" as firmly as the reward judge asks "did it help?".
2. Among the accepted hints choose the consensus one: the highest mean Jaccard similarity of its
   content words (``heuristic.content_words``) to the other accepted hints; ties go to the
   shortest, then to the earliest vote. A single accepted hint is chosen as it is.
   Why not the longest (the original's rule): the longest hint is the one most likely to add what
   the next state did not say (embellishment, speculation, a restated answer), and every extra
   word of the hint moves the teacher's distribution away from what the user asked for. The
   consensus hint carries what the votes agree on; among equals the shortest says it with the
   least extra.

Candidates (``candidate_hints``, for ``--distill topk_select`` with ``--hint-m`` m > 1): the
accepted hint and the other distinct usable hints of the same votes, at most m, shortest first
(ties: the accepted hint, then vote order), so candidate 0 is the shortest (upstream's
``shortest`` rule). Only a turn with an accepted hint has candidates: the majority rule still decides whether there is hindsight.
The heuristic judge casts one vote, so it gives one candidate; m > 1 needs a judge with several
votes (``--judge-votes``), each of which may phrase the hint differently. Candidates are read back
from the stored hint votes (``Store.hint_vote_texts``), so nothing else is stored for them.

``HintJudge`` runs the votes through any backend with ``Judge``'s machinery (``VoteRunner``: one
concurrency bound, per-vote timeout, failures abstain, never raises); the heuristic answers
through ``HeuristicHintBackend`` (``heuristic.heuristic_hint``). ``HintJudge.from_judge`` makes
the hint judge that goes with a reward judge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from slime_ext.judge.backends import HeuristicBackend, Judge, JudgeInput, VoteRunner
from slime_ext.judge.heuristic import content_words, heuristic_hint
from slime_ext.judge.prompts import (
    HINT_END,
    HINT_START,
    MAX_HINT_CHARS,
    MIN_HINT_CHARS,
    build_hint_messages,
)
from slime_ext.judge.votes import parse_vote
from slime_ext.store import preference_key

_START = re.compile(re.escape(HINT_START), re.IGNORECASE)
_END = re.compile(re.escape(HINT_END), re.IGNORECASE)
_PLACEHOLDERS = frozenset({"none", "n/a", "na", "null", "nil", "no hint", "nothing", "hint", "your hint", "..."})


def _usable(hint: str) -> bool:
    """A stripped hint says something: within the length bounds, not punctuation nor a placeholder."""
    return (
        MIN_HINT_CHARS <= len(hint) <= MAX_HINT_CHARS
        and any(c.isalnum() for c in hint)
        and hint.lower().strip(" .!?:;\"'`<>[]()") not in _PLACEHOLDERS
    )


def parse_hint(text: str | None) -> str | None:
    """The hint of one vote, or ``None``: the last ``\\boxed{}`` must be 1 and the last marker pair
    must hold a usable hint (see the module docstring). Pure."""
    if not text or parse_vote(text) != 1:
        return None
    ends = list(_END.finditer(text))
    if not ends:
        return None
    end = ends[-1].start()
    starts = list(_START.finditer(text, 0, end))
    if not starts:
        return None
    hint = text[starts[-1].end() : end].strip()
    return hint if _usable(hint) else None


def _jaccard(a: set[str], b: set[str]) -> float:
    """|a & b| / |a | b|; 0 when both are empty (no evidence of agreement)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def select_hint(hints: Sequence[str | None], votes: int) -> str | None:
    """The accepted hint of ``votes`` votes, or ``None`` (the rule is in the module docstring).

    ``hints[i]`` is vote i's ``parse_hint`` (``None``: no hint); votes missing from ``hints``
    count as giving none. Invariant: a hint is returned only when more than half of ``votes``
    gave one, and it is one of them, stripped. Pure and deterministic.
    """
    if votes < 1:
        raise ValueError("votes must be at least 1")
    if len(hints) > votes:
        raise ValueError(f"{len(hints)} hints for {votes} votes")
    given = [h.strip() for h in hints if h is not None and h.strip()]
    if 2 * len(given) <= votes:
        return None
    if len(given) == 1:
        return given[0]
    words = [content_words(h) for h in given]

    def agreement(i: int) -> float:
        return sum(_jaccard(words[i], words[j]) for j in range(len(given)) if j != i) / (len(given) - 1)

    return given[max(range(len(given)), key=lambda i: (agreement(i), -len(given[i]), -i))]


def candidate_hints(accepted: str | None, hints: Sequence[str | None], m: int) -> list[str]:
    """Up to ``m`` distinct candidate hints of one turn (see the module docstring): ``accepted``
    always among them, shortest first; hints equal under ``preference_key`` are one. ``hints``: each
    vote's ``parse_hint``. Pure."""
    if m < 1:
        raise ValueError(f"hint_m must be >= 1; got {m}")
    if accepted is None or not accepted.strip():
        return []
    seen, others = {preference_key(accepted)}, []
    for h in hints:
        if h is not None and h.strip() and preference_key(h) not in seen:
            seen.add(preference_key(h))
            others.append(h.strip())
    chosen = [accepted.strip()] + sorted(others, key=len)[: m - 1]
    return sorted(chosen, key=len)  # stable: among equal lengths the accepted hint, then vote order


@dataclass
class HintVerdict:
    """The hint chosen for one turn and every vote behind it.

    ``votes[i]`` is vote i's decision (its last ``\\boxed{}``: 1, -1, or 0; ``None`` when it failed,
    timed out or gave none); ``hints[i]`` its ``parse_hint`` (``None``: no usable hint);
    ``texts[i]`` its raw judge text, or why it abstained (``"abstained: ..."``). ``hint`` is
    ``select_hint(hints, len(votes))``.
    """

    hint: str | None
    votes: list[int | None] = field(default_factory=list)
    hints: list[str | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


class HeuristicHintBackend(HeuristicBackend):
    """The heuristic's hint reading: ``heuristic_hint`` of the next state, in the hint answer format.

    Its answer always parses: a hint between the markers and ``\\boxed{1}``, or ``\\boxed{-1}``.
    """

    task = "hint"

    def answer(self, inputs: JudgeInput) -> str:
        hint = heuristic_hint(inputs.next_state, inputs.next_state_role, MAX_HINT_CHARS)
        if hint is None:
            return f"no_hint: no imperative correction in the next state (role {inputs.next_state_role})\n\\boxed{{-1}}"
        return f"hint: the user's imperative correction\n{HINT_START}{hint}{HINT_END}\n\\boxed{{1}}"


class HintJudge(VoteRunner):
    """The hint judge: ``votes`` votes of ``build_hint_messages`` per turn, read by ``parse_hint``
    and combined by ``select_hint``; never raises (see ``VoteRunner`` for bounds and abstentions)."""

    prompt_builder = staticmethod(build_hint_messages)
    task = "hint"

    @classmethod
    def from_judge(cls, judge: Judge) -> HintJudge:
        """The hint judge for a reward judge: its backend's ``hint_backend`` when it has one, else its
        backend, except that a backend serving the reward task only (the heuristic, or a user's with
        ``task = "judge"``) gets the heuristic's hint reading; its votes, timeout, seed and context
        budget, and its concurrency bound, shared."""
        backend = getattr(judge.backend, "hint_backend", None)
        if backend is None:
            reward_only = isinstance(judge.backend, HeuristicBackend) or getattr(judge.backend, "task", None) == "judge"
            backend = HeuristicHintBackend() if reward_only else judge.backend
        return cls(backend, votes=judge.votes, timeout_s=judge.timeout_s, seed=judge.seed,
                   max_context_chars=judge.max_context_chars, semaphore=judge.semaphore)

    async def hint(self, inputs: JudgeInput) -> HintVerdict:
        """The chosen hint of ``self.votes`` votes, with every vote's decision, hint and text."""
        results = await self.collect(inputs)
        hints = [parse_hint(answer) for answer, _ in results]
        return HintVerdict(
            hint=select_hint(hints, self.votes),
            votes=[parse_vote(answer) for answer, _ in results],
            hints=hints,
            texts=[text for _, text in results],
        )
