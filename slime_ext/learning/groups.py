"""The groups stage: fresh on-policy samples of each hinted turn's prompt, and context distillation.

For each hinted judged turn, the pipeline draws ``group_size - 1`` fresh responses to the recorded
prompt from the **current policy** (a ``Scorer``: the trainer's model in the trainer process, off the
serving path, or SGLang's synced weights under Slime; its own temperature and token bound), and the
recorded response joins them with its recorded log-probs.
Every member is scored by the hinted teacher at every position (its log-probs, and its top-k for
the distillation term). Rewards:

- the recorded response: its verdict (the judge read the user's actual next message about it);
- a fresh sample: no next message exists for it, and the judges read only the next message, so it
  gets the **implicit reward**
  ``tanh(mean_t(teacher_t - student_t) / scale)`` (``algorithms/groups.py``): positive when the hint
  makes it more likely, i.e. it already does more of what the user asked.

Advantages are group-normalized (``group_advantages``); a constant group gets none (recorded with
its reason) but still trains its distillation term. Every member is scored at the temperature it was
sampled at (``logprobs.scoring_temperature``; ``metadata["temperature"]``), like a recorded turn: a
fresh sample's ``rollout_log_probs`` are the trainer model's teacher-forced log-probs at the group
temperature (the distribution it was drawn from; the step scores it there too, so its PPO ratio is
exactly 1), and the teacher scores it at that temperature as well, so its implicit reward compares
like with like. Its staleness is 0.

**Context distillation** (optional, ``sft_coef`` > 0; Snell et al. 2022): the hinted teacher's own
answers to the hinted prompt (``demonstration``), put after the *student's* prompt, trained as
SFT: each token's advantage is ``sft_coef`` at ratio 1, whose gradient is ``sft_coef`` times the
negative log-likelihood's (per-sample mean, like every term). The stop token is kept, so the
student also learns where the teacher stops. A demonstration is scored at temperature 1 (it is not a
sample of the student, and SFT is the student's likelihood of it).
"""

from __future__ import annotations

from typing import Any

from slime_ext.algorithms.groups import group_advantages, implicit_reward
from slime_ext.learning.example import Example
from slime_ext.learning.scorers import Scorer
from slime_ext.learning.settings import GroupConfig
from slime_ext.learning.teacher import TeacherTerm
from slime_ext.logprobs import scoring_temperature
from slime_ext.types import Sample


def fresh_sample(ex: Example, response: list[int], student: list[float], teacher: list[float], teacher_topk: Any,
                 reward: float, version: int, temperature: float = 1.0) -> Sample:
    """A fresh group member as a ``Sample`` (``metadata["fresh"]``), on-policy at ``version``, sampled
    (and scored: ``student``, ``teacher``) at ``temperature``."""
    return Sample(tokens=ex.prompt_ids + response, response_length=len(response), loss_mask=[1] * len(response),
                  rollout_log_probs=student, teacher_log_probs=teacher, reward=reward, session_id=ex.session_id,
                  metadata={"session_id": ex.session_id, "turn": ex.turn, "fresh": True, "user": ex.user,
                            "teacher_topk": teacher_topk, "policy_version": version, "policy_version_end": version,
                            "temperature": temperature})


def room(ex: Example, max_new_tokens: int, context: int) -> int:
    """How many tokens a fresh answer to ``ex``'s prompt (or its hinted one) may have within ``context``."""
    prompts = max(len(ex.prompt_ids), len(ex.teaching.prompt_ids))
    return min(max_new_tokens, context - prompts) if context else max_new_tokens


def demonstration(ex: Example, *, teacher: Scorer, policy: Scorer, config: GroupConfig, sft_coef: float,
                  version: int, context: int = 0, seed: int | None = None) -> Sample | None:
    """One answer of the ``teacher`` to the hinted prompt, as an SFT sample after the student's prompt
    (``metadata["sft"]``), or None when the context has no room. ``policy``: the model being trained, for the
    sample's ratio-1 ``rollout_log_probs``."""
    budget = room(ex, config.max_new_tokens, context)
    if budget <= 0:
        return None
    (response,) = teacher.sample(ex.teaching.prompt_ids, 1, temperature=config.temperature, max_new_tokens=budget,
                                 seed=seed)
    if not response:
        return None
    return Sample(tokens=ex.prompt_ids + response, response_length=len(response), loss_mask=[1] * len(response),
                  rollout_log_probs=policy.logprobs(ex.prompt_ids, response), reward=sft_coef,
                  session_id=ex.session_id,
                  metadata={"session_id": ex.session_id, "turn": ex.turn, "sft": True, "user": ex.user,
                            "advantage": sft_coef, "policy_version": version, "policy_version_end": version})


def build_group(ex: Example, recorded: Sample, *, policy: Scorer, teacher: Scorer, term: TeacherTerm,
                config: GroupConfig, version: int, context: int = 0,
                seed: int | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """The group of one taught example (its ``recorded`` sample first), its members' advantages set in
    ``metadata["group_advantage"]``, and a record of it (rewards, dropped reason)."""
    members = [recorded]
    budget = room(ex, config.max_new_tokens, context)
    scale = scoring_temperature(config.temperature)  # each member is scored at its own sampling temperature
    if budget > 0:
        for response in policy.sample(ex.prompt_ids, config.size - 1, temperature=config.temperature,
                                      max_new_tokens=budget, seed=seed):
            if not response:
                continue
            student = policy.logprobs(ex.prompt_ids, response, scale)
            t_lp, t_top = term.scores(teacher, ex.teaching.prompt_ids, response, scale)
            reward = implicit_reward(t_lp, student, config.reward_scale)
            members.append(fresh_sample(ex, response, student, t_lp, t_top, reward, version, config.temperature))
    record: dict[str, Any] = {"session_id": ex.session_id, "turn": ex.turn,
                              "rewards": [round(float(m.reward), 4) for m in members], "dropped": None}
    if len(members) < 2:
        record["dropped"] = "no room in the context for fresh samples"
        return members, record
    record["dropped"] = set_group_advantages(members, config.estimator)
    return members, record


def set_group_advantages(members: list[Sample], estimator: str = "grpo") -> str | None:
    """Put each member's group advantage (``group_advantages`` of their rewards) in its
    ``metadata["group_advantage"]``; why the group is dropped (constant rewards), or None. Shared by the live
    groups above and the agent recipe's groups of episodes (``envs/recipe.py``)."""
    adv = group_advantages([float(m.reward) for m in members], estimator)
    for m, a in zip(members, adv.advantages):
        m.metadata["group_advantage"] = a
    return adv.dropped
