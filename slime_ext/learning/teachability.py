"""The teacher check, a stage of the pipeline: does the hinted teacher follow a hint at all?

OPD distills the student toward the same model shown the hint; its gain is bounded by how
differently that hinted teacher behaves (OPSD found the final gain roughly linear in the initial
student-teacher gap), and a 135M model follows some hints ("Answer in one short sentence.") and
not others ("Write everything in lowercase."). So, once per hinted turn (cached per prompt and
hint), the trainer measures it with a model-free test that works with every judge:

1. the teacher's own answer ``y``: greedy, at most ``max_new_tokens`` tokens, from the teacher's
   weights shown the **hinted** prompt;
2. the **gap**: the mean per-token log-prob of ``y`` under the hinted prompt minus under the
   **unhinted** prompt, same weights, teacher-forced (``mean_gap``): how much more likely the hint
   makes the teacher's own answer (nats/token);
3. **same answer**: whether the unhinted greedy answer is ``y`` too (``Scorer.logprobs_and_greedy``: in
   this process read off the same unhinted pass, since greedy decoding gives ``y`` exactly when the
   unhinted argmax is ``y``'s token at every position; through an engine, by decoding it).

One prompt's gap is noisy on a small model (measured on smollm2: 0.03 to 0.48 nats/token across
eight questions for a hint it follows, -0.06 to 0.46 for one it does not), and a hint is a
standing preference that recurs, so the decision reads the **hint's median gap** over every
distinct prompt it was measured on so far, and this prompt's own answer: the hint is followed
when that median reaches ``min_gap`` and the teacher's answer here differs (``decide``). Once a
hint has been measured on ``per_hint`` distinct prompts, later turns with it reuse its median
without measuring (a standing preference costs ``per_hint`` measures, not one per turn). Both
sides use the teacher's weights (``--teacher base``: the initial model, which is also the student
before its first step; ``--teacher policy``: the current policy, the student itself), so the
figure is the hint's effect alone and does not shrink as the student learns.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from slime_ext.learning.scorers import Scorer
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.types import Method, Unfollowed

NOT_FOLLOWED = "teacher does not follow the hint"  # the start of a dropped turn's reason


@dataclass
class TeacherCheck:
    """One hinted turn's measure and decision (stored in the ``teacher_checks`` table)."""

    gap: float  # mean nats/token the hint adds to the teacher's own answer to this prompt
    same_answer: bool | None  # the unhinted greedy answer is the same (None: not measured here)
    hint_gap: float  # the hint's median gap over the distinct prompts measured so far (what decides)
    hint_checks: int  # how many
    follows: bool
    reason: str  # the decision in words
    sample: str  # the teacher's answer (truncated)
    tokens: int  # its length in tokens
    seconds: float = 0.0  # what measuring it cost (0 when it came from the cache)
    cached: bool = False

    def record(self) -> dict[str, Any]:
        """The stored fields."""
        return asdict(self)


def mean_gap(hinted: Sequence[float], unhinted: Sequence[float]) -> float:
    """The mean per-token log-prob difference ``hinted - unhinted`` of one answer (0 for an empty one)."""
    if len(hinted) != len(unhinted):
        raise ValueError(f"{len(hinted)} hinted log-probs but {len(unhinted)} unhinted ones")
    if not hinted:
        return 0.0
    return sum(h - u for h, u in zip(hinted, unhinted)) / len(hinted)


