"""The trainer as its own process, beside the server.

The server and the trainer share only the run directory: the trainer reads judged turns from the
store and writes ``checkpoints/v<N>``; the server's ``CheckpointWatcher`` swaps each new version
into the engine. One trainer per run directory: it holds an exclusive lock (``trainer.lock``), so
after a crash the restarted server's trainer waits for the old one to finish its step and exit
instead of training the same turns a second time. A separate process keeps training's Python work off the serving process's GIL,
and it computes with one thread so serving keeps the other core(s).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import multiprocessing
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from slime_ext.trainers.canary import read_status as read_canary_status
from slime_ext.trainers.loop import latest_checkpoint
from slime_ext.types import Method

log = logging.getLogger(__name__)


def trainer_main(model: str, run_dir: str, config: dict[str, Any], poll_s: float = 0.25, threads: int = 1,
                 device: str = "cpu") -> None:
    """Entry point of the trainer process: resume, then train whenever a batch is ready. On a CUDA ``device``
    the model lives there and the process's tensors are made there (``torch.set_default_device``)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.algorithms import PolicyLossConfig
    from slime_ext.models import resolve_model
    from slime_ext.store import Store
    from slime_ext.trainers.canary import CanaryConfig
    from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, recompute_activations, wrap_lora
    from slime_ext.trainers.scalars import ScalarWriter
    from slime_ext.trainers.teachability import TeachabilityConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s trainer: %(message)s")
    lock = open(Path(run_dir) / "trainer.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.info("another trainer holds %s (the previous server's, finishing its step): waiting", lock.name)
        fcntl.flock(lock, fcntl.LOCK_EX)
    torch.set_num_threads(threads)
    from slime_ext.engines.device import resolve_device

    where = resolve_device(device)
    if where.type == "cuda":
        torch.set_default_device(where)
    cfg = TrainerConfig(**{**config, "loss": PolicyLossConfig(**config.get("loss", {})),
                           "canary": CanaryConfig(**config.get("canary", {})),
                           "teacher_check": TeachabilityConfig(**config.get("teacher_check", {}))})
    model_dir = str(resolve_model(model, progress=log.info))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(where)
    if where.type == "cuda":  # on a GPU beside the engine, bound the trainer's activations (LoRA bounds the rest)
        recompute_activations(model)
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # the teacher re-renders each hinted prompt as the server rendered it
    renderer = PromptRenderer(tokenizer) if Method.parse(cfg.method).uses_hints else None
    store = Store(run_dir)
    trainer = OnlineTrainer(wrap_lora(model, cfg), store, run_dir, cfg, renderer=renderer,
                            canary=make_canary(cfg.canary, tokenizer, store, run_dir))
    if trainer.resume():
        log.info("resumed at version %d", trainer.version)
    scalars = ScalarWriter(run_dir)
    log.info("ready on %s: %s, %s, lr %g, batch %d, canary %s; scalars -> %s (%s)", where, cfg.method,
             f"LoRA rank {cfg.lora_rank}" if cfg.lora_rank else "full weights", cfg.lr, cfg.batch_size,
             "on" if trainer.canary else "off", scalars.dir, scalars.kind)
    parent = os.getppid()
    while os.getppid() == parent:  # the server is gone (even by kill -9): stop too
        metrics = trainer.step()
        if metrics is None:
            time.sleep(poll_s)
            continue
        scalars.write(metrics["version"], metrics)
        if not metrics.get("refused"):  # a refusal is logged by the canary, as a WARNING
            log.info(step_line(metrics))


def make_canary(config, tokenizer, store, run_dir: str):
    """The trainer's canary (``trainers/canary.py``), or None when it is off."""
    if not config.enabled:
        return None
    from slime_ext.trainers.canary import Canary

    return Canary(config, tokenizer, store, run_dir)


def step_line(m: dict[str, Any]) -> str:
    """One log line per training step."""
    kl = f", kl_ref {m['kl_to_ref']:.4f}" if "kl_to_ref" in m else ""
    if "canary_nll" in m:
        kl += f", canary passed in {m['canary_s']:.1f} s (NLL {m['canary_nll_rise']:+.3f})"
    if m.get("hinted_turns"):
        kl += f", {m['hinted_turns']} hinted (teacher gap {m['teacher_gap_mean']:+.2f})"
    if "teacher_check_s" in m:
        kl += f", teacher checks {m['teacher_check_s']:.1f} s ({m['hints_unfollowed']} hints not followed)"
    if "topk_kl" in m:
        kl += f", top-k KL {m['topk_kl']:.4f}"
    return (f"version {m['version']}: {m['turns']} turns ({m['response_tokens']} tokens, reward {m['reward_mean']:+.2f}), "
            f"loss {m['loss']:+.4f}, clip {m['clip_fraction']:.3f}, ratio {m['ratio_mean']:.3f} "
            f"[{m['ratio_min']:.3f}, {m['ratio_max']:.3f}], kl_rollout {m['kl_rollout']:.4f}{kl}, "
            f"staleness {m['staleness_mean']:.1f} (max {m['staleness_max']}){backlog_note(m)}, grad {m['grad_norm']:.3f}, "
            f"{m['step_s']:.1f} s")


def backlog_note(m: dict[str, Any]) -> str:
    """What the step line says about a backlog: how many turns waited, and any past the staleness cap."""
    note = f", backlog {m['waiting']}" if m.get("waiting", 0) > m["turns"] else ""
    if m.get("over_cap_turns"):
        note += f", {m['over_cap_turns']} past the staleness cap (capped ratio)"
    return note


def start_trainer_process(model: str, run_dir: str, config, device: str = "cpu") -> multiprocessing.Process:
    """Start ``trainer_main`` in a fresh (spawned) process on ``device``; it dies with the server."""
    cfg = asdict(config)
    proc = multiprocessing.get_context("spawn").Process(
        target=trainer_main, args=(model, run_dir, cfg), kwargs={"device": device}, name="openclaw-rl-trainer",
        daemon=True)
    proc.start()
    return proc


class CheckpointWatcher:
    """Swaps each new checkpoint of the run directory into the engine (server side).

    ``last_step`` holds the metrics the trainer saved with the version being served (step time,
    loss, staleness, ...), for ``/healthz`` and ``/metrics``.
    """

    def __init__(self, engine, run_dir: str | Path, poll_s: float = 0.25) -> None:
        self.engine = engine
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.swaps = 0
        self.last_swap_s = 0.0
        self.last_step: dict[str, Any] = {}

    async def check(self) -> bool:
        found = latest_checkpoint(self.run_dir)
        if found is None or found[0] <= self.engine.policy_version:
            return False
        version, path = found
        started = time.perf_counter()
        await self.engine.swap(path, version)
        self.last_swap_s = time.perf_counter() - started
        self.swaps += 1
        try:
            state = json.loads((path / "trainer_state.json").read_text())
            self.last_step = {k: v for k, v in state.get("metrics", {}).items() if isinstance(v, (int, float))}
            self.last_step["saved_at"] = state.get("saved_at")
        except (OSError, ValueError):
            self.last_step = {}
        pause = getattr(self.engine, "stats", {}).get("last_swap_pause_s", float("nan"))
        log.info("serving policy version %d (swap took %.3f s, decoding paused %.4f s)", version, self.last_swap_s, pause)
        return True

    def status(self) -> dict[str, Any]:
        """What ``/healthz`` reports under ``training``."""
        step = self.last_step
        canary = self.canary()
        return {"swaps": self.swaps, "swap_s": round(self.last_swap_s, 4),
                **{k: step[k] for k in ("step_s", "loss", "clip_fraction", "kl_rollout", "staleness_mean",
                                        "staleness_max", "reward_mean", "turns", "canary_s") if k in step},
                **({"canary": canary} if canary else {})}

    def canary(self) -> dict[str, Any]:
        """What the trainer's canary recorded (``trainers/canary.py``): checks, refusals, the last of each."""
        return read_canary_status(self.run_dir) or {}

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # a bad checkpoint must not take serving down
                log.exception("could not swap in the latest checkpoint")
            await asyncio.sleep(self.poll_s)
