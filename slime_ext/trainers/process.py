"""The trainer as its own process beside the server, kept running by the server.

The server and the trainer share only the run directory: the trainer reads judged turns from the
store and writes ``checkpoints/v<N>``; the server's ``CheckpointWatcher`` swaps each new version
into the engine. One trainer per run directory: it holds an exclusive lock (``trainer.lock``), so
after a crash the restarted server's trainer waits for the old one to finish its step and exit
instead of training the same turns a second time. A separate process keeps training's Python work
off the serving process's GIL.

**Cores go where the work is.** On the CPU the trainer computes on as many threads as the engine, at the
lowest scheduling priority (``SCHED_IDLE``; ``nice 19`` where that is refused): a core the engine is
decoding on is the engine's at once, and a core it leaves (between requests, while a user reads) is the
trainer's. Serving keeps its speed while a step runs, and a step takes every core the engine is not using
(docs/engine.md, "Serving while the trainer learns"). Under continuous load that could be none for as long as
the load lasts, so the trainer marks its work in the engine's ``CoreShare`` (``engines/cores.py``): after 10 s
of waiting, the engine rests for ``--trainer-share`` of its time until the work is done. On a GPU the trainer
keeps one CPU thread at normal priority.

**Supervised.** The trainer writes what it is doing and its last error, traceback included, to
``RUN_DIR/trainer.json`` (``TrainerStatus``). A step that raises (``StepFailed``: an out-of-memory on a
long turn, a corrupt record, a canary error) is counted against its turns (``OnlineTrainer.set_back``:
a turn in two failed steps is set aside with the error as its reason) and the process exits; any
other exception (a model that cannot load, ...) ends it too. The server's ``TrainerSupervisor`` sees
it exit, logs the error, and starts a new trainer after a back-off (1 s, doubling to 60 s; back to 1 s
once a trainer has run for a minute), which resumes from the latest checkpoint. ``/healthz``
(``training.trainer``) and ``/metrics`` (``openclaw_trainer_*``) show its state, restarts and last error.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from slime_ext.engines.cores import CoreShare
from slime_ext.trainers import checkpoints
from slime_ext.trainers.canary import brief as canary_brief
from slime_ext.trainers.canary import read_status as read_canary_status

log = logging.getLogger(__name__)

STATUS_FILE = "trainer.json"  # in the run directory


class TrainerStatus:
    """``RUN_DIR/trainer.json``: written by the trainer process (atomically), read by the server."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self.fields = read_trainer_status(run_dir)

    def update(self, **fields: Any) -> None:
        self.fields.update(fields)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.fields))
        tmp.replace(self.path)

    def failed(self, error: BaseException, step: bool = False, set_aside: list | None = None) -> None:
        """Record an error that ends the process: its text, its traceback, whether a training step raised it
        (counted in ``failed_steps``), and the turns it set aside."""
        text = f"{type(error).__name__}: {error}"
        self.update(state="failed", failed_steps=self.fields.get("failed_steps", 0) + step,
                    last_error={"error": text[:500], "at": time.time(), "traceback": traceback.format_exc()[-4000:],
                                "set_aside": [list(k) for k in set_aside or []]})


