"""Warm-start data: a setting's scripted solutions played through the real environment by the agent loop.

A demonstration is an ``agent_loop.run_episode`` whose engine is a ``ScriptedActor``: instead of sampling, it
emits the tokens of the setting's next scripted message (``register_setting``'s ``demonstrate_fn``) and the chat
template's end-of-turn token. Everything else is the live loop's: the first message and every observation are the
environment's own, placed with the same ``ChatSegments``, so a demonstration's ids are the ids the agent loop
would hold had the model written those messages, and its loss mask covers the agent's tokens only.

Only train tasks are played (``demonstrations`` refuses the held-out split); a script that does not earn +1, or
that ends before its episode does, is left out and reported. ``write_demos`` / ``read_demos`` keep the samples as
JSON lines (``tokens``, ``response_length``, ``loss_mask``, ``label``, ``metadata``), the data ``env sft`` trains
on and Slime's SFT rollout (``slime_ext.hooks.sft``) reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from slime_ext.engines.base import SamplingParams, TokenOut
from slime_ext.envs.agent_loop import ChatSegments, Episode, episode_sample, run_episode
from slime_ext.envs.base import EnvTask, demonstrator, list_tasks, make_env
from slime_ext.types import Sample


class ScriptEnded(RuntimeError):
    """The scripted solution ran out of messages before the environment ended the episode."""


class ScriptedActor:
    """An ``Engine`` that plays a script: each ``generate`` emits the next message's tokens, then ``end_token``.
    ``messages()`` is called at the first ``generate`` (after the env was reset, so a script may read its state)."""

    policy_version = 0

    def __init__(self, tokenizer: Any, end_token: int, messages: Callable[[], Iterable[str]],
                 context_length: int) -> None:
        self.tokenizer, self.end_token, self.context_length = tokenizer, end_token, context_length
        self._messages, self._script = messages, None

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                       images: Sequence[bytes] = ()) -> AsyncIterator[TokenOut]:
        if self._script is None:
            self._script = iter(self._messages())
        text = next(self._script, None)
        if text is None:
            raise ScriptEnded("the scripted solution ended before the episode did")
        for tid in [*self.tokenizer.encode(text, add_special_tokens=False), self.end_token]:
            yield TokenOut(tid, 0.0, self.policy_version)


async def demonstrate(tokenizer: Any, renderer: Any, task: EnvTask, *, max_turns: int,
                      context_length: int) -> Episode:
    """One task's scripted solution as an agent-loop episode (``ScriptEnded`` when the script runs out)."""
    env = make_env(task.setting, max_turns=max_turns)
    segments = ChatSegments(renderer, env.tools)
    script = demonstrator(task.setting)
    actor = ScriptedActor(tokenizer, segments.end_token, lambda: script(task, env), context_length)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=context_length, stop_token_ids=(segments.end_token,))
    return await run_episode(actor, tokenizer, segments, env, task, sampling, max_turns=max_turns)


def demonstrations(setting: str, tokenizer: Any, renderer: Any, *, split: str = "train", max_turns: int = 8,
                   context_length: int = 8192, limit: int | None = None,
                   progress: Callable[[str], None] = lambda _: None) -> tuple[list[Sample], dict[str, str]]:
    """The warm-start samples of ``setting``'s ``split`` (train only: held-out tasks never become data), one per
    task whose script earns +1, and {task id: why it was left out} for the others."""
    if split != "train":
        raise ValueError(f"demonstrations come from the train split only (got {split!r}): held-out tasks are "
                         "what the warm start is measured on")
    tasks = list_tasks(setting, split)[:limit]
    samples, skipped = [], {}
    for i, task in enumerate(tasks, 1):
        try:
            ep = asyncio.run(demonstrate(tokenizer, renderer, task, max_turns=max_turns,
                                         context_length=context_length))
        except ScriptEnded as e:
            skipped[task.id] = str(e)
            continue
        if ep.outcome < 1.0:
            skipped[task.id] = f"the script earned {ep.outcome:+.2f}, not +1 ({ep.reason})"
        elif ep.truncated:
            skipped[task.id] = f"cut short ({ep.reason}) at {max_turns} turns"
        else:
            samples.append(episode_sample(ep))
        progress(f"[{setting}] demonstration {i}/{len(tasks)}: {task.id} "
                 + (f"left out: {skipped[task.id]}" if task.id in skipped else
                    f"{len(ep.steps)} steps, {sum(ep.loss_mask)} agent tokens, {len(ep.loss_mask) - sum(ep.loss_mask)} "
                    "observation tokens"))
    return samples, skipped


def write_demos(samples: Sequence[Sample], path: Path) -> None:
    """Demonstration samples as JSON lines (the module docstring's fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps({"tokens": s.tokens, "response_length": s.response_length, "loss_mask": s.loss_mask,
                                "label": s.label, "metadata": s.metadata}) + "\n")


def read_demos(path: Path) -> list[Sample]:
    """The samples ``write_demos`` wrote; ValueError naming the line that is not one."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tokens, r, mask = row["tokens"], int(row["response_length"]), row["loss_mask"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a demonstration row ({e})") from None
        if not 0 < r <= len(tokens) or len(mask) != r:
            raise ValueError(f"{path}:{n}: response_length {r} and loss_mask ({len(mask)}) do not fit "
                             f"{len(tokens)} tokens")
        out.append(Sample(tokens=list(tokens), response_length=r, loss_mask=list(mask), label=row.get("label"),
                          reward=1.0, rollout_log_probs=[0.0] * r, metadata=dict(row.get("metadata") or {}),
                          status=Sample.Status.COMPLETED))
    return out
