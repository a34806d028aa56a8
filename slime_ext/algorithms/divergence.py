"""Teacher-weighted distillation at every response position: forward KL or JSD(beta) over top-k + tail.

Same bins as ``topk.py``: at each position the vocabulary is split into the ``k`` ids of a support
set ``S`` (by default the teacher's top-k) and one *tail* bin holding every other token, for both
sides: ``q_tail = 1 - sum_{i in S} q_i`` (student), ``p_tail = 1 - sum_{i in S} p_i`` (teacher).
Over those ``k + 1`` bins, per token:

- ``reverse_kl``: ``KL(q || p) = sum_b q_b (log q_b - log p_b)`` (``topk.py``'s loss). Weighted by
  the *student's* probability: a token the student almost never emits gets almost no push.
- ``forward_kl``: ``KL(p || q) = sum_b p_b (log p_b - log q_b)`` (SDFT). Weighted by the
  *teacher's* probability: a token the teacher prefers is raised even if the student never sampled
  it, which the token-level gap on the sampled token cannot do.
- ``jsd``: the generalized Jensen-Shannon divergence of GKD (Agarwal et al. 2023), with TRL's
  convention: ``m = beta * p + (1 - beta) * q`` and ``beta * KL(p || m) + (1 - beta) * KL(q || m)``
  for ``0 < beta < 1`` (``beta = 0.5``: the symmetric JSD, as OPSD and SDPO use); ``beta = 0`` is
  ``forward_kl`` and ``beta = 1`` is ``reverse_kl`` (the limits TRL special-cases).

Each is the exact divergence between the two distributions coarsened to these bins (0 when they
agree; never above the full-vocabulary divergence), and with ``k = V - 1`` the tail bin holds one
token, so it *is* the full-vocabulary divergence (tested, values and gradients). The student side
is the fused log-softmax + gather of ``topk.py`` (no ``[B, T, V]`` tensor kept for the backward);
the teacher's values are detached; masked positions contribute exactly 0.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from slime_ext.algorithms.ppo import masked_sample_mean
from slime_ext.algorithms.topk import (
    TeacherLogprobs,
    TopKReverseKL,
    _compute_dtype,
    support_logprobs,
    tail_logmass,
    topk_distillation_loss,
)

Divergence = Literal["reverse_kl", "forward_kl", "jsd"]
DIVERGENCES: tuple[str, ...] = ("reverse_kl", "forward_kl", "jsd")


def _kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``KL(a || b)`` over the last dim, from log-probs."""
    return (torch.exp(a) * (a - b)).sum(-1)


def binned_divergence(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor,
                      divergence: Divergence = "forward_kl", beta: float = 0.5,
                      tail_floor: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The divergence over ``k`` bins plus the tail, from both sides' log-probs at the same ids ``[..., k]``.

    Returns ``(divergence [...], student tail log-mass [...], teacher tail log-mass [...])``."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence {divergence!r}: expected one of {', '.join(DIVERGENCES)}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd beta must be in [0, 1]; got {beta}")
    dtype = _compute_dtype(student_logprobs.dtype)
    floor = torch.finfo(dtype).eps if tail_floor is None else float(tail_floor)
    log_tiny = math.log(torch.finfo(dtype).tiny)
    s = student_logprobs.to(dtype).clamp(min=log_tiny)
    t = teacher_logprobs.detach().to(dtype).clamp(min=log_tiny)
    s_tail, t_tail = tail_logmass(s, floor), tail_logmass(t, floor)
    s_bins = torch.cat([s, s_tail.unsqueeze(-1)], dim=-1)
    t_bins = torch.cat([t, t_tail.unsqueeze(-1)], dim=-1)
    if divergence == "jsd" and beta == 0.0:
        divergence = "forward_kl"
    if divergence == "jsd" and beta == 1.0:
        divergence = "reverse_kl"
    if divergence == "reverse_kl":
        return _kl(s_bins, t_bins), s_tail, t_tail
    if divergence == "forward_kl":
        return _kl(t_bins, s_bins), s_tail, t_tail
    m = torch.logsumexp(torch.stack([t_bins + math.log(beta), s_bins + math.log(1.0 - beta)]), dim=0)
    return beta * _kl(t_bins, m) + (1.0 - beta) * _kl(s_bins, m), s_tail, t_tail


def topk_divergence(
    student_logits: torch.Tensor,
    teacher: TeacherLogprobs,
    mask: torch.Tensor,
    *,
    divergence: Divergence = "forward_kl",
    beta: float = 0.5,
    k: int | None = None,
    support: Literal["teacher", "student"] = "teacher",
    chunk_size: int | None = None,
    tail_floor: float | None = None,
) -> TopKReverseKL:
    """Per-token divergence ``[B, T]`` (0 where masked) from student logits ``[B, T, V]`` and the
    teacher passed as ``topk_reverse_kl`` takes it (a ``TopK``, full log-probs, or a callable)."""
    student_logprobs, teacher_logprobs, m = support_logprobs(student_logits, teacher, mask, k, support, chunk_size)
    div, s_tail, t_tail = binned_divergence(student_logprobs, teacher_logprobs, divergence, beta, tail_floor)
    per_token = torch.where(m, div, torch.zeros_like(div))
    return TopKReverseKL(per_token, torch.exp(s_tail).detach(), torch.exp(t_tail))


def topk_divergence_loss(
    student_logits: torch.Tensor,
    teacher: TeacherLogprobs,
    mask: torch.Tensor,
    *,
    divergence: Divergence = "forward_kl",
    beta: float = 0.5,
    **options: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(scalar loss, metrics)``: ``topk_divergence`` reduced like ``policy_loss`` (per-sample mean,
    then the mean over samples); ``options``: its ``k``, ``support``, ``chunk_size``, ``tail_floor``.
    ``reverse_kl`` is ``topk_distillation_loss`` (metric ``topk_kl``); the others report
    ``topk_forward_kl`` / ``topk_jsd`` and both sides' mean tail masses."""
    if divergence == "reverse_kl":
        return topk_distillation_loss(student_logits, teacher, mask, **options)
    out = topk_divergence(student_logits, teacher, mask, divergence=divergence, beta=beta, **options)
    loss = masked_sample_mean(out.per_token, mask)
    with torch.no_grad():
        metrics = {f"topk_{divergence}": loss.detach(),
                   "student_tail_mass": masked_sample_mean(out.student_tail, mask),
                   "teacher_tail_mass": masked_sample_mean(out.teacher_tail, mask)}
    return loss, metrics
