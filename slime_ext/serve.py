"""Wire a ServeConfig into a running server: model -> engine -> store -> tracker -> HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from slime_ext.config import ServeConfig
from slime_ext.logs import LOG_FILE, log_to_file, quiet_libraries

if TYPE_CHECKING:
    from slime_ext.api.server import ChatServer
    from slime_ext.models.generation import SamplingDefaults

log = logging.getLogger("openclaw_rl")


def build_server(cfg: ServeConfig, engine=None, tokenizer=None):
    """Everything ``serve`` needs, constructed and ready (used by the CLI, the Slime rollout hook
    and tests). ``engine`` / ``tokenizer``: given (e.g. the SGLang client inside Slime, whose
    weights Slime syncs itself: no checkpoint watcher then), or the embedded engine on ``cfg.model``."""
    from transformers import AutoTokenizer

    from slime_ext.api.server import ChatServer, ServerSettings
    from slime_ext.engines.cores import CoreShare
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model
    from slime_ext.sessions import SessionTracker
    from slime_ext.store import Store

    embedded = engine is None  # we make the engine (and swap each trained version into it)
    if embedded:  # a GPU that is not there is refused before a model is converted or loaded
        from slime_ext.engines.device import resolve_device

        device = resolve_device(cfg.device)
    # the served checkpoint; on Slime (engine and tokenizer given) the HF checkpoint the tokenizer came from
    model_dir = resolve_model(cfg.model, progress=log.info) if embedded or tokenizer is None else None
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if embedded and cfg.engine == "sglang":  # connected (refresh) on the serving loop: run_server
        from slime_ext.engines.sglang import SGLangEngine

        engine = SGLangEngine(cfg.sglang_url, api_key=os.environ.get("SGLANG_API_KEY"), lora=True)
    elif embedded:
        engine = LocalEngine(
            model_dir, dtype=cfg.dtype, threads=engine_threads(cfg),
            max_batch_size=cfg.max_batch_size, context_length=cfg.context_length or None,
            prefix_cache_tokens=cfg.prefix_cache_tokens, device=str(device),
            cores=CoreShare(cfg.trainer_share) if cfg.learns and device.type == "cpu" else None,
        )
    store = Store(cfg.resolved_run_dir())
    tracker = SessionTracker(
        store, idle_timeout_s=cfg.session_idle_timeout_s, max_open_sessions=cfg.max_open_sessions,
        ephemeral_markers=cfg.ephemeral_markers, submit=store.submit,
    )
    settings = ServerSettings(
        model_name=cfg.served_model_name or cfg.model, api_keys=cfg.api_keys(), user_keys=dict(cfg.user_keys),
        max_body_bytes=int(cfg.max_body_mb * 1024 * 1024), max_tokens_cap=cfg.max_tokens_cap,
        default_max_tokens=cfg.default_max_tokens, bound_host=cfg.host, allowed_hosts=tuple(cfg.allowed_hosts),
        allowed_origins=tuple(cfg.allowed_origins), header_timeout_s=cfg.header_timeout_s,
        body_timeout_s=cfg.body_timeout_s, keepalive_timeout_s=cfg.keepalive_timeout_s,
        max_connections=open_connection_cap(cfg.max_connections), context_overflow=cfg.context_overflow,
        memory=cfg.memory == "on", memory_placement=cfg.memory_placement,
        memory_opening=cfg.memory_opening == "on", repetition_stop=cfg.repetition_stop == "on",
        sampling=served_sampling_defaults(cfg, model_dir or getattr(tokenizer, "name_or_path", None)),
        learns=cfg.learns, batch_size=cfg.batch_size if embedded and cfg.learns else 0,
    )
    from slime_ext.trainers.process import CheckpointWatcher

    judge_worker = build_judge_worker(cfg, store, engine, tokenizer)
    watcher = CheckpointWatcher(engine, cfg.resolved_run_dir()) if embedded else None
    trainer = trainer_supervisor(cfg, device, getattr(engine, "cores", None)) if embedded and cfg.learns else None
    return ChatServer(engine, tokenizer, store, tracker, settings, judge_worker=judge_worker, checkpoints=watcher,
                      trainer=trainer)


def engine_threads(cfg: ServeConfig) -> int:
    """The embedded engine's torch threads: ``--threads``, or every core. Learning on too: the trainer computes
    at idle priority on the cores the engine leaves (``trainers/process.py``)."""
    return cfg.threads or os.cpu_count() or 1


def trainer_supervisor(cfg: ServeConfig, device, cores=None):
    """The embedded trainer's supervisor (``trainers/process.py``), not started yet: on the CPU, on as many
    threads as the engine (at idle priority); on a GPU, one CPU thread. ``device``: the resolved ``cfg.device``;
    ``cores``: the engine's ``CoreShare`` (CPU), which the trainer tells when its work waits for cores."""
    from slime_ext.trainers.process import TrainerSupervisor, start_trainer_process

    run_dir = str(cfg.resolved_run_dir())
    trainer_config = cfg.trainer_config()
    threads = engine_threads(cfg) if device.type == "cpu" else 1
    log_file = str(Path(run_dir) / LOG_FILE)  # the server's log: the trainer's lines go there too
    return TrainerSupervisor(lambda: start_trainer_process(cfg.model, run_dir, trainer_config, device=cfg.device,
                                                           threads=threads, cores=cores, log_file=log_file), run_dir)


