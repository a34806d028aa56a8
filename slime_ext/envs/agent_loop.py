"""The multi-turn agent loop: a model acts in an ``Env`` through an ``Engine``, token in, token out.

One episode is one growing token sequence: the rendered first message (the prompt), then per step the
model's sampled tokens (trainable: loss mask 1, with the log-probs the engine recorded) followed by the
observation's tokens (not trainable: loss mask 0, log-prob 0.0). The model's tokens are never decoded and
re-tokenized into the sequence: the text is decoded only to hand the action to the env. Observation tokens
come from the model's own chat template (``ChatSegments``): the template's text that closes an assistant
turn, then the observation message and the generation prompt for the next assistant turn.

The episode ends when the env says done, after ``max_turns`` steps, or when the next step would not fit
in ``context_budget`` tokens (then ``reason`` says so). Its reward is the env's outcome (the task's own
check, in [-1, 1]), optionally combined with step-wise judge scores (``combine_rewards``). The step judge is
switched on by ``openclaw-rl env eval/train --step-judge`` and the Slime hook's ``step_judge`` setting, both
through ``make_step_judge`` (checked by ``step_judge_problems``).

Images. A setting that shows images (gui with ``vision``: ``observation_images``) puts them before the text of
the message they go with; the renderer must then be a vision one (``slime_ext.chat.vision.VisionRenderer``),
whose ids hold each image's placeholder run, and the engine gets every image of the sequence so far with
each request (SGLang's ``image_data``; the embedded engine is text-only and refuses them). ``Episode.images``
keeps them in order, ``StepRecord.images`` how many came before the step's tokens.

Episodes become Slime ``Sample``s: one per episode (``episode_sample``; the default) or one per step
(``step_samples``: each step's model tokens as the response, everything before them as the prompt; the
siblings share ``rollout_id``). ``run_episodes`` runs many concurrently with a bound; env steps run in
threads so the engine keeps batching while a sandboxed command runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from slime_ext.engines.base import Engine, SamplingParams
from slime_ext.envs.base import Env, EnvTask, observation_images
from slime_ext.types import Sample

# (first message, action text, next-state text, next-state role) -> score in [-1, 1]
StepJudge = Callable[[str, str, str, str], Awaitable[float]]


class ChatSegments:
    """Token segments of the model's chat template around observations.

    ``observation_ids(text, role, ended)`` are the tokens that follow the model's sampled tokens when
    ``text`` comes back as a ``role`` message: the rest of the assistant turn's closing (``ended``: the
    model sampled its end-of-turn token; otherwise the template's end token is added too), the
    observation message, and the next assistant turn's generation prompt. Cut out of a rendered dummy
    conversation, so it relies on the template rendering a conversation as the concatenation
    of its messages (true of ChatML-style templates; checked, with a clear error otherwise). ``images`` (PNG
    bytes) go before a message's text, as image parts; only a vision renderer takes them."""

    def __init__(self, renderer: Any, tools: list[dict] | None = None):
        self.renderer = renderer
        self.tools = tools or []
        self._closing_cache: tuple[list[int], int, list[int]] | None = None

    def _message(self, role: str, text: str, images: Sequence[bytes]) -> dict:
        if not images:
            return {"role": role, "content": text}
        if not getattr(self.renderer, "vision", False):
            raise ValueError(f"the environment shows {len(images)} image(s) but this model's renderer is text-only: "
                             "images need a vision-language model (slime_ext.chat.vision.VisionRenderer)")
        return {"role": role, "content": [*({"type": "image", "image": im} for im in images),
                                          {"type": "text", "text": text}]}

    def prompt_ids(self, first_message: str, images: Sequence[bytes] = ()) -> list[int]:
        return self.renderer.render([self._message("user", first_message, images)], self.tools)

    def _render(self, extra: list[dict], add_generation_prompt: bool) -> list[int]:
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        return self.renderer.render(base + extra, self.tools, add_generation_prompt=add_generation_prompt)

    def _closing(self) -> tuple[list[int], int, list[int]]:
        """(the dummy conversation's tokens, its assistant turn's end token, the tokens after that end token)."""
        if not self._closing_cache:
            head = self._render([], add_generation_prompt=False)
            stops = set(_stop_ids(self.renderer.tokenizer))
            end = max((i for i, t in enumerate(head) if t in stops), default=None)
            if end is None:
                raise ValueError("the chat template closes an assistant turn without an end-of-turn token")
            self._closing_cache = (head, head[end], head[end + 1:])
        return self._closing_cache

    @property
    def end_token(self) -> int:
        """The token that closes an assistant turn in this template."""
        return self._closing()[1]

    def observation_ids(self, text: str, role: str, ended: bool, images: Sequence[bytes] = ()) -> list[int]:
        head, end_token, closing = self._closing()
        full = self._render([self._message(role, text, images)], add_generation_prompt=True)
        if full[: len(head)] != head:
            raise ValueError("this chat template does not render a conversation as the concatenation of its "
                             "messages; the agent loop cannot place observation tokens after sampled ones")
        return ([] if ended else [end_token]) + closing + full[len(head):]


