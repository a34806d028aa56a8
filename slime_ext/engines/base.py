"""The Engine contract shared by the local (transformers) engine and the SGLang client.

Invariants every engine keeps:
- ``generate`` is token-in / token-out: it never re-tokenizes. Each yielded ``TokenOut`` carries
  the sampled id, its log-prob under the sampling distribution (logits / temperature, before
  top-p truncation; raw logits when temperature is 0), and the policy version whose weights
  computed it. A temperature below ``GREEDY_BELOW`` (1e-6, SGLang's threshold) is greedy: 0.
- ``swap`` is atomic between decode steps and never fails an in-flight request: tokens before
  the swap carry the old version, tokens after it the new one.
- ``score(ids, start)`` returns teacher-forced log-probs (temperature 1) of ``ids[start:]``.
- A ``frozen_base`` request is computed with the base weights, whatever adapter is being served.
- ``generate``'s ``images`` (PNG bytes) are the images whose placeholder runs the prompt holds, in order
  (``slime_ext.chat.vision``); an engine that cannot see images (the embedded one) refuses a request with any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, Sequence

GREEDY_BELOW = 1e-6  # a temperature below this is greedy (temperature 0), as in SGLang


class EngineError(RuntimeError):
    """A generation or scoring request could not be served by the engine."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    min_new_tokens: int = 0  # no stop token is sampled before this many new tokens (renormalized without them)
    # Sample from the frozen base weights (the trained LoRA adapter disabled), for the ``self``
    # judge. An engine whose base weights were replaced by a full-weight update refuses it.
    frozen_base: bool = False

    def __post_init__(self) -> None:
        # logits / T overflows for tiny T (1e-39 is NaN in float32): below GREEDY_BELOW sampling is
        # greedy in all but name, so it is greedy by name too, and records raw-logit log-probs
        if self.temperature < GREEDY_BELOW:
            object.__setattr__(self, "temperature", 0.0)


@dataclass(frozen=True)
class TokenOut:
    token_id: int
    logprob: float
    policy_version: int


class Engine(Protocol):
    """What the server, judges and trainers need from an inference engine."""

    @property
    def policy_version(self) -> int: ...

    @property
    def context_length(self) -> int: ...

    def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                 images: Sequence[bytes] = ()) -> AsyncIterator[TokenOut]: ...

    async def score(self, ids: Sequence[int], start: int) -> list[float]: ...

    async def swap(self, update: Any, version: int) -> None: ...

    async def close(self) -> None: ...
