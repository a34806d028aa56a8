"""Records shared by every loop: a captured ``Turn`` and the training ``Sample``.

``Sample`` is Slime's own class when Slime is importable (so hooks hand Slime exactly what it
expects) and an identical dataclass otherwise, so everything runs on a CPU machine without it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict


class Choice(enum.StrEnum):
    """A setting with a fixed set of values. A ``str`` subclass (YAML and the CLI keep plain strings);
    ``parse`` names the setting and the values when one is wrong."""

    @classmethod
    def parse(cls, value: str, setting: str = "") -> Choice:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{setting or cls.__name__.lower()} {value!r}: expected one of "
                             f"{', '.join(m.value for m in cls)}") from None


class Method(Choice):
    """What the trainer learns from: ``binary`` the judge's verdicts (Binary RL), ``opd`` the
    hindsight hints (On-Policy Distillation), ``combine`` both; ``none`` records without training."""

    COMBINE = "combine"
    BINARY = "binary"
    OPD = "opd"
    NONE = "none"

    @property
    def uses_hints(self) -> bool:
        """It trains a teacher term from hints (OPD, Combine)."""
        return self in (Method.OPD, Method.COMBINE)

    @property
    def uses_verdicts(self) -> bool:
        """It trains the judge's verdicts (Binary RL, Combine)."""
        return self in (Method.BINARY, Method.COMBINE)


class Distill(Choice):
    """The teacher term (docs/learning.md): the per-token gap in the advantage (``token``); at every
    position over a top-k plus a tail bin (``topk`` reverse KL, ``forward_kl``, ``jsd``); upstream's
    recipe (``topk_select``); or its reduction to the sampled token (``topk_select_token``: the gap
    PPO-clipped on its own, added to the verdict's loss)."""

    TOKEN = "token"
    TOPK = "topk"
    FORWARD_KL = "forward_kl"
    JSD = "jsd"
    TOPK_SELECT = "topk_select"
    TOPK_SELECT_TOKEN = "topk_select_token"

    @property
    def per_token(self) -> bool:
        """The teacher term is a per-token advantage (one teacher log-prob per response token is enough)."""
        return self in (Distill.TOKEN, Distill.TOPK_SELECT_TOKEN)

    @property
    def divergence(self) -> str:
        """The divergence of a top-k distillation loss (``algorithms/divergence.py``)."""
        return "reverse_kl" if self in (Distill.TOKEN, Distill.TOPK) else self.value


class Teacher(Choice):
    """Whose weights score the hinted prompt: the initial model, or the current policy (self-distillation)."""

    BASE = "base"
    POLICY = "policy"


class Baseline(Choice):
    """The advantage baseline: none (advantage = verdict) or an EMA of earlier verdicts (algorithms/advantages.py)."""

    NONE = "none"
    RUNNING = "running"


class TopkSupport(Choice):
    """Whose top-k the distillation runs over (``overlap``: topk_select only)."""

    TEACHER = "teacher"
    STUDENT = "student"
    OVERLAP = "overlap"
    AUTO = "auto"  # the distill kind's own (learning/settings.py: LearningConfig.distill_support)


class VerdictCredit(Choice):
    """Where a -1 lands on a turn the teacher scored: every token, or where the teacher disagrees."""

    UNIFORM = "uniform"
    TEACHER = "teacher"


class Estimator(Choice):
    """The group advantage: ``grpo`` ((r - mean) / std) or ``drgrpo`` (r - mean) (algorithms/groups.py)."""

    GRPO = "grpo"
    DRGRPO = "drgrpo"


class SelectRule(Choice):
    """topk_select: which candidate hint teaches (algorithms/topk_select.py)."""

    SHORTEST = "shortest"
    TOKEN_OPTIMAL = "token_optimal"
    SEQUENCE_OPTIMAL = "sequence_optimal"


class Unfollowed(Choice):
    """A turn whose hint the teacher does not follow: dropped, trained without its teacher term, or trained."""

    DROP = "drop"
    SKIP = "skip"
    TRAIN = "train"


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
    memory: list[str] | None  # the standing preferences the preference memory served it with
    failures: int | None  # training steps that raised with it in them
    refusals: int | None  # catch-up steps the canary refused with it in them


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
    memory: list[str] | None = None  # the standing preferences the preference memory added (chat/memory.py)


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