def _stop_ids(tokenizer: Any) -> tuple[int, ...]:
    from slime_ext.chat.prompt import stop_token_ids

    return stop_token_ids(tokenizer)


@dataclasses.dataclass
class StepRecord:
    action: str  # the model's decoded message
    observation: str
    next_state: str  # what a step-wise judge sees
    start: int  # the step's model tokens are response[start:end]
    end: int
    info: dict[str, Any]
    score: float | None = None  # the step-wise judge's score, when there is a judge
    images: int = 0  # images in the sequence before the step's model tokens


@dataclasses.dataclass
class Episode:
    task: EnvTask
    prompt_ids: list[int]
    response_ids: list[int] = dataclasses.field(default_factory=list)  # model and observation tokens
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)  # policy version per model token
    images: list[bytes] = dataclasses.field(default_factory=list)  # every image shown, in sequence order
    steps: list[StepRecord] = dataclasses.field(default_factory=list)
    outcome: float = 0.0
    reward: float = 0.0
    reason: str = ""  # why it ended: the env's reason, "max_turns" or "context"
    truncated: bool = False  # ended by the turn limit or the context budget rather than by the env


def combine_rewards(outcome: float, step_scores: Sequence[float | None], step_weight: float) -> float:
    """The episode reward: the outcome plus ``step_weight`` times the mean step-wise judge score, clipped to
    [-1, 1]; steps without a score are left out, and with none (or weight 0) it is the outcome alone."""
    scores = [s for s in step_scores if s is not None]
    if not scores or step_weight == 0:
        return outcome
    return max(-1.0, min(1.0, outcome + step_weight * sum(scores) / len(scores)))


async def run_episode(engine: Engine, tokenizer: Any, segments: ChatSegments, env: Env, task: EnvTask,
                      sampling: SamplingParams, *, max_turns: int = 8, context_budget: int | None = None,
                      judge: StepJudge | None = None, step_weight: float = 0.0) -> Episode:
    """Play one episode of ``task`` in ``env`` (already built for the task's setting); see the module docstring."""
    budget = context_budget or engine.context_length
    stops = set(sampling.stop_token_ids)
    first = await asyncio.to_thread(env.reset, task)
    shown = observation_images(env)
    ep = Episode(task=task, prompt_ids=segments.prompt_ids(first, shown), images=shown)
    try:
        for _ in range(max_turns):
            room = budget - len(ep.prompt_ids) - len(ep.response_ids)
            if room <= 0:
                ep.reason, ep.truncated = "context", True
                break
            params = dataclasses.replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room))
            start = len(ep.response_ids)
            async for tok in engine.generate(ep.prompt_ids + ep.response_ids, params, images=tuple(ep.images)):
                ep.response_ids.append(tok.token_id)
                ep.logprobs.append(tok.logprob)
                ep.versions.append(tok.policy_version)
                ep.loss_mask.append(1)
            new = ep.response_ids[start:]
            ended = bool(new) and new[-1] in stops
            action = tokenizer.decode(new[:-1] if ended else new, skip_special_tokens=True)
            result = await asyncio.to_thread(env.step, action)
            record = StepRecord(action, result.observation, env.next_state_text(result), start,
                                len(ep.response_ids), dict(result.info), images=len(ep.images))
            if judge is not None:
                record.score = await judge(first, action, record.next_state, env.observation_role)
            ep.steps.append(record)
            if result.done:
                ep.reason = str(result.info.get("reason", "done"))
                ep.truncated = ep.reason == "max_turns"  # the env's own turn limit: cut short, like ours
                break
            shown = observation_images(env)
            obs = segments.observation_ids(result.observation, env.observation_role, ended, shown)
            if len(ep.prompt_ids) + len(ep.response_ids) + len(obs) >= budget:
                ep.reason, ep.truncated = "context", True
                break
            ep.images += shown
            ep.response_ids += obs
            ep.loss_mask += [0] * len(obs)
            ep.logprobs += [0.0] * len(obs)
        else:
            ep.reason, ep.truncated = "max_turns", True
        ep.outcome = await asyncio.to_thread(env.outcome)
    finally:
        await asyncio.to_thread(env.close)
    ep.reward = combine_rewards(ep.outcome, [s.score for s in ep.steps], step_weight)
    return ep