def read_trainer_status(run_dir: str | Path) -> dict[str, Any]:
    """What the trainer last wrote in ``trainer.json`` ({} before it first did)."""
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def trainer_main(model: str, run_dir: str, config, poll_s: float = 0.25, threads: int = 1,
                 device: str = "cpu", cores: CoreShare | None = None, log_file: str | None = None) -> None:
    """Entry point of the trainer process: resume, then train whenever a batch is ready (``config``: the
    ``TrainerConfig``). On a CUDA ``device`` the model lives there and the process's tensors are made there
    (``torch.set_default_device``). ``cores``: the engine's ``CoreShare``, told when this process's work waits
    for cores (loading, each step). ``log_file``: the server's ``serve.log``, which the log goes to besides stderr.
    An error is recorded in ``trainer.json`` and ends the process (module doc)."""
    from slime_ext.logs import log_to_file, quiet_libraries

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    fmt = "%(asctime)s %(levelname)s trainer: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt)
    if log_file:
        log_to_file(log_file, fmt)
    quiet_libraries()
    from slime_ext.trainers.loop import StepFailed

    lock = open(Path(run_dir) / "trainer.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.info("another trainer holds %s (the previous server's, finishing its step): waiting", lock.name)
        fcntl.flock(lock, fcntl.LOCK_EX)
    status = TrainerStatus(run_dir)
    status.update(state="starting", pid=os.getpid(), started_at=time.time())
    trainer = None
    try:
        with working(cores):
            trainer, scalars = build_trainer(model, run_dir, config, threads, device)
        status.update(state="idle", version=trainer.version)
        train_forever(trainer, scalars, status, poll_s, cores)
    except StepFailed as e:
        aside = trainer.set_back(e.examples, str(e))
        log.error("the training step of %d turns failed%s; restarting", len(e.examples),
                  f" (set aside: {[ex.key for ex in aside]})" if aside else "", exc_info=True)
        status.failed(e.__cause__ or e, step=True, set_aside=[ex.key for ex in aside])
        raise SystemExit(1) from None
    except Exception as e:
        log.exception("the trainer stopped")
        status.failed(e)
        raise SystemExit(1) from None


def lowest_priority() -> str:
    """Put this process at the lowest CPU scheduling priority: ``SCHED_IDLE`` (it runs only on a core no other
    task wants), else ``nice 19``; what it got, in words."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle priority (SCHED_IDLE)"
    except (AttributeError, OSError):  # not Linux, or refused
        try:
            os.nice(19 - os.nice(0))
            return "nice 19"
        except OSError:
            return "normal priority (SCHED_IDLE and nice 19 were refused)"


def build_trainer(model: str, run_dir: str, config, threads: int, device: str):
    """The trainer on ``model`` (resumed from the latest checkpoint) and its scalar writer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.engines.device import resolve_device
    from slime_ext.models import resolve_model
    from slime_ext.store import Store
    from slime_ext.trainers.loop import OnlineTrainer, recompute_activations, wrap_lora
    from slime_ext.trainers.scalars import ScalarWriter

    torch.set_num_threads(threads)
    where = resolve_device(device)
    if where.type == "cuda":
        torch.set_default_device(where)
    else:  # before loading: the model's loading is work too
        log.info("computing on %d threads at %s: the engine's cores are the engine's when it decodes", threads,
                 lowest_priority())
    model_dir = str(resolve_model(model, progress=log.info))
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(where)
    if where.type == "cuda":  # on a GPU beside the engine, bound the trainer's activations (LoRA bounds the rest)
        recompute_activations(base)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # the teacher re-renders each hinted prompt as the server rendered it
    renderer = PromptRenderer(tokenizer) if config.method.uses_hints else None
    store = Store(run_dir)
    trainer = OnlineTrainer(wrap_lora(base, config), store, run_dir, config, renderer=renderer,
                            canary=make_canary(config.canary, tokenizer, store, run_dir))
    if trainer.resume():
        log.info("resumed at version %d", trainer.version)
    scalars = ScalarWriter(run_dir)
    log.info("ready on %s: %s, %s, lr %g, batch %d, canary %s; scalars -> %s (%s)", where, config.method,
             f"LoRA rank {config.lora_rank}" if config.lora_rank else "full weights", config.lr, config.batch_size,
             "on" if trainer.canary else "off", scalars.dir, scalars.kind)
    return trainer, scalars


def train_forever(trainer, scalars, status: TrainerStatus, poll_s: float, cores: CoreShare | None = None) -> None:
    """Step whenever a batch is ready, until the server is gone (even by kill -9)."""
    parent = os.getppid()

    def started(turns: int) -> None:  # what the server shows while the step runs (/healthz, the status line)
        log.info("training version %d on %d turns", trainer.version + 1, turns)
        status.update(state="training", step_turns=turns, step_started_at=time.time())

    while os.getppid() == parent:
        with working(cores):
            metrics = trainer.step(started)
        if metrics is None:  # nothing trained (a step that started may have found no usable turn)
            if status.fields.get("state") == "training":
                status.update(state="idle")
            time.sleep(poll_s)
            continue
        scalars.write(metrics["version"], metrics)
        status.update(state="idle", version=trainer.version, steps=status.fields.get("steps", 0) + 1,
                      last_step_at=time.time())
        if not metrics.get("refused"):  # a refusal is logged by the canary, as a WARNING
            log.info(step_line(metrics))


def working(cores: CoreShare | None):
    """``cores.working()``: the work inside waits for cores (``engines/cores.py``); nothing without a share."""
    return cores.working() if cores is not None else contextlib.nullcontext()


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


def start_trainer_process(model: str, run_dir: str, config, device: str = "cpu", threads: int = 1,
                          cores: CoreShare | None = None, log_file: str | None = None) -> multiprocessing.Process:
    """Start ``trainer_main`` in a fresh (spawned) process on ``device`` with ``threads`` torch threads; it dies
    with the server. ``config`` (the ``TrainerConfig``) crosses the process boundary as it is (pickled);
    ``cores``, the engine's ``CoreShare``, as shared memory; ``log_file``: where its log goes besides stderr."""
    proc = multiprocessing.get_context("spawn").Process(
        target=trainer_main, args=(model, run_dir, config),
        kwargs={"device": device, "threads": threads, "cores": cores, "log_file": log_file},
        name="openclaw-rl-trainer", daemon=True)
    proc.start()
    return proc


def without_traceback(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error record as ``/healthz`` shows it: the traceback stays in the log and in trainer.json."""
    return {k: v for k, v in error.items() if k != "traceback"} if error else None


class TrainerSupervisor:
    """Keeps the trainer process running (server side): starts it, and when it exits logs why and starts
    a new one after a back-off (module docstring). ``start`` makes and starts a process."""

    def __init__(self, start: Callable[[], multiprocessing.Process], run_dir: str | Path, *,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, healthy_after_s: float = 60.0) -> None:
        self._start = start
        self.run_dir = Path(run_dir)
        self.backoff_s, self.max_backoff_s, self.healthy_after_s = backoff_s, max_backoff_s, healthy_after_s
        self.process: multiprocessing.Process | None = None
        self.started_at = 0.0  # monotonic, for the back-off
        self.started_wall = 0.0  # wall clock, to tell this process's error from an earlier one's
        self.restarts = 0
        self.last_exit: int | None = None
        self.state = "stopped"
        self._delay = backoff_s

    def start(self) -> None:
        self.started_at, self.started_wall = time.monotonic(), time.time()  # before: it may fail at once
        self.process, self.state = self._start(), "running"

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(10)
        self.state = "stopped"

    async def run(self) -> None:
        """Watch the process; restart it after the back-off when it exits."""
        while True:
            await asyncio.sleep(0.5)
            if self.process is None or self.process.is_alive() or self.state == "stopped":
                continue
            self.last_exit = self.process.exitcode
            ran = time.monotonic() - self.started_at
            self._delay = self.backoff_s if ran >= self.healthy_after_s else self._delay
            error = read_trainer_status(self.run_dir).get("last_error") or {}
            error = error if error.get("at", 0) >= self.started_wall else {}  # killed: it recorded nothing
            log.error("the trainer exited (code %s after %.0f s)%s; starting it again in %.0f s", self.last_exit, ran,
                      f": {error.get('error')}" if error else "", self._delay)
            self.state = "restarting"
            await asyncio.sleep(self._delay)
            self._delay = min(2 * self._delay, self.max_backoff_s)
            self.restarts += 1
            self.start()

    def status(self) -> dict[str, Any]:
        """What ``/healthz`` shows under ``training.trainer``: the process, its restarts and its last error."""
        written = read_trainer_status(self.run_dir)
        alive = self.process is not None and self.process.is_alive()
        state = written.get("state", "starting") if alive else self.state
        step = {"step_turns": written.get("step_turns"), "step_started_at": written.get("step_started_at")}
        return {"state": state, **(step if state == "training" else {}),
                "pid": self.process.pid if alive else None, "restarts": self.restarts, "last_exit_code": self.last_exit,
                "failed_steps": written.get("failed_steps", 0), "steps": written.get("steps", 0),
                "last_error": without_traceback(written.get("last_error"))}

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.is_alive()


def version_sentence(version: int, metrics: dict[str, Any]) -> str:
    """A served version in one plain sentence: what it learned from and what the canary said (``metrics``: its
    step's, as saved in its checkpoint; empty for a checkpoint that kept none)."""
    if not metrics.get("turns"):
        return f"now serving version {version}"
    turns = int(metrics["turns"])
    parts = [f"{int(metrics[k])} {word}" for k, word in (("corrected_turns", "corrected"),
                                                        ("approved_turns", "approved")) if metrics.get(k)]
    if metrics.get("hinted_turns"):
        parts.append(f"{int(metrics['hinted_turns'])} with a hint")
    learned = f"{turns} turn{'s' if turns != 1 else ''}" + (f" ({', '.join(parts)})" if parts else "")
    canary = (f"the canary passed it (reference NLL {metrics['canary_nll_rise']:+.3f})" if "canary_nll_rise" in metrics
              else "no canary checked it")
    return f"now serving version {version}: it learned from {learned}; {canary}"


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
        found = checkpoints.latest(self.run_dir)
        if found is None or found[0] <= self.engine.policy_version:
            return False
        version, path = found
        started = time.perf_counter()
        await self.engine.swap(path, version)
        self.last_swap_s = time.perf_counter() - started
        self.swaps += 1
        try:
            state = checkpoints.read_state(path)
            self.last_step = {k: v for k, v in state.get("metrics", {}).items() if isinstance(v, (int, float))}
            self.last_step["saved_at"] = state.get("saved_at")
        except (OSError, ValueError):
            self.last_step = {}
        pause = getattr(self.engine, "stats", {}).get("last_swap_pause_s", float("nan"))
        log.info("%s (swap took %.3f s, decoding paused %.4f s)", version_sentence(version, self.last_step),
                 self.last_swap_s, pause)
        return True

    def status(self) -> dict[str, Any]:
        """What ``/healthz`` reports under ``training``."""
        step = self.last_step
        canary = self.canary()
        served = {"served": version_sentence(self.engine.policy_version, step)} if self.swaps else {}
        return {"swaps": self.swaps, "swap_s": round(self.last_swap_s, 4), **served,
                **{k: step[k] for k in ("step_s", "loss", "clip_fraction", "kl_rollout", "staleness_mean",
                                        "staleness_max", "reward_mean", "turns", "canary_s") if k in step},
                **({"canary": canary} if canary else {})}

    def canary(self) -> dict[str, Any]:
        """What the trainer's canary recorded (``trainers/canary.py``), short, as ``/healthz`` shows it: checks,
        refusals, the last of each; the facts the first version recalled are counted (the list stays in
        ``canary.json``)."""
        return canary_brief(read_canary_status(self.run_dir) or {})

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # a bad checkpoint must not take serving down
                log.exception("could not swap in the latest checkpoint")
            await asyncio.sleep(self.poll_s)
