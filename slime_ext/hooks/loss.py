"""Train-side hook: the Combine loss (Binary RL + OPD) on Megatron, with the embedded trainer's math.

``combine_loss(args, batch, logits, sum_of_sample_mean)`` is Slime's custom-loss signature. The
per-token advantage is ``mix_advantages`` (the embedded trainer's formula) with Slime's own
advantages as the reward term (the launch scripts choose an estimator that leaves the verdict unnormalized on every token):

    A = w_rl * advantages + w_opd * clip(teacher_log_probs - rollout_log_probs, ±opd_clip)

(``post_process_rewards`` sets teacher = rollout for turns without a hint, so those add 0), then
the same clipped surrogate as the embedded trainer (``policy_loss``) against the rollout
log-probs, reduced with Slime's ``sum_of_sample_mean``. Current log-probs come from Slime's
``get_log_probs_and_entropy`` (imported when called), which divides the logits by
``--rollout-temperature``: the one temperature every sample is scored at on Slime, so it must be
the one the turns were sampled at (the rollout hook refuses settings where it is not, and drops a
turn sampled at another; the embedded trainer scores each sample at its own
``metadata["temperature"]`` instead). Method ``binary`` is ``w_opd = 0``, ``opd`` is ``w_rl = 0``.

``topk_select_token_loss`` is upstream's ``topk_select`` recipe reduced to what Slime's batch
carries (one teacher log-prob per token: the support is the sampled token, K = 1, its softmax
weight 1): ``w_rl * L(advantages) + w_opd * L(clip(teacher - rollout, ±opd_clip))`` with each term
PPO-clipped on its own, as upstream adds its two losses (``combine_loss`` clips their sum once).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig, policy_loss
from slime_ext.algorithms.advantages import mix_advantages
from slime_ext.hooks.config import plugin_config
from slime_ext.types import Method


def slime_response_log_probs(args, batch: dict[str, Any], logits: torch.Tensor) -> list[torch.Tensor]:
    """Per-sample response log-probs of ``logits`` ``[1, T, V/TP]`` by Slime's own function."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

    _, out = get_log_probs_and_entropy(logits, args=args, unconcat_tokens=batch["unconcat_tokens"],
                                       total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"],
                                       with_entropy=False)
    return out["log_probs"]


def combine_advantages_of(batch: dict[str, Any], weights: AdvantageWeights) -> list[torch.Tensor]:
    """Per-sample advantages from Slime's batch (see the module docstring)."""
    out = []
    teachers = batch.get("teacher_log_probs") or [None] * len(batch["advantages"])
    for adv, rollout, teacher in zip(batch["advantages"], batch["rollout_log_probs"], teachers):
        out.append(mix_advantages(adv.to(rollout.device), rollout, teacher, weights))
    return out


def combine_loss_from_log_probs(batch: dict[str, Any], log_probs: list[torch.Tensor],
                                sum_of_sample_mean: Callable[[torch.Tensor], torch.Tensor],
                                weights: AdvantageWeights, config: PolicyLossConfig) -> tuple[torch.Tensor, dict]:
    """The loss once the current log-probs are known: pure, and what the tests compare."""
    logp = torch.cat(log_probs, dim=0)
    old = torch.cat([x.float() for x in batch["rollout_log_probs"]], dim=0).to(logp.device)
    adv = torch.cat(combine_advantages_of(batch, weights), dim=0).to(logp.device)
    mask = torch.cat([m.float() for m in batch["loss_masks"]], dim=0).to(logp.device)
    loss, metrics = policy_loss(logp, old, adv, mask, config, reduce=lambda values, _mask: sum_of_sample_mean(values))
    return loss, {"loss": loss.detach(), **{k: v.detach() for k, v in metrics.items()}}


def loss_settings(args) -> tuple[AdvantageWeights, PolicyLossConfig]:
    """The method's weights from the plugin config, and Slime's PPO clip (``--eps-clip``, ``--eps-clip-high``)."""
    cfg = plugin_config(args)
    method = Method.BINARY if cfg.method == Method.NONE else Method.parse(cfg.method)
    weights = AdvantageWeights.for_method(method, cfg.w_rl, cfg.w_opd, cfg.opd_clip, cfg.verdict_credit)
    config = PolicyLossConfig(eps_low=float(getattr(args, "eps_clip", 0.2)),
                              eps_high=float(getattr(args, "eps_clip_high", None) or getattr(args, "eps_clip", 0.28)))
    return weights, config


def combine_loss(args, batch, logits, sum_of_sample_mean):
    weights, config = loss_settings(args)
    log_probs = slime_response_log_probs(args, batch, logits)
    loss, metrics = combine_loss_from_log_probs(batch, log_probs, sum_of_sample_mean, weights, config)
    return loss + 0 * logits.sum(), metrics  # keeps the graph when a micro-batch has no trainable token


def topk_select_token_loss_from_log_probs(batch: dict[str, Any], log_probs: list[torch.Tensor],
                                          sum_of_sample_mean: Callable[[torch.Tensor], torch.Tensor],
                                          weights: AdvantageWeights, config: PolicyLossConfig) -> tuple[torch.Tensor, dict]:
    """``w_rl * L_GRPO + w_opd * L_OPD``, each term ``combine_loss_from_log_probs`` with the other weight
    0 (``L(w * A) = w * L(A)`` for ``w >= 0``, so the weights can stay inside). Pure."""
    rl, rl_metrics = combine_loss_from_log_probs(batch, log_probs, sum_of_sample_mean,
                                                 AdvantageWeights(weights.w_rl, 0.0, weights.opd_clip,
                                                                  weights.verdict_credit), config)
    opd, opd_metrics = combine_loss_from_log_probs(batch, log_probs, sum_of_sample_mean,
                                                   AdvantageWeights(0.0, weights.w_opd, weights.opd_clip), config)
    loss = rl + opd
    return loss, {"loss": loss.detach(), **{f"rl_{k}": v for k, v in rl_metrics.items() if k != "loss"},
                  "rl_loss": rl.detach(), "opd_loss": opd.detach(), "opd_clip_fraction": opd_metrics["clip_fraction"]}


def topk_select_token_loss(args, batch, logits, sum_of_sample_mean):
    """Slime's custom-loss entry of ``topk_select``'s token-level reduction (``openclaw-combine/
    run_qwen3_4b_openclaw_topk_select.sh`` with ``TOPK_SELECT=token``)."""
    weights, config = loss_settings(args)
    log_probs = slime_response_log_probs(args, batch, logits)
    loss, metrics = topk_select_token_loss_from_log_probs(batch, log_probs, sum_of_sample_mean, weights, config)
    return loss + 0 * logits.sum(), metrics
