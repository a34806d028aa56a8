"""Training math as pure torch functions, shared by the embedded trainer and Slime's custom loss.

Nothing here reads settings or environment variables: callers pass every coefficient.
"""

from slime_ext.algorithms.advantages import RunningBaseline, token_advantages
from slime_ext.algorithms.ppo import PolicyLossConfig, masked_sample_mean, policy_loss
from slime_ext.algorithms.staleness import staleness_filter

__all__ = [
    "PolicyLossConfig",
    "RunningBaseline",
    "masked_sample_mean",
    "policy_loss",
    "staleness_filter",
    "token_advantages",
]