STEP_JUDGES = ("off", "heuristic", "openai")
JUDGE_KEY_ENV = "OPENCLAW_RL_JUDGE_KEY"  # the key of an openai step judge's endpoint; never logged
DEFAULT_STEP_WEIGHT = 0.5  # the step-score weight when a step judge is on and no weight is given


def step_judge_problems(kind: str, url: str | None, model: str | None, weight: float | None,
                        names: dict[str, str]) -> list[str]:
    """What is wrong with a step-wise judge configuration (empty when nothing is); ``names`` maps ``kind``,
    ``url``, ``model`` and ``weight`` to what the user called them (flags or settings keys). ``weight`` None
    means unset (0 without a judge, ``DEFAULT_STEP_WEIGHT`` with one)."""
    n = names
    if kind not in STEP_JUDGES:
        return [f"{n['kind']} must be one of {', '.join(STEP_JUDGES)}, got {kind!r}"]
    problems = []
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not 0.0 <= weight <= 1.0):
        problems.append(f"{n['weight']} must be a number in [0, 1], got {weight!r}")
    elif kind == "off" and weight:
        problems.append(f"{n['weight']} {weight:g} needs a step judge: set {n['kind']} heuristic or openai "
                        f"(with {n['kind']} off the reward is the outcome alone)")
    if kind == "openai":
        missing = [n[k] for k, v in (("url", url), ("model", model)) if not v]
        if missing:
            problems.append(f"{n['kind']} openai needs {' and '.join(missing)} (the endpoint's key comes from "
                            f"${JUDGE_KEY_ENV})")
    else:
        given = [n[k] for k, v in (("url", url), ("model", model)) if v]
        if given:
            problems.append(f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with {n['kind']} openai, "
                            f"not {kind}")
    return problems


def make_step_judge(kind: str, url: str | None = None, model: str | None = None, *,
                    api_key: str | None = None) -> Any:
    """The reward ``Judge`` (``slime_ext.judge``) a step-wise judge ``kind`` names, or None for ``off``:
    ``heuristic`` (the lexical next-state reader, one vote) or ``openai`` (the model ``model`` behind the
    OpenAI-compatible endpoint ``url``; the key ``api_key``, else ``$OPENCLAW_RL_JUDGE_KEY``). Wrap it with
    ``step_judge`` for ``run_episode``; ``close_step_judge`` releases an endpoint's HTTP session."""
    import os

    from slime_ext.judge import HeuristicBackend, Judge, OpenAIJudgeBackend

    if kind == "off":
        return None
    if kind == "heuristic":
        return Judge(HeuristicBackend())
    if kind == "openai":
        if not url or not model:
            raise ValueError("an openai step judge needs the endpoint's url and model")
        return Judge(OpenAIJudgeBackend(url, model, api_key or os.environ.get(JUDGE_KEY_ENV) or None))
    raise ValueError(f"unknown step judge {kind!r}; known: {', '.join(STEP_JUDGES)}")


async def close_step_judge(judge: Any) -> None:
    """Release what a ``make_step_judge`` judge holds (an endpoint's HTTP session); None is fine."""
    close = getattr(getattr(judge, "backend", None), "close", None)
    if close is not None:
        await close()


