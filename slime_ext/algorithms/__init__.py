"""Training math as pure torch functions, shared by the embedded trainer and Slime's custom loss.

Nothing here reads settings or environment variables: callers pass every coefficient.
"""

from slime_ext.algorithms.advantages import (
    AdvantageWeights,
    RunningBaseline,
    combined_advantages,
)
from slime_ext.algorithms.divergence import topk_divergence, topk_divergence_loss
from slime_ext.algorithms.groups import GroupAdvantages, group_advantages, implicit_reward
from slime_ext.algorithms.ppo import PolicyLossConfig, masked_sample_mean, policy_loss, sft_loss
from slime_ext.algorithms.staleness import staleness_filter
from slime_ext.algorithms.topk import TopK, teacher_topk, topk_distillation_loss, topk_reverse_kl

__all__ = [
    "AdvantageWeights",
    "GroupAdvantages",
    "PolicyLossConfig",
    "RunningBaseline",
    "TopK",
    "combined_advantages",
    "group_advantages",
    "implicit_reward",
    "masked_sample_mean",
    "policy_loss",
    "sft_loss",
    "staleness_filter",
    "teacher_topk",
    "topk_distillation_loss",
    "topk_divergence",
    "topk_divergence_loss",
    "topk_reverse_kl",
]
