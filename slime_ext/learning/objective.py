"""What a step optimizes, written once for both drivers: per-token advantages and the policy loss.

``Objective.of(settings)`` holds what the settings say about it. For each sample:

- ``advantages(sample, baseline)``: its per-token advantage, from the sample's own fields through
  ``algorithms/advantages.py: combined_advantages`` (the one formula): the verdict term (``reward -
  baseline``; a group member's group-normalized advantage; a fixed one for a context-distillation
  sample) and the teacher term (``clip(teacher - rollout)``). A turn whose pi_old the trainer re-scored
  (served with the preference memory and trained without it, or any turn of the embedded trainer) has its
  verdict term weighted per token (``metadata["verdict_weights"]``: truncated importance weights,
  ``learning/memory.py``). One term, or the two apart when the
  teacher term is clipped on its own (``distill: topk_select_token``).
- ``loss(...)``: the policy loss over those terms (the built-in PPO or the user's, one call per
  term), with the KL term to the reference (``kl_coef``) and truncated importance sampling against
  the trainer's own log-probs before the step (``tis_cap``).

The embedded trainer's step (``trainers/step.py``) and Slime's custom loss (``hooks/loss.py``) both
call these on the same padded ``[B, T]`` tensors; only where the current, reference and proximal
log-probs come from differs (the trainer's model, or Megatron's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig, combined_advantages, policy_loss
from slime_ext.learning.settings import BUILTIN_POLICY_LOSS, LearningConfig
from slime_ext.types import Distill, Sample

LossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


def resolve_policy_loss(name: str) -> LossFn:
    """The policy loss ``name`` names: ``ppo`` (``algorithms/ppo.py``'s ``policy_loss``), or the user's
    (``module:attr``, or a name an installed package registered under ``openclaw_rl.losses``), which is called
    like ``policy_loss(logprobs, behaviour_logprobs, advantages, mask, config, ref_logprobs=...)`` (and
    ``proximal_logprobs=`` with ``tis_cap``) and returns ``(scalar loss, metrics)``.
    ``slime_ext.plugins.PluginError`` (a ValueError) says why one does not load."""
    from slime_ext.plugins import check_choice, load_object

    if name == BUILTIN_POLICY_LOSS:
        return policy_loss
    check_choice(name, "loss", (BUILTIN_POLICY_LOSS,), "it is called like algorithms/ppo.py's policy_loss")
    return load_object(name, "loss")


@dataclass(frozen=True)
class Objective:
    weights: AdvantageWeights  # the teacher weight is 0 when the teacher term is a separate distillation loss
    distill: Distill
    loss: PolicyLossConfig
    # the embedded trainer's distillation loss at every position (distill topk, forward_kl, jsd, topk_select)
    topk_coef: float = 0.0  # its weight: w_opd, which it takes from the advantage
    topk: int = 20
    divergence: str = "reverse_kl"
    beta: float = 0.5

    @classmethod
    def of(cls, cfg: LearningConfig) -> Objective:
        weights = AdvantageWeights.for_method(cfg.method, cfg.w_rl, cfg.w_opd, cfg.distill_clip, cfg.verdict_credit)
        loss = PolicyLossConfig(kl_coef=cfg.kl_coef, tis_cap=cfg.tis_cap or None)
        if cfg.distill.per_token:
            return cls(weights, cfg.distill, loss)
        return cls(dataclasses.replace(weights, w_opd=0.0), cfg.distill, loss, topk_coef=weights.w_opd, topk=cfg.distill_topk,
                   divergence=cfg.distill.divergence, beta=cfg.jsd_beta)

    @property
    def separate_teacher_term(self) -> bool:
        """The teacher term is PPO-clipped on its own (``topk_select_token``), not summed into one advantage."""
        return self.distill is Distill.TOPK_SELECT_TOKEN

    def advantages(self, sample: Sample, baseline: float = 0.0) -> list[torch.Tensor]:
        """The sample's per-token advantage terms ``[r]``: one, or (verdict, teacher) apart (module docstring)."""
        meta = sample.metadata or {}
        r = sample.response_length
        fixed = meta.get("advantage")  # a term with its own weight (context distillation), used as is
        if fixed is not None:
            return [torch.full((r,), float(fixed))] + ([torch.zeros(r)] if self.separate_teacher_term else [])
        group = meta.get("group_advantage")
        reward, b = (float(group), 0.0) if group is not None else (float(sample.reward or 0.0), baseline)
        rollout = torch.tensor(sample.rollout_log_probs, dtype=torch.float32)
        teacher = torch.tensor(sample.teacher_log_probs, dtype=torch.float32) if sample.teacher_log_probs else None
        verdict = combined_advantages(reward, rollout, teacher, dataclasses.replace(self.weights, w_opd=0.0), b)
        if meta.get("verdict_weights") is not None:  # pi_old re-scored by the trainer (learning/memory.py)
            verdict = verdict * torch.tensor(meta["verdict_weights"], dtype=torch.float32)
        taught = combined_advantages(0.0, rollout, teacher, dataclasses.replace(self.weights, w_rl=0.0))
        return [verdict, taught] if self.separate_teacher_term else [verdict + taught]

    def policy_loss(self, loss_fn: LossFn, logprobs: torch.Tensor, behaviour: torch.Tensor,
                    terms: list[torch.Tensor], mask: torch.Tensor, *, proximal: torch.Tensor | None = None,
                    ref: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """``loss_fn`` over each advantage term ``[B, T]`` (the KL term once, with the first), summed."""
        extra = {"proximal_logprobs": proximal} if proximal is not None else {}
        loss, metrics = loss_fn(logprobs, behaviour, terms[0], mask, self.loss, ref_logprobs=ref, **extra)
        if len(terms) == 2:  # the teacher term, clipped on its own (topk_select_token)
            taught, taught_metrics = loss_fn(logprobs, behaviour, terms[1], mask,
                                             dataclasses.replace(self.loss, kl_coef=0.0), **extra)
            metrics = {**metrics, "verdict_loss": loss.detach(), "teacher_loss": taught.detach(),
                       "teacher_clip_fraction": taught_metrics.get("clip_fraction", taught.new_zeros(()))}
            loss = loss + taught
        return loss, metrics