def mean_step_score(episodes: Sequence[Episode]) -> float | None:
    """The mean of the episodes' mean step-wise judge scores (episodes without a scored step left out);
    None when no step was scored (no step judge)."""
    means = [sum(s) / len(s) for s in ([st.score for st in e.steps if st.score is not None] for e in episodes) if s]
    return sum(means) / len(means) if means else None


def step_judge(judge: Any) -> StepJudge:
    """A ``StepJudge`` from our reward ``Judge`` (``slime_ext.judge``: heuristic, OpenAI-compatible endpoint or
    engine backends): the step is judged as a turn whose request is the task's first message, whose response
    is the action and whose next state is the env's ``next_state_text``; the majority vote is the score."""
    from slime_ext.judge import JudgeInput

    async def score(first: str, action: str, next_state: str, role: str) -> float:
        verdict = await judge.judge(JudgeInput([{"role": "user", "content": first}], action, None, next_state, role))
        return float(verdict.score)

    return score


def episode_sample(ep: Episode, *, rollout_id: int | None = None) -> Sample:
    """The whole episode as one Slime sample: observation tokens in the response with loss mask 0."""
    sample = Sample(tokens=ep.prompt_ids + ep.response_ids, response_length=len(ep.response_ids),
                    loss_mask=list(ep.loss_mask), rollout_log_probs=list(ep.logprobs), reward=ep.reward)
    _fill(sample, ep, rollout_id)
    sample.metadata.update(steps=len(ep.steps))
    score = mean_step_score([ep])
    if score is not None:  # a step judge scored the steps: their mean, next to the outcome
        sample.metadata.update(step_score=score)
    return sample


def step_samples(ep: Episode, *, rollout_id: int | None = None) -> list[Sample]:
    """One sample per step: the step's model tokens as the response (all trainable), the episode so far as
    the prompt; each gets the episode reward plus the weighted step score, if any; siblings share rollout_id."""
    out = []
    for i, st in enumerate(ep.steps):
        response = ep.response_ids[st.start:st.end]
        sample = Sample(tokens=ep.prompt_ids + ep.response_ids[:st.end], response_length=len(response),
                        loss_mask=[1] * len(response), rollout_log_probs=ep.logprobs[st.start:st.end],
                        reward=ep.reward)
        _fill(sample, ep, rollout_id)
        sample.metadata.update(step=i, step_score=st.score)
        out.append(sample)
    return out


def _fill(sample: Sample, ep: Episode, rollout_id: int | None) -> None:
    sample.status = Sample.Status.TRUNCATED if ep.truncated else Sample.Status.COMPLETED
    sample.rollout_id = rollout_id
    sample.label = ep.task.id
    sample.weight_versions = sorted({str(v) for v in ep.versions})
    sample.metadata = {"setting": ep.task.setting, "task_id": ep.task.id, "outcome": ep.outcome,
                       "reason": ep.reason}


async def run_episodes(engine: Engine, tokenizer: Any, renderer: Any, make_env: Callable[[], Env],
                       tasks: Sequence[EnvTask], sampling: SamplingParams, *, concurrency: int = 4,
                       on_episode: Callable[[int, int, Episode], None] | None = None,
                       **episode_kw: Any) -> list[Episode]:
    """Run one episode per task, at most ``concurrency`` at a time; results in task order. With a seed in
    ``sampling``, episode ``i`` samples with seed + i.
    ``on_episode(done, total, episode)`` is called as each one finishes (for progress output)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)
    segments: dict[int, ChatSegments] = {}
    done = 0

    async def one(i: int, task: EnvTask) -> Episode:
        nonlocal done
        # a seeded run gives each episode its own seed: the same task twice (a GRPO group, a repeated
        # evaluation) is two samples, not one sample twice
        params = sampling if sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + i)
        async with gate:
            env = make_env()
            seg = segments.setdefault(id(type(env)), ChatSegments(renderer, env.tools))
            ep = await run_episode(engine, tokenizer, seg, env, task, params, **episode_kw)
        done += 1
        if on_episode is not None:
            on_episode(done, len(tasks), ep)
        return ep

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))
