"""Rollout-side hook: live conversations as Slime's rollout.

``live_rollout(args, rollout_id, data_source, evaluation=False)`` is Slime's rollout-function
signature. With our settings on ``args`` (``openclaw_rl:`` in the ``--custom-config-path`` YAML)
its first call starts a ``LiveSource`` in this process (Slime's RolloutManager): our API server
on the configured host and port, backed by the SGLang engine client pointed at Slime's router,
recording, judging and storing every turn exactly as ``openclaw-rl serve`` does. Each call then
blocks until ``rollout_batch_size`` judged turns with a training signal for the method are
ready (the embedded trainer's ``select_turns``: a turn is dropped for having no signal, never for
its age; Slime's batch size is fixed, so an old turn is corrected by the loss's capped ratio), and
returns them as one-sample groups (``n_samples_per_prompt`` must be 1: a live turn is
one sample of one prompt). Each turn handed to Slime is marked ``trained_in_version =
rollout_id + 1`` in the store (so it is never handed out twice, also after a restart); hinted
turns carry the teacher's log-probs in ``metadata["teacher_log_probs"]`` (scored through the
engine), which ``post_process_rewards`` moves onto the sample.

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
from slime_ext.types import RolloutFnEvalOutput, RolloutFnTrainOutput, Sample

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
    return RolloutFnTrainOutput(samples=[[s] for s in samples], metrics=source.metrics(samples))


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
        if int(getattr(args, "n_samples_per_prompt", 1) or 1) != 1:
            raise ValueError("live conversations give one sample per prompt: set --n-samples-per-prompt 1")
        if cfg.method in ("opd", "combine") and cfg.teacher != "policy":
            raise ValueError("teacher: on Slime the teacher is the current policy served by SGLang (it holds no "
                             "frozen base); set teacher: policy (the launch scripts do)")
        if cfg.distill != "token":
            raise ValueError(f"distill: {cfg.distill} needs the embedded backend: Slime passes only per-token teacher "
                             "log-probs to the trainer, not the teacher's top-k (see docs/slime.md); use distill: token")
        if cfg.group_size != 1 or cfg.sft_coef:
            raise ValueError("group_size > 1 and sft_coef need the embedded backend for now: on Slime, groups are to "
                             "come from --n-samples-per-prompt through this rollout (not built yet); set group_size: 1 "
                             "and sft_coef: 0")
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
        tokenizer = AutoTokenizer.from_pretrained(args.hf_checkpoint)
        _SOURCES[key] = LiveSource(cfg, lambda: SGLangEngine.connect(url), tokenizer).start()
    return _SOURCES[key]


class LiveSource:
    """Our API server in this process (its own thread and event loop), and the judged turns it
    recorded, handed out as Slime samples."""

    def __init__(self, cfg, engine, tokenizer, *, poll_s: float = 0.5) -> None:
        """``engine``: an Engine, or an async factory of one (an engine that belongs to an event
        loop, like ``SGLangEngine.connect``, is made on the server's loop)."""
        from slime_ext.api.prompt import PromptRenderer
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
        self._error: Exception | None = None
        self._next_index = 0
        self.port = cfg.port

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
            from slime_ext.serve import build_server

            if self._make_engine is not None:
                self.engine = await self._make_engine()
            self.server = build_server(self.cfg, engine=self.engine, tokenizer=self.tokenizer)
            self._runner = web.AppRunner(self.server.app(), access_log=None)
            await self._runner.setup()
            # behind the connection guard, as `serve` is: read timeouts and a cap on open connections
            self._listener = await self.server.guard.listen(self._runner.server, self.cfg.host, self.cfg.port)
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
            method = self.cfg.method if self.cfg.method != "none" else "binary"
            usable = select_turns(self.store, self.store.trainable_turns(n * 4), method, self.engine.policy_version, n)
            if len(usable) == n:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{len(usable)} of {n} samples ready after {timeout_s:g} s")
            time.sleep(self.poll_s)
        samples = [self._sample(row) for row in usable]
        self.store.mark_trained([(r["session_id"], r["idx"]) for r in usable], rollout_id + 1)
        return samples

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
        if score_teacher and row.get("hint") and self.cfg.method in ("opd", "combine"):
            prompt = teacher_prompt_ids(self.renderer, row["messages"], row["hint"], row.get("tools"), row.get("tool_choice"))
            ids = prompt + row["response_token_ids"]
            teacher = self._on_loop(self.engine.score(ids, len(prompt)), timeout_s=600)
            sample.metadata["teacher_log_probs"] = teacher
            self.store.set_teacher_logprobs(row["session_id"], row["idx"], teacher)
        return sample

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
