"""The record that flows through the learning pipeline: one judged turn as a trainable ``Example``.

An ``Example`` is read from the store once (``Example.from_row``) and never changed in place: each
stage returns a new one (``dataclasses.replace``) with what it adds, the teacher stage its
``Teaching`` (the hinted prompt, the teacher's log-probs of the recorded response, and what a
distillation kind needs besides). ``sample()`` is the example as a Slime ``Sample``: exactly the
recorded token ids and log-probs, never re-tokenized, with the temperature they were sampled at
(``metadata["temperature"]``) and the teacher's, when it has one. Both drivers train Samples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from slime_ext.types import JudgedTurn, Sample

# a recorded turn cut before it ended: at the token limit, or by the repetition stop (chat/repetition.py)
CUT = ("length", "repetition")

Key = tuple[str, int]  # (session id, turn index): a turn's identity in the store


@dataclass(frozen=True)
class Request:
    """What renders the turn's prompt again (the teacher's prompt is it with a hint): the request's
    messages, tools, tool_choice and chat-template arguments as the server rendered them."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    template_kwargs: dict[str, Any] | None = None

    def render(self, renderer, messages: list[dict[str, Any]] | None = None) -> list[int]:
        """The prompt ids of this request, or of it with ``messages`` instead of its own, as the server renders."""
        return renderer.render(self.messages if messages is None else messages, self.tools or [],
                               self.tool_choice if self.tool_choice is not None else "auto",
                               template_kwargs=self.template_kwargs)


@dataclass(frozen=True)
class Teaching:
    """What the teacher stage attached: the hinted prompt and the teacher's scores of the recorded response."""

    prompt_ids: list[int]
    logprobs: list[float]  # the teacher's log-prob of each response token, at the turn's sampling temperature
    topk: Any = None  # what a distillation kind needs besides: a TopK, full log-probs [r, V], or a SelectedSupport
    hints: tuple[str, ...] = ()  # empty: the unhinted teacher (topk_select's term on a turn without a hint)
    selection: dict[str, Any] | None = None  # topk_select: the candidates and which taught where


@dataclass(frozen=True)
class Example:
    session_id: str
    turn: int
    user: str | None
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]  # recorded when the tokens were sampled
    verdict: int  # -1, 0 or +1
    hint: str | None  # the accepted hindsight hint
    hint_judged_at: float | None  # None: not judged for hints
    policy_version: int  # the version that sampled the first token
    policy_version_end: int
    temperature: float | None  # the sampling temperature (None: unknown)
    finish_reason: str
    request: Request
    memory: tuple[str, ...] = ()  # the standing preferences the preference memory served it with
    forced: int = 0  # the response's first tokens the memory gave (its opening, chat/memory.py), not sampled
    # a turn whose pi_old the trainer re-scored (``learning/memory.py``: a memory turn trained without its memory, or
    # any turn with ``rescore``): each token's truncated importance weight pi_old / recorded, which corrects the
    # verdict term for the distribution (the memory, another version, the engine's numerics) that sampled it
    verdict_weights: list[float] | None = None
    recorded_logprobs: list[float] | None = None  # re-scored: what the engine recorded (rollout_logprobs is pi_old)
    failures: int = 0  # training steps that raised with this turn in them
    refusals: int = 0  # catch-up steps the canary refused with this turn in them
    teaching: Teaching | None = None

    @property
    def key(self) -> Key:
        return self.session_id, self.turn

    @property
    def hinted(self) -> bool:
        """Taught by a teacher shown a hint or the user's preferences (not topk_select's unhinted teacher): the one
        whose log-probs are the sample's teacher term, and whose prompt fresh group members are drawn under."""
        return self.teaching is not None and bool(self.teaching.hints)

    @classmethod
    def from_row(cls, row: JudgedTurn) -> Example:
        """A judged turn as the store reads it back (``Store.trainable_turns``, ``replay_turns``)."""
        sampling = row.get("sampling") or {}
        return cls(session_id=row["session_id"], turn=row["idx"], user=row.get("user"),
                   prompt_ids=list(row["prompt_token_ids"]), response_ids=list(row["response_token_ids"]),
                   rollout_logprobs=list(row["response_logprobs"]), verdict=int(row["verdict"] or 0),
                   hint=row.get("hint"), hint_judged_at=row.get("hint_judged_at"),
                   policy_version=row["policy_version"], policy_version_end=row["policy_version_end"],
                   temperature=sampling.get("temperature"), finish_reason=row.get("finish_reason") or "",
                   request=Request(row.get("messages") or [], row.get("tools"), row.get("tool_choice"),
                                   sampling.get("chat_template_kwargs")),
                   memory=tuple(row.get("memory") or ()), forced=int(sampling.get("forced_tokens") or 0),
                   failures=int(row.get("failures") or 0), refusals=int(row.get("refusals") or 0))

    def taught(self, teaching: Teaching | None) -> Example:
        """This example with ``teaching`` (None: trained like an unhinted turn)."""
        return dataclasses.replace(self, teaching=teaching)

    def sample(self) -> Sample:
        """The example as a Slime ``Sample``: the recorded tokens and log-probs, its verdict as the reward,
        the teacher's log-probs when a hint taught it (and the distillation kind's top-k when it has one), the
        temperature it was sampled at, whether it was cut (``status``: at the token limit or by the repetition
        stop), and a re-scored turn's verdict weights (``verdict_weights``).
        Tokens the memory gave (``forced``: its opening) carry no loss, with the memory or without it (the student,
        ``learning/memory.py``): they were not the policy's choice, and taught as an approved answer's tokens they broke
        smollm2's first token (answers opened "Россlа", "El Perú": docs/learning.md); the rest of the answer trains."""
        t = self.teaching
        return Sample(
            tokens=self.prompt_ids + self.response_ids, response_length=len(self.response_ids),
            status=Sample.Status.TRUNCATED if self.finish_reason in CUT else Sample.Status.COMPLETED,
            loss_mask=[0] * self.forced + [1] * (len(self.response_ids) - self.forced),
            rollout_log_probs=list(self.rollout_logprobs),
            teacher_log_probs=list(t.logprobs) if self.hinted else None, reward=float(self.verdict),
            session_id=self.session_id,
            metadata={"session_id": self.session_id, "turn": self.turn, "user": self.user,
                      "teacher_topk": t.topk if t else None, "policy_version": self.policy_version,
                      "policy_version_end": self.policy_version_end, "temperature": self.temperature,
                      "verdict_weights": self.verdict_weights})
