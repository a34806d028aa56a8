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

``topk_select_loss`` reduces it like ``policy_loss`` (the mean over each sample's trained
positions with a non-empty ``S_t``, then over samples); the trainer adds ``w_opd`` times it to
``w_rl`` times the GRPO loss. Nothing here reads settings.
"""

from __future__ import annotations

from typing import Literal

import torch

from slime_ext.algorithms.ppo import masked_sample_mean
from slime_ext.algorithms.topk import gather_log_softmax

SelectRule = Literal["shortest", "token_optimal", "sequence_optimal"]
SELECT_RULES: tuple[str, ...] = ("shortest", "token_optimal", "sequence_optimal")
Support = Literal["student", "teacher", "overlap"]
SUPPORTS: tuple[str, ...] = ("student", "teacher", "overlap")
LOG_RATIO_CLAMP = 20.0  # guard on log(rho) before exp, as upstream: a rare tail id cannot overflow


def overlap_counts(student_ids: torch.Tensor, teacher_ids: torch.Tensor) -> torch.Tensor:
    """``O[h, t] = |student_ids[t] ∩ teacher_ids[h, t]|`` from ``[T, K]`` and ``[H, T, K']`` id
    tensors (each row's ids distinct); returns ``[H, T]`` int64."""
    if student_ids.dim() != 2 or teacher_ids.dim() != 3 or teacher_ids.shape[1] != student_ids.shape[0]:
        raise ValueError(f"expected student ids [T, K] and teacher ids [H, T, K']; got {tuple(student_ids.shape)} "
                         f"and {tuple(teacher_ids.shape)}")
    same = student_ids[None, :, :, None] == teacher_ids[:, :, None, :]  # [H, T, K, K']
    return same.any(-1).sum(-1).long()


def select_candidates(overlap: torch.Tensor, rule: SelectRule, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``k*(t)`` ``[T]`` (int64) from ``overlap [H, T]`` by ``rule`` (see the module docstring);
    ``mask [T]``: the trained positions, the only ones ``sequence_optimal`` sums over."""
    if rule not in SELECT_RULES:
        raise ValueError(f"selection rule {rule!r}: expected one of {', '.join(SELECT_RULES)}")
    if overlap.dim() != 2:
        raise ValueError(f"expected overlap [H, T]; got {tuple(overlap.shape)}")
    H, T = overlap.shape
    if rule == "shortest" or H == 1:
        return torch.zeros(T, dtype=torch.long)
    if rule == "token_optimal":
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


def support_ids(student_ids: torch.Tensor, teacher_ids: torch.Tensor, support: Support) -> tuple[torch.Tensor, torch.Tensor]:
    """The support ``S_t`` as ids ``[..., K]`` and a bool mask ``[..., K]`` (False: not in ``S_t``),
    from the student's and the chosen teacher's top-K ids (same shape ``[..., K]``)."""
    if support == "student":
        return student_ids, torch.ones_like(student_ids, dtype=torch.bool)
    if support == "teacher":
        return teacher_ids, torch.ones_like(teacher_ids, dtype=torch.bool)
    if support == "overlap":
        return student_ids, (student_ids[..., :, None] == teacher_ids[..., None, :]).any(-1)
    raise ValueError(f"support {support!r}: expected one of {', '.join(SUPPORTS)}")


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


def topk_select_loss(student_logits: torch.Tensor, ids: torch.Tensor, in_support: torch.Tensor,
                     teacher_logprobs: torch.Tensor, mask: torch.Tensor, *, old_logprobs: torch.Tensor | None = None,
                     clip: float | None = 1.0, eps_low: float = 0.2, eps_high: float = 0.28) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(scalar loss, metrics)`` of the top-K OPD term from student logits ``[B, T, V]``.

    ``ids``/``in_support``/``teacher_logprobs`` ``[B, T, K]``: the support (padded with distinct ids
    and False), and the chosen teacher's global log-probs there. ``mask [B, T]``: trained positions.
    ``old_logprobs [B, T, K]``: pi_old at ``ids``; None takes the current policy's, detached (one
    optimizer step per batch: the policy before the step *is* pi_old, so the ratio is 1 by value).
    Reduced like ``policy_loss`` over positions with a non-empty ``S_t``."""
    if student_logits.dim() != 3 or ids.shape[:2] != student_logits.shape[:2] or mask.shape != ids.shape[:2]:
        raise ValueError(f"expected logits [B, T, V], ids [B, T, K], mask [B, T]; got {tuple(student_logits.shape)}, "
                         f"{tuple(ids.shape)}, {tuple(mask.shape)}")
    logprobs = gather_log_softmax(student_logits, ids)
    old = logprobs.detach() if old_logprobs is None else old_logprobs.to(logprobs.dtype)
    support = in_support.bool() & mask.bool()[..., None]
    teacher = torch.where(support, teacher_logprobs.to(logprobs.dtype), old)  # padding cannot leak (NaN-safe)
    adv = select_advantages(old, teacher, support, clip)
    per_token, frac = select_per_token(logprobs, old, adv, support, eps_low, eps_high)
    trained = support.any(-1).float()
    loss = masked_sample_mean(per_token, trained)
    with torch.no_grad():
        diff = (teacher - old).abs() * torch.softmax(old.masked_fill(~support, float("-inf")), -1).nan_to_num(0.0)
        metrics = {"topk_select_loss": loss.detach(),
                   "topk_select_clip_fraction": masked_sample_mean(frac, trained),
                   "topk_select_support_size": masked_sample_mean(support.sum(-1).float(), mask.float()),
                   "topk_select_abs_diff": masked_sample_mean(diff.sum(-1), trained)}
    return loss, metrics
