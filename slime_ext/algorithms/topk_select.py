"""``topk_select``: overlap-guided choice among several hinted teachers, and the top-K OPD term.

Upstream OpenClaw-RL's recommended recipe (``openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh``
upstream), written here as pure functions over small tensors. Per turn the judge proposes ``H``
candidate hints; each gives a teacher (the frozen base model with that hint appended). At every
response position ``t`` of the recorded response:

- **Overlap** ``O[h, t] = |topK(student_t) ∩ topK(teacher_{h,t})|`` (``overlap_counts``), with the
  student = the policy before the step (pi_old).
- **Selection** (``select_candidates``) of ``k*(t)``: ``shortest`` takes candidate 0 everywhere
  (the caller orders the candidates shortest first); ``sequence_optimal`` the candidate with the
  largest ``sum_t O[h, t]`` over trained positions, for every position (upstream's default);
  ``token_optimal`` the best candidate per position. Ties go to the earlier (shorter) candidate.
- **Support** ``S_t`` (``support_ids``): the student's top-K (``student``, upstream's default), the
  chosen teacher's top-K (``teacher``), or their intersection (``overlap``; may be empty at a
  position, which then adds nothing).
- **Advantage** of each ``v`` in ``S_t`` (``select_advantages``), detached:
  ``A_v = clip(log pi_T(v) - log pi_old(v), -c, c) * softmax(log pi_old over S_t)_v``, with ``c``
  the log-prob-difference clip (upstream's launcher: 1.0, "clip is important in stabilizing the
  training"; ``None``: no clip). The softmax weight only sums to 1 over ``S_t``: log-probs are the
  *global* ones, never renormalized to ``S_t``.
- **Loss** per position (``select_per_token``): the PPO-clipped surrogate of every ``v`` in
  ``S_t`` with the global ratio ``rho_v = pi_theta(v) / pi_old(v)``, **summed** over ``S_t``:
  ``sum_v max(-A_v rho_v, -A_v clip(rho_v, 1 - eps_low, 1 + eps_high))``.

``select_support`` does all of it for one response from full log-probs (pi_old's and each
candidate teacher's) and keeps only ``[T, K]`` tensors (``SelectedSupport``: the advantages are
fixed there, as they are detached); ``topk_select_loss`` is the loss from those and the current
logits: the mean over each sample's trained positions with a non-empty ``S_t``, then over every
sample of the batch, one without a support counting 0 (upstream's ``sum_of_sample_mean`` over the
batch); the trainer adds ``w_opd`` times it to ``w_rl`` times the GRPO loss. Nothing here reads settings.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from slime_ext.algorithms.ppo import masked_sample_mean
from slime_ext.algorithms.topk import gather_log_softmax
from slime_ext.types import SelectRule, TopkSupport

LOG_RATIO_CLAMP = 20.0  # guard on log(rho) before exp, as upstream: a rare tail id cannot overflow


def overlap_counts(student_ids: torch.Tensor, teacher_ids: torch.Tensor) -> torch.Tensor:
    """``O[h, t] = |student_ids[t] ∩ teacher_ids[h, t]|`` from ``[T, K]`` and ``[H, T, K']`` id
    tensors (each row's ids distinct); returns ``[H, T]`` int64."""
    if student_ids.dim() != 2 or teacher_ids.dim() != 3 or teacher_ids.shape[1] != student_ids.shape[0]:
        raise ValueError(f"expected student ids [T, K] and teacher ids [H, T, K']; got {tuple(student_ids.shape)} "
                         f"and {tuple(teacher_ids.shape)}")
    same = student_ids[None, :, :, None] == teacher_ids[:, :, None, :]  # [H, T, K, K']
    return same.any(-1).sum(-1).long()


def select_candidates(overlap: torch.Tensor, rule: str, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``k*(t)`` ``[T]`` (int64) from ``overlap [H, T]`` by ``rule`` (see the module docstring);
    ``mask [T]``: the trained positions, the only ones ``sequence_optimal`` sums over."""
    rule = SelectRule.parse(rule, "selection rule")
    if overlap.dim() != 2:
        raise ValueError(f"expected overlap [H, T]; got {tuple(overlap.shape)}")
    H, T = overlap.shape
    if rule is SelectRule.SHORTEST or H == 1:
        return torch.zeros(T, dtype=torch.long)
    if rule is SelectRule.TOKEN_OPTIMAL:
        return _first_argmax(overlap, dim=0)
    m = torch.ones(T, dtype=torch.bool) if mask is None else mask.bool()
    score = (overlap * m[None]).sum(-1)  # [H]
    return torch.full((T,), int(_first_argmax(score, dim=0)), dtype=torch.long)


def _first_argmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The index of the first maximum along ``dim`` (ties: the earliest), on any backend."""
    idx = torch.arange(x.shape[dim], device=x.device).view([-1 if d == dim else 1 for d in range(x.dim())])
    top = x.max(dim=dim, keepdim=True).values
    return torch.where(x == top, idx, x.shape[dim]).min(dim=dim).values


def gather_candidate(per_candidate: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """``per_candidate[choice[t], t, ...]``: ``[H, T, ...]`` and ``[T]`` -> ``[T, ...]``."""
    index = choice.view(1, -1, *([1] * (per_candidate.dim() - 2))).expand(1, *per_candidate.shape[1:])
    return per_candidate.gather(0, index)[0]


def support_ids(student_ids: torch.Tensor, teacher_ids: torch.Tensor, support: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The support ``S_t`` as ids ``[..., K]`` and a bool mask ``[..., K]`` (False: not in ``S_t``),
    from the student's and the chosen teacher's top-K ids (same shape ``[..., K]``)."""
    support = TopkSupport.parse(support, "support")
    if support is TopkSupport.STUDENT:
        return student_ids, torch.ones_like(student_ids, dtype=torch.bool)
    if support is TopkSupport.TEACHER:
        return teacher_ids, torch.ones_like(teacher_ids, dtype=torch.bool)
    return student_ids, (student_ids[..., :, None] == teacher_ids[..., None, :]).any(-1)  # overlap


def select_advantages(old_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, in_support: torch.Tensor,
                      clip: float | None = 1.0) -> torch.Tensor:
    """``A_v = clip(teacher - old, ±clip) * softmax(old over S_t)_v`` on ``S_t``, 0 off it (detached).

    All ``[..., K]``: the global log-probs of pi_old and of the teacher at the support ids, and the
    support mask. A position with an empty support gets all zeros."""
    old = old_logprobs.detach().float()
    diff = teacher_logprobs.detach().float() - old
    if clip is not None:
        diff = diff.clamp(-clip, clip)
    weights = torch.softmax(old.masked_fill(~in_support, float("-inf")), dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # empty support: softmax of all -inf
    return torch.where(in_support, diff * weights, torch.zeros_like(diff))


def select_per_token(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                     in_support: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position loss ``[...]``: the PPO-clipped surrogate of each ``v`` in ``S_t`` summed over
    ``S_t``, from the current (with gradient) and old global log-probs and the advantages ``[..., K]``;
    and the fraction of ``S_t`` entries where the clipped branch is active (detached)."""
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_low, 1 + eps_high)
    per_v = torch.where(in_support, torch.maximum(unclipped, clipped), torch.zeros_like(unclipped))
    with torch.no_grad():
        active = (clipped > unclipped) & in_support
        frac = active.sum(-1) / in_support.sum(-1).clamp(min=1)
    return per_v.sum(-1), frac


class SelectedSupport(NamedTuple):
    """One response's support and what the loss needs there, all ``[T, K]`` (detached): the ids of
    ``S_t`` (padded with distinct ids), ``in_support`` (bool), the advantages (``select_advantages``)
    and pi_old's global log-probs at the ids."""

    ids: torch.Tensor
    in_support: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor


class Selection(NamedTuple):
    """``select_support``'s result: the support, ``k*(t)`` ``[T]`` and the overlap ``O [H, T]``."""

    support: SelectedSupport
    choice: torch.Tensor
    overlap: torch.Tensor


def select_support(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, k: int, rule: str,
                   support: str, clip: float | None = 1.0, mask: torch.Tensor | None = None) -> Selection:
    """The whole per-response choice from full log-probs: pi_old ``[T, V]`` and each candidate
    teacher's ``[H, T, V]`` (at the same positions): top-K of each, the overlap, ``k*`` by ``rule``,
    the support, and the advantages with the log-prob-difference ``clip``."""
    if teacher_logprobs.dim() != 3 or teacher_logprobs.shape[1:] != student_logprobs.shape:
        raise ValueError(f"expected student log-probs [T, V] and teacher log-probs [H, T, V]; got "
                         f"{tuple(student_logprobs.shape)} and {tuple(teacher_logprobs.shape)}")
    if not 1 <= k <= student_logprobs.shape[-1]:
        raise ValueError(f"k must be in [1, V = {student_logprobs.shape[-1]}]; got {k}")
    with torch.no_grad():
        student_ids = student_logprobs.topk(k, dim=-1).indices  # [T, K]
        teacher_ids = teacher_logprobs.topk(k, dim=-1).indices  # [H, T, K]
        overlap = overlap_counts(student_ids, teacher_ids)
        choice = select_candidates(overlap, rule, mask)
        chosen = gather_candidate(teacher_logprobs, choice)  # [T, V]: the chosen teacher at each position
        ids, in_support = support_ids(student_ids, gather_candidate(teacher_ids, choice), support)
        old = student_logprobs.gather(-1, ids).float()
        adv = select_advantages(old, chosen.gather(-1, ids), in_support, clip)
    return Selection(SelectedSupport(ids, in_support, adv, old), choice, overlap)


def topk_select_loss(student_logits: torch.Tensor, support: SelectedSupport, mask: torch.Tensor, *,
                     eps_low: float = 0.2, eps_high: float = 0.28) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(scalar loss, metrics)`` of the top-K OPD term from student logits ``[B, T, V]`` and the
    batch's ``SelectedSupport`` ``[B, T, K]`` (padding: distinct ids, ``in_support`` False).
    ``mask [B, T]``: trained positions. The mean over each row's positions with a non-empty ``S_t``, then over
    every row (a row without one counts 0: upstream's mean over all samples). The current global log-probs at
    the ids carry the gradient (``gather_log_softmax``)."""
    ids = support.ids
    if student_logits.dim() != 3 or ids.shape[:2] != student_logits.shape[:2] or mask.shape != ids.shape[:2]:
        raise ValueError(f"expected logits [B, T, V], support [B, T, K], mask [B, T]; got "
                         f"{tuple(student_logits.shape)}, {tuple(ids.shape)}, {tuple(mask.shape)}")
    logprobs = gather_log_softmax(student_logits, ids)
    in_s = support.in_support.bool() & mask.bool()[..., None]
    old = torch.where(in_s, support.old_logprobs.to(logprobs.dtype), logprobs.detach())  # padding cannot leak
    adv = torch.where(in_s, support.advantages.to(logprobs.dtype), torch.zeros_like(logprobs))
    per_token, frac = select_per_token(logprobs, old, adv, in_s, eps_low, eps_high)
    trained = in_s.any(-1).float()
    loss = masked_sample_mean(per_token, trained, every_row=True)
    with torch.no_grad():
        metrics = {"topk_select_loss": loss.detach(),
                   "topk_select_clip_fraction": masked_sample_mean(frac, trained),
                   "topk_select_support_size": masked_sample_mean(in_s.sum(-1).float(), mask.float()),
                   "topk_select_abs_advantage": masked_sample_mean(adv.abs().sum(-1), trained)}
    return loss, metrics
