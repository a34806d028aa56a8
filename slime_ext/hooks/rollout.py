"""Rollout-side hook: live conversations as Slime's rollout, through the one learning pipeline.

``live_rollout(args, rollout_id, data_source, evaluation=False)`` is Slime's rollout-function
signature. With our settings on ``args`` (``openclaw_rl:`` in the ``--custom-config-path`` YAML)
its first call checks them (``hooks/config.py: slime_refusals``: a setting this driver cannot run as
the embedded trainer does is refused, named, before anything starts) and starts a ``LiveSource`` in
this process (Slime's RolloutManager): our API server on the configured host and port, backed by the
SGLang engine client pointed at Slime's router, recording, judging and storing every turn exactly as
``openclaw-rl serve`` does. Each call then blocks until ``rollout_batch_size`` judged turns are
prepared by the same pipeline the embedded trainer runs (``learning/pipeline.py``: select, teach,
teacher check, groups), with ``EngineScorer``s on SGLang (the synced policy) as policy and teacher,
and returns them as groups of ``group_size`` samples (``--n-samples-per-prompt`` must equal it; an
unhinted turn's group is padded with zero-loss-mask copies). Each turn handed to Slime is marked
``trained_in_version = rollout_id + 1`` in the store, so it is never handed out twice, also after a
restart.

**What reaches the loss.** Slime hands its trainer a fixed set of per-sample lists and no other field;
the only per-token float list besides the rollout log-probs is ``teacher_log_probs``. The pipeline's
per-token advantage (``learning/objective.py``: the verdict term with its baseline or group advantage,
the teacher term, verdict credit) is computed here, once, as the embedded step computes it, and
travels as ``teacher_log_probs = rollout_log_probs + advantage``; ``hooks/loss.py`` reads ``advantage =
teacher_log_probs - rollout_log_probs`` (Slime does nothing else with the field without ``--use-opd``,
though its logged ``teacher_log_probs`` mean is then that sum). With ``distill: topk_select_token``
the field carries the teacher term alone and ``sample.reward`` the verdict term, which Slime's
estimator (grpo, unnormalized, as the launch scripts set it) spreads over the tokens as ``advantages``.

Temperature: Slime's trainer scores every sample at one ``--rollout-temperature``, so requests that
name no temperature must be sampled at it (``rollout_temperature_error``, checked at start-up), a turn
whose request named another is dropped with the reason, fresh group samples must be drawn at it
(``group_temperature``), and with hints it must be 1: SGLang scores the teacher at temperature 1.

Without our settings (Slime's own contract tests call it with ``args=None``), it takes its groups
from ``data_source`` like Slime's default rollout, so the same function also trains on a prompt
dataset whose samples already carry rewards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import torch

from slime_ext.algorithms import RunningBaseline
from slime_ext.hooks.config import PLUGIN_KEY, plugin_config, plugin_mapping, slime_notes, slime_refusals
from slime_ext.learning.example import Example
from slime_ext.learning.objective import Objective
from slime_ext.learning.pipeline import Pipeline, record
from slime_ext.learning.scorers import EngineScorer
from slime_ext.learning.select import select
from slime_ext.types import Baseline, Method, RolloutFnEvalOutput, RolloutFnTrainOutput, Sample

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
    groups = source.take(n, rollout_id)
    return RolloutFnTrainOutput(samples=groups, metrics=source.metrics(groups))


def live_source(args) -> LiveSource:
    """The process's LiveSource for these settings, started on first use; settings Slime cannot run as the
    embedded trainer does are refused first (``hooks/config.py``)."""
    cfg = plugin_config(args)
    key = (cfg.host, cfg.port)
    if key not in _SOURCES:
        from transformers import AutoTokenizer

        from slime_ext.engines.sglang import SGLangEngine
        from slime_ext.serve import served_sampling_defaults

        given = set(plugin_mapping(args))
        rollout_temperature = float(getattr(args, "rollout_temperature", 1.0))
        refuse(slime_refusals(cfg, given, args))
        why = rollout_temperature_error(cfg, served_sampling_defaults(cfg, args.hf_checkpoint).temperature,
                                        rollout_temperature)
        refuse([why] if why else [])
        for note in slime_notes(cfg, given):
            log.warning(note)
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
        tokenizer = AutoTokenizer.from_pretrained(args.hf_checkpoint)
        _SOURCES[key] = LiveSource(cfg, lambda: SGLangEngine.connect(url), tokenizer,
                                   rollout_temperature=rollout_temperature).start()
    return _SOURCES[key]


def refuse(reasons: list[str]) -> None:
    """Raise ValueError listing every reason these settings cannot run on Slime (none: return)."""
    if reasons:
        raise ValueError("these settings cannot run on Slime as they do on the embedded backend:\n  "
                         + "\n  ".join(reasons))


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
    if abs(rollout_temperature - 1.0) > 1e-6 and getattr(cfg, "memory", "off") == "on" \
            and Method.parse(cfg.method) is not Method.NONE:
        return (f"--rollout-temperature {rollout_temperature:g} with the preference memory on: a turn served with it "
                "is trained without it, its pi_old scored through SGLang at temperature 1, so it would not compare "
                "with the rollout's; serve and train at 1 (sampling_defaults: openai, --rollout-temperature 1.0), "
                "or --memory off")
    if abs(rollout_temperature - 1.0) > 1e-6 and Method.parse(cfg.method).uses_hints:
        return (f"--rollout-temperature {rollout_temperature:g} with method {cfg.method}: the teacher (and fresh group "
                "samples) are scored through SGLang at temperature 1, so their log-probs would not compare with the "
                "rollout's; serve and train at 1 (sampling_defaults: openai, --rollout-temperature 1.0)")
    return None


def carry_advantages(sample: Sample, objective: Objective, baseline: float = 0.0) -> None:
    """Put the sample's advantage where Slime's loss finds it (module docstring): ``teacher_log_probs =
    rollout_log_probs + advantage``; with the teacher term apart, the verdict term in ``reward`` (one number)."""
    terms = objective.advantages(sample, baseline)
    rollout = torch.tensor(sample.rollout_log_probs, dtype=torch.float32)
    sample.teacher_log_probs = (rollout + terms[-1]).tolist()
    if len(terms) == 2:  # the verdict term, one number per turn: Slime's own estimator spreads it
        sample.reward = float(terms[0][0]) if sample.response_length else 0.0


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
        from slime_ext.chat.prompt import stop_token_ids

        self.stop_ids = set(stop_token_ids(tokenizer))
        self.objective = Objective.of(cfg)
        self._pipeline: Pipeline | None = None  # made at the first take, over the engine
        self.taken: list[Example] = []  # the turns of the last take
        self.group_records: list[dict] = []  # and their groups' records
        self.baseline_path = self.store.run_dir / "slime_baseline.json"
        self.baseline = None
        if cfg.baseline is Baseline.RUNNING:
            saved = json.loads(self.baseline_path.read_text()) if self.baseline_path.exists() else {}
            self.baseline = RunningBaseline(**saved)

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

    # ----------------------------------------------------------------- samples
    def take(self, n: int, rollout_id: int, timeout_s: float | None = None) -> list[list[Sample]]:
        """Block until ``n`` judged turns are prepared by the pipeline; return their groups, as Slime samples."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ready: list[tuple[Example, list[Sample]]] = []
        self.group_records = []
        while len(ready) < n:
            have = {ex.key for ex, _ in ready}
            rows = [r for r in self.store.trainable_turns(4 * n) if (r["session_id"], r["idx"]) not in have]
            version = self.engine.policy_version
            candidates, dropped = select([Example.from_row(r) for r in rows], self.cfg.method, version,
                                         refuse=self._temperature_mismatch)
            prepared = self.pipeline().prepare(candidates, n - len(ready), 1, version)
            record(self.store, dropped, prepared)
            ready += zip(prepared.taken, prepared.groups)
            self.group_records += prepared.group_records
            if len(ready) < n:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{len(ready)} of {n} samples ready after {timeout_s:g} s")
                time.sleep(self.poll_s)
        self.store.mark_trained([ex.key for ex, _ in ready], rollout_id + 1)
        self.taken = [ex for ex, _ in ready]
        baseline = self.baseline.value if self.baseline else 0.0  # from earlier rollouts only, as embedded
        groups = [self._slime_group(ex, group, baseline) for ex, group in ready]
        if self.baseline:
            for ex, _ in ready:
                self.baseline.update(ex.verdict)
            self._save_baseline()
        return groups

    def pipeline(self) -> Pipeline:
        """The learning pipeline over the engine: SGLang's synced policy is both the policy and the teacher."""
        if self._pipeline is None:
            from slime_ext.chat.prompt import stop_token_ids

            scorer = EngineScorer(self.engine, self.loop, stop_token_ids(self.tokenizer))
            self._pipeline = Pipeline(self.cfg, self.renderer, self.store, policy=scorer, teacher=scorer,
                                      context=int(getattr(self.engine, "context_length", 0) or 0))
        return self._pipeline

    def _temperature_mismatch(self, ex: Example) -> str | None:
        """Why a turn cannot train on Slime: sampled at a temperature other than ``--rollout-temperature``."""
        from slime_ext.logprobs import scoring_temperature

        if abs(scoring_temperature(ex.temperature) - self.rollout_temperature) <= 1e-6:
            return None
        return (f"sampled at temperature {ex.temperature:g}: Slime scores every sample at --rollout-temperature "
                f"{self.rollout_temperature:g}")

    def _slime_group(self, ex: Example, group: list[Sample], baseline: float) -> list[Sample]:
        """A turn's group as Slime takes it: ``group_size`` samples (zero-loss-mask copies fill it), each
        with Slime's fields and its advantage in ``teacher_log_probs`` (see the module docstring)."""
        out = [self._slime_sample(ex, s, baseline) for s in group]
        while len(out) < self.cfg.groups.size:
            out.append(self._padding(out[0]))
        return out

    def _slime_sample(self, ex: Example, sample: Sample, baseline: float) -> Sample:
        sample.metadata["raw_reward"] = float(sample.reward or 0.0)  # logged by Slime; the verdict or implicit reward
        carry_advantages(sample, self.objective, baseline)
        sample.index, self._next_index = self._next_index, self._next_index + 1
        if sample.metadata.get("fresh"):  # a recorded turn's status is its finish reason (Example.sample)
            stopped = sample.tokens[-1] in self.stop_ids
            sample.status = Sample.Status.COMPLETED if stopped else Sample.Status.TRUNCATED
        self._decode(sample)
        sample.prompt = ex.request.messages or ""
        sample.weight_versions = [str(sample.metadata["policy_version"])]
        return sample

    def _padding(self, recorded: Sample) -> Sample:
        """A copy of ``recorded`` that trains nothing (all-zero loss mask, reward 0, advantage 0)."""
        import copy

        pad = copy.copy(recorded)
        pad.loss_mask, pad.reward = [0] * recorded.response_length, 0.0
        pad.teacher_log_probs = list(recorded.rollout_log_probs)
        pad.metadata = {**recorded.metadata, "padding": True}
        pad.index, self._next_index = self._next_index, self._next_index + 1
        return pad

    def _save_baseline(self) -> None:
        """The running baseline, kept in the run directory so a restarted rollout resumes it (as a checkpoint does)."""
        tmp = self.baseline_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(vars(self.baseline)))
        tmp.replace(self.baseline_path)

    def recent(self, n: int) -> list[Sample]:
        """The latest judged turns as samples, without handing them out (for evaluation)."""
        return [self._decode(Example.from_row(row).sample()) for row in self.store.recent_judged(n)]

    def _decode(self, sample: Sample) -> Sample:
        """``sample`` with its response as text (``Sample.response``: what Slime logs)."""
        response = sample.tokens[len(sample.tokens) - sample.response_length:]
        sample.response = self.tokenizer.decode(response, skip_special_tokens=True)
        return sample

    def metrics(self, groups: list[list[Sample]]) -> dict[str, float]:
        """The rollout's metrics: the turns' verdicts and hints, store counts, their staleness, and the groups."""
        from slime_ext.algorithms.staleness import staleness_metrics

        counts = self.store.counts()
        taken = self.taken
        fresh = [s.metadata["raw_reward"] for g in groups for s in g if s.metadata.get("fresh")]
        out = {"openclaw/reward_mean": sum(ex.verdict for ex in taken) / max(1, len(taken)),
               "openclaw/hinted": sum(ex.hinted for ex in taken),
               "openclaw/judged_turns": counts["judged_turns"], "openclaw/dropped_turns": counts["dropped_turns"],
               **{f"openclaw/{k}": v for k, v in staleness_metrics(
                   [self.engine.policy_version - ex.policy_version for ex in taken], self.cfg.max_staleness).items()}}
        if self.cfg.groups.size > 1:
            records = self.group_records
            out.update({"openclaw/groups": len(records),
                        "openclaw/constant_groups": sum(r["dropped"] is not None for r in records),
                        "openclaw/fresh_samples": len(fresh),
                        "openclaw/fresh_reward_mean": sum(fresh) / len(fresh) if fresh else 0.0})
        return out
