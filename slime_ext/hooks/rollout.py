"""Rollout-side hook: live conversations as Slime's rollout.

``live_rollout(args, rollout_id, data_source, evaluation=False)`` is Slime's rollout-function
signature. With our settings on ``args`` (``openclaw_rl:`` in the ``--custom-config-path`` YAML)
its first call starts a ``LiveSource`` in this process (Slime's RolloutManager): our API server
on the configured host and port, backed by the SGLang engine client pointed at Slime's router,
recording, judging and storing every turn exactly as ``openclaw-rl serve`` does. Each call then
blocks until ``rollout_batch_size`` judged turns with a training signal for the method are
ready (the embedded trainer's ``select_turns``: a turn is dropped for having no signal, never for
its age; Slime's batch size is fixed, so an old turn is corrected by the loss's capped ratio), and
returns them as groups of ``group_size`` samples (``--n-samples-per-prompt`` must equal it; 1 by
default: the recorded turn alone). Each turn handed to Slime is marked ``trained_in_version =
rollout_id + 1`` in the store (so it is never handed out twice, also after a restart); hinted
turns carry the teacher's log-probs in ``metadata["teacher_log_probs"]`` (scored through the
engine), which ``post_process_rewards`` moves onto the sample.

Groups (``group_size`` > 1; the embedded trainer's ``trainers/groups.py`` rule, through SGLang):
a hinted turn's group is its recorded sample plus ``group_size - 1`` fresh samples of the prompt
from the served policy (the weights Slime just synced) at ``group_temperature``, each scored by
the engine at temperature 1 for its ``rollout_log_probs`` and under the hinted prompt for its
teacher log-probs; rewards are the verdict and the implicit reward, and ``sample.reward`` holds
the group-normalized advantage (the raw reward in ``metadata["raw_reward"]``; a constant group's
reason in ``metadata["group_dropped"]``), which ``post_process_rewards`` passes through. An
unhinted turn has no teacher to reward fresh samples: its group is the recorded sample (its
verdict, as before) and ``group_size - 1`` copies with an all-zero loss mask, so every group has
the size Slime expects.

Temperature: every sample carries the temperature its ``rollout_log_probs`` are under
(``metadata["temperature"]``: the recorded turn's sampling temperature; 1 for fresh samples, which
are scored through ``Engine.score``), but Slime's trainer scores all of
them at one ``--rollout-temperature`` (it divides the logits by it, as the embedded trainer divides
each sample's by its own). So the serving temperature must equal it: at start-up, requests that name
no temperature must be sampled at ``--rollout-temperature`` (``sampling_defaults`` and the HF
checkpoint's ``generation_config.json``; greedy counts as 1), and a turn whose request named another
temperature is dropped with the reason. The teacher and fresh group samples are scored through
SGLang's ``score`` at temperature 1 (stock SGLang's input log-probs are the raw logits), so OPD and
Combine need ``--rollout-temperature 1``; the launch scripts set both from ``SAMPLING_DEFAULTS`` /
``ROLLOUT_TEMPERATURE`` (``scripts/slime_common.sh``).

Without our settings (Slime's own contract tests call it with ``args=None``), it takes its groups
from ``data_source`` like Slime's default rollout, so the same function also trains on a prompt
dataset whose samples already carry rewards.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from slime_ext.hooks.config import PLUGIN_KEY, plugin_config
from slime_ext.types import Method, RolloutFnEvalOutput, RolloutFnTrainOutput, Sample

log = logging.getLogger(__name__)

_SOURCES: dict[tuple[str, int], LiveSource] = {}


def live_rollout(args, rollout_id, data_source, evaluation=False):
    source = live_source(args) if getattr(args, PLUGIN_KEY, None) is not None else None
    if evaluation:
        samples = source.recent(getattr(args, "n_eval_samples", 32)) if source else [
            s for group in data_source.get_samples(1) for s in group]
        data = {"openclaw_live": {"rewards": [s.reward for s in samples],
                                  "truncated": [s.status == Sample.Status.TRUNCATED for s in samples],
                                  "samples": samples}}
        return RolloutFnEvalOutput(data=data, metrics={"openclaw/eval_samples": len(samples)})
    n = int(getattr(args, "rollout_batch_size", 1) or 1)
    if source is None:
        return RolloutFnTrainOutput(samples=data_source.get_samples(n), metrics={})
    samples = source.take(n, rollout_id)
    metrics = source.metrics(samples)  # before groups() puts group advantages in the rewards
    groups = source.groups(samples)
    return RolloutFnTrainOutput(samples=groups, metrics={**metrics, **source.group_metrics(groups)})


def live_source(args) -> LiveSource:
    """The process's LiveSource for these settings, started on first use."""
    cfg = plugin_config(args)
    key = (cfg.host, cfg.port)
    if key not in _SOURCES:
        from transformers import AutoTokenizer

        from slime_ext.engines.sglang import SGLangEngine

        if cfg.judge == "self":
            raise ValueError("judge: self needs the embedded engine (SGLang holds only the synced weights, no frozen "
                             "base); use judge: openai with a judge server (PRM_GPUS) or judge: heuristic")
        if int(getattr(args, "n_samples_per_prompt", 1) or 1) != cfg.group_size:
            raise ValueError(f"--n-samples-per-prompt must equal the plugin's group_size ({cfg.group_size}): each live "
                             "turn is a group of its recorded sample and group_size - 1 fresh ones")
        if Method.parse(cfg.method).uses_hints and cfg.teacher != "policy":
            raise ValueError("teacher: on Slime the teacher is the current policy served by SGLang (it holds no "
                             "frozen base); set teacher: policy (the launch scripts do)")
        if cfg.distill != "token":
            raise ValueError(f"distill: {cfg.distill} needs the embedded backend: Slime passes only per-token teacher "
                             "log-probs to the trainer, not the teacher's top-k (see docs/slime.md); use distill: token")
        if cfg.sft_coef:
            raise ValueError("sft_coef (context distillation) needs the embedded backend for now; set sft_coef: 0")
        from slime_ext.serve import served_sampling_defaults

        rollout_temperature = float(getattr(args, "rollout_temperature", 1.0))
        why = rollout_temperature_error(cfg, served_sampling_defaults(cfg, args.hf_checkpoint).temperature,
                                        rollout_temperature)
        if why:
            raise ValueError(why)
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
        tokenizer = AutoTokenizer.from_pretrained(args.hf_checkpoint)
        _SOURCES[key] = LiveSource(cfg, lambda: SGLangEngine.connect(url), tokenizer,
                                   rollout_temperature=rollout_temperature).start()
    return _SOURCES[key]


