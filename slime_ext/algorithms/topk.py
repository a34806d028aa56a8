"""Top-k distillation: reverse KL from the student to the teacher over k tokens plus a tail bin.

At each response position the student has logits ``z`` over the vocabulary ``V`` and a support
set ``S`` of ``k`` distinct token ids is chosen. The vocabulary is split into ``k + 1`` bins: one
per id in ``S`` and a *tail* bin holding every other token. Binned distributions:

  q_i    = softmax(z)_i                      for i in S (student; log q_i = z_i - logsumexp(z))
  q_tail = 1 - sum_{i in S} q_i              (the student's mass outside S)
  p_i    = exp(teacher log-prob of i)        for i in S
  p_tail = 1 - sum_{i in S} p_i

  loss per token = KL(q || p) = sum over the k + 1 bins of q_b * (log q_b - log p_b)   (>= 0)

It is the exact reverse KL between the two distributions coarsened to these bins, so it is 0 when
student and teacher agree, and it never exceeds the full-vocabulary reverse KL (data processing).
The tail bin keeps the loss a proper KL: without it, moving mass out of ``S`` would look free.

Support sets (``support``):

- ``"teacher"`` (default): S = the teacher's top-k ids at that position. The caller passes them
  with their log-probs (``TopK``, e.g. from ``teacher_topk`` on the teacher's logits, so only
  ``[B, T, k]`` needs storing per sample), or the full teacher log-probs ``[B, T, V]``.
- ``"student"``: S = the student's top-k ids, chosen here from the detached student logits. The
  teacher's log-probs at those ids come from the full teacher log-probs ``[B, T, V]`` or from a
  callable ``ids [B, T, k] -> log-probs [B, T, k]`` (e.g. the teacher's hidden states times the
  gathered rows of its output layer, minus its log-normalizer), since S is known only here.

Gradient flows into the student logits only; the teacher's values are detached. The student side
is one log-softmax plus a gather, fused (``gather_log_softmax``): the forward keeps only the
log-normalizer ``[B, T]`` (plus a reference to the caller's logits), and the backward writes
``grad = scatter(g) - softmax(z) * sum(g)`` straight into the logits' gradient. So no ``[B, T, V]``
tensor is kept from the forward to the backward, and the backward allocates none besides the
gradient itself (plain autograd on ``log_softmax(z).gather(...)`` keeps the log-softmax and adds two
more in its backward; a naive version with one softmax per bin keeps ``k``). The transient buffers
of the forward's logsumexp and of a float32 upcast of low-precision logits are ``[B, chunk, V]``
with ``chunk_size`` positions of T per chunk (default: about ``CHUNK_VALUES`` values per chunk).
Everything is computed in at least float32.

Numerics: the tail's log-mass is ``log(-expm1(logsumexp(log q_S)))``, floored at ``tail_floor``
(default: the compute dtype's machine epsilon; masses below about ``eps * |logsumexp(z)|`` are
rounding noise anyway, as ``log q_i = z_i - logsumexp(z)`` is exact only to that), so a
support covering nearly all the mass (tail -> 0) gives a finite loss and gradient. Log-probs of
-inf (a token with zero probability) are raised to ``log(tiny)`` so that they add ``0``, not NaN.
The tail bin must not be empty: ``1 <= k < V`` is required.

Masked positions (``mask`` 0) contribute exactly 0 to the loss and its gradient; their teacher
values may be anything (padding), but the student logits there must be finite.
"""

from __future__ import annotations

import math
from typing import Callable, Literal, NamedTuple

import torch

from slime_ext.algorithms.ppo import masked_sample_mean
from slime_ext.types import TopkSupport


class TopK(NamedTuple):
    """The teacher's top-k at each position: ``ids [B, T, k]`` (int64) and ``logprobs [B, T, k]``."""

    ids: torch.Tensor
    logprobs: torch.Tensor


# Where the teacher's log-probs come from: its top-k, its full log-probs, or log-probs at given ids.
TeacherLogprobs = TopK | torch.Tensor | Callable[[torch.Tensor], torch.Tensor]


