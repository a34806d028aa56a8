"""The clipped policy-gradient loss, corrected for stale and mismatched samples.

All tensors are ``[B, T]`` per-token values over response positions, with ``mask`` 1 on trained
tokens. Terms, per token:

  ratio  = exp(logp - old)          old = the behaviour log-probs recorded at sampling time, or a
                                    proximal policy's when ``proximal_logprobs`` is given
  pg     = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
           and, where A < 0, at most ratio_cap * |A| (dual clip, Ye et al. 2020): the one side PPO's
                                    clip leaves open, a token the policy now prefers far more than
                                    its sampler did. With both bounds no token of a sample, however
                                    stale, weighs more than max(1 + eps_high, ratio_cap) x |A|, so
                                    old samples are corrected, never dropped (see staleness.py)
  tis    = min(exp(old - behaviour), tis_cap)   only with a proximal policy (decoupled PPO):
                                    truncated importance weight for the behaviour/proximal gap, the
                                    engine's numerics (or a stale sample) against the trainer's own
                                    log-probs before the step; both drivers pass one when ``tis_cap`` is set
  kl     = exp(ref - logp) - (ref - logp) - 1   k3 estimator of KL(current || reference) >= 0
  loss   = tis * pg + kl_coef * kl

Reduction: the mean over each sample's masked tokens, then the mean over samples (Slime's
``sum_of_sample_mean`` divided by the batch size), so a long response does not outweigh a short one.
Both drivers call it the same way, on padded ``[B, T]`` tensors (``learning/objective.py``); ``reduce``
replaces the reduction (every term is elementwise, so any shape works with its reduction).
With ratio 1 the gradient is exactly the plain policy gradient ``-A * grad logp`` (so reduced).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class PolicyLossConfig:
    eps_low: float = 0.2
    eps_high: float = 0.28
    tis_cap: float | None = None  # truncate behaviour/proximal importance weights at this value
    ratio_cap: float | None = 3.0  # dual clip: bound on the ratio of tokens with a negative advantage (None: off)
    kl_coef: float = 0.0


def masked_sample_mean(values: torch.Tensor, mask: torch.Tensor, every_row: bool = False) -> torch.Tensor:
    """Mean over each row's masked entries, then over rows that have any (0 if none do); ``every_row``: over every
    row, a row without a masked entry counting 0 (as Slime's ``sum_of_sample_mean``, divided by the batch size)."""
    mask = mask.to(values.dtype)
    counts = mask.sum(dim=-1)
    per_sample = (values * mask).sum(dim=-1) / counts.clamp(min=1)
    if every_row:
        return per_sample.mean()
    has = counts > 0
    if not bool(has.any()):
        return (values * 0).sum()  # keeps the graph: a batch with no trainable token
    return per_sample[has].mean()


def policy_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig = PolicyLossConfig(),
    *,
    proximal_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = masked_sample_mean,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return ``(scalar loss, metrics)``; metrics are detached 0-d tensors. ``reduce(values, mask)``
    turns per-token values into the loss (and the averaged metrics)."""
    old = proximal_logprobs if proximal_logprobs is not None else behaviour_logprobs
    log_ratio = logprobs - old
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - config.eps_low, 1 + config.eps_high)
    unclipped_obj = ratio * advantages
    clipped_obj = clipped * advantages
    pg = -torch.minimum(unclipped_obj, clipped_obj)
    if config.ratio_cap is not None:
        dual_clipped = (advantages < 0) & (pg > -config.ratio_cap * advantages)
        pg = torch.where(dual_clipped, -config.ratio_cap * advantages, pg)  # constant: no gradient
    per_token = pg
    metrics: dict[str, torch.Tensor] = {}
    if proximal_logprobs is not None:
        w = torch.exp(proximal_logprobs - behaviour_logprobs).detach()
        if config.tis_cap is not None:
            w = torch.clamp(w, max=config.tis_cap)
        per_token = per_token * w
        metrics["tis_weight_mean"] = reduce(w, mask).detach()
    if ref_logprobs is not None and config.kl_coef:
        d = ref_logprobs - logprobs
        kl = torch.exp(d) - d - 1
        per_token = per_token + config.kl_coef * kl
        metrics["kl_to_ref"] = reduce(kl, mask).detach()
    loss = reduce(per_token, mask)

    with torch.no_grad():
        m = mask.bool()
        r = ratio[m] if bool(m.any()) else ratio.new_ones(1)
        was_clipped = (clipped_obj < unclipped_obj) & m  # the clipped branch is the active one
        metrics["clip_fraction"] = was_clipped.sum() / m.sum().clamp(min=1)
        if config.ratio_cap is not None:
            metrics["dual_clip_fraction"] = (dual_clipped & m).sum() / m.sum().clamp(min=1)
        metrics["ratio_mean"] = r.mean()
        metrics["ratio_max"] = r.max()
        metrics["ratio_min"] = r.min()
        d = (behaviour_logprobs - logprobs)
        metrics["kl_rollout"] = reduce(torch.exp(-d) - 1 + d, mask)  # k3 KL(rollout || current)
        metrics["pg_loss"] = reduce(pg, mask)
    return loss, metrics


def sft_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig = PolicyLossConfig(),
    **_: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Supervised fine-tuning's loss, called like ``policy_loss`` (so the trainer's step takes it as its loss):
    the negative log-likelihood of the masked tokens, averaged per sample, then over samples (Slime's
    ``sft_loss``). The behaviour log-probs and advantages are not read."""
    nll = -masked_sample_mean(logprobs, mask)
    return nll, {"nll": nll.detach()}
