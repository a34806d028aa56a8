"""Judge backends and the async runners that turn m of their votes into a ``Verdict``.

Every backend has ``async def vote(messages, *, seed, inputs=None) -> str``: it returns the raw
judge text, and one parse path per task serves all of them (``parse_vote`` here, ``parse_hint``
in ``hints.py``). ``messages`` are the runner's prompt (``build_judge_messages`` for ``Judge``);
``inputs`` is the turn being judged, for backends that read it directly (the heuristic does;
model backends ignore it). A backend that answers from the turn rather than the prompt serves
one task only and names it in ``task`` ("judge" or "hint"); a runner of another task refuses it.

- ``OpenAIJudgeBackend``: any OpenAI-compatible ``/v1/chat/completions`` endpoint (aiohttp).
- ``EngineJudgeBackend``: an ``Engine`` (the ``self`` judge), prompt rendered with the model's chat
  template by ``PromptRenderer``.
- ``HeuristicBackend``: the lexical classifier of ``heuristic.py``.
- a user's backend, named by ``--judge module:attr`` (``slime_ext.plugins``; ``docs/extending.md``):
  only ``vote`` is required; ``name``, ``default_votes`` (else 3), ``task`` (``"judge"``: it reads the
  turn for the reward only, and hints come from the heuristic's reading) and ``hint_backend`` (the
  backend the hint judge uses instead of this one) are read when present.

The voting machinery is ``VoteRunner`` (``Judge`` and ``hints.HintJudge`` are its two tasks):
``collect`` never raises: a vote that fails or times out abstains and its reason is kept (and a
vote whose text does not parse abstains in the task's reading). Votes of all turns run by one
runner share one semaphore, so at most ``max_concurrency`` backend calls run at once (runners
given the same ``semaphore`` share the bound); the per-vote timeout counts from when a vote gets
its slot, so a queue of waiting votes does not time them out. Logs name the failure's type and a
short message only: never a traceback, a key or a header.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from slime_ext.judge.heuristic import heuristic_explain
from slime_ext.judge.prompts import DEFAULT_MAX_CONTEXT_CHARS, build_judge_messages
from slime_ext.judge.votes import Verdict, majority, parse_vote
from slime_ext.sessions import message_text

log = logging.getLogger(__name__)

DEFAULT_MODEL_VOTES = 3
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_CONCURRENCY = 4


def backend_name(backend: Any) -> str:
    """A backend's ``name``, or its class name (a user's backend need not set one)."""
    return getattr(backend, "name", None) or type(backend).__name__


class JudgeError(RuntimeError):
    """A judge backend could not produce an answer (the vote abstains)."""


@dataclass(frozen=True)
class JudgeInput:
    """One assistant turn to judge: the request it answered, the response, and what came next."""

    request_messages: list[dict[str, Any]]
    response_text: str
    response_tool_calls: list[dict[str, Any]] | None
    next_state: str
    next_state_role: str  # "user" or "tool"

    @property
    def request_text(self) -> str:
        """The last user message of the request ("" when there is none)."""
        for m in reversed(self.request_messages):
            if m.get("role") == "user":
                return message_text(m)
        return ""


class JudgeBackend(Protocol):
    name: str
    default_votes: int

    async def vote(self, messages: list[dict[str, str]], *, seed: int, inputs: JudgeInput | None = None) -> str: ...


def error_text(exc: BaseException, limit: int = 200) -> str:
    """``"ErrorType: message"`` on one line, the message cut to ``limit`` characters (never a traceback)."""
    msg = str(exc).replace("\n", " ").strip()
    return f"{type(exc).__name__}: {msg[:limit]}" if msg else type(exc).__name__


VoteResult = tuple[str | None, str]
"""One vote: ``(answer, text)``; ``answer`` is the backend's text, or ``None`` when the vote failed or
timed out; ``text`` is what is stored: the answer, or the reason it abstained (``"abstained: ..."``)."""


class VoteRunner:
    """Runs ``votes`` votes of a backend per turn, concurrently within a shared bound; never raises.

    A task subclasses it and sets ``prompt_builder`` (a function with ``build_judge_messages``'s
    signature) and ``task`` (its name in logs), then reads the answers that ``collect`` returns.
    Pass another runner's ``semaphore`` to share its concurrency bound (``max_concurrency`` is then
    unused), e.g. when two tasks query the same judge model.
    """

    prompt_builder: ClassVar[Callable[..., list[dict[str, str]]]]
    task: ClassVar[str]

    def __init__(
        self,
        backend: JudgeBackend,
        *,
        votes: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        seed: int = 0,
        max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
        semaphore: asyncio.Semaphore | None = None,
    ) -> None:
        serves = getattr(backend, "task", None)
        if serves is not None and serves != self.task:
            raise ValueError(f"the {backend_name(backend)} backend answers the {serves!r} task, not {self.task!r}")
        self.backend = backend
        self.votes = votes if votes is not None else getattr(backend, "default_votes", DEFAULT_MODEL_VOTES)
        if self.votes < 1:
            raise ValueError("votes must be at least 1")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.timeout_s = timeout_s
        self.seed = seed
        self.max_context_chars = max_context_chars
        self.semaphore = semaphore if semaphore is not None else asyncio.Semaphore(max_concurrency)

    async def collect(self, inputs: JudgeInput) -> list[VoteResult]:
        """``self.votes`` results, vote i with seed ``self.seed + i``; a turn whose prompt cannot be
        built has every vote abstain."""
        try:
            messages = self.prompt_builder(
                inputs.request_messages, inputs.response_text, inputs.response_tool_calls,
                inputs.next_state, inputs.next_state_role, self.max_context_chars,
            )
        except Exception as e:  # malformed turn: every vote abstains
            reason = f"abstained: could not build the {self.task} prompt ({error_text(e)})"
            log.warning("%s: %s", self.task, reason)
            return [(None, reason)] * self.votes
        return list(await asyncio.gather(*(self._one(messages, inputs, self.seed + i) for i in range(self.votes))))

    async def _one(self, messages: list[dict[str, str]], inputs: JudgeInput, seed: int) -> VoteResult:
        try:
            async with self.semaphore:
                text = await asyncio.wait_for(self.backend.vote(messages, seed=seed, inputs=inputs), self.timeout_s)
        except asyncio.TimeoutError:
            reason = f"abstained: timed out after {self.timeout_s:g}s"
            log.warning("%s vote (%s): %s", self.task, backend_name(self.backend), reason)
            return None, reason
        except asyncio.CancelledError:
            raise
        except Exception as e:
            reason = f"abstained: {error_text(e)}"
            log.warning("%s vote (%s): %s", self.task, backend_name(self.backend), reason)
            return None, reason
        text = text if isinstance(text, str) else str(text)
        return text, text  # an unparsable answer abstains in the task's reading; its text shows why


class Judge(VoteRunner):
    """The reward judge: the majority of ``votes`` scores (``parse_vote``) per turn; never raises."""

    prompt_builder = staticmethod(build_judge_messages)
    task = "judge"

    async def judge(self, inputs: JudgeInput) -> Verdict:
        """The majority verdict of ``self.votes`` votes; abstentions (``None``) keep their reason."""
        results = await self.collect(inputs)
        votes = [parse_vote(answer) for answer, _ in results]
        return Verdict(score=majority(votes), votes=votes, texts=[text for _, text in results])


class HeuristicBackend:
    """The lexical next-state classifier; deterministic, so one vote is enough.

    It reads the turn (``inputs``), not the prompt; ``answer`` writes its reading in the answer
    format of the task it serves (subclasses serve other tasks, e.g. ``hints.HeuristicHintBackend``).
    """

    name = "heuristic"
    default_votes = 1
    task = "judge"

    async def vote(self, messages: list[dict[str, str]], *, seed: int, inputs: JudgeInput | None = None) -> str:
        if inputs is None:
            raise JudgeError("the heuristic judge needs the turn (inputs)")
        return self.answer(inputs)

    def answer(self, inputs: JudgeInput) -> str:
        """The rule that decided and the score, in the reward judge's answer format."""
        score, reason = heuristic_explain(inputs.next_state, inputs.next_state_role, inputs.request_text)
        return f"{reason}\n\\boxed{{{score}}}"


