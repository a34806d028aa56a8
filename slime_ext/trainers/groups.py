"""Groups of fresh on-policy samples for the embedded trainer (issue #15 item 2).

For each hinted judged turn, the trainer draws ``group_size - 1`` fresh responses to the recorded
prompt from the **current trainer model** (in the trainer process, off the serving path; its own
temperature and token bound), and the recorded response joins them with its recorded log-probs.
Every member is scored by the hinted teacher at every position (its log-probs, and its top-k for
the distillation term). Rewards:

- the recorded response: its verdict (the judge read the user's actual next message about it);
- a fresh sample: no next message exists for it, and the judges here read only the next message
  (the heuristic judge) or run in the server process, so it gets the **implicit reward**
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

from typing import Any, Callable, Sequence

import torch

from slime_ext.algorithms.groups import group_advantages, implicit_reward
from slime_ext.logprobs import output_logits, scoring_temperature, teacher_forced_logprobs
from slime_ext.trainers.learning import GroupConfig
from slime_ext.types import Sample, TrainingRow

# (hinted teacher prompt ids, response ids, scoring temperature) -> (teacher log-probs of the response at that
# temperature, its top-k or full log-probs)
TeacherScorer = Callable[[list[int], list[int], float], tuple[list[float], Any]]


def sample_responses(model, prompt_ids: Sequence[int], n: int, *, temperature: float, max_new_tokens: int,
                     stop_ids: Sequence[int], generator: torch.Generator | None = None) -> list[list[int]]:
    """``n`` responses to ``prompt_ids`` from ``model`` (KV-cached decoding, batch ``n``), each ending
    at its first stop token (kept) or after ``max_new_tokens``. Logits come from the fp32 output
    layer as everywhere else, divided by ``temperature``; 0 is greedy, otherwise plain sampling (no top-k / top-p)."""
    decoder, head = model.get_decoder(), model.get_output_embeddings().weight.float()
    stops = set(int(s) for s in stop_ids)
    seqs: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)  # filled in place by each call
    with torch.no_grad():
        out = decoder(input_ids=torch.tensor([list(prompt_ids)] * n), cache=cache, use_cache=True)
        for _ in range(max_new_tokens):
            logits = output_logits(out.last_hidden_state[:, -1], head, scoring_temperature(temperature))
            if temperature > 0:
                probs = torch.softmax(logits, dim=-1)
                tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
            else:
                tokens = logits.argmax(-1)
            for i, t in enumerate(tokens.tolist()):
                if not done[i]:
                    seqs[i].append(t)
                    done[i] = t in stops
            if all(done):
                break
            out = decoder(input_ids=tokens[:, None], cache=cache, use_cache=True)
    return seqs


def fresh_sample(prompt: list[int], response: list[int], student: list[float], teacher: list[float],
                 teacher_topk: Any, reward: float, row: TrainingRow, version: int, temperature: float = 1.0) -> Sample:
    """A fresh group member as a ``Sample`` (``metadata["fresh"]``), on-policy at ``version``, sampled
    (and scored: ``student``, ``teacher``) at ``temperature``."""
    return Sample(tokens=prompt + response, response_length=len(response), loss_mask=[1] * len(response),
                  rollout_log_probs=student, teacher_log_probs=teacher, reward=reward, session_id=row["session_id"],
                  metadata={"session_id": row["session_id"], "turn": row["idx"], "fresh": True,
                            "teacher_topk": teacher_topk, "policy_version": version, "policy_version_end": version,
                            "temperature": temperature})


def demonstration(teacher_model, row: TrainingRow, student, config: GroupConfig, sft_coef: float, *,
                  stop_ids: Sequence[int], version: int, context: int = 0,
                  generator: torch.Generator | None = None) -> Sample | None:
    """One answer of ``teacher_model`` to the hinted prompt (``row["teacher_prompt_ids"]``), as an SFT
    sample after the student's prompt (``metadata["sft"]``), or None when the context has no room.
    ``student``: the model being trained, for the sample's ratio-1 ``rollout_log_probs``."""
    prompt, t_prompt = list(row["prompt_token_ids"]), list(row["teacher_prompt_ids"])
    budget = min(config.max_new_tokens, context - max(len(prompt), len(t_prompt))) if context else config.max_new_tokens
    if budget <= 0:
        return None
    (response,) = sample_responses(teacher_model, t_prompt, 1, temperature=config.temperature, max_new_tokens=budget,
                                   stop_ids=stop_ids, generator=generator)
    lp = teacher_forced_logprobs(student, prompt + response, len(prompt)).tolist()
    return Sample(tokens=prompt + response, response_length=len(response), loss_mask=[1] * len(response),
                  rollout_log_probs=lp, reward=sft_coef, session_id=row["session_id"],
                  metadata={"session_id": row["session_id"], "turn": row["idx"], "sft": True,
                            "advantage": sft_coef, "policy_version": version, "policy_version_end": version})


def build_group(model, row: TrainingRow, recorded: Sample, teacher: TeacherScorer, config: GroupConfig, *,
                stop_ids: Sequence[int], version: int, context: int = 0,
                generator: torch.Generator | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """The group of one hinted turn (``row`` with ``teacher_prompt_ids``), its members' advantages
    set in ``metadata["group_advantage"]``, and a record of it (rewards, dropped reason)."""
    prompt, t_prompt = list(row["prompt_token_ids"]), list(row["teacher_prompt_ids"])
    budget = config.max_new_tokens
    if context:
        budget = min(budget, context - max(len(prompt), len(t_prompt)))
    members = [recorded]
    scale = scoring_temperature(config.temperature)  # each member is scored at its own sampling temperature
    if budget > 0:
        for response in sample_responses(model, prompt, config.size - 1, temperature=config.temperature,
                                         max_new_tokens=budget, stop_ids=stop_ids, generator=generator):
            student = teacher_forced_logprobs(model, prompt + response, len(prompt), scale).tolist()
            t_lp, t_top = teacher(t_prompt, response, scale)
            reward = implicit_reward(t_lp, student, config.reward_scale)
            members.append(fresh_sample(prompt, response, student, t_lp, t_top, reward, row, version, config.temperature))
    record: dict[str, Any] = {"session_id": row["session_id"], "turn": row["idx"],
                              "rewards": [round(float(m.reward), 4) for m in members], "dropped": None}
    if len(members) < 2:
        record["dropped"] = "no room in the context for fresh samples"
        return members, record
    adv = group_advantages([float(m.reward) for m in members], config.estimator)  # type: ignore[arg-type]
    record["dropped"] = adv.dropped
    for m, a in zip(members, adv.advantages):
        m.metadata["group_advantage"] = a
    return members, record