def start_background(server: ChatServer) -> list[asyncio.Task]:
    """Start what a built server does besides HTTP: the judge loop, the checkpoint watcher (the HTTP
    server only notifies the judge of new next states) and the trainer's supervisor. On the running
    loop; cancel the tasks to stop them (and ``server.trainer.stop()`` the trainer)."""
    tasks = [server.judge_worker.run()] if server.judge_worker else []
    tasks += [server.checkpoints.run()] if server.checkpoints else []
    tasks += [server.trainer.run()] if server.trainer else []
    return [asyncio.create_task(t) for t in tasks]


def served_sampling_defaults(cfg: ServeConfig, model_dir: str | Path | None) -> SamplingDefaults:
    """The ``SamplingDefaults`` (temperature / top_p) of requests that name none, logged with where
    they came from.

    ``model_dir``: the served checkpoint (on Slime, the HF checkpoint its tokenizer was loaded from)."""
    from slime_ext.models.generation import sampling_defaults

    defaults = sampling_defaults(model_dir, cfg.sampling_defaults)
    log.info("requests without temperature / top_p: %s", defaults.describe())
    return defaults


def user_judge_backend(cfg: ServeConfig):
    """The backend a user's ``--judge module:attr`` (or installed name) makes: ``attr(cfg)``, which must
    have an async ``vote(messages, *, seed, inputs=None) -> str`` (``judge/backends.py``)."""
    from slime_ext.plugins import PluginError, load_object

    make = load_object(cfg.judge, "judge")
    try:
        backend = make(cfg)
    except Exception as e:  # the user's code: its error, named, not a traceback
        raise PluginError(f"judge {cfg.judge!r}: making the backend failed: {type(e).__name__}: {e}") from None
    if not callable(getattr(backend, "vote", None)):
        raise PluginError(f"judge {cfg.judge!r} made a {type(backend).__name__}, which has no vote(messages, *, seed, "
                          f"inputs=None) method")
    return backend