class OpenAIJudgeBackend:
    """A judge model behind an OpenAI-compatible chat-completions endpoint.

    ``url`` may be the server root (``http://host:8000``), its ``/v1`` base, or the full
    ``/v1/chat/completions`` address. The key is sent as a bearer token and never logged or shown
    in ``repr``. Call ``close()`` when done (one HTTP session is kept per event loop).
    """

    name = "openai"
    default_votes = DEFAULT_MODEL_VOTES

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 1.0,
        *,
        max_tokens: int = 1024,
        http_timeout_s: float = 300.0,
    ) -> None:
        self.url = self.endpoint(url)
        self.model = model
        self._api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.http_timeout_s = http_timeout_s
        self._session = None
        self._session_loop = None

    @staticmethod
    def endpoint(url: str) -> str:
        u = url.rstrip("/")
        if u.endswith("/chat/completions"):
            return u
        if u.endswith("/v1"):
            return u + "/chat/completions"
        return u + "/v1/chat/completions"

    def __repr__(self) -> str:
        return f"OpenAIJudgeBackend(url={self.url!r}, model={self.model!r}, key={'set' if self._api_key else 'none'})"

    async def _http(self):
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.http_timeout_s))
            self._session_loop = loop
        return self._session

    async def vote(self, messages: list[dict[str, str]], *, seed: int, inputs: JudgeInput | None = None) -> str:
        import aiohttp

        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": seed,
            "n": 1,
            "stream": False,
        }
        session = await self._http()
        try:
            async with session.post(self.url, json=body, headers=headers) as resp:
                if resp.status != 200:
                    detail = (await resp.text())[:200].replace("\n", " ")
                    raise JudgeError(f"HTTP {resp.status} from the judge endpoint: {detail}")
                data = await resp.json(content_type=None)
        except aiohttp.ClientError as e:  # connection refused, reset, bad payload: no request details
            raise JudgeError(f"judge endpoint unreachable ({type(e).__name__})") from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeError("judge endpoint returned no choices[0].message.content") from None
        if not isinstance(content, str):
            raise JudgeError("judge answer has no text content")
        return content

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


