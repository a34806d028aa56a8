"""Train-side hook: the one learning objective on Megatron, ``--custom-loss-function-path
slime_ext.hooks.loss.openclaw_loss``, for every method and distillation kind Slime can carry.

``openclaw_loss(args, batch, logits, sum_of_sample_mean)`` is Slime's custom-loss signature. It
computes exactly what the embedded trainer's step computes (``learning/objective.py``), on the same
padded ``[samples, response tokens]`` tensors:

- the current log-probs from Slime's ``get_log_probs_and_entropy`` (imported when called), which
  divides the logits by ``--rollout-temperature`` (the rollout hook makes sure that is the temperature
  every sample was sampled at);
- the advantage the rollout hook computed with the pipeline (``hooks/rollout.py``): ``teacher_log_probs -
  rollout_log_probs``, and with ``distill: topk_select_token`` the verdict term apart, from Slime's own
  ``advantages`` (its estimator spreads each turn's number over its tokens);
- the policy loss the settings name (``policy_loss``: the built-in PPO with its dual clip, or the
  user's), against the recorded log-probs; with ``kl_coef`` the KL term to Slime's reference
  (``ref_log_probs``: ``--use-kl-loss`` makes Slime compute them); with ``tis_cap`` truncated importance
  sampling against Megatron's own log-probs before the step (``log_probs``: ``--get-mismatch-metrics``).

The embedded loss is a mean over samples; Slime sums the micro-batches' losses and divides by the
step's sample count, so the hook returns the sum (the mean times the samples that have a trainable
token), and its metrics likewise. ``sum_of_sample_mean`` is therefore not needed.
"""

from __future__ import annotations

from typing import Any

import torch

from slime_ext.hooks.config import plugin_config
from slime_ext.learning.objective import LossFn, Objective, resolve_policy_loss


def slime_response_log_probs(args, batch: dict[str, Any], logits: torch.Tensor) -> list[torch.Tensor]:
    """Per-sample response log-probs of ``logits`` ``[1, T, V/TP]`` by Slime's own function."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

    _, out = get_log_probs_and_entropy(logits, args=args, unconcat_tokens=batch["unconcat_tokens"],
                                       total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"],
                                       with_entropy=False)
    return out["log_probs"]


def padded(rows: list[torch.Tensor], keep: list[int]) -> torch.Tensor:
    """The ``keep`` rows of per-sample 1-d tensors, right-padded with 0 into ``[len(keep), longest]``."""
    width = max(len(rows[i]) for i in keep)
    return torch.stack([torch.nn.functional.pad(rows[i].float(), (0, width - len(rows[i]))) for i in keep])


def loss_from_log_probs(batch: dict[str, Any], log_probs: list[torch.Tensor], objective: Objective,
                        loss_fn: LossFn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss once the current log-probs are known (pure: what the tests compare with the embedded step)."""
    if batch.get("teacher_log_probs") is None:
        raise ValueError("openclaw_loss needs the live rollout's samples (slime_ext.hooks.rollout.live_rollout): they "
                         "carry each token's advantage in teacher_log_probs")
    keep = [i for i, m in enumerate(batch["loss_masks"]) if float(m.sum()) > 0]
    if not keep:
        return log_probs[0].sum() * 0 if log_probs else torch.zeros(()), {}
    device = log_probs[0].device
    rollout = padded(batch["rollout_log_probs"], keep).to(device)
    terms = [padded(batch["teacher_log_probs"], keep).to(device) - rollout]
    if objective.separate_teacher_term:  # the verdict term apart: Slime's advantages (module docstring)
        terms.insert(0, padded(batch["advantages"], keep).to(device))
    loss, metrics = objective.policy_loss(
        loss_fn, padded(log_probs, keep), rollout, terms, padded(batch["loss_masks"], keep).to(device),
        proximal=_needed(batch, "log_probs", objective.loss.tis_cap, "tis_cap", "--get-mismatch-metrics", keep),
        ref=_needed(batch, "ref_log_probs", objective.loss.kl_coef, "kl_coef", "--use-kl-loss", keep))
    n = len(keep)
    return n * loss, {"loss": n * loss.detach(), **{k: n * v.detach() for k, v in metrics.items()}}


def _needed(batch: dict[str, Any], key: str, setting: float | None, name: str, flag: str,
            keep: list[int]) -> torch.Tensor | None:
    """Slime's ``batch[key]`` padded, when ``setting`` needs it (None when it does not); a clear error if absent."""
    if not setting:
        return None
    if not batch.get(key):
        raise ValueError(f"{name} needs Slime's {key} in the batch: start Slime with {flag} (the launch scripts do)")
    return padded(batch[key], keep).to(batch[key][0].device)


def openclaw_loss(args, batch, logits, sum_of_sample_mean):
    cfg = plugin_config(args)
    loss, metrics = loss_from_log_probs(batch, slime_response_log_probs(args, batch, logits), Objective.of(cfg),
                                        resolve_policy_loss(cfg.policy_loss))
    return loss + 0 * logits.sum(), metrics  # keeps the graph when a micro-batch has no trainable token