def build_judge_worker(cfg: ServeConfig, store, engine=None, tokenizer=None):
    """The judge loop for ``cfg.judge``, or None when judging is off."""
    from slime_ext.judge import EngineJudgeBackend, HeuristicBackend, HintJudge, Judge, OpenAIJudgeBackend
    from slime_ext.judge.worker import JudgeWorker

    cfg.validated()
    if cfg.judge == "off":
        return None
    if cfg.judge == "heuristic":
        backend = HeuristicBackend()
    elif cfg.judge == "self":  # the served model with its adapter disabled: a frozen judge, no extra weights
        backend = EngineJudgeBackend(engine, tokenizer, frozen_base=True, max_new_tokens=512)
    elif cfg.judge == "openai":
        key = cfg.judge_key or os.environ.get("OPENCLAW_RL_JUDGE_KEY") or None
        backend = OpenAIJudgeBackend(cfg.judge_url, cfg.judge_model, key)
    else:
        backend = user_judge_backend(cfg)
    judge = Judge(backend, votes=cfg.judge_votes or None, timeout_s=cfg.judge_timeout_s,
                  max_concurrency=cfg.judge_concurrency)
    # hints teach (OPD, Combine) and become the preferences the memory serves: judged when either needs them
    hints = HintJudge.from_judge(judge) if cfg.method.uses_hints or cfg.memory == "on" else None
    return JudgeWorker(judge, store, hints=hints)


def open_connection_cap(wanted: int) -> int:
    """Raise the open-files limit to its hard limit and return the connection cap it allows."""
    from slime_ext.api.guard import connection_cap, raise_open_files_limit

    before, after = raise_open_files_limit()
    if after <= 0:  # no descriptor limit to fit under
        return wanted
    cap = connection_cap(wanted, after)
    if after != before:
        log.debug("open-files limit raised from %d to %d", before, after)
    if cap < wanted:
        log.warning("max_connections lowered from %d to %d: the open-files limit is %d (ulimit -n)", wanted, cap, after)
    return cap


