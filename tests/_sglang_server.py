"""Test support: an HTTP server that speaks the subset of SGLang's native API the SGLang engine
client uses, backed by our ``LocalEngine``.

Written from SGLang's documented request/response format (``python/sglang/srt/entrypoints/
http_server.py``, ``managers/tokenizer_manager.py``, ``io_struct.py``):

- ``POST /generate``: ``input_ids``, ``sampling_params`` (``temperature``, ``top_p``, ``top_k``
  = 1 only, ``max_new_tokens``, ``stop_token_ids``, ``min_new_tokens``, ``sampling_seed``), ``return_logprob``,
  ``logprob_start_len``, ``stream``, ``rid``. Streaming sends ``data: {json}`` chunks with
  cumulative ``meta_info.output_token_logprobs`` ``[[logprob, token_id, None], ...]``,
  ``completion_tokens``, ``prompt_tokens``, ``weight_version`` (the server's, as a string, when
  the chunk is made), ``finish_reason`` (``None``, then ``{"type": "stop", "matched": id}``,
  ``{"type": "length", "length": n}`` or ``{"type": "abort", "message": ..., "status_code":
  None}``), then ``data: [DONE]``. With ``max_new_tokens: 0`` and ``return_logprob``,
  ``input_token_logprobs`` covers ``input_ids[logprob_start_len:]``, its first entry ``None``.
  Requests whose input reaches the context, or whose input + ``max_new_tokens`` does, get 400.
- ``POST /pause_generation`` (``mode`` ``abort`` by default, as Slime calls it: every running
  request ends with ``finish_reason`` abort and the call returns once none is running; new
  requests wait until ``/continue_generation``; ``in_place`` / ``retract`` hold running requests
  instead), ``POST /continue_generation``.
- ``POST /abort_request`` (``rid`` or ``abort_all``), ``POST /update_weight_version``
  (``new_version``), ``POST /update_weights_from_disk`` (``model_path``, ``weight_version``: the
  local engine swaps in that checkpoint), ``GET /model_info``, ``GET /get_model_info``,
  ``GET /v1/models`` (``max_model_len``), ``GET /health``, ``GET /health_generate``.
- ``POST /load_lora_adapter`` (``lora_name``, ``lora_path``: a PEFT adapter folder; the local engine merges it
  in) and ``POST /unload_lora_adapter`` (``lora_name``); a ``/generate`` naming an adapter (``lora_path``)
  that is not loaded gets 400. The local engine holds one set of weights: a stream still naming the previous
  adapter decodes on the new one until its client moves it (SGLang would keep serving the old adapter).
- ``--api-key``: every request must carry ``Authorization: Bearer <key>`` (401 otherwise).
- ``image_data`` (a vision-language model; ``image_processor`` and ``image_token_id`` given): one
  ``data:image/...;base64,`` URL per run of the image token in ``input_ids``, in order, each run as long
  as the model's processor makes it for that image (``grid_t * grid_h * grid_w / merge_size**2``);
  otherwise 400 (SGLang fails such a request). The test model cannot see: it reads the run as tokens.
  A server without an image processor refuses ``image_data`` (a text model).

Not SGLang: ``refuse_while_paused`` answers 503 to ``/generate`` during a pause (how a router in
front of paused workers may answer), and ``token_delay_s`` slows decoding so tests can act
mid-generation. The local engine does not stop at the tokenizer's EOS by itself (SGLang does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from slime_ext.engines.base import EngineError, SamplingParams


@dataclass
class _Running:
    rid: str
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    message: str = "Aborted"


class FakeSGLangServer:
    """``LocalEngine`` behind SGLang's native HTTP API (see the module docstring)."""

    def __init__(self, engine, *, model_path: str = "tiny", weight_version: str = "default", api_key: str | None = None,
                 token_delay_s: float = 0.0, refuse_while_paused: bool = False, context_length: int | None = None,
                 image_processor=None, image_token_id: int | None = None) -> None:
        self.engine = engine
        self.context_length = min(context_length or engine.context_length, engine.context_length)
        self.model_path = model_path
        self.weight_version = weight_version
        self.api_key = api_key
        self.token_delay_s = token_delay_s
        self.refuse_while_paused = refuse_while_paused
        self.running: dict[str, _Running] = {}
        self.paused = False
        self.pause_mode = "abort"
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.stats = {"generate": 0, "aborted": 0, "refused": 0, "waited_for_pause": 0}
        self.requests: list[dict] = []
        self.image_processor = image_processor
        self.image_token_id = image_token_id
        self.image_sizes: list[list[tuple[int, int]]] = []  # per request with images: each image's (w, h)
        self.adapters: dict[str, int] = {}  # loaded LoRA adapters: name -> the local engine's version for it
        self.lora_calls: list[tuple[str, str]] = []  # ("load" | "unload", adapter name), in order
        self.runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------------ lifecycle
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.router.add_post("/generate", self.generate)
        app.router.add_put("/generate", self.generate)
        app.router.add_post("/pause_generation", self.pause_generation)
        app.router.add_post("/continue_generation", self.continue_generation)
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_post("/update_weight_version", self.update_weight_version)
        app.router.add_post("/update_weights_from_disk", self.update_weights_from_disk)
        app.router.add_post("/load_lora_adapter", self.load_lora_adapter)
        app.router.add_post("/unload_lora_adapter", self.unload_lora_adapter)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeSGLangServer:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        self.url = f"http://{host}:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        self._resumed.set()
        for r in self.running.values():
            r.abort.set()
        if self.runner is not None:
            await self.runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    # ------------------------------------------------------------------ info
    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.model_path, "tokenizer_path": self.model_path,
                                  "is_generation": True, "preferred_sampling_params": None,
                                  "weight_version": self.weight_version, "model_type": "llama",
                                  "architectures": ["LlamaForCausalLM"]})

    async def models(self, request: web.Request) -> web.Response:
        ctx = self.context_length
        return web.json_response({"object": "list", "data": [{"id": self.model_path, "object": "model", "created": 0,
                                                              "owned_by": "sglang", "root": self.model_path,
                                                              "max_model_len": ctx}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    # ------------------------------------------------------------------ control
    async def pause_generation(self, request: web.Request) -> web.Response:
        body = await _json(request)
        self.pause_mode = body.get("mode", "abort")
        self.paused = True
        self._resumed.clear()
        if self.pause_mode == "abort":
            for r in list(self.running.values()):
                r.message = "Abort for pause_generation"
                r.abort.set()
            await self._idle.wait()
        return web.json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        self.paused = False
        self._resumed.set()
        return web.json_response({"message": "Generation continued successfully.", "status": "ok"})

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await _json(request)
        for rid, r in list(self.running.items()):
            if body.get("abort_all") or (body.get("rid") and rid.startswith(body["rid"])):
                r.abort.set()
        return web.Response(status=200)

    async def update_weight_version(self, request: web.Request) -> web.Response:
        body = await _json(request)
        self.weight_version = str(body["new_version"])
        return web.json_response({"success": True, "message": f"Weight version updated to {self.weight_version}",
                                  "new_version": self.weight_version})

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        body = await _json(request)
        version = body.get("weight_version")
        try:
            await self.engine.swap(body["model_path"], int(version) if version is not None else self.engine.policy_version + 1)
        except (EngineError, OSError, KeyError, ValueError) as e:
            return web.json_response({"success": False, "message": str(e), "num_paused_requests": 0}, status=400)
        if version is not None:
            self.weight_version = str(version)
        return web.json_response({"success": True, "message": "Succeeded to update model weights.",
                                  "num_paused_requests": 0})

    # ------------------------------------------------------------------ generate
    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await _json(request)
        self.requests.append(body)
        self.stats["generate"] += 1
        if self.paused and self.refuse_while_paused:
            self.stats["refused"] += 1
            return web.json_response({"object": "error", "message": "generation is paused", "type": "Service Unavailable",
                                      "code": 503}, status=503)
        rid = body.get("rid") or f"req-{time.monotonic_ns()}"
        stream = bool(body.get("stream"))
        resp = None
        if stream:  # a streaming response sends its headers first; the body waits at the pause gate
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
        if not self._resumed.is_set():
            self.stats["waited_for_pause"] += 1
            await self._resumed.wait()
        ids = body.get("input_ids")
        sp = body.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128))
        ctx = self.context_length
        error = None
        if not isinstance(ids, list) or not ids:
            error = "input_ids is required (this test server does not tokenize text)"
        elif body.get("image_data") is not None:
            error = self._check_images(ids, body["image_data"])
        elif body.get("lora_path") is not None and body["lora_path"] not in self.adapters:
            error = f"LoRA adapter {body['lora_path']!r} is not loaded (loaded: {sorted(self.adapters)})"
        elif len(ids) >= ctx:
            error = f"The input ({len(ids)} tokens) is longer than the model's context length ({ctx} tokens)."
        elif max_new + len(ids) >= ctx:
            error = (f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                     f"a total of {max_new + len(ids)} tokens: {len(ids)} tokens from the input messages and {max_new} "
                     "tokens for the completion.")
        if error:  # SGLang raises ValueError: a 400, or an error chunk once a stream has started
            if resp is None:
                return web.json_response({"object": "error", "message": error, "type": "BadRequest", "param": None,
                                          "code": 400}, status=400)
            await resp.write(_sse({"error": {"message": error}}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        if max_new == 0:
            out = await self._score_only(body, ids, rid)
            return await _finish(resp, out) if stream else web.json_response(out)
        return await self._decode(resp, body, ids, sp, max_new, rid)

    async def load_lora_adapter(self, request: web.Request) -> web.Response:
        body = await _json(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return web.json_response({"success": False, "error_message": "lora_name and lora_path are required"},
                                     status=400)
        version = max(self.adapters.values(), default=0) + 1
        try:
            await self.engine.swap(path, version)
        except EngineError as e:
            return web.json_response({"success": False, "error_message": str(e)}, status=400)
        self.adapters[name] = version
        self.lora_calls.append(("load", name))
        return web.json_response({"success": True, "loaded_adapters": dict(self.adapters)})

    async def unload_lora_adapter(self, request: web.Request) -> web.Response:
        name = (await _json(request)).get("lora_name")
        if self.adapters.pop(name, None) is None:
            return web.json_response({"success": False, "error_message": f"{name!r} is not loaded"}, status=400)
        self.lora_calls.append(("unload", name))
        return web.json_response({"success": True, "loaded_adapters": dict(self.adapters)})

    def _check_images(self, ids: list[int], image_data) -> str | None:
        """What is wrong with a request's images (None: nothing); see the module docstring."""
        import base64
        import io

        from PIL import Image

        if self.image_processor is None:
            return "this model takes no images (image_data was sent to a text-only model)"
        images = []
        for i, url in enumerate(image_data if isinstance(image_data, list) else [image_data]):
            head, _, data = str(url).partition(",")
            try:
                assert head.startswith("data:image/") and head.endswith(";base64")
                images.append(Image.open(io.BytesIO(base64.b64decode(data, validate=True))).convert("RGB"))
            except Exception:
                return f"image_data[{i}] is not a base64 data URL of an image"
        from slime_ext.chat.vision import placeholder_runs

        runs = placeholder_runs(ids, self.image_token_id)
        if len(runs) != len(images):
            return f"input_ids hold {len(runs)} image placeholder run(s) for {len(images)} image(s)"
        merge = self.image_processor.merge_size ** 2
        for i, (image, run) in enumerate(zip(images, runs)):
            want = int(self.image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0].prod()) // merge
            if run != want:
                return f"image {i} ({image.width}x{image.height}) needs {want} placeholder tokens, input_ids hold {run}"
        self.image_sizes.append([im.size for im in images])
        return None

    async def _score_only(self, body: dict, ids: list[int], rid: str) -> dict:
        meta = {"id": rid, "finish_reason": {"type": "length", "length": 0}, "prompt_tokens": len(ids),
                "completion_tokens": 0, "weight_version": self.weight_version}
        if body.get("return_logprob"):
            start = int(body.get("logprob_start_len", -1))
            if start < 0:
                start = len(ids) - 1
            lps = await self.engine.score(ids, start + 1) if start + 1 <= len(ids) else []
            meta["input_token_logprobs"] = [[None, ids[start], None]] + [[lp, t, None] for lp, t in zip(lps, ids[start + 1:])]
            meta["output_token_logprobs"] = []
        return {"text": "", "output_ids": [], "meta_info": meta}

    async def _decode(self, resp, body, ids, sp, max_new, rid) -> web.StreamResponse:
        temperature = float(sp.get("temperature", 1.0))
        top_p = 0.0 if sp.get("top_k") == 1 else float(sp.get("top_p", 1.0))
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new,
                                  seed=sp.get("sampling_seed"), stop_token_ids=tuple(sp.get("stop_token_ids") or ()),
                                  min_new_tokens=int(sp.get("min_new_tokens", 0)))
        run = _Running(rid)
        self.running[rid] = run
        self._idle.clear()
        tokens: list[tuple[float, int]] = []
        finish = None
        gen = self.engine.generate(ids, sampling)
        step = aborted = None
        try:
            while finish is None:
                step = asyncio.ensure_future(gen.__anext__())
                aborted = asyncio.ensure_future(run.abort.wait())
                await asyncio.wait({step, aborted}, return_when=asyncio.FIRST_COMPLETED)
                if run.abort.is_set():  # an abort wins over a token that is ready at the same time
                    finish = {"type": "abort", "message": run.message, "status_code": None, "err_type": None}
                    self.stats["aborted"] += 1
                    break
                aborted.cancel()
                try:
                    tok = step.result()
                except StopAsyncIteration:
                    finish = {"type": "length", "length": len(tokens)}
                    break
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                if self.paused and self.pause_mode != "abort":  # in_place / retract: hold until continued
                    await self._resumed.wait()
                tokens.append((tok.logprob, tok.token_id))
                if tok.token_id in sampling.stop_token_ids:
                    finish = {"type": "stop", "matched": tok.token_id}
                elif len(tokens) >= max_new:
                    finish = {"type": "length", "length": len(tokens)}
                if resp is not None and finish is None:
                    await resp.write(_sse(self._chunk(rid, ids, tokens, None, body)))
        finally:
            for task in (step, aborted):
                if task is not None and not task.done():
                    task.cancel()
            if step is not None:
                await asyncio.wait({step})  # the generator is not running any more before it is closed
                if not step.cancelled():
                    step.exception()  # retrieved: a token or end of stream nobody will read
            await gen.aclose()
            self.running.pop(rid, None)
            if not self.running:
                self._idle.set()
        out = self._chunk(rid, ids, tokens, finish, body)
        return await _finish(resp, out) if resp is not None else web.json_response(out)

    def _chunk(self, rid, ids, tokens, finish, body) -> dict:
        meta = {"id": rid, "finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(tokens),
                "cached_tokens": 0, "weight_version": self.weight_version}
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in tokens]
            meta["input_token_logprobs"] = []
        return {"text": "", "output_ids": [t for _, t in tokens], "meta_info": meta}


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _finish(resp: web.StreamResponse, out: dict) -> web.StreamResponse:
    await resp.write(_sse(out))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _json(request: web.Request) -> dict:
    raw = await request.read()
    return json.loads(raw) if raw else {}


@contextlib.contextmanager
def serving_in_thread(model_dir, **kw) -> Iterator[FakeSGLangServer]:
    """A ``FakeSGLangServer`` on a float32, one-thread ``LocalEngine`` of ``model_dir`` (``kw``: the server's
    options), on its own event loop in a thread: for code under test that runs event loops of its own (Slime's
    hooks, a server subprocess). Stopped on exit."""
    from slime_ext.engines.local import LocalEngine

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def up():
        return await FakeSGLangServer(LocalEngine(model_dir, dtype="float32", threads=1), **kw).start()

    fake = asyncio.run_coroutine_threadsafe(up(), loop).result(60)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

