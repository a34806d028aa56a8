"""Records shared by every loop: a captured ``Turn`` and the training ``Sample``.

``Sample`` is Slime's own class when Slime is importable (so hooks hand Slime exactly what it
expects) and an identical dataclass otherwise, so everything runs on a CPU machine without it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict


class Method(enum.StrEnum):
    """What the trainer learns from: ``binary`` the judge's verdicts (Binary RL), ``opd`` the
    hindsight hints (On-Policy Distillation), ``combine`` both; ``none`` records without training.
    A ``str`` subclass, so configs, YAML and the CLI keep plain strings."""

    COMBINE = "combine"
    BINARY = "binary"
    OPD = "opd"
    NONE = "none"

    @classmethod
    def parse(cls, value: str) -> Method:
        """``value`` as a Method; ValueError names the known ones."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"method {value!r}: expected {', '.join(m.value for m in cls)}") from None

    @property
    def uses_hints(self) -> bool:
        """It trains a teacher term from hints (OPD, Combine)."""
        return self in (Method.OPD, Method.COMBINE)

    @property
    def uses_verdicts(self) -> bool:
        """It trains the judge's verdicts (Binary RL, Combine)."""
        return self in (Method.BINARY, Method.COMBINE)


ESTIMATORS: tuple[str, ...] = ("grpo", "drgrpo")  # group advantage estimators (algorithms/groups.py)
SELECT_RULES: tuple[str, ...] = ("shortest", "token_optimal", "sequence_optimal")  # topk_select hint choice
VERDICT_CREDIT: tuple[str, ...] = ("uniform", "teacher")  # where a -1 lands (algorithms/advantages.py)


class JudgedTurn(TypedDict):
    """A judged turn as the store reads it back for training (``Store.trainable_turns``, ``replay_turns``,
    ``recent_judged``): exactly the columns the store selects, JSON columns decoded."""

    session_id: str
    idx: int
    user: str | None
    policy_version: int
    policy_version_end: int
    verdict: int  # -1, 0 or +1
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    hint: str | None
    hint_judged_at: float | None
    teacher_logprobs: list[float] | None  # stored by an earlier teacher pass
    messages: list[dict[str, Any]] | None
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    finish_reason: str
    sampling: dict[str, Any] | None  # the request's sampling settings


class TrainingRow(JudgedTurn, total=False):
    """A judged turn as the trainer fills it in before the step (``trainers/loop.py``)."""

    teacher_prompt_ids: list[int] | None  # the hinted prompt the teacher scored
    teacher_topk: Any  # the teacher's top-k at each position (distill topk / forward_kl / jsd / topk_select)
    topk_select: dict[str, Any]  # which candidate hint was chosen where


@dataclass
class Turn:
    """One served request: exactly the tokens the engine saw and sampled, and how it was classified."""

    session_id: str
    index: int  # position within the session, 0-based
    main_line: bool
    reason: str  # why it was classified main-line or side
    request_id: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    response_text: str
    policy_version: int  # version that produced the first response token
    policy_version_end: int  # version that produced the last (differs when a swap landed mid-turn)
    finish_reason: str
    messages: list[dict[str, Any]]  # the request's messages, as normalized by the server
    tool_calls: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None  # the request's tools and tool_choice: with the messages,
    tool_choice: Any = None  # they re-render the prompt (the OPD teacher's prompt is this one plus a hint)
    user: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    reply_key: str = ""  # fingerprint of the reply, to recognise it in a later request's history
    history_keys: list[str] = field(default_factory=list)  # fingerprints of the prompt messages
    created_at: float = 0.0


try:  # pragma: no cover - only on a machine with Slime
    from slime.utils.types import Sample  # type: ignore  # noqa: F401
except Exception:  # Slime is not installed: an identical dataclass with the fields we use

    @dataclass
    class Sample:  # type: ignore[no-redef]
        class Status(enum.Enum):
            PENDING = "pending"
            COMPLETED = "completed"
            TRUNCATED = "truncated"
            ABORTED = "aborted"
            FAILED = "failed"

        group_index: int | None = None
        index: int | None = None
        prompt: Any = ""
        tokens: list[int] = field(default_factory=list)
        response: str = ""
        response_length: int = 0
        label: str | None = None
        reward: float | dict[str, Any] | None = None
        loss_mask: list[int] | None = None
        weight_versions: list[str] = field(default_factory=list)
        rollout_log_probs: list[float] | None = None
        teacher_log_probs: list[float] | None = None
        status: Status = Status.PENDING
        metadata: dict[str, Any] = field(default_factory=dict)
        rollout_id: int | None = None
        session_id: str | None = None
        remove_sample: bool = False
        multimodal_inputs: dict[str, Any] | None = None  # raw images ({"images": [PIL images]})
        multimodal_train_inputs: dict[str, Any] | None = None  # the processor's tensors (pixel_values, ...)


try:  # pragma: no cover - only on a machine with Slime
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput  # type: ignore  # noqa: F401
except Exception:  # Slime is not installed: the same two records

    @dataclass
    class RolloutFnTrainOutput:  # type: ignore[no-redef]
        samples: list[list[Sample]]
        metrics: dict[str, Any] | None = None

    @dataclass
    class RolloutFnEvalOutput:  # type: ignore[no-redef]
        data: dict[str, dict[str, Any]]
        metrics: dict[str, Any] | None = None
