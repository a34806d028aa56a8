"""Slime's dynamic-sampling filter for the agent settings: ``--dynamic-sampling-filter-path
slime_ext.hooks.filters.drop_constant_groups`` (the agent RL launchers pass it; ``DYNAMIC_FILTER=0`` leaves it
out).

GRPO learns nothing from a group whose episodes all earned the same reward (every advantage is 0), so Slime's
default rollout drops such a group and samples another task in its place (its ``--over-sampling-batch-size``
loop), and counts the drops per reason in the step's metrics (``rollout/dynamic_filter/drop_<reason>``). Slime's
own ``check_reward_nonzero_std`` does not fit the agent settings' groups, so this one:

- takes a group of episode samples, or of fan-out lists (``samples: step``: one list of per-step siblings per
  episode, every sibling with the episode's reward), one reward per episode;
- leaves out episodes that could not be played (``FAILED`` / ``remove_sample``: SGLang or the browser failed; the
  generate hook gives them reward 0.0, which is no outcome): ``[-1, -1, -1, failed]`` is a constant group, not a
  varied one;
- drops a group whose remaining rewards do not vary (reason ``zero_std_<reward>``, as Slime's, e.g.
  ``zero_std_-1.0``: nothing solved; ``zero_std_1.0``: all solved) or that has fewer than two played episodes
  (reason ``too_few_episodes``);
- never makes Slime sample forever: when every task is constant for the model (a base model that solves none of
  them, the usual start of agent RL), dropping alone would send Slime's loop through the data set again and
  again. After ``ROUNDS`` batches' worth of constant groups in a row the filter lets Slime keep a constant group
  whenever dropping it would start another sampling round (Slime's ``keep_when_insufficient``), and says so once
  in the log; the first varied group ends that. Such a step trains on zero advantages, but it ends.

Nothing here imports Slime at module level (its ``DynamicFilterOutput`` is used when Slime is there, so Slime
counts the reasons; an identical record otherwise).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

log = logging.getLogger(__name__)

ROUNDS = 4  # batches' worth of constant groups in a row before a constant group may be kept (module docstring)
_state = {"constant_in_a_row": 0, "warned": False}


@dataclasses.dataclass
class _FilterOutput:  # Slime's slime.rollout.filter_hub.base_types.DynamicFilterOutput, field for field
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def _output(keep: bool, reason: str | None = None, keep_when_insufficient: bool = False):
    try:  # pragma: no cover - only on a machine with Slime
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput  # type: ignore
    except Exception:
        DynamicFilterOutput = _FilterOutput  # noqa: N806
    return DynamicFilterOutput(keep=keep, reason=reason, keep_when_insufficient=keep_when_insufficient)


def episode_rewards(args: Any, group: list[Any]) -> list[float]:
    """One reward per played episode of ``group`` (a list of samples, or of fan-out sibling lists); episodes that
    failed (``FAILED`` or ``remove_sample``) are left out."""
    rewards = []
    for item in group:
        siblings = item if isinstance(item, list) else [item]
        if not siblings or any(_failed(s) for s in siblings):
            continue
        rewards.append(_reward(args, siblings[0]))
    return rewards


def drop_constant_groups(args: Any, samples: list[Any], **kwargs: Any):
    """Slime's dynamic-sampling filter (see the module docstring): keep a group whose played episodes' rewards
    vary; drop it, with the reason, otherwise."""
    rewards = episode_rewards(args, samples)
    if len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-6:
        _state["constant_in_a_row"] = 0
        return _output(True)
    _state["constant_in_a_row"] += 1
    reason = "too_few_episodes" if len(rewards) < 2 else f"zero_std_{round(rewards[0], 1)}"
    batch = int(getattr(args, "over_sampling_batch_size", None) or getattr(args, "rollout_batch_size", 1) or 1)
    stuck = _state["constant_in_a_row"] > ROUNDS * batch
    if stuck and not _state["warned"]:
        _state["warned"] = True
        log.warning("%d constant-reward groups in a row (last: %s): the model solves all or none of these "
                    "tasks; constant groups are now kept when dropping them would start another sampling round, "
                    "so the step ends (its advantages are 0)", _state["constant_in_a_row"], reason)
    return _output(False, reason, keep_when_insufficient=stuck)


def _failed(sample: Any) -> bool:
    status = getattr(getattr(sample, "status", None), "value", getattr(sample, "status", None))
    return bool(getattr(sample, "remove_sample", False)) or status == "failed"


def _reward(args: Any, sample: Any) -> float:
    reward = sample.reward
    if isinstance(reward, dict):  # Slime's --reward-key picks one of a reward model's several rewards
        reward = reward[getattr(args, "reward_key", None)]
    if reward is None:
        raise ValueError(f"sample {getattr(sample, 'index', '?')} has no reward to filter its group on")
    return float(reward)