def median(values: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    if not values:
        raise ValueError("the median of nothing")
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def decide(hint_gap: float, same_answer: bool | None, min_gap: float, checks: int = 1) -> tuple[bool, str]:
    """Whether the teacher follows the hint, and why in words: ``hint_gap`` is the hint's median gap
    over ``checks`` prompts, ``same_answer`` whether the teacher's answer here is the same without it
    (None: not measured here)."""
    over = f"median over {checks} prompt{'s' if checks != 1 else ''}"
    if same_answer:
        return False, f"{NOT_FOLLOWED}: its greedy answer here is the same without the hint"
    if hint_gap < min_gap:
        return False, f"{NOT_FOLLOWED}: it adds {hint_gap:+.3f} nats/token to its own answers ({over}; < {min_gap:g})"
    return True, f"the teacher follows the hint: it adds {hint_gap:+.3f} nats/token to its own answers ({over})"


def measure(teacher: Scorer, prompt_ids: Sequence[int], teacher_prompt_ids: Sequence[int], *,
            max_new_tokens: int) -> tuple[float, bool, list[int]]:
    """``(gap, same_answer, answer)`` of the ``teacher`` for one prompt and its hinted version (module doc)."""
    prompt, hinted = list(prompt_ids), list(teacher_prompt_ids)
    (answer,) = teacher.sample(hinted, 1, temperature=0.0, max_new_tokens=max_new_tokens)
    if not answer:
        return 0.0, True, answer
    without, same = teacher.logprobs_and_greedy(prompt, answer)
    return mean_gap(teacher.logprobs(hinted, answer), without), same, answer


class TeacherChecker:
    """Measures and decides each hinted turn. A measure is cached by (prompt, hinted prompt): the
    hinted prompt holds the hint, so a replayed prompt with the same hint is measured once. The
    decision reads the hint's median gap over its distinct measured prompts (``gaps``)."""

    def __init__(self, config: TeacherCheckConfig, tokenizer, cache_size: int = 512) -> None:
        config.validate()
        self.config = config
        self.tokenizer = tokenizer
        self.cache: OrderedDict[tuple, tuple[float, bool, str, int]] = OrderedDict()  # (gap, same, sample, tokens)
        self.cache_size = cache_size
        self.gaps: dict[str, dict[tuple, float]] = {}  # hint -> {(prompt, hinted prompt): gap}

    def check(self, teacher: Scorer, prompt_ids: Sequence[int], teacher_prompt_ids: Sequence[int], hint: str,
              context: int = 0) -> TeacherCheck:
        """The check of the ``teacher`` on this prompt and its hinted version."""
        key = (tuple(prompt_ids), tuple(teacher_prompt_ids))
        started, cached = time.perf_counter(), key in self.cache
        measured = self.gaps.get(hint, {})
        if not cached and self.config.per_hint and len(measured) >= self.config.per_hint:
            return self.reuse(hint)
        if cached:
            self.cache.move_to_end(key)
        else:
            budget = self.config.max_new_tokens
            if context:
                budget = min(budget, context - max(len(prompt_ids), len(teacher_prompt_ids)))
            if budget <= 0:  # nothing to measure with: not judged, trained as before
                return TeacherCheck(0.0, False, 0.0, 0, True, "not measured: no room in the context", "", 0)
            gap, same, answer = measure(teacher, prompt_ids, teacher_prompt_ids, max_new_tokens=budget)
            text = self.tokenizer.decode(answer, skip_special_tokens=True) if answer else ""
            self.cache[key] = (round(gap, 4), same, text[:200], len(answer))
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        gap, same, text, tokens = self.cache[key]
        per_prompt = self.gaps.setdefault(hint, {})
        per_prompt[key] = gap
        hint_gap = median(list(per_prompt.values()))
        follows, reason = decide(hint_gap, same, self.config.min_gap, len(per_prompt))
        return TeacherCheck(gap, same, round(hint_gap, 4), len(per_prompt), follows, reason, text, tokens,
                            0.0 if cached else round(time.perf_counter() - started, 3), cached)

    def follows(self, hint: str) -> bool | None:
        """Whether the teacher follows ``hint`` by its median gap so far (``decide``); None if never measured."""
        gaps = self.gaps.get(hint)
        return decide(median(list(gaps.values())), None, self.config.min_gap)[0] if gaps else None

    def reuse(self, hint: str) -> TeacherCheck:
        """The decision for a prompt not measured, from the hint's ``per_hint`` measured ones."""
        gaps = list(self.gaps[hint].values())
        hint_gap = median(gaps)
        follows, reason = decide(hint_gap, None, self.config.min_gap, len(gaps))
        return TeacherCheck(round(hint_gap, 4), None, round(hint_gap, 4), len(gaps), follows,
                            reason + "; not measured on this prompt", "", 0, 0.0, True)


def excluded(method: str, verdict: int, check: TeacherCheck, config: TeacherCheckConfig) -> tuple[bool, str | None]:
    """What a check does to a hinted turn: ``(strip the teacher term, drop reason or None)``. A hint
    the teacher does not follow trains no teacher term (``unfollowed: skip``); the turn is dropped
    when nothing else is left to learn from it (OPD, or Combine with a zero verdict), or always
    (``unfollowed: drop``: its -1 verdicts alone lengthened and degraded answers, docs/learning.md)."""
    if check.follows or config.unfollowed is Unfollowed.TRAIN:
        return False, None
    if config.unfollowed is Unfollowed.DROP or Method.parse(method) is Method.OPD or verdict == 0:
        return True, check.reason
    return True, None
