"""The trainer as its own process, beside the server.

The server and the trainer share only the run directory: the trainer reads judged turns from the
store and writes ``checkpoints/v<N>``; the server's ``CheckpointWatcher`` swaps each new version
into the engine. A separate process keeps training's Python work off the serving process's GIL,
and it computes with one thread so serving keeps the other core(s).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from slime_ext.trainers.loop import latest_checkpoint

log = logging.getLogger(__name__)


def trainer_main(model: str, run_dir: str, config: dict[str, Any], poll_s: float = 1.0, threads: int = 1) -> None:
    """Entry point of the trainer process: resume, then train whenever a batch is ready."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.algorithms import PolicyLossConfig
    from slime_ext.models import resolve_model
    from slime_ext.store import Store
    from slime_ext.trainers.loop import BinaryRLTrainer, TrainerConfig, wrap_lora

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s trainer: %(message)s")
    torch.set_num_threads(threads)
    cfg = TrainerConfig(**{**config, "loss": PolicyLossConfig(**config.get("loss", {}))})
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model(model, progress=log.info)), dtype=torch.float32)
    store = Store(run_dir)
    trainer = BinaryRLTrainer(wrap_lora(model, cfg), store, run_dir, cfg)
    if trainer.resume():
        log.info("resumed at version %d", trainer.version)
    parent = os.getppid()
    while os.getppid() == parent:  # the server is gone (even by kill -9): stop too
        metrics = trainer.step()
        if metrics is None:
            time.sleep(poll_s)
        else:
            log.info("version %d: loss %.4f, clip %.3f, %.1f s", metrics["version"], metrics["loss"],
                     metrics["clip_fraction"], metrics["step_s"])


def start_trainer_process(model: str, run_dir: str, config) -> multiprocessing.Process:
    """Start ``trainer_main`` in a fresh (spawned) process; it dies with the server."""
    cfg = asdict(config)
    proc = multiprocessing.get_context("spawn").Process(
        target=trainer_main, args=(model, run_dir, cfg), name="openclaw-rl-trainer", daemon=True)
    proc.start()
    return proc


class CheckpointWatcher:
    """Swaps each new checkpoint of the run directory into the engine (server side)."""

    def __init__(self, engine, run_dir: str | Path, poll_s: float = 0.5) -> None:
        self.engine = engine
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.swaps = 0
        self.last_swap_s = 0.0

    async def check(self) -> bool:
        found = latest_checkpoint(self.run_dir)
        if found is None or found[0] <= self.engine.policy_version:
            return False
        version, path = found
        started = time.perf_counter()
        await self.engine.swap(path, version)
        self.last_swap_s = time.perf_counter() - started
        self.swaps += 1
        log.info("serving policy version %d (swap took %.3f s)", version, self.last_swap_s)
        return True

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # a bad checkpoint must not take serving down
                log.exception("could not swap in the latest checkpoint")
            await asyncio.sleep(self.poll_s)