class TopKReverseKL(NamedTuple):
    """Per-token results ``[B, T]``: the loss (0 where masked) and both tails' masses (detached)."""

    per_token: torch.Tensor
    student_tail: torch.Tensor
    teacher_tail: torch.Tensor


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


# Values per chunk when ``chunk_size`` is not given: 4 MiB of float32, small enough to stay in cache
# and to be reused by the allocator from one chunk to the next (a [B, T, V] buffer is page-faulted
# in anew on every call), which made the forward about twice as fast at V = 49152 on a CPU.
CHUNK_VALUES = 1 << 20


def _chunks(shape: torch.Size, chunk_size: int | None) -> list[slice]:
    """Slices of T for ``[B, T, V]``: ``chunk_size`` positions each, by default ~``CHUNK_VALUES`` values."""
    B, T, V = shape
    step = chunk_size if chunk_size else max(1, CHUNK_VALUES // max(1, B * V))
    return [slice(i, i + step) for i in range(0, T, step)]


def _logsumexp(logits: torch.Tensor, chunk_size: int | None) -> torch.Tensor:
    """``logsumexp(logits, -1)`` of ``[B, T, V]`` in the compute dtype, over chunks of T."""
    dtype = _compute_dtype(logits.dtype)
    out = logits.new_empty(logits.shape[:-1], dtype=dtype)
    for c in _chunks(logits.shape, chunk_size):
        out[:, c] = torch.logsumexp(logits[:, c].to(dtype), dim=-1)
    return out


class _GatherLogSoftmax(torch.autograd.Function):
    """``log_softmax(logits)[ids]`` saving only the logits (the caller's) and the log-normalizer."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, chunk_size: int | None) -> torch.Tensor:
        lse = _logsumexp(logits, chunk_size)
        ctx.save_for_backward(logits, ids, lse)
        ctx.chunk_size = chunk_size
        return logits.gather(-1, ids).to(lse.dtype) - lse.unsqueeze(-1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        # d log q_i / d z_j = [j == i] - softmax(z)_j, so grad_z = scatter(g) - softmax(z) * sum(g).
        logits, ids, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        total = grad_out.sum(-1, keepdim=True)
        same_dtype = logits.dtype == lse.dtype
        for c in _chunks(logits.shape, ctx.chunk_size):
            g = grad[:, c] if same_dtype else torch.empty_like(logits[:, c], dtype=lse.dtype)
            torch.sub(logits[:, c], lse[:, c].unsqueeze(-1), out=g)
            g.exp_().mul_(-total[:, c])
            g.scatter_add_(-1, ids[:, c], grad_out[:, c].to(g.dtype))
            if not same_dtype:
                grad[:, c] = g
        return grad, None, None


def gather_log_softmax(logits: torch.Tensor, ids: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """``log_softmax(logits, -1).gather(-1, ids)`` for logits ``[B, T, V]`` and ids ``[B, T, k]``.

    Same values and gradient as that expression, in the compute dtype (at least float32), without
    keeping a ``[B, T, V]`` log-softmax for the backward: see the module docstring."""
    if logits.dim() != 3 or ids.dim() != 3 or ids.shape[:2] != logits.shape[:2]:
        raise ValueError(f"expected logits [B, T, V] and ids [B, T, k]; got {tuple(logits.shape)} and "
                         f"{tuple(ids.shape)}")
    return _GatherLogSoftmax.apply(logits, ids.long(), chunk_size)


def teacher_topk(teacher_logits: torch.Tensor, k: int, chunk_size: int | None = None) -> TopK:
    """The teacher's ``k`` most likely ids and their log-probs (detached), from its logits (or
    log-probs) ``[B, T, V]``: ``topk`` on the logits minus the log-normalizer, so no ``[B, T, V]``
    log-softmax is built. Ids come sorted by decreasing probability. Give it float32 logits (the
    output layer in fp32, as ``slime_ext.logprobs.output_logits`` does): bf16 logits are too coarse."""
    with torch.no_grad():
        values, ids = teacher_logits.topk(k, dim=-1)
        lse = _logsumexp(teacher_logits, chunk_size)
        return TopK(ids, values.to(lse.dtype) - lse.unsqueeze(-1))


def tail_logmass(logprobs: torch.Tensor, floor: float) -> torch.Tensor:
    """``log(max(1 - sum_i exp(logprobs_i), floor))`` over the last dim, stable as the sum -> 1."""
    covered = torch.logsumexp(logprobs, dim=-1)
    return torch.log(torch.clamp(-torch.expm1(covered), min=floor))


def binned_reverse_kl(
    student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, tail_floor: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reverse KL over ``k`` bins plus the tail, from both sides' log-probs at the same ids ``[..., k]``.

    Returns ``(kl [...], student tail log-mass [...], teacher tail log-mass [...])``; the teacher's
    values are detached. See the module docstring for the formula and the floors."""
    dtype = _compute_dtype(student_logprobs.dtype)
    floor = torch.finfo(dtype).eps if tail_floor is None else float(tail_floor)
    log_tiny = math.log(torch.finfo(dtype).tiny)
    s = student_logprobs.to(dtype).clamp(min=log_tiny)
    t = teacher_logprobs.detach().to(dtype).clamp(min=log_tiny)
    s_tail = tail_logmass(s, floor)
    t_tail = tail_logmass(t, floor)
    s_bins = torch.cat([s, s_tail.unsqueeze(-1)], dim=-1)
    t_bins = torch.cat([t, t_tail.unsqueeze(-1)], dim=-1)
    kl = (torch.exp(s_bins) * (s_bins - t_bins)).sum(-1)
    return kl, s_tail, t_tail


