"""A policy loss of one's own for the embedded trainer (docs/extending.md): PPO's clipped ratio averaged over
every trained token of the batch at once (a token-level mean, as DAPO does), instead of over each sample's
tokens first and then over samples (``algorithms/ppo.py``'s ``masked_sample_mean``). Long responses then
weigh in proportion to their length.

    PYTHONPATH=examples/custom_loss openclaw-rl serve --policy-loss token_mean_loss:token_mean_ppo
    PYTHONPATH=examples/custom_loss openclaw-rl env train ... --policy-loss token_mean_loss:token_mean_ppo
"""

from __future__ import annotations

import torch

from slime_ext.algorithms.ppo import PolicyLossConfig, policy_loss


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over every masked entry of the batch (0 when there is none)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def token_mean_ppo(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, config: PolicyLossConfig, *,
                   ref_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``policy_loss`` with the token-level mean; also reports how many tokens it averaged."""
    loss, metrics = policy_loss(logprobs, behaviour_logprobs, advantages, mask, config, ref_logprobs=ref_logprobs,
                                reduce=token_mean)
    metrics["loss_tokens"] = mask.sum().detach()
    return loss, metrics