class RunDirStart:
    """One start of ``serve`` in its run directory: the log goes to ``RUN_DIR/serve.log`` too while it runs
    (``slime_ext/logs.py``), and a start that fails before the server listens (a model that does not load, a
    plugin that fails, the port taken meanwhile, Ctrl-C while loading) removes the run directory again when it
    made it, and the parent folders it made that are left empty: a failed start leaves nothing behind, and the
    newest run in ``runs/`` is one that served. A directory that was there before is kept as it was, its
    log included. Set ``listening`` once the server listens."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # innermost first
        self.listening = False
        self._log: logging.Handler | None = None

    def __enter__(self) -> RunDirStart:
        self._log = log_to_file(self.run_dir / LOG_FILE)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._log is not None:
            if isinstance(exc, Exception):  # the command prints it on stderr; the run's own log keeps it too
                user_error = isinstance(exc, (ValueError, RuntimeError))  # said in one line (cli.py: main)
                self._log.handle(logging.makeLogRecord({
                    "name": log.name, "levelno": logging.ERROR, "levelname": "ERROR",
                    "msg": f"serve stopped: {exc}" if user_error else f"serve stopped: {type(exc).__name__}: {exc}",
                    "exc_info": None if user_error else (exc_type, exc, tb)}))
            logging.getLogger().removeHandler(self._log)
            self._log.close()
        if exc_type is None or self.listening or not self.made:
            return
        shutil.rmtree(self.run_dir, ignore_errors=True)
        for parent in self.made[1:]:
            try:
                parent.rmdir()  # only when empty: another start may have made a run beside this one meanwhile
            except OSError:
                break


def run_server(cfg: ServeConfig, warnings: list[str] | tuple[str, ...] = ()) -> None:
    """Serve until SIGINT or SIGTERM. The log goes to stderr and ``RUN_DIR/serve.log``, ``warnings`` first; the
    port is checked before the model loads (``ListenError``: one line)."""
    from slime_ext.api.guard import check_listen, install_log_limits

    install_log_limits()
    run_dir = cfg.resolved_run_dir()
    cfg.run_dir = str(run_dir)
    with RunDirStart(run_dir) as start:
        for warning in warnings:
            log.warning(warning)
        check_listen(cfg.host, cfg.port)  # a port in use is refused before the model loads
        quiet_libraries()
        serve(cfg, run_dir, start)


def serve(cfg: ServeConfig, run_dir: Path, start: RunDirStart) -> None:
    """Build the server on ``cfg`` and serve (``run_server``)."""
    from aiohttp import web

    from slime_ext.api.policy import is_loopback

    server = build_server(cfg)
    if not is_loopback(cfg.host) and not (server.settings.api_keys or cfg.user_keys):
        log.warning("binding %s without an API key: anyone who can reach this port can use the model", cfg.host)

    async def main() -> None:
        if cfg.engine == "sglang":  # the SGLang server's context length and version, on this loop
            await server.engine.refresh()
        await server.checkpoints.check()  # after a restart, serve the latest trained version from the start
        runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:  # listen before the trainer starts: a port taken meanwhile leaves no process to stop
            listener = await server.guard.listen(runner.server, cfg.host, cfg.port)
        except BaseException:
            await runner.cleanup()
            await server.engine.close()
            server.store.close()  # before RunDirStart removes the directory
            raise
        start.listening = True
        if server.trainer is not None:
            server.trainer.start()
            log.info("training (%s) in process %d (batch %d, %s)", cfg.method, server.trainer.process.pid,
                     cfg.batch_size, f"LoRA rank {cfg.lora_rank}" if cfg.lora_rank else "full weights")
        background = start_background(server)
        eng = server.engine
        where = (f"SGLang at {cfg.sglang_url}" if cfg.engine == "sglang" else
                 f"{str(eng.dtype).removeprefix('torch.')} on {eng.device}, {eng.threads} threads")
        log.info("serving %s (%s, policy v%d, context %d) at http://%s:%d/v1; records in %s",
                 server.settings.model_name, where, eng.policy_version, eng.context_length, cfg.host, cfg.port, run_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        status = asyncio.create_task(status_line(server, cfg.status_interval_s))
        await stop.wait()
        log.info("shutting down")
        status.cancel()
        for task in background:
            task.cancel()
        if server.trainer is not None:
            server.trainer.stop()
        listener.close()
        await runner.cleanup()
        await server.engine.close()
        server.store.close()

    asyncio.run(main())


def status_text(server, counts: dict, now: float | None = None) -> str:
    """The one-line summary of a running server: what is served, judged, trained and waiting (out of the turns a
    step needs), and what the trainer is doing."""
    verdict = counts["mean_verdict"]
    training = server.checkpoints.status() if server.checkpoints else {}
    step = f" | last step {training['step_s']:.1f}s" if "step_s" in training else ""
    batch = server.settings.batch_size
    return (f"v{server.engine.policy_version} | {server.in_flight} in flight | {counts['turns']} turns | "
            f"judged {counts['judged_turns']}" + (f" (mean {verdict:+.2f})" if verdict is not None else "") +
            f" | trained {counts['trained_turns']} | waiting {counts['waiting_to_train']}" + (f"/{batch}" if batch else "")
            + f" | dropped {counts['dropped_turns']}{step}{trainer_text(server.trainer, now)}")


def trainer_text(trainer, now: float | None = None) -> str:
    """What the status line says of the trainer process when it is not simply waiting for turns."""
    if trainer is None:
        return ""
    status = trainer.status()
    if status["state"] == "training":
        return (f" | training on {status['step_turns']} turns "
                f"({(now or time.time()) - status['step_started_at']:.0f} s)")
    return {"starting": " | trainer loading", "restarting": " | trainer restarting",
            "failed": " | trainer failed (see /healthz)"}.get(status["state"], "")


async def status_line(server, interval_s: float) -> None:
    """Keep a live status line on a terminal; elsewhere (a log file) log it when it changes."""
    import sys

    tty = sys.stderr.isatty()
    last = ""
    while interval_s > 0:
        await asyncio.sleep(interval_s)
        try:
            text = status_text(server, await server.store.run(server.store.counts))
        except Exception as e:  # a status line must never stop the server
            log.debug("status line: %s", e)
            continue
        if tty:
            sys.stderr.write("\r\x1b[2K" + text[: 200])
            sys.stderr.flush()
        elif text != last:
            log.info("status: %s", text)
        last = text
