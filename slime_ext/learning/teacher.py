"""The teacher stage: the same conversation with the user's hindsight hint, scoring the recorded answer.

The teacher prompt is the turn's own request (its messages, tools and tool_choice, rendered with
the model's chat template exactly as the server rendered the student's prompt) with the hint
appended to the last user message in a marked block. Several hints (a user's accumulated standing
preferences, replayed by ``learning/replay.py``) go in the same block, one a line, in order; one
hint renders exactly as before. The teacher log-probs are those of the **exact recorded response
tokens** after that prompt, teacher-forced at the temperature the turn was sampled at (the one the
student's are taken at); the response is never re-tokenized. Which weights score them is the
``Scorer``'s (``learning/scorers.py``): the frozen base model (the default teacher) or the current
policy (self-distillation), in this process or through SGLang.

``teach`` attaches a turn's ``Teaching`` (the stage's output) or says why it cannot be taught;
``teach_candidates`` is ``distill: topk_select``'s version, which scores several candidate hints
and picks, at each position, the one whose teacher the policy overlaps most
(``algorithms/topk_select.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from slime_ext.algorithms.topk import teacher_topk
from slime_ext.algorithms.topk_select import select_support
from slime_ext.chat.memory import HINT_BLOCK, hint_text  # noqa: F401  (the hint block is written once: chat/memory.py)
from slime_ext.chat.memory import with_hint_block as teacher_messages
from slime_ext.learning.example import Example, Request, Teaching
from slime_ext.learning.scorers import Scorer
from slime_ext.logprobs import scoring_temperature
from slime_ext.types import Distill, SelectRule, TopkSupport

log = logging.getLogger(__name__)

def as_hints(hint: str | Sequence[str]) -> tuple[str, ...]:
    """One hint, or several, as a tuple."""
    return (hint,) if isinstance(hint, str) else tuple(hint)


def teacher_prompt_ids(renderer, messages: list[dict[str, Any]], hint: str | Sequence[str], tools: list | None = None,
                       tool_choice: Any = None, template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The teacher's prompt token ids: the request plus the hint, rendered like the student's (with the
    request's ``template_kwargs``, e.g. ``enable_thinking``)."""
    return Request(messages, tools, tool_choice, template_kwargs).render(renderer, teacher_messages(messages, hint))


@dataclass(frozen=True)
class TeacherTerm:
    """What the teacher stage computes for the distillation kind: the teacher's top-k (``topk``), its whole
    log-distributions (``student`` support: the step takes the student's top-k of them), or log-probs alone."""

    distill: Distill
    topk: int = 20
    support: TopkSupport = TopkSupport.TEACHER
    select_rule: SelectRule = SelectRule.SEQUENCE_OPTIMAL
    clip: float = 5.0  # topk_select: the clip of its advantages (``opd_clip``)

    def scores(self, teacher: Scorer, prompt: list[int], response: list[int], temperature: float) -> tuple[list[float], Any]:
        """The teacher's log-probs of ``response`` after ``prompt`` at ``temperature``, and what the
        distillation term needs besides (None for a per-token term and for topk_select, which chooses its own)."""
        if self.distill.per_token or self.distill is Distill.TOPK_SELECT:
            return teacher.logprobs(prompt, response, temperature), None
        logprobs = teacher.distributions(prompt, response, temperature)  # [r, V]
        values = logprobs.gather(1, torch.tensor(response)[:, None])[:, 0].tolist()
        if self.support is TopkSupport.STUDENT:
            return values, logprobs  # for this step only
        top = teacher_topk(logprobs[None], self.topk)
        return values, (top.ids[0], top.logprobs[0])


def teacher_prompt(renderer, ex: Example, hint: str | Sequence[str], context: int) -> tuple[list[int], str | None]:
    """``ex``'s teacher prompt ids under ``hint``, and why it cannot be used (None when it can): a template
    that cannot render it, or no room for the response within the ``context`` (0: unbounded). No hint (``()``):
    the unhinted teacher, shown the turn's own prompt."""
    if not as_hints(hint):
        return list(ex.prompt_ids), None
    r = ex.request
    try:
        prompt = teacher_prompt_ids(renderer, r.messages, hint, r.tools, r.tool_choice, r.template_kwargs)
    except Exception as e:  # a template that cannot render it: the turn cannot be distilled under it
        return [], f"teacher prompt could not be rendered: {type(e).__name__}: {str(e)[:100]}"
    if context and len(prompt) + len(ex.response_ids) > context:
        return prompt, f"teacher prompt too long: {len(prompt)} + {len(ex.response_ids)} tokens > context {context}"
    return prompt, None


def teach(ex: Example, hint: str | Sequence[str], *, renderer, teacher: Scorer, term: TeacherTerm,
          context: int) -> tuple[Example, str | None]:
    """``ex`` with its ``Teaching`` under ``hint`` (one, or a user's preferences), or unchanged and why not."""
    prompt, why = teacher_prompt(renderer, ex, hint, context)
    if why is not None:
        return ex, why
    logprobs, topk = term.scores(teacher, prompt, ex.response_ids, scoring_temperature(ex.temperature))
    hints = as_hints(hint)
    return ex.taught(Teaching(prompt, logprobs, topk, hints)), None


def teach_candidates(ex: Example, candidates: Sequence[str | Sequence[str]], *, renderer, teacher: Scorer, policy: Scorer,
                     term: TeacherTerm, context: int) -> tuple[Example, str | None]:
    """``distill: topk_select``: each candidate hint's teacher and pi_old (``policy`` now) on the recorded
    response, the choice by overlap and the support with its advantages; the example's teacher log-probs
    are the chosen candidate's at each position, its teacher prompt the accepted hint's (the first
    candidate: fresh group members and the teacher check use it). One empty candidate (``[()]``): a turn
    without a hint, taught by the unhinted teacher (its ``Teaching.hints`` empty)."""
    kept = []  # (hint, teacher prompt) of the candidates that render within the context
    for hint in candidates:
        prompt, why = teacher_prompt(renderer, ex, hint, context)
        if why is None:
            kept.append((hint, prompt))
        elif not prompt:  # a template that cannot render it: not a candidate (too long: silently)
            log.warning("candidate hint %r: %s", hint, why)
    if not kept:
        return ex, "topk_select: no candidate hint's teacher prompt could be rendered within the context"
    temperature, response = scoring_temperature(ex.temperature), ex.response_ids
    teachers = torch.stack([teacher.distributions(p, response, temperature) for _, p in kept])  # [H, r, V]
    student = policy.distributions(ex.prompt_ids, response, temperature)
    chosen = select_support(student, teachers, term.topk, term.select_rule, term.support, term.clip)
    picked = teachers.gather(0, chosen.choice.view(1, -1, 1).expand(1, *teachers.shape[1:]))[0]
    logprobs = picked.gather(1, torch.tensor(response)[:, None])[:, 0].tolist()
    names = [hint_text(h) if as_hints(h) else "" for h, _ in kept]  # "": the unhinted teacher
    selection = {"session_id": ex.session_id, "turn": ex.turn, "candidates": names,
                 "chosen": torch.bincount(chosen.choice, minlength=len(kept)).tolist(),
                 "overlap": chosen.overlap.sum(-1).tolist()}
    return ex.taught(Teaching(kept[0][1], logprobs, chosen.support, as_hints(kept[0][0]), selection)), None
