"""The memory stage: a turn served with the preference memory is trained as if it had been asked without it.

With ``serve --memory on`` a user's standing preferences are in the prompt of every later request
(``chat/memory.py``), so the recorded turn was sampled *with* them. Trained as recorded, the weights
learn little: the preference is already in the prompt (measured: Combine with the memory, probed
without it, one_sentence 0.667 -> 0.708 in 12 sessions against 0.917 without the memory). So the turn
is trained as context distillation (Snell et al. 2022), the memory learned into the weights:

- the **student** is the prompt without the memory: the recorded messages with the memory block taken
  out (``chat/memory.py: without_memory``), rendered by the chat template like any prompt; the
  response stays the exact recorded tokens;
- pi_old is the policy's log-probs of the response after that prompt (``Scorer.logprobs``, at the
  turn's sampling temperature), so the PPO ratio starts at 1 and the teacher gap is what the memory
  adds;
- the response was sampled with the memory, from another distribution than the student's, so its
  **verdict term** is weighted per token by the truncated importance weight
  ``min(pi_old / recorded, WEIGHT_CAP)`` (``Example.verdict_weights``; the teacher term is a per-token target
  and is not weighted);
- the **teacher** (``Pipeline.teach``) is the frozen base shown the memory's preferences, and the turn's
  own hint, as the hint block the teacher follows best (``learning/teacher.py``; the same teacher as
  preference replay), so every turn served with the memory distills it, hinted or not.

A turn whose memory block is not in its recorded messages as served (a system prompt cut to fit the
context took part of it) is trained as recorded.

**pi_old re-scored for every turn (``rescore``, the embedded trainer).** The embedded engine may serve in
another dtype than the float32 trainer (bfloat16 while training: docs/engine.md, "dtype"): its recorded
log-probs are then ~1e-2 to 3e-2 per token from what the trainer computes. So the trainer does not rely on them: a
turn served without the memory is re-scored the same way (its own prompt), pi_old replaces the recorded
log-probs (the PPO ratio starts at 1, the teacher gap compares the trainer's numbers with the trainer's),
and the verdict term gets the same truncated importance weight ``min(pi_old / recorded, WEIGHT_CAP)``:
decoupled PPO with truncated importance sampling, as Slime runs it with ``--get-mismatch-metrics`` and a
TIS cap. It corrects a turn sampled by an older version too. Slime's rollout hook does not re-score: there the
ratio is against the log-probs SGLang recorded (``--use-rollout-logprobs``), and ``TIS_CAP`` has Megatron
recompute them and weight the gap (``--get-mismatch-metrics``; docs/learning.md, "Binary RL").
"""

from __future__ import annotations

import dataclasses
import math

from slime_ext.chat.memory import without_memory
from slime_ext.learning.example import Example
from slime_ext.learning.scorers import Scorer
from slime_ext.logprobs import scoring_temperature

WEIGHT_CAP = 2.0  # the truncated importance weight's bound (the usual TIS cap)


def student_example(ex: Example, *, renderer, policy: Scorer, rescore: bool = False) -> tuple[Example, str | None]:
    """``ex`` as the student without its memory (module docstring), with pi_old and verdict weights; served
    without one, re-scored on its own prompt with ``rescore``, else unchanged; unchanged with the reason when its
    memory cannot be taken out."""
    if not ex.memory:
        return (rescored(ex, ex.prompt_ids, policy) if rescore else ex), None
    r = ex.request
    messages = without_memory(r.messages, list(ex.memory))
    if messages is None:
        return ex, "the memory block is not in the recorded prompt as served (cut to fit the context?)"
    student = dataclasses.replace(ex, request=dataclasses.replace(r, messages=messages))
    return rescored(student, r.render(renderer, messages), policy), None


def rescored(ex: Example, prompt: list[int], policy: Scorer) -> Example:
    """``ex`` after ``prompt``: pi_old (the policy's log-probs of the recorded response there, at the turn's
    sampling temperature) in place of the recorded log-probs, and each token's truncated importance weight
    ``min(pi_old / recorded, WEIGHT_CAP)`` on its verdict term. A turn whose recorded log-probs do not match its
    response (a corrupt record) is left as it is, for the step's sample check to name it (and set it aside)."""
    if len(ex.rollout_logprobs) != len(ex.response_ids):
        return ex
    old = policy.logprobs(prompt, ex.response_ids, scoring_temperature(ex.temperature))
    weights = [math.exp(min(o - s, math.log(WEIGHT_CAP))) for o, s in zip(old, ex.rollout_logprobs)]
    return dataclasses.replace(ex, prompt_ids=prompt, rollout_logprobs=old, verdict_weights=weights,
                               recorded_logprobs=ex.rollout_logprobs)