def _support(
    student_logits: torch.Tensor,
    teacher: TeacherLogprobs,
    mask: torch.Tensor,
    k: int | None,
    support: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The support ids ``[B, T, k]`` and the teacher's log-probs there (detached)."""
    V = student_logits.shape[-1]
    lead = tuple(student_logits.shape[:2])

    def check_k(k_: int) -> int:
        if not 1 <= k_ < V:
            raise ValueError(f"k must be in [1, V - 1] = [1, {V - 1}] so that the tail bin is not empty; got {k_} "
                             "(for k >= V use the full-vocabulary reverse KL)")
        return k_

    full = isinstance(teacher, torch.Tensor)
    if full and tuple(teacher.shape) != tuple(student_logits.shape):
        raise ValueError(f"full teacher log-probs must have the student logits' shape {tuple(student_logits.shape)}; "
                         f"got {tuple(teacher.shape)}")
    support = TopkSupport.parse(support, "support")
    if support is TopkSupport.TEACHER:
        if isinstance(teacher, TopK):
            ids, logprobs = teacher
            if tuple(ids.shape) != tuple(logprobs.shape) or tuple(ids.shape[:2]) != lead:
                raise ValueError(f"TopK ids and logprobs must both be [B, T, k] with [B, T] = {lead}; got "
                                 f"{tuple(ids.shape)} and {tuple(logprobs.shape)}")
            kk = check_k(k if k is not None else ids.shape[-1])
            if kk > ids.shape[-1]:
                raise ValueError(f"k = {kk} but the teacher's top-k holds only {ids.shape[-1]} ids")
            ids = ids.long()
            if kk < ids.shape[-1]:  # keep the kk most likely of the stored ones, whatever their order
                logprobs, pick = logprobs.topk(kk, dim=-1)
                ids = ids.gather(-1, pick)
            srt = ids.sort(dim=-1).values
            if bool(((srt[..., 1:] == srt[..., :-1]).any(-1) & mask.bool()).any()):
                raise ValueError("the teacher's top-k ids repeat an id at a trained position; they must be distinct")
            return ids, logprobs.detach()
        if full:
            with torch.no_grad():
                logprobs, ids = teacher.topk(check_k(_required(k)), dim=-1)
            return ids, logprobs
        raise ValueError("support='teacher' needs the teacher's top-k (TopK) or its full log-probs [B, T, V]")
    if support is TopkSupport.STUDENT:
        if isinstance(teacher, TopK):
            raise ValueError("support='student' needs the teacher's log-probs at the student's top-k ids: pass the "
                             "full teacher log-probs [B, T, V] or a callable ids -> log-probs, not a TopK")
        with torch.no_grad():
            ids = student_logits.detach().topk(check_k(_required(k)), dim=-1).indices
            logprobs = teacher.gather(-1, ids) if full else teacher(ids)
        if tuple(logprobs.shape) != tuple(ids.shape):
            raise ValueError(f"the teacher callable must return log-probs shaped like its ids {tuple(ids.shape)}; "
                             f"got {tuple(logprobs.shape)}")
        return ids, logprobs.detach()
    raise ValueError(f"support must be 'teacher' or 'student'; got {support!r}")


def _required(k: int | None) -> int:
    if k is None:
        raise ValueError("k is required unless the teacher's top-k (TopK) is given")
    return k


def topk_reverse_kl(
    student_logits: torch.Tensor,
    teacher: TeacherLogprobs,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    support: Literal["teacher", "student"] = "teacher",
    chunk_size: int | None = None,
    tail_floor: float | None = None,
) -> TopKReverseKL:
    """Per-token top-k reverse KL ``[B, T]`` from student logits ``[B, T, V]`` (see the module docstring).

    ``teacher``: a ``TopK`` (``support="teacher"`` only; ``k`` defaults to its width and a smaller
    ``k`` keeps its ``k`` most likely ids), the full teacher log-probs ``[B, T, V]`` (either
    support; must be normalized), or a callable mapping ids ``[B, T, k]`` to the teacher's log-probs
    there (``support="student"`` only). ``mask [B, T]``: 1 on trained positions."""
    student_logprobs, teacher_logprobs, m = support_logprobs(student_logits, teacher, mask, k, support, chunk_size)
    kl, s_tail, t_tail = binned_reverse_kl(student_logprobs, teacher_logprobs, tail_floor)
    per_token = torch.where(m, kl, torch.zeros_like(kl))
    return TopKReverseKL(per_token, torch.exp(s_tail).detach(), torch.exp(t_tail))


def support_logprobs(student_logits: torch.Tensor, teacher: TeacherLogprobs, mask: torch.Tensor, k: int | None,
                     support: Literal["teacher", "student"], chunk_size: int | None = None):
    """``(student log-probs [B, T, k], teacher log-probs [B, T, k], bool mask [B, T])`` on the support.

    Masked positions take the student's own values (every divergence exactly 0 there), so padding,
    even NaN, cannot leak into the gradient through the zero weights."""
    if student_logits.dim() != 3 or tuple(mask.shape) != tuple(student_logits.shape[:2]):
        raise ValueError(f"expected student logits [B, T, V] and mask [B, T]; got {tuple(student_logits.shape)} "
                         f"and {tuple(mask.shape)}")
    ids, teacher_logprobs = _support(student_logits, teacher, mask, k, support)
    student_logprobs = gather_log_softmax(student_logits, ids, chunk_size)
    m = mask.bool()
    teacher_logprobs = torch.where(m.unsqueeze(-1), teacher_logprobs.to(student_logprobs.dtype),
                                   student_logprobs.detach())
    return student_logprobs, teacher_logprobs, m


def topk_distillation_loss(
    student_logits: torch.Tensor,
    teacher: TeacherLogprobs,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    support: Literal["teacher", "student"] = "teacher",
    chunk_size: int | None = None,
    tail_floor: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(scalar loss, metrics)``: ``topk_reverse_kl`` reduced like ``policy_loss`` (the mean over
    each sample's masked tokens, then over samples). Metrics are detached 0-d tensors: the loss
    (``topk_kl``), the tail bin's term of it (``topk_kl_tail``), and the mean tail masses of the
    student and the teacher (``student_tail_mass``, ``teacher_tail_mass``)."""
    out = topk_reverse_kl(student_logits, teacher, mask, k=k, support=support, chunk_size=chunk_size,
                          tail_floor=tail_floor)
    loss = masked_sample_mean(out.per_token, mask)
    with torch.no_grad():
        q_t, p_t = out.student_tail, out.teacher_tail
        tail_term = q_t * (torch.log(q_t) - torch.log(p_t))
        metrics = {
            "topk_kl": loss.detach(),
            "topk_kl_tail": masked_sample_mean(tail_term, mask),
            "student_tail_mass": masked_sample_mean(q_t, mask),
            "teacher_tail_mass": masked_sample_mean(p_t, mask),
        }
    return loss, metrics
