"""Advantages: the judge's verdict spread over every response token, plus the OPD teacher term.

A turn's reward is its verdict r in {-1, 0, +1}. Its advantage is ``r - b`` on every response
token, where the baseline ``b`` is

- ``none`` (the default): ``b = 0``. A thumbs-up raises the whole response, a thumbs-down lowers
  it, an ambiguous verdict contributes nothing. This is the original system's estimator.
- ``running``: an exponential moving average of *earlier* verdicts (``RunningBaseline``). It is
  independent of the sample it is subtracted from, so the gradient stays unbiased, and it lowers
  variance once most answers are judged the same way: when nearly everything is +1, the rare -1
  carries the signal. A batch-mean baseline is deliberately not offered: with the ~4 samples a
  personal agent trains on, it is correlated with each sample and zeroes a batch judged unanimously.

On-Policy Distillation (OPD) adds a per-token term from a teacher: the same model shown the
user's hindsight hint. Its log-prob of each recorded response token minus the log-prob recorded
at sampling time says, token by token, whether the hint makes that token more (> 0) or less
likely. ``combined_advantages`` is the one formula for every method:

    A_t = w_opd * clip(teacher_t - rollout_t, -opd_clip, opd_clip)   only if the turn has a hint
        + w_rl  * (reward - baseline)                                only if the verdict is not 0

Binary RL is ``w_opd = 0``, OPD is ``w_rl = 0``, Combine uses both. A turn without an accepted
hint contributes no OPD term (not rollout-vs-trainer noise), and a zero verdict no RL term.

**Where a -1 lands** (``verdict_credit``). ``uniform`` spreads a negative reward term over every
token, as above. ``teacher`` (for turns the teacher scored) lands it where the hinted teacher
disagrees: at token t the negative term is scaled by ``clamp(rollout_t - teacher_t, 0, 1)``, full
where the teacher finds the token at least a nat less likely, none where it agrees. A user who
says "start with 'So,'" objects to the opening, not to "Tokyo": with ``uniform``, 24 such -1s
lowered the answer words themselves and held-out answers became "The capital of Sweden is
Sweden." (experiments/personalization/README.md). A positive term stays on every token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from slime_ext.types import Method, VerdictCredit


@dataclass(frozen=True)
class AdvantageWeights:
    w_rl: float = 1.0
    w_opd: float = 1.0
    opd_clip: float = 5.0  # bound on |teacher - rollout| per token, in nats
    verdict_credit: VerdictCredit = VerdictCredit.UNIFORM  # where a negative reward term lands: every token,
    # or where the teacher disagrees

    @classmethod
    def for_method(cls, method: str, w_rl: float = 1.0, w_opd: float = 1.0, opd_clip: float = 5.0,
                   verdict_credit: str = VerdictCredit.UNIFORM) -> AdvantageWeights:
        """The weights ``binary``, ``opd`` and ``combine`` mean."""
        m = Method.parse(method)
        if m is Method.NONE:
            raise ValueError("method 'none' trains nothing: expected binary, opd or combine")
        return cls(w_rl=w_rl if m.uses_verdicts else 0.0, w_opd=w_opd if m.uses_hints else 0.0, opd_clip=opd_clip,
                   verdict_credit=VerdictCredit.parse(verdict_credit, "verdict_credit"))


def combined_advantages(reward: float, rollout_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor | None,
                        weights: AdvantageWeights, baseline: float = 0.0) -> torch.Tensor:
    """Per-token advantages of one response (see the module docstring)."""
    rl = float(reward) - float(baseline) if reward != 0 else 0.0
    return mix_advantages(rl, rollout_logprobs, teacher_logprobs, weights)


def mix_advantages(rl: torch.Tensor | float, rollout_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor | None,
                   weights: AdvantageWeights) -> torch.Tensor:
    """``w_rl * rl + w_opd * clip(teacher - rollout, ±opd_clip)`` per token: the one place the
    OPD term is written; with ``verdict_credit: teacher`` a negative ``rl`` lands where the teacher
    disagrees (module docstring). ``rl`` is the reward term, a number for every token (the embedded
    trainer) or a per-token tensor (Slime's advantages); no teacher, no OPD term."""
    adv = torch.zeros_like(rollout_logprobs, dtype=torch.float32)
    gap = None
    by_teacher = weights.verdict_credit is VerdictCredit.TEACHER
    if teacher_logprobs is not None and (weights.w_opd or by_teacher):
        if teacher_logprobs.shape != rollout_logprobs.shape:
            raise ValueError(f"teacher log-probs {tuple(teacher_logprobs.shape)} do not match the response "
                             f"{tuple(rollout_logprobs.shape)}")
        gap = (teacher_logprobs.float() - rollout_logprobs.float()).clamp(-weights.opd_clip, weights.opd_clip)
    if weights.w_rl:
        r = adv + (rl.float() if isinstance(rl, torch.Tensor) else float(rl))
        if by_teacher and gap is not None:
            r = torch.where(r < 0, r * (-gap).clamp(0.0, 1.0), r)
        adv = adv + weights.w_rl * r
    if weights.w_opd and gap is not None:
        adv += weights.w_opd * gap
    return adv


@dataclass
class RunningBaseline:
    """EMA of verdicts seen so far; ``value`` is read before ``update`` with the current sample."""

    decay: float = 0.9
    value: float = 0.0
    count: int = 0

    def update(self, reward: float) -> float:
        """Fold in one verdict and return the new baseline."""
        self.value = float(reward) if self.count == 0 else self.decay * self.value + (1 - self.decay) * float(reward)
        self.count += 1
        return self.value
