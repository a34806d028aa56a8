"""The OpenAI-compatible server: HTTP in, token ids to the engine, every turn to the store.

Request path of ``POST /v1/chat/completions``:
  connection guard (guard: read timeouts, connection cap) -> Host / Origin / Content-Type checks
  and body decoding (policy) -> auth -> read the body (with a timeout) -> validate (schemas) ->
  render prompt ids (prompt; off the event loop, big prompts in a lane of their own) -> assign session (sessions) -> generate
  (engine, token-in/token-out) -> parse content / tool calls incrementally (reply) -> commit the
  turn (store) -> send the last chunk.
The turn is committed before the final chunk (``finish_reason``) is written, so a client that got
a whole response can always find it in the store.

``POST /v1/messages`` (Anthropic's Messages API) and ``POST /v1/responses`` (OpenAI's Responses API) are the
same path: the body is translated into the chat request it stands for (api/anthropic.py, api/responses.py)
before validation, and only the reply (content blocks or output items, and their event streams) takes that
API's shape; Messages' errors take Anthropic's shape too. ``GET /ui`` is the page of what the agent learned
(slime_ext/dashboard.py), with its figures from ``GET /v1/dashboard``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from slime_ext import dashboard
from slime_ext.api import anthropic, feedback, responses
from slime_ext.api.errors import ApiError
from slime_ext.api.guard import ConnectionGuard
from slime_ext.api.metrics import Metrics, label_value
from slime_ext.api.policy import (
    OPERATOR,
    PUBLIC,
    Access,
    check_content_type,
    check_declared_length,
    check_host,
    check_http_version,
    check_origin,
    decode_body,
    host_name,
    is_loopback,
    key_identity,
    normalize_origin,
    request_user,
    sent_key,
)
from slime_ext.api.schemas import ChatRequest, parse_chat_request
from slime_ext.chat.memory import HEADER as MEMORY_HEADER
from slime_ext.chat.memory import MEMORY_TOKENS, fit_memory, opening, with_memory
from slime_ext.chat.overflow import cuttable_text, fit_messages
from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
from slime_ext.chat.repetition import RepetitionStop
from slime_ext.chat.reply import ReplyParser
from slime_ext.config import MODEL_ALIAS
from slime_ext.engines.base import EngineError, SamplingParams
from slime_ext.judge.worker import is_standing_preference
from slime_ext.models.generation import OPENAI_DEFAULTS, SamplingDefaults
from slime_ext.models.hub import is_hub_id
from slime_ext.sessions import Assignment, SessionTracker, message_key
from slime_ext.types import Turn

log = logging.getLogger(__name__)

PAGE_PATH = "/ui"  # what the agent learned, as a page (slime_ext/dashboard.py)
MESSAGES_PATH = "/v1/messages"  # Anthropic's Messages API: its errors in Anthropic's shape too
CUT_HEADER = "X-OpenClaw-RL-Prompt-Tokens-Cut"  # tokens of the system prompt cut to fit the context
UNKNOWN_MODELS_LOGGED = 32  # other model names are answered by the served model, each warned about once, this many
# what the middlewares leave on a request (aiohttp's typed keys where it has them)
_request_key = getattr(web, "RequestKey", lambda name, _type: name)
CORS = _request_key("cors", bool)  # the request came from an allowed web origin: CORS headers go back
ACCESS = _request_key("access", Access)  # what it may see, and the user its per-user key names (_authenticate)
BIG_REQUEST_BYTES = 256 * 1024  # a request body past this is rendered in the lane of big prompts (ChatServer._fit)


@dataclass
class ServerSettings:
    model_name: str
    api_keys: tuple[str, ...] = ()
    user_keys: dict[str, str] | None = None  # user name -> that user's API key (also accepted)
    max_body_bytes: int = 8 * 1024 * 1024
    max_tokens_cap: int = 1024  # the most new tokens one response may take
    default_max_tokens: int = 512  # when the request names none
    sampling: SamplingDefaults = OPENAI_DEFAULTS  # temperature / top_p when the request names none
    session_sweep_s: float = 30.0
    bound_host: str = "127.0.0.1"  # bound to a loopback address: the Host header must be a loopback name
    allowed_hosts: tuple[str, ...] = ()  # more Host names accepted then (a reverse proxy's)
    allowed_origins: tuple[str, ...] = ()  # web origins allowed to call the API (CORS); others get a 403
    header_timeout_s: float = 10.0  # a request head must arrive this long after it began
    body_timeout_s: float = 60.0  # a request body must arrive this long after its head
    keepalive_timeout_s: float = 75.0  # idle keep-alive connections are closed after this
    max_connections: int = 1000  # open connections; past it the longest-waiting idle one is closed
    # a prompt past the context: "trim" (cut the middle of the longest system message, chat/overflow.py) or "error"
    context_overflow: str = "trim"
    memory: bool = False  # serve each user's requests with their standing preferences (chat/memory.py)
    memory_placement: str = "system"  # where (chat/memory.py: PLACEMENTS): system, user or hint
    memory_opening: bool = True  # an opening quoted in a standing preference is written as the answer's first tokens
    repetition_stop: bool = True  # end a reply that has fallen into a loop (chat/repetition.py; client: length)
    learns: bool = False  # judged turns are trained on (here, or by Slime's trainer)
    batch_size: int = 0  # judged turns our trainer's step waits for (0: no trainer of ours: none, or Slime's)


class ChatServer:
    """Holds the engine, tokenizer, store and session tracker, and serves the HTTP API."""

    def __init__(self, engine, tokenizer, store, tracker: SessionTracker, settings: ServerSettings,
                 judge_worker=None, checkpoints=None, trainer=None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.renderer = PromptRenderer(tokenizer)
        self.store = store
        self.tracker = tracker
        self.settings = settings
        self.judge_worker = judge_worker
        self.checkpoints = checkpoints  # a CheckpointWatcher: swaps in what the trainer publishes
        self.trainer = trainer  # a TrainerSupervisor: keeps the trainer process running (trainers/process.py)
        self.stop_ids = stop_token_ids(tokenizer)
        self.in_flight = 0
        self.guard = ConnectionGuard(settings.header_timeout_s, settings.keepalive_timeout_s, settings.max_connections)
        self._origins = frozenset(normalize_origin(o) for o in settings.allowed_origins)
        self._hosts = frozenset(host_name(h) for h in settings.allowed_hosts)
        self._keyed_users = frozenset(settings.user_keys or ())  # names a `user` field may not claim without the key
        # without keys a bearer token is whatever a client had to send (the openai SDK needs one): no identity
        self._keys_identify = bool(settings.api_keys or settings.user_keys)
        self._model_ids = tuple(dict.fromkeys((settings.model_name, MODEL_ALIAS)))  # what /v1/models lists
        self._unknown_models: set[str] = set()  # names already warned about (_note_model)
        self._check_host = is_loopback(settings.bound_host)
        self._lanes: dict[bool, ThreadPoolExecutor] = {}  # is the request big -> its render threads (_start_sweeper)
        self.metrics = Metrics()
        self.metrics.gauge("openclaw_connections_open", lambda: self.guard.open_connections, "Open HTTP connections")
        self.metrics.gauge("openclaw_policy_version", lambda: self.engine.policy_version, "Policy version being served")
        self.metrics.gauge("openclaw_requests_in_flight", lambda: self.in_flight, "Chat requests being served")
        self.metrics.gauge("openclaw_sessions_open", lambda: self.tracker.open_sessions, "Sessions held in memory")
        if checkpoints is not None:
            self.metrics.gauge("openclaw_train_step_seconds", lambda: checkpoints.last_step.get("step_s", 0),
                               "Duration of the training step that produced the served version")
            self.metrics.gauge("openclaw_train_staleness_mean", lambda: checkpoints.last_step.get("staleness_mean", 0),
                               "Mean age in versions of the turns in the last training step")
            self.metrics.gauge("openclaw_swap_seconds", lambda: checkpoints.last_swap_s, "Duration of the last weight swap")
            self.metrics.gauge("openclaw_canary_checks", lambda: checkpoints.canary().get("checks", 0),
                               "Trained versions the canary probed before serving")
            self.metrics.gauge("openclaw_canary_refusals", lambda: checkpoints.canary().get("refused", 0),
                               "Trained versions the canary refused to serve (the previous one kept serving)")
        if trainer is not None:
            self.metrics.gauge("openclaw_trainer_up", lambda: int(trainer.up), "1 while the trainer process runs")
            self.metrics.gauge("openclaw_trainer_restarts", lambda: trainer.restarts,
                               "Times the trainer process was started again after it stopped")
            self.metrics.gauge("openclaw_trainer_failed_steps", lambda: trainer.status()["failed_steps"],
                               "Training steps that raised (their turns counted, set aside at the second)")
        if getattr(engine, "cores", None) is not None:
            self.metrics.gauge("openclaw_engine_rested_seconds", lambda: engine.stats["rested_s"],
                               "Time the engine left the cores to a trainer that continuous serving had starved")
        if judge_worker is not None:
            self.metrics.gauge("openclaw_judge_failures", lambda: judge_worker.failures,
                               "Judgings of a turn that raised (retried; set aside at the third)")
            self.metrics.gauge("openclaw_judge_set_aside", lambda: judge_worker.set_aside,
                               "Turns the judge set aside after repeated failures")

    # ------------------------------------------------------------------ app
    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[self.guard.middleware, self._errors_middleware, self._policy_middleware, self._auth_middleware],
            # bodies are decompressed by the handler, within the body limit (policy.decode_body)
            handler_args={"auto_decompress": False, "keepalive_timeout": self.settings.keepalive_timeout_s},
        )
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post(MESSAGES_PATH, self.messages)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get(PAGE_PATH, self.ui)
        app.router.add_get("/v1/dashboard", self.dashboard)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/feedback", self.feedback_post)
        app.router.add_get("/v1/feedback/{response_id}", self.feedback_get)
        app.router.add_get("/v1/memory", self.memory_list)
        app.router.add_delete("/v1/memory", self.memory_clear)
        app.router.add_delete("/v1/memory/{id}", self.memory_forget)
        app.on_response_prepare.append(self._cors_headers)
        app.on_startup.append(self._start_sweeper)
        app.on_cleanup.append(self._stop_sweeper)
        return app

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler):
        try:
            return await handler(request)
        except ApiError as e:
            self.metrics.inc("openclaw_errors_total", help="Requests answered with an error", status=str(e.status))
            resp = web.json_response(_error_body(request, e), status=e.status)
            if e.close:  # send it, then close: the rest of the request (a body too slow or too big) is not read
                resp.force_close()
                await resp.prepare(request)
                await resp.write_eof()
                request.protocol.force_close()
            return resp
        except RequestPayloadError as e:  # a body that breaks off or whose framing is invalid
            err = ApiError(f"the request body could not be read: {e}", code="invalid_body")
            return web.json_response(_error_body(request, err), status=400)
        except web.HTTPRequestEntityTooLarge:
            e = ApiError(f"request body is larger than {self.settings.max_body_bytes} bytes", status=413, code="request_too_large")
            return web.json_response(_error_body(request, e), status=413)
        except web.HTTPException as e:  # 404, 405, ... as OpenAI-style JSON
            if e.status < 400:
                raise
            err = ApiError(f"{e.reason}: {request.method} {request.path}", status=e.status, code=str(e.status))
            allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else {}  # a 405 says what is allowed
            return web.json_response(_error_body(request, err), status=e.status, headers=allow)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            err = ApiError("internal server error", status=500, type="server_error", code="internal_error")
            return web.json_response(_error_body(request, err), status=500)

    @web.middleware
    async def _policy_middleware(self, request: web.Request, handler):
        """HTTP/0.9, a body declared over the limit, Host (DNS rebinding) and Origin (cross-site requests)
        checks; CORS preflights of allowed origins."""
        check_http_version(request.version)
        check_declared_length(request.content_length, self.settings.max_body_bytes)
        origin = request.headers.get("Origin")
        if self._check_host:
            check_host(request.headers.get("Host"), self._hosts)
            if origin is not None and origin.rstrip("/").lower() == f"http://{request.headers.get('Host', '')}".lower():
                origin = None  # same origin, on a Host that is ours: our own page (/ui) calling its server
        if check_origin(origin, self._origins):
            request[CORS] = True
            if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
                return web.Response(status=204, headers={
                    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                    "Access-Control-Allow-Headers": request.headers.get("Access-Control-Request-Headers", ""),
                    "Access-Control-Max-Age": "600"})
        return await handler(request)

    async def _cors_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.get(CORS):
            response.headers["Access-Control-Allow-Origin"] = request.headers["Origin"]
            response.headers["Access-Control-Expose-Headers"] = f"X-Session-Id, {CUT_HEADER}"
            response.headers["Vary"] = "Origin"

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler):
        request[ACCESS] = self._authenticate(request)
        return await handler(request)

    def _authenticate(self, request: web.Request) -> Access:
        """What the request may see (``policy.Access``), or a 401. Where the server has keys, every endpoint
        needs one but ``/healthz``, which answers liveness probes without a key."""
        users = self.settings.user_keys or {}
        if not (self.settings.api_keys or users):
            return OPERATOR
        key = sent_key(request.headers)
        if key is None and request.path in ("/healthz", PAGE_PATH):  # the page holds no figures: it asks with a key
            return PUBLIC
        # aiohttp decodes header bytes that are not UTF-8 to surrogates: compare bytes, never fail on them
        raw = (key or "").encode("utf-8", "surrogateescape")
        named = [name for name, k in users.items() if hmac.compare_digest(raw, k.encode())]
        if named:
            return Access(details=True, user=named[0])
        if key is not None and any(hmac.compare_digest(raw, k.encode()) for k in self.settings.api_keys):
            return OPERATOR
        raise ApiError("invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')",
                       status=401, type="authentication_error", code="invalid_api_key")

    async def _start_sweeper(self, app: web.Application) -> None:
        async def sweep() -> None:
            while True:
                await asyncio.sleep(self.settings.session_sweep_s)
                self.tracker.close_idle()

        # prompts are rendered (the chat template and the tokenizer) off the event loop, in two lanes: a
        # 7 MB prompt takes seconds to tokenize, and only other big ones wait behind it (see _fit)
        self._lanes = {False: ThreadPoolExecutor(max_workers=2, thread_name_prefix="openclaw-render"),
                       True: ThreadPoolExecutor(max_workers=1, thread_name_prefix="openclaw-render-big")}
        self._sweeper = asyncio.create_task(sweep())

    async def _stop_sweeper(self, app: web.Application) -> None:
        self._sweeper.cancel()
        self.guard.stop()
        for lane in self._lanes.values():
            lane.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ small endpoints
    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: the served model's name and its alias ``policy``; a request naming either (or any
        other name: ``_note_model``) is answered by that one model."""
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "openclaw-rl"} for name in self._model_ids]})

    def _note_model(self, name: str | None) -> None:
        """A request naming a model this server does not list is still answered (a client sends the name it was
        configured with, and should not break), by the served model, whose name the response reports; the log
        says so once per name (for the first ``UNKNOWN_MODELS_LOGGED`` names: a client cannot grow the set)."""
        if not name or name in self._model_ids or name in self._unknown_models:
            return
        if len(self._unknown_models) >= UNKNOWN_MODELS_LOGGED:
            return
        self._unknown_models.add(name)
        log.warning("requests for model %r are answered by the served model %r (this server lists %s)", name[:200],
                    self.settings.model_name, ", ".join(self._model_ids))

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness and figures. Who asks decides what is shown (``policy.Access``): without a key, on a server
        that has keys, figures that identify no one; a per-user key adds that user's own per-user figures and
        the filesystem and error details; the shared key (or any request, on a server without keys) everything."""
        access = request[ACCESS]
        only = None if access.everyone else access.user  # whose per-user figures
        counts = await self.store.run(self.store.counts)
        checks = await self.store.run(self.store.teacher_check_summary, 5 if access.sees_users else 0, only)
        memory = await self._memory_counts()
        body: dict[str, Any] = {
            "status": "ok",
            "model": self.settings.model_name if access.details else _public_model_name(self.settings.model_name),
            "dtype": str(getattr(self.engine, "dtype", "")).removeprefix("torch.") or None,
            "policy_version": self.engine.policy_version,
            "learns": self.settings.learns,
            "sampling_defaults": {"temperature": self.settings.sampling.temperature, "top_p": self.settings.sampling.top_p,
                                  **({"source": self.settings.sampling.source} if access.details else {})},
            "requests_in_flight": self.in_flight,
            "sessions_open": self.tracker.open_sessions,
            **counts,
            "hints_teacher_follows": checks["hints_teacher_follows"],  # does the hinted teacher follow hints
            "hints_teacher_cannot_follow": checks["hints_teacher_cannot_follow"],
            "memory": memory,  # the preference memory, all users together
        }
        if access.sees_users:
            body["hints_unfollowed_recent"] = checks["hints_unfollowed_recent"]
            body["preferences_by_user"] = await self.store.run(self.store.preference_counts, only)  # accepted hints
        if self.checkpoints or self.trainer:
            body["training"] = self.training_status(access.details)
        if self.judge_worker:
            body["judge"] = _details(self.judge_worker.status(), access.details)
        if not access.details:
            body["access"] = "no API key: figures that identify no one; per-user and filesystem details need a key"
        return web.json_response(body)

    async def ui(self, request: web.Request) -> web.Response:
        """``GET /ui``: the page that shows what the agent learned (slime_ext/dashboard.py). It holds no figures:
        it asks ``/v1/dashboard`` for them with the key given in its address (``/ui#key=KEY``)."""
        return web.Response(text=dashboard.page(), content_type="text/html",
                            headers={"Cache-Control": "no-store", "Content-Security-Policy":
                                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                     "img-src 'self' data:"})

    async def dashboard(self, request: web.Request) -> web.Response:
        """``GET /v1/dashboard``: the page's figures; a per-user key sees its own user's, the shared key everyone's."""
        access = request[ACCESS]  # never PUBLIC: only /healthz and the page itself are served without a key
        only = None if access.everyone else access.user
        data = await self.store.run(dashboard.collect, self.store, self.store.run_dir, only, self.engine.policy_version,
                                    self.settings.model_name)
        return web.json_response(data)

    async def _memory_counts(self) -> dict[str, Any]:
        """The preference memory in figures that identify no user: on or off, how many users have standing
        preferences and how many those are, and the requests served with the memory."""
        per_user = await self.store.run(self.store.preference_counts)
        standing = [n["standing"] for n in per_user.values() if n["standing"]]
        served = self.metrics.total("openclaw_memory_requests_total")
        return {"on": self.settings.memory, "users": len(standing), "standing_preferences": sum(standing),
                "requests_served_with_it": int(served)}

    def training_status(self, details: bool = True) -> dict[str, Any]:
        """``/healthz``'s ``training``: the served version's step figures and the canary (the watcher), and the
        trainer process (the supervisor: its state, restarts and, with ``details``, its last error)."""
        out = self.checkpoints.status() if self.checkpoints else {}
        return {**out, "trainer": _details(self.trainer.status(), details)} if self.trainer else out

    async def prometheus(self, request: web.Request) -> web.Response:
        text = self.metrics.render()
        counts = await self.store.run(self.store.counts)
        counts.update(await self.store.run(self.store.teacher_check_summary, 0))
        memory = await self._memory_counts()
        counts.update(memory_users=memory["users"], memory_standing=memory["standing_preferences"])
        lines = []
        for name, key, what in (("openclaw_judged_turns", "judged_turns", "Turns with a judge verdict"),
                                ("openclaw_trained_turns", "trained_turns", "Turns trained on"),
                                ("openclaw_waiting_turns", "waiting_to_train", "Judged turns waiting for a training step"),
                                ("openclaw_verdict_mean", "mean_verdict", "Mean judge verdict (the reward)"),
                                ("openclaw_hints_teacher_follows", "hints_teacher_follows",
                                 "Hinted turns whose hinted teacher follows the hint"),
                                ("openclaw_hints_teacher_cannot_follow", "hints_teacher_cannot_follow",
                                 "Hinted turns whose hinted teacher does not follow the hint"),
                                ("openclaw_memory_users", "memory_users", "Users with standing preferences"),
                                ("openclaw_memory_standing_preferences", "memory_standing",
                                 "Standing preferences stored, all users together")):
            lines += [f"# HELP {name} {what}", f"# TYPE {name} gauge", f"{name} {counts[key] or 0:g}"]
        lines += ["# HELP openclaw_dropped_turns Judged turns not trained on, by reason", "# TYPE openclaw_dropped_turns gauge"]
        lines += [f'openclaw_dropped_turns{{reason="{_label(r)}"}} {n}' for r, n in sorted(counts["dropped_by_reason"].items())]
        lines += ["# HELP openclaw_connections_closed_total Connections the server closed, by reason",
                  "# TYPE openclaw_connections_closed_total counter"]
        lines += [f'openclaw_connections_closed_total{{reason="{r}"}} {n}' for r, n in sorted(self.guard.dropped.items())]
        text += "\n".join(lines) + "\n"
        access = request[ACCESS]  # a per-user key sees its own user's figures
        per_user = [row for row in await self.store.run(self.store.verdicts_by_user) if access.sees(row[0])]
        if per_user:
            lines = ["# HELP openclaw_user_verdict_mean Mean judge verdict of each user's turns",
                     "# TYPE openclaw_user_verdict_mean gauge"]
            lines += [f'openclaw_user_verdict_mean{{user="{_label(u)}"}} {mean:g}' for u, _, mean in per_user]
            lines += ["# HELP openclaw_user_judged_turns Judged turns of each user", "# TYPE openclaw_user_judged_turns gauge"]
            lines += [f'openclaw_user_judged_turns{{user="{_label(u)}"}} {n}' for u, n, _ in per_user]
            text += "\n".join(lines) + "\n"
        return web.Response(body=text.encode(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    # ------------------------------------------------------------------ the preference memory
    def _user(self, request: web.Request, named: str | None) -> str | None:
        """Whom a request acts for (a chat is recorded as, a memory call reads or edits): the user its per-user
        key names, else ``named`` (a chat's ``user`` field, the memory's ``user`` query parameter; never a keyed
        user's name without that user's key: 403), else its key's identity (``policy.request_user``). On a server
        without keys, every caller that names no user is the one local user (None), whatever token it sends."""
        sent = key_identity(sent_key(request.headers)) if self._keys_identify else None
        return request_user(request[ACCESS].user, named or None, sent, self._keyed_users)

    async def memory_list(self, request: web.Request) -> web.Response:
        """``GET /v1/memory``: the caller's own preferences; ``applied`` marks what the memory serves them with."""
        user = self._user(request, request.query.get("user"))
        prefs = await self.store.run(self.store.preferences, user)
        served = self._fit_memory([p["hint"] for p in prefs if p["standing"]]) if self.settings.memory else []
        applied = set(served)
        return web.json_response({"object": "list", "user": user, "memory": "on" if self.settings.memory else "off",
                                  # the words the caller's answers open with (chat/memory.py: opening), or null
                                  "opening": opening(served) if self.settings.memory_opening else None,
                                  "data": [{"id": p["id"], "hint": p["hint"], "standing": p["standing"],
                                            "applied": p["hint"] in applied, "times": p["times"],
                                            # False: stored and served, but the model does not follow it yet
                                            "teacher_follows": p["teacher_follows"],
                                            "created_at": p["created_at"], "last_at": p["last_at"]} for p in prefs]})

    async def memory_forget(self, request: web.Request) -> web.Response:
        """``DELETE /v1/memory/{id}``: delete one of the caller's own preferences (another user's is a 404)."""
        user = self._user(request, request.query.get("user"))
        try:
            pid = int(request.match_info["id"])
        except ValueError:
            raise ApiError(f"a preference id is a number (got {request.match_info['id'][:40]!r})", param="id") from None
        hint = await self.store.run(self.store.forget_preference, user, pid)
        if hint is None:
            raise ApiError(f"you have no preference {pid} (GET /v1/memory lists yours)", status=404, param="id",
                           code="preference_not_found")
        return web.json_response({"id": pid, "hint": hint, "deleted": True})

    async def memory_clear(self, request: web.Request) -> web.Response:
        """``DELETE /v1/memory``: delete every preference of the caller's."""
        n = await self.store.run(self.store.clear_preferences, self._user(request, request.query.get("user")))
        return web.json_response({"deleted": n})

    def _fit_memory(self, hints: list[str]) -> list[str]:
        """The newest of ``hints`` whose memory block fits ``MEMORY_TOKENS`` (the oldest left out past it)."""
        count = lambda text: len(self.tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
        return fit_memory(hints, count, MEMORY_TOKENS)

    # ------------------------------------------------------------------ explicit feedback
    async def feedback_post(self, request: web.Request) -> web.Response:
        """``POST /v1/feedback``: the caller's verdict (and hint) on one of their own replies (``api/feedback.py``)."""
        _, body = await self._json_body(request)
        response_id, verdict, hint, named = feedback.parse_feedback(body)
        user = self._user(request, named)
        standing = bool(hint) and is_standing_preference(hint, "user")
        done = await self.store.run(feedback.record, self.store, response_id, user, verdict, hint, standing)
        counts = await self.store.run(self.store.counts)
        log.info("feedback %+d on turn %d of %s%s", verdict, done["turn"], done["session_id"],
                 f", hint {hint!r}" if hint else "")
        self.metrics.inc("openclaw_feedback_total", help="Explicit verdicts received (POST /v1/feedback)",
                         verdict=str(verdict))
        return web.json_response({"object": "feedback", "response_id": response_id, "verdict": verdict, "hint": hint,
                                  "standing": standing, "session_id": done["session_id"], "turn": done["turn"],
                                  "served_by_version": done["policy_version"],
                                  "replaced_verdict": done["replaced_verdict"],
                                  "waiting_to_train": counts["waiting_to_train"],
                                  "batch_size": self.settings.batch_size})

    async def feedback_get(self, request: web.Request) -> web.Response:
        """``GET /v1/feedback/{response_id}``: what became of one of the caller's replies: its verdict and hint, from
        the user or the judge, and whether it was trained on (another user's reply is a 404 like an unknown one)."""
        response_id = request.match_info["response_id"]
        found = await self.store.run(self.store.turn_feedback, response_id, self._user(request, request.query.get("user")))
        if found is None:
            raise ApiError(f"you have no reply {response_id[:80]!r}", status=404, param="response_id",
                           code="response_not_found")
        return web.json_response({"object": "feedback", "response_id": response_id, **found})

    # ------------------------------------------------------------------ chat completions
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        received = time.time()
        raw, body = await self._json_body(request)
        gen = await self._generation(request, parse_chat_request(body), received, big=len(raw) > BIG_REQUEST_BYTES)
        return await self._serve(gen, gen.stream(request) if gen.req.stream else gen.complete())

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's Messages API: the same generation, recorded the same way (api/anthropic.py)."""
        received = time.time()
        raw, body = await self._json_body(request)
        req = parse_chat_request(anthropic.to_chat_body(body))
        gen = await self._generation(request, req, received, big=len(raw) > BIG_REQUEST_BYTES, id_prefix="msg_")
        return await self._serve(gen, gen.anthropic_stream(request) if req.stream else gen.anthropic_complete())

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's Responses API: the same generation, recorded the same way (api/responses.py); with ``store``
        (the default) the conversation and its reply are kept for a later ``previous_response_id``."""
        received = time.time()
        raw, body = await self._json_body(request)
        prev = responses.previous_id(body)
        previous: list[dict[str, Any]] = []
        if prev is not None:
            named = body.get("user") if isinstance(body.get("user"), str) else None
            previous = await self.store.run(self.store.response_conversation, prev, self._user(request, named))
            if previous is None:
                raise ApiError(f"Previous response with id '{prev}' not found.", param="previous_response_id",
                               code="previous_response_not_found")
        chat_body, conversation = responses.to_chat_body(body, previous)
        req = parse_chat_request(chat_body)
        keep = responses.keeps(body)  # checked before the session is assigned: a bad request changes nothing
        gen = await self._generation(request, req, received, big=len(raw) > BIG_REQUEST_BYTES, id_prefix="resp_")
        gen.kept_conversation = conversation if keep else None
        return await self._serve(gen, gen.responses_stream(request, body) if req.stream else gen.responses_complete(body))

    async def _generation(self, request: web.Request, req: ChatRequest, received: float, big: bool,
                          id_prefix: str = "chatcmpl-") -> _Generation:
        """A validated request made ready to run: its user's memory added, its prompt rendered (and cut to fit),
        its sampling settled and its session assigned."""
        user = self._user(request, req.user)
        self._note_model(req.model)
        memory = await self._memory(request, user)
        wanted = min(req.max_tokens or self.settings.default_max_tokens, self.settings.max_tokens_cap)
        served = dataclasses.replace(req, messages=with_memory(req.messages, memory, self.settings.memory_placement))
        seen, prompt_ids, cut = await self._fit(served, wanted, big=big)
        ctx = self.engine.context_length
        max_new = min(wanted, ctx - len(prompt_ids))
        defaults = self.settings.sampling  # the request's own values win
        sampling = SamplingParams(
            temperature=defaults.temperature if req.temperature is None else req.temperature,
            top_p=defaults.top_p if req.top_p is None else req.top_p,
            max_new_tokens=max_new, seed=req.seed, stop_token_ids=() if req.ignore_eos else self.stop_ids,
        )
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower().startswith("x-")}
        try:  # the session id is stored: aiohttp turns bytes that are not UTF-8 into surrogates it cannot encode
            headers.get("x-session-id", "").encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError("the X-Session-Id header is not valid UTF-8", param="x-session-id") from None
        assignment = self.tracker.assign(req.messages, headers, user)
        if assignment.next_state_for is not None and self.judge_worker:
            self.judge_worker.notify()
        # the turn records the messages the model saw (the memory, a cut system prompt); the tracker matched the
        # sent ones
        return _Generation(self, dataclasses.replace(req, messages=seen), prompt_ids, sampling, assignment, user,
                           received, cut, memory, opening(memory) if memory and self.settings.memory_opening else None,
                           id_prefix=id_prefix)

    async def _serve(self, gen: _Generation, reply) -> web.StreamResponse:
        """Await ``reply`` (the generation's response, streamed or whole), counted as a request in flight."""
        self.in_flight += 1
        self.metrics.inc("openclaw_requests_total", help="Chat requests accepted", stream=str(gen.req.stream).lower())
        try:
            return await reply
        finally:
            self.in_flight -= 1

    async def _memory(self, request: web.Request, user: str | None) -> list[str]:
        """The standing preferences of ``user`` the preference memory adds to this request (``chat/memory.py``):
        none with ``--memory off`` or the request header ``X-OpenClaw-RL-Memory: off``."""
        wanted = (request.headers.get(MEMORY_HEADER) or "on").strip().lower()
        if wanted not in ("on", "off"):
            raise ApiError(f"the {MEMORY_HEADER} header must be 'on' or 'off'", param=MEMORY_HEADER.lower(),
                           code="invalid_header")
        if not self.settings.memory or wanted == "off":
            return []
        hints = self._fit_memory([p["hint"] for p in await self.store.run(self.store.preferences, user, True, False)])
        if hints:
            self.metrics.inc("openclaw_memory_requests_total", help="Requests served with the preference memory")
        return hints

    async def _json_body(self, request: web.Request) -> tuple[bytes, Any]:
        """The request's body, raw and decoded from JSON, or a 4xx naming what is wrong with it."""
        check_content_type(request.headers.get("Content-Type"))
        raw = await self._read_body(request)
        try:
            return raw, json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(f"the request body is not valid JSON: {e}", code="invalid_json") from None
        except RecursionError:  # e.g. 100000 nested '[': the decoder gives up before finding an error
            raise ApiError("the request body could not be parsed as JSON: it is nested too deeply", code="invalid_json") from None

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole body, decompressed, or a 408 when it does not arrive within ``body_timeout_s`` (one declared
        over the limit was refused before: ``check_declared_length``)."""
        try:
            raw = await asyncio.wait_for(request.read(), self.settings.body_timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(f"the request body did not arrive within {self.settings.body_timeout_s:g} s", status=408,
                           code="request_timeout", close=True) from None
        return decode_body(raw, request.headers.get("Content-Encoding"), self.settings.max_body_bytes)

    async def _fit(self, req: ChatRequest, wanted: int, big: bool) -> tuple[list[dict[str, Any]], list[int], int]:
        """``(messages as the model sees them, prompt ids, tokens cut)``. A prompt that does not fit the context
        leaves room for ``wanted`` new tokens (at most a quarter of the context) by cutting the system prompt's
        middle (``chat/overflow.py``), or is refused with ``context_overflow: error``.

        Rendering runs off the event loop, in one of two lanes: a ``big`` request (a body over
        ``BIG_REQUEST_BYTES``) in the lane of big prompts (one thread), every other one in the lane of small
        prompts (two threads). Tokenizing a 7 MB prompt takes seconds; only another big prompt waits behind it,
        never another client's chat. And a big request whose prompt cannot fit even with its system prompt cut is
        refused before it is tokenized at all, on a lower bound of its tokens (``_render_or_refuse``; a small one
        tokenizes in milliseconds, and is not rendered twice to save them)."""
        ctx = self.engine.context_length
        budget = ctx - min(wanted, ctx // 4)
        render = functools.partial(self._render, tools=req.tools, tool_choice=req.tool_choice,
                                   template_kwargs=req.template_kwargs)
        loop = asyncio.get_running_loop()
        lane = self._lanes[big]
        ids = await loop.run_in_executor(lane, self._render_or_refuse, req, budget, big)
        if len(ids) < ctx:
            return req.messages, ids, 0
        if self.settings.context_overflow != "trim":
            raise self._overflow(f"the prompt is {len(ids)} tokens")
        tok = self.tokenizer
        fit = functools.partial(fit_messages, render=render, budget=budget, context=ctx,
                                encode=lambda t: tok.encode(t, add_special_tokens=False), decode=tok.decode)
        sent = len(ids)
        try:
            seen, ids, cut = await loop.run_in_executor(lane, fit, req.messages, ids)
        except ValueError as e:
            raise ApiError(str(e), param="messages", code="context_length_exceeded") from None
        log.info("prompt of %d tokens cut to %d (%d tokens of the system prompt's middle) to fit the %d-token "
                 "context", sent, len(ids), cut, ctx)
        self.metrics.inc("openclaw_prompt_tokens_cut_total", cut, help="System-prompt tokens cut to fit the context")
        return seen, ids, cut

    def _render_or_refuse(self, req: ChatRequest, budget: int, check: bool) -> list[int]:
        """The prompt ids, or (``check``) a 400 before tokenizing when lower bounds of the prompt's tokens (its
        text's bytes over the most bytes one token stands for) show it cannot be served: past the context, and,
        where the system prompt may be cut (``context_overflow: trim``), past ``budget`` without it too."""
        if not check:
            return self._render(req.messages, req.tools, req.tool_choice, req.template_kwargs)
        with _template_errors():
            text = self.renderer.text(req.messages, req.tools, req.tool_choice, template_kwargs=req.template_kwargs)
        n_bytes = len(text.encode("utf-8", "surrogatepass"))
        fewest = self.renderer.fewest_tokens(n_bytes)
        if fewest >= self.engine.context_length:
            prompt_is = f"the prompt is at least {fewest} tokens ({n_bytes} bytes of text; counted without tokenizing it)"
            cuttable = cuttable_text(req.messages) if self.settings.context_overflow == "trim" else ""
            if cuttable:
                fewest = self.renderer.fewest_tokens(n_bytes - len(cuttable.encode("utf-8", "surrogatepass")))
                prompt_is += f", at least {fewest} without its system prompt"
            if fewest > (budget if self.settings.context_overflow == "trim" else 0):
                self.metrics.inc("openclaw_prompts_refused_untokenized_total",
                                 help="Prompts refused as too long before they were tokenized")
                raise self._overflow(prompt_is)
        return self._render(req.messages, req.tools, req.tool_choice, req.template_kwargs)

    def _overflow(self, prompt_is: str) -> ApiError:
        """The 400 for a prompt that does not fit the context, ``prompt_is`` saying how long it is."""
        refusal = f"{prompt_is}, but this model's context is {self.engine.context_length} tokens ({self.settings.model_name})"
        if self.settings.context_overflow == "trim":
            return ApiError(f"{refusal}, and cutting the system prompt cannot make it fit: shorten the conversation or "
                            "serve a model with a longer context", param="messages", code="context_length_exceeded")
        return ApiError(f"{refusal}; shorten the messages, serve a model with a longer context, or serve with "
                        "--context-overflow trim", param="messages", code="context_length_exceeded")

    def _render(self, messages: list[dict[str, Any]], tools, tool_choice, template_kwargs=None) -> list[int]:
        with _template_errors():
            return self.renderer.render(messages, tools, tool_choice, template_kwargs=template_kwargs)


class _Generation:
    """One chat completion: runs the engine, feeds the parser, records the turn."""

    def __init__(self, server: ChatServer, req: ChatRequest, prompt_ids, sampling, assignment: Assignment, user, received,
                 cut: int = 0, memory: list[str] | None = None, opening: str | None = None, id_prefix: str = "chatcmpl-"):
        self.s = server
        self.memory = memory or None  # the standing preferences the memory added to the prompt
        self.cut = cut  # system-prompt tokens cut to fit the context (reported in a response header)
        self.req = req
        self.prompt_ids = prompt_ids
        self.sampling = sampling
        self.a = assignment
        self.user = user
        self.id = id_prefix + uuid.uuid4().hex
        self.created = int(received)
        self.t_received = received
        self.t_first: float | None = None
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        tools_on = bool(req.tools) and req.tool_choice != "none"
        # a prompt that ends inside <think> (a thinking model's template opens it): the reply starts as reasoning
        opened = server.tokenizer.decode(list(prompt_ids[-4:])).rstrip().endswith("<think>")
        self.parser = ReplyParser(stops=req.stop, tool_names={t["function"]["name"] for t in req.tools} if tools_on else set(),
                                  thinking=True if opened else None)
        self.hit_eos = False
        # the repetition stop (chat/repetition.py): ends a reply that fell into a loop; not where the request asked
        # for max_tokens whatever the model says (ignore_eos)
        self.loop_stop = RepetitionStop() if server.settings.repetition_stop and not req.ignore_eos else None
        self.looped = False  # the repetition stop ended the reply
        # Responses API: the conversation this answers, kept with its reply under the id (previous_response_id)
        self.kept_conversation: list[dict[str, Any]] | None = None
        # the memory's opening: the answer's first tokens, given, not sampled (a tool call or reasoning comes first
        # where tools are on or the prompt opened <think>; and at least one token is left to sample)
        forced = server.tokenizer.encode(opening, add_special_tokens=False) if opening else []
        self.forced = forced if forced and not tools_on and not opened and len(forced) < sampling.max_new_tokens else []
        if self.forced:  # and the opening is never the whole answer: one sampled token at least is not a stop
            self.sampling = dataclasses.replace(sampling, max_new_tokens=sampling.max_new_tokens - len(self.forced),
                                                min_new_tokens=1)

    async def events(self):
        """Yield parser events as tokens arrive; stops the engine early on a stop string."""
        decode = self.s.tokenizer.decode
        if self.forced:  # given as the answer's first tokens: log-prob 0 under what served them
            self.tokens, self.logprobs = list(self.forced), [0.0] * len(self.forced)
            self.versions = [self.s.engine.policy_version] * len(self.forced)
        stream = self.s.engine.generate(self.prompt_ids + self.forced, self.sampling)
        try:
            async for out in stream:
                if self.t_first is None:
                    self.t_first = time.time()
                self.tokens.append(out.token_id)
                self.logprobs.append(out.logprob)
                self.versions.append(out.policy_version)
                if out.token_id in self.sampling.stop_token_ids:
                    self.hit_eos = True
                elif self.loop_stop is not None and self.loop_stop.feed(out.token_id):
                    self.looped = True
                for ev in self.parser.feed(decode(self.tokens, skip_special_tokens=True)):
                    yield ev
                if self.parser.stopped or self.looped:
                    break
        finally:
            await stream.aclose()
        if not self.parser.stopped:
            for ev in self.parser.feed(decode(self.tokens, skip_special_tokens=True), final=True):
                yield ev

    @property
    def finish_reason(self) -> str:
        if self.parser.tool_calls:
            return "tool_calls"
        if self.parser.stopped or self.hit_eos:
            return "stop"
        return "length"  # at the token limit, or cut by the repetition stop (recorded as "repetition")

    @property
    def recorded_finish_reason(self) -> str:
        """What the recorded turn says: the client's ``finish_reason``, but ``repetition`` where the repetition stop
        ended the reply (the client sees ``length``: the reply was cut, and OpenAI's clients know no other word)."""
        reason = self.finish_reason
        return "repetition" if reason == "length" and self.looped else reason

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.tokens),
                "total_tokens": len(self.prompt_ids) + len(self.tokens)}

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.parser.content or (None if self.parser.tool_calls else "")}
        if self.parser.tool_calls:
            msg["tool_calls"] = self.parser.tool_calls
        if self.parser.reasoning:
            msg["reasoning_content"] = self.parser.reasoning
        return msg

    async def record(self, finish_reason: str, main_line: bool | None = None, reason: str | None = None) -> None:
        """Commit the turn; returns only once it is durable."""
        now = time.time()
        msg = self.message()
        turn = Turn(
            session_id=self.a.session_id, index=self.a.turn_index,
            main_line=self.a.main_line if main_line is None else main_line,
            reason=reason or self.a.reason, request_id=self.id,
            prompt_token_ids=list(self.prompt_ids), response_token_ids=self.tokens, response_logprobs=self.logprobs,
            response_text=self.parser.visible, policy_version=self.versions[0] if self.versions else self.s.engine.policy_version,
            policy_version_end=self.versions[-1] if self.versions else self.s.engine.policy_version,
            finish_reason=finish_reason, messages=self.req.messages, tool_calls=self.parser.tool_calls or None,
            tools=self.req.tools or None, tool_choice=self.req.tool_choice if self.req.tools else None,
            user=self.user,
            sampling={"temperature": self.sampling.temperature, "top_p": self.sampling.top_p,
                      "max_new_tokens": self.sampling.max_new_tokens + len(self.forced), "seed": self.sampling.seed,
                      "stop": self.req.stop, **({"forced_tokens": len(self.forced)} if self.forced else {}),
                      **({"chat_template_kwargs": self.req.template_kwargs} if self.req.template_kwargs else {})},
            timings={"received": self.t_received, "first_token": self.t_first or now, "done": now},
            reply_key=message_key(msg), history_keys=self.a.history_keys, created_at=now, memory=self.memory,
        )
        await self.s.store.run(self.s.store.insert_turn, turn)
        if self.kept_conversation is not None and main_line is None:  # a whole reply (not an abandoned one)
            await self.s.store.run(self.s.store.save_response, self.id, self.user, [*self.kept_conversation, msg])
        if self.a.main_line and not turn.main_line:
            self.s.tracker.demote(self.a)
        self.s.tracker.record_reply(self.a, turn.reply_key)
        self.s.metrics.inc("openclaw_turns_recorded_total", help="Turns committed to the store",
                           main_line=str(turn.main_line).lower())
        self.s.metrics.inc("openclaw_generated_tokens_total", len(self.tokens) - len(self.forced),
                           help="Response tokens sampled (not those the memory gave)")

    async def _run_whole(self) -> None:
        """Generate the whole reply and record it (a non-streaming response)."""
        try:
            async for _ in self.events():
                pass
        except EngineError as e:
            self.s.tracker.demote(self.a)  # nothing was recorded: the previous main-line turn stays the latest
            raise ApiError(f"the engine failed: {e}", status=500, type="server_error", code="engine_error") from None
        await self.record(self.recorded_finish_reason)

    async def complete(self) -> web.Response:
        await self._run_whole()
        return web.json_response(
            {
                "id": self.id, "object": "chat.completion", "created": self.created, "model": self.s.settings.model_name,
                "choices": [{"index": 0, "message": self.message(), "finish_reason": self.finish_reason, "logprobs": None}],
                "usage": self.usage(),
            }, headers=self.headers()
        )

    async def anthropic_complete(self) -> web.Response:
        await self._run_whole()
        return web.json_response(anthropic.message(self.id, self.s.settings.model_name, self.parser, self.finish_reason,
                                                   len(self.prompt_ids), len(self.tokens)), headers=self.headers())

    async def responses_complete(self, body: dict[str, Any]) -> web.Response:
        await self._run_whole()
        return web.json_response(self._response_object(responses.output_items(self.parser), body), headers=self.headers())

    def _response_object(self, output: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
        return responses.response_object(self.id, self.s.settings.model_name, self.created, output, self.finish_reason,
                                          len(self.prompt_ids), len(self.tokens), body)

    def headers(self) -> dict[str, str]:
        """What the response says besides the body: how many prompt tokens were cut to fit, if any."""
        return {CUT_HEADER: str(self.cut)} if self.cut else {}

    async def stream(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, _ChunkFrames(self))

    async def anthropic_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, anthropic.Frames(self.id, self.s.settings.model_name, len(self.prompt_ids)))

    async def responses_stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return await self._stream(request, responses.Frames(self.id, self.s.settings.model_name, self.created, body,
                                                            lambda output: self._response_object(output, body)))

    async def _stream(self, request: web.Request, frames) -> web.StreamResponse:
        """Stream the reply as ``frames`` writes it (``start``, an ``event`` per parser event, ``end`` once the
        turn is recorded, or ``error``): Chat Completions chunks, Anthropic's events or the Responses events."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Session-Id": self.a.client_session_id, **self.headers()})
        await resp.prepare(request)
        try:
            await resp.write(frames.start())
            async for kind, value in self.events():
                await resp.write(frames.event(kind, value))
        except (ConnectionResetError, asyncio.CancelledError):
            await self._abandon()
            raise
        except EngineError as e:
            self.s.tracker.demote(self.a)
            await resp.write(frames.error(ApiError(f"the engine failed: {e}", status=500, type="server_error",
                                                   code="engine_error")))
            return resp
        await self.record(self.recorded_finish_reason)
        try:
            await resp.write(frames.end(self.finish_reason, self.parser.stop_found, len(self.tokens)))
            await resp.write_eof()
        except ConnectionResetError:
            pass
        return resp

    async def _abandon(self) -> None:
        """The client left mid-stream: keep the record, but never as a trainable main-line turn."""
        try:
            await asyncio.shield(self.record("client_disconnected", main_line=False,
                                             reason="side: the client disconnected before the reply was complete"))
        except Exception:
            log.exception("could not record an abandoned turn")


class _ChunkFrames:
    """A reply's parser events as Chat Completions chunks (``data: {...}``), ending with ``data: [DONE]``."""

    def __init__(self, gen: _Generation) -> None:
        self.gen = gen
        self.calls = 0  # tool calls sent so far: the next one's index

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, kind: str, value: Any) -> bytes:
        if kind in ("content", "reasoning"):
            return self._chunk({"content" if kind == "content" else "reasoning_content": value})
        self.calls += 1
        return self._chunk({"tool_calls": [{"index": self.calls - 1, **value}]})

    def end(self, finish_reason: str, stop_sequence: str | None, output_tokens: int) -> bytes:
        gen = self.gen
        out = self._chunk({}, finish_reason)
        if gen.req.include_usage:
            usage = {"id": gen.id, "object": "chat.completion.chunk", "created": gen.created,
                     "model": gen.s.settings.model_name, "choices": [], "usage": gen.usage()}
            out += b"data: " + json.dumps(usage).encode() + b"\n\n"
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def error(err: ApiError) -> bytes:
        return b"data: " + json.dumps(err.body()).encode() + b"\n\ndata: [DONE]\n\n"

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        gen = self.gen
        body = {"id": gen.id, "object": "chat.completion.chunk", "created": gen.created, "model": gen.s.settings.model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


@contextlib.contextmanager
def _template_errors():
    """A chat template that cannot render the messages (it raised) is the request's error, a 400."""
    try:
        yield
    except ApiError:
        raise
    except Exception as e:
        raise ApiError(f"the chat template could not render these messages: {e}", param="messages") from None


def _error_body(request: web.Request, e: ApiError) -> dict[str, Any]:
    """``e`` in the shape of the API the request was made to: Anthropic's for ``/v1/messages``, else OpenAI's."""
    return anthropic.error_body(e) if request.path == MESSAGES_PATH else e.body()


def _label(user: str | None) -> str:
    """A Prometheus label value: escaped, and 'anonymous' for requests without an identity."""
    return label_value(user or "anonymous")


def _details(status: dict[str, Any], details: bool) -> dict[str, Any]:
    """A component's status without its error texts (they can name paths) unless ``details`` may be shown."""
    return status if details else {k: v for k, v in status.items() if k != "last_error"}


def _public_model_name(name: str) -> str:
    """The model's name as a request without a key sees it: a local path's last component, a hub id as it is."""
    return name if "/" not in name or is_hub_id(name) else Path(name).name