class EngineJudgeBackend:
    """The ``self`` judge: samples judge answers from an ``Engine``.

    With ``frozen_base`` (what ``serve --judge self`` uses) the engine computes the votes with its
    base weights, the trained adapter disabled, so the judge does not drift with the policy it
    judges. The judge messages are rendered with the tokenizer's chat template
    (``PromptRenderer``); generation stops at the end-of-turn tokens or ``max_new_tokens``.
    """

    name = "self"
    default_votes = DEFAULT_MODEL_VOTES

    def __init__(self, engine: Any, tokenizer: Any, *, temperature: float = 1.0, max_new_tokens: int = 512,
                 frozen_base: bool = False) -> None:
        from slime_ext.chat.prompt import PromptRenderer, stop_token_ids

        self.engine = engine
        self.tokenizer = tokenizer
        self.renderer = PromptRenderer(tokenizer)
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.frozen_base = frozen_base
        self.stop_ids = stop_token_ids(tokenizer)

    async def vote(self, messages: list[dict[str, str]], *, seed: int, inputs: JudgeInput | None = None) -> str:
        from slime_ext.engines.base import SamplingParams

        prompt_ids = self.renderer.render(messages, [])
        sampling = SamplingParams(
            temperature=self.temperature, max_new_tokens=self.max_new_tokens, seed=seed, stop_token_ids=self.stop_ids,
            frozen_base=self.frozen_base,
        )
        tokens: list[int] = []
        stream = self.engine.generate(prompt_ids, sampling)
        try:
            async for out in stream:
                if out.token_id in self.stop_ids:
                    break
                tokens.append(out.token_id)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return self.tokenizer.decode(tokens, skip_special_tokens=True)