def rollout_temperature_error(cfg, serving_temperature: float, rollout_temperature: float) -> str | None:
    """Why Slime would train these settings' turns at the wrong temperature (see the module docstring),
    or None. ``serving_temperature``: what a request naming none is sampled at."""
    from slime_ext.logprobs import scoring_temperature

    serving = scoring_temperature(serving_temperature)
    if abs(serving - rollout_temperature) > 1e-6:
        return (f"--rollout-temperature {rollout_temperature:g}: requests that name no temperature are sampled at "
                f"{serving_temperature:g} (sampling_defaults: {cfg.sampling_defaults}), and Slime must score them at "
                f"that temperature; set --rollout-temperature {serving:g} (ROLLOUT_TEMPERATURE in the launch scripts) "
                "or sampling_defaults: openai (1.0)")
    if abs(rollout_temperature - 1.0) > 1e-6 and Method.parse(cfg.method).uses_hints:
        return (f"--rollout-temperature {rollout_temperature:g} with method {cfg.method}: the teacher (and fresh group "
                "samples) are scored through SGLang at temperature 1, so their log-probs would not compare with the "
                "rollout's; serve and train at 1 (sampling_defaults: openai, --rollout-temperature 1.0)")
    return None


class LiveSource:
    """Our API server in this process (its own thread and event loop), and the judged turns it
    recorded, handed out as Slime samples."""

    def __init__(self, cfg, engine, tokenizer, *, poll_s: float = 0.5, rollout_temperature: float = 1.0) -> None:
        """``engine``: an Engine, or an async factory of one (an engine that belongs to an event
        loop, like ``SGLangEngine.connect``, is made on the server's loop). ``rollout_temperature``:
        Slime's ``--rollout-temperature``, the one temperature its trainer scores every sample at."""
        from slime_ext.chat.prompt import PromptRenderer
        from slime_ext.store import Store

        self.cfg = cfg
        self._make_engine = engine if callable(engine) else None
        self.engine = None if callable(engine) else engine
        self.store = Store(cfg.resolved_run_dir())  # this thread's connection; the server opens its own
        self.server = None
        self.renderer = PromptRenderer(tokenizer)
        self.tokenizer = tokenizer
        self.poll_s = poll_s
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner = None
        self._listener = None
        self._background: list[asyncio.Task] = []  # the judge loop, started with the server
        self._error: Exception | None = None
        self._next_index = 0
        self.port = cfg.port
        self.rollout_temperature = rollout_temperature

    # ----------------------------------------------------------------- the server thread
    def start(self, timeout_s: float = 60.0) -> LiveSource:
        threading.Thread(target=self._serve, name="openclaw-rl-server", daemon=True).start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"the API server did not start on {self.cfg.host}:{self.cfg.port} in {timeout_s:g} s")
        if self._error is not None:
            raise RuntimeError(f"the API server could not start on {self.cfg.host}:{self.cfg.port}: {self._error}")
        log.info("openclaw-rl API at http://%s:%d/v1 (records in %s)", self.cfg.host, self.port, self.store.run_dir)
        return self

    def _serve(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self.loop)

        async def up() -> None:
            from slime_ext.serve import build_server, start_background

            if self._make_engine is not None:
                self.engine = await self._make_engine()
            self.server = build_server(self.cfg, engine=self.engine, tokenizer=self.tokenizer)
            self._runner = web.AppRunner(self.server.app(), access_log=None)
            await self._runner.setup()
            # behind the connection guard, as `serve` is: read timeouts and a cap on open connections
            self._listener = await self.server.guard.listen(self._runner.server, self.cfg.host, self.cfg.port)
            self._background = start_background(self.server)  # the judge loop (and a watcher, if any)
            self.port = self._listener.sockets[0].getsockname()[1]
            self._ready.set()

        try:
            self.loop.run_until_complete(up())
        except Exception as e:  # reported by start()
            log.error("the API server could not start: %s: %s", type(e).__name__, e)
            self._error = e
            self._ready.set()
            return
        self.loop.run_forever()

    def stop(self) -> None:
        async def down() -> None:
            for task in self._background:
                task.cancel()
            self._listener.close()
            await self._runner.cleanup()
            await self.engine.close()
            self.server.store.close()

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.store.close()

    def _on_loop(self, coro, timeout_s: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    # ----------------------------------------------------------------- samples
    def take(self, n: int, rollout_id: int, timeout_s: float | None = None) -> list[Sample]:
        """Block until ``n`` turns with a training signal are ready; return them as samples."""
        from slime_ext.trainers.loop import select_turns

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            method = Method.BINARY if self.cfg.method == Method.NONE else Method.parse(self.cfg.method)
            usable = select_turns(self.store, self.store.trainable_turns(n * 4), method, self.engine.policy_version, n,
                                  check=self._temperature_mismatch)
            if len(usable) == n:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{len(usable)} of {n} samples ready after {timeout_s:g} s")
            time.sleep(self.poll_s)
        samples = [self._sample(row) for row in usable]
        self.store.mark_trained([(r["session_id"], r["idx"]) for r in usable], rollout_id + 1)
        return samples

    def _temperature_mismatch(self, row: dict[str, Any]) -> str | None:
        """Why a turn cannot train on Slime: sampled at a temperature other than ``--rollout-temperature``."""
        from slime_ext.logprobs import scoring_temperature
        from slime_ext.trainers.loop import sampled_temperature

        sampled = sampled_temperature(row)
        if abs(scoring_temperature(sampled) - self.rollout_temperature) <= 1e-6:
            return None
        return (f"sampled at temperature {sampled:g}: Slime scores every sample at --rollout-temperature "
                f"{self.rollout_temperature:g}")

    def _sample(self, row: dict[str, Any], score_teacher: bool = True) -> Sample:
        from slime_ext.teacher import teacher_prompt_ids
        from slime_ext.trainers.loop import turn_to_sample

        sample = turn_to_sample(row)
        sample.index = self._next_index
        self._next_index += 1
        sample.status = Sample.Status.TRUNCATED if row.get("finish_reason") == "length" else Sample.Status.COMPLETED
        sample.response = self.tokenizer.decode(row["response_token_ids"], skip_special_tokens=True)
        sample.prompt = row.get("messages") or ""
        sample.weight_versions = [str(row["policy_version"])]
        if score_teacher and row.get("hint") and Method.parse(self.cfg.method).uses_hints:
            prompt = teacher_prompt_ids(self.renderer, row["messages"], row["hint"], row.get("tools"), row.get("tool_choice"),
                                        (row.get("sampling") or {}).get("chat_template_kwargs"))
            ids = prompt + row["response_token_ids"]
            teacher = self._on_loop(self.engine.score(ids, len(prompt)), timeout_s=600)
            sample.metadata["teacher_log_probs"] = teacher
            sample.metadata["teacher_prompt_ids"] = prompt
            self.store.set_teacher_logprobs(row["session_id"], row["idx"], teacher)
        return sample

    def groups(self, samples: list[Sample]) -> list[list[Sample]]:
        """Each sample's group of ``group_size`` (see the module docstring)."""
        size = self.cfg.group_size
        if size <= 1:
            return [[s] for s in samples]
        return [self._group(s, size) for s in samples]

    def _group(self, recorded: Sample, size: int) -> list[Sample]:
        from slime_ext.algorithms.groups import group_advantages, implicit_reward

        t_prompt = recorded.metadata.get("teacher_prompt_ids")
        members = [recorded]
        if t_prompt is not None:
            prompt = recorded.tokens[: len(recorded.tokens) - recorded.response_length]
            for ids, student, teacher, stopped in self._on_loop(self._fresh(prompt, t_prompt, size - 1), timeout_s=600):
                fresh = self._fresh_sample(recorded, prompt, ids, student, teacher, stopped)
                fresh.reward = implicit_reward(teacher, student, self.cfg.implicit_reward_scale)
                members.append(fresh)
        if len(members) > 1:
            rewards = [float(m.reward) for m in members]
            adv = group_advantages(rewards, self.cfg.group_estimator)  # type: ignore[arg-type]
            for m, r, a in zip(members, rewards, adv.advantages):
                m.metadata["raw_reward"], m.reward = r, a
            if adv.dropped:
                recorded.metadata["group_dropped"] = adv.dropped
        while len(members) < size:  # no teacher (or empty samples): zero-mask copies keep the group's size
            members.append(self._padding(recorded))
        return members

    async def _fresh(self, prompt: list[int], t_prompt: list[int], n: int) -> list[tuple[list[int], list[float], list[float], bool]]:
        """``n`` fresh samples of ``prompt`` from the served policy: (ids, their log-probs at temperature 1,
        the teacher's under ``t_prompt``, whether a stop token ended them); empty samples are left out."""
        from slime_ext.chat.prompt import stop_token_ids
        from slime_ext.engines.base import SamplingParams

        stops = stop_token_ids(self.tokenizer)
        sampling = SamplingParams(temperature=self.cfg.group_temperature, max_new_tokens=self.cfg.group_max_new_tokens,
                                  stop_token_ids=stops)

        async def one():
            ids = [out.token_id async for out in self.engine.generate(prompt, sampling)]
            if not ids:
                return None
            student = await self.engine.score(prompt + ids, len(prompt))
            teacher = await self.engine.score(t_prompt + ids, len(t_prompt))
            return ids, list(student), list(teacher), ids[-1] in stops

        return [x for x in await asyncio.gather(*(one() for _ in range(n))) if x is not None]

    def _fresh_sample(self, recorded: Sample, prompt: list[int], ids: list[int], student: list[float],
                      teacher: list[float], stopped: bool) -> Sample:
        version = self.engine.policy_version
        sample = Sample(tokens=prompt + ids, response_length=len(ids), loss_mask=[1] * len(ids), rollout_log_probs=student,
                        session_id=recorded.session_id,
                        metadata={"session_id": recorded.metadata["session_id"], "turn": recorded.metadata["turn"],
                                  "fresh": True, "teacher_log_probs": teacher, "policy_version": version,
                                  "policy_version_end": version,
                                  "temperature": 1.0})  # what its log-probs are under: engine.score's
        sample.index, self._next_index = self._next_index, self._next_index + 1
        sample.status = Sample.Status.COMPLETED if stopped else Sample.Status.TRUNCATED
        sample.response = self.tokenizer.decode(ids, skip_special_tokens=True)
        sample.prompt = recorded.prompt
        sample.weight_versions = [str(version)]
        return sample

    def _padding(self, recorded: Sample) -> Sample:
        """A copy of ``recorded`` that trains nothing (all-zero loss mask, reward 0)."""
        import copy

        pad = copy.copy(recorded)
        pad.loss_mask, pad.reward = [0] * recorded.response_length, 0.0
        pad.metadata = {**recorded.metadata, "padding": True}
        pad.index, self._next_index = self._next_index, self._next_index + 1
        return pad

    def group_metrics(self, groups: list[list[Sample]]) -> dict[str, float]:
        """Groups with fresh samples, constant ones, fresh samples and their mean implicit reward."""
        fresh = [m.metadata["raw_reward"] for g in groups for m in g if m.metadata.get("fresh")]
        if self.cfg.group_size <= 1:
            return {}
        return {"openclaw/groups": sum(any(m.metadata.get("fresh") for m in g) for g in groups),
                "openclaw/constant_groups": sum("group_dropped" in g[0].metadata for g in groups),
                "openclaw/fresh_samples": len(fresh),
                "openclaw/fresh_reward_mean": sum(fresh) / len(fresh) if fresh else 0.0}

    def recent(self, n: int) -> list[Sample]:
        """The latest judged turns as samples, without handing them out (for evaluation)."""
        return [self._sample(r, score_teacher=False) for r in self.store.recent_judged(n)]

    def metrics(self, samples: list[Sample]) -> dict[str, float]:
        """The rollout's metrics: rewards, hints, store counts and the staleness of the turns handed out."""
        from slime_ext.algorithms.staleness import staleness_metrics

        counts = self.store.counts()
        ages = [self.engine.policy_version - s.metadata["policy_version"] for s in samples]
        return {"openclaw/reward_mean": sum(float(s.reward) for s in samples) / max(1, len(samples)),
                "openclaw/hinted": sum("teacher_log_probs" in s.metadata for s in samples),
                "openclaw/judged_turns": counts["judged_turns"], "openclaw/dropped_turns": counts["dropped_turns"],
                **{f"openclaw/{k}": v for k, v in staleness_metrics(ages, self.cfg.max_staleness).items()}}
