"""The SGLang engine client: the ``Engine`` contract over SGLang's native HTTP API (aiohttp only).

With Slime, SGLang serves the policy and Slime syncs its weights; this client is how the chat
server, judges and hooks talk to it. What it uses of SGLang (all in SGLang's ``http_server.py``):

- ``POST /generate`` with ``input_ids``, ``sampling_params`` (``temperature``, ``top_p``,
  ``max_new_tokens``, ``stop_token_ids``, ``min_new_tokens``, ``sampling_seed``, ``no_stop_trim``), ``stream: true``
  and ``return_logprob: true``. Each SSE chunk (``data: {...}``, ended by ``data: [DONE]``) has
  ``meta_info.output_token_logprobs`` = ``[[logprob, token_id, text], ...]``, cumulative over the
  request (a chunk may also be incremental: ``meta_info.completion_tokens`` tells them apart),
  ``meta_info.weight_version`` (a string: the server's ``weight_version`` when the chunk was made)
  and ``meta_info.finish_reason`` (``None`` until the end, then ``{"type": "stop"|"length"|
  "abort", ...}``).
- Scoring: ``/generate`` with ``max_new_tokens: 0``, ``return_logprob: true`` and
  ``logprob_start_len: start - 1``. ``meta_info.input_token_logprobs`` then covers
  ``ids[start - 1:]`` and its first entry is always ``None`` (SGLang pads it), so the rest are
  the log-probs of ``ids[start:]`` -- the same ``[1:]`` Slime's on-policy distillation uses.
- ``GET /model_info`` (``/get_model_info`` on older servers) for ``weight_version``, and
  ``GET /v1/models`` for ``max_model_len`` (the context length).
- ``POST /abort_request {"rid": ...}`` when a caller stops reading a stream early.
- Images (a vision-language model): ``image_data``, one ``data:image/png;base64,...`` URL per image
  whose placeholder run ``input_ids`` holds, in order, as Slime's multi-turn VLM rollout sends them
  (``examples/geo3k_vlm_multi_turn/rollout.py``; the runs are the processor's expansion, ``chat/vision.py``).

Weight syncs. Slime calls ``/pause_generation`` (mode ``abort``, the default) before a weight
update and ``/continue_generation`` after it. Pausing aborts every running request (it finishes
with ``finish_reason.type == "abort"`` and the tokens made so far) and holds new requests until
generation continues. This client keeps the tokens it already yielded and re-sends the rest of
the generation (prompt + tokens so far, ``max_new_tokens`` reduced); the re-sent request waits
inside SGLang until generation continues. A server answering 503, or an abort from Slime's own
``/abort_request`` at the end of a rollout step, is handled the same way. If no new token
arrives within ``pause_wait_s`` of the abort (or refusal), the request fails with an
``EngineError`` saying so. Tokens made after the sync carry the new weight version.

In-place LoRA (``lora=True``: ``serve --engine sglang``, our trainer beside an SGLang server on the same GPU).
``swap(adapter_folder, version)`` calls ``POST /load_lora_adapter {"lora_name": "openclaw-v<N>", "lora_path"}``
(SGLang started with ``--enable-lora``), and from then on every ``/generate`` names it (``lora_path``); a request
with ``frozen_base`` names none (the base weights: the ``self`` judge). Streams still running on the previous
adapter are aborted (``/abort_request``) and re-sent from where they were on the new one, the way a pause is
handled, so each token carries the version whose adapter computed it. The previous adapter stays loaded; older
ones are unloaded (``/unload_lora_adapter``; SGLang's ``--max-loras-per-batch`` must be at least 2).

Log-probs: SGLang's native ``/generate`` reports ``log_softmax(logits / temperature)`` of the
sampled token, before top-p / top-k / min-p filtering, and ``log_softmax(logits)`` for greedy
requests: the ``base.Engine`` invariant. Unless the server runs with
``SGLANG_RETURN_ORIGINAL_LOGPROB=1``, which reports raw (temperature 1) log-probs instead.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from slime_ext.engines.base import EngineError, SamplingParams, TokenOut

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = {502, 503, 504}  # refused while paused, starting, or behind a router that lost a worker


class _Retry(Exception):
    """This attempt ended without finishing the request, and re-sending it may succeed."""


def parse_weight_version(value: Any) -> int | None:
    """SGLang's ``weight_version`` (a string; Slime sets ``str(n)``) as an int, or None.

    ``"default"`` (a server that never had its weights updated) and other non-numeric strings
    give None; a trailing number is taken from strings like ``"v12"`` or ``"step_12"``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        m = re.search(r"(\d+)$", text)
        return int(m.group(1)) if m else None


class SGLangEngine:
    """An SGLang server (or router) as an ``Engine`` (see ``slime_ext.engines.base``).

    Create it with ``await SGLangEngine.connect(url)``, which reads the context length and the
    weight version from the server. ``timeout_s`` bounds each wait for the server's next chunk
    (prefill of a long prompt included); ``pause_wait_s`` bounds how long a request waits for a
    paused engine (a weight sync) before it fails.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        pause_wait_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        context_length: int | None = None,
        max_connections: int = 512,
        lora: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key or None
        self.timeout_s = float(timeout_s)
        self.pause_wait_s = float(pause_wait_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_connections = max_connections
        self._context_length = context_length
        self._version = 0
        self._session = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task] = set()
        self.model_path: str | None = None
        self.stats = {"requests": 0, "retries": 0, "aborted_by_server": 0, "tokens": 0, "swaps": 0}
        # lora: this client loads the trainer's adapters into the server itself (``swap``; see "In-place LoRA")
        self.lora = lora
        self._adapter: tuple[str, int] | None = None  # the adapter new requests name, and its version
        self._loaded: list[str] = []  # adapters loaded in the server by this client, oldest first
        self._streams: dict[str, str | None] = {}  # rid -> the adapter a running stream names ("": none; None: base)

    def __repr__(self) -> str:  # never shows the API key
        return f"SGLangEngine({self.url!r}, policy_version={self._version})"

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> SGLangEngine:
        """A client whose context length and weight version were read from the server."""
        engine = cls(url, **kwargs)
        try:
            await engine.refresh()
        except BaseException:
            await engine.close()
            raise
        return engine

    # ----------------------------------------------------------------- public API
    @property
    def policy_version(self) -> int:
        """The weight version SGLang last reported (0 until its weights were first updated)."""
        return self._version

    @property
    def context_length(self) -> int:
        """The most prompt + response tokens one request may hold.

        SGLang refuses a request whose input plus ``max_new_tokens`` reaches its context length,
        so this is one less than the server's ``max_model_len``.
        """
        if self._context_length is None:
            raise EngineError("the SGLang context length is unknown: create the engine with "
                              "`await SGLangEngine.connect(url)` or pass context_length=")
        return self._context_length

    async def refresh(self) -> None:
        """Read the weight version (and, once, the context length) from the server."""
        info = await self._get_json("/model_info", fallback="/get_model_info")
        self.model_path = info.get("model_path")
        self._note_version(info.get("weight_version"))
        if self._context_length is None:
            models = await self._get_json("/v1/models")
            try:
                ctx = int(models["data"][0]["max_model_len"])
            except (KeyError, IndexError, TypeError, ValueError):
                raise EngineError(f"the SGLang server at {self.url} did not report max_model_len in /v1/models; "
                                  "pass context_length= explicitly") from None
            self._context_length = ctx - 1

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                       images: Sequence[bytes] = ()) -> AsyncIterator[TokenOut]:
        """Stream sampled tokens; closing the iterator early aborts the request in SGLang. ``images`` go as
        ``image_data`` (data URLs, in the order of their placeholder runs in ``prompt_ids``)."""
        if not prompt_ids:
            raise EngineError("prompt is empty")
        if sampling.frozen_base and not self.lora:
            raise EngineError("frozen_base: SGLang serves only the weights Slime synced into it; there is no frozen "
                              "base model to sample from (use a judge other than `self`)")
        prompt = [int(t) for t in prompt_ids]
        budget = sampling.max_new_tokens
        if self._context_length is not None:
            if len(prompt) >= self._context_length:
                raise EngineError(f"prompt has {len(prompt)} tokens; the context is {self._context_length}")
            budget = min(budget, self._context_length - len(prompt))
        stops = set(sampling.stop_token_ids)
        image_data = [image_data_url(im) for im in images]
        produced: list[int] = []
        deadline: float | None = None  # set while waiting out a pause (abort or refusal)
        first_why = ""
        failures = 0
        while len(produced) < budget and not (produced and produced[-1] in stops):
            adapter = None if sampling.frozen_base else self._adapter  # frozen base: the weights without one
            payload = {
                "input_ids": prompt + produced,
                "sampling_params": self._sampling_params(sampling, budget - len(produced), len(produced)),
                "return_logprob": True,
                "stream": True,
                **({"image_data": image_data} if image_data else {}),
                **({"lora_path": adapter[0]} if adapter else {}),
            }
            before = len(produced)
            stream = self._stream(payload, deadline, self._version if self.lora else None, sampling.frozen_base)
            try:
                async for out in stream:
                    produced.append(out.token_id)
                    self.stats["tokens"] += 1
                    yield out
                return  # finished: stop or length
            except _Retry as why:
                if len(produced) > before or deadline is None:  # progress since the last pause: a new pause
                    deadline = time.monotonic() + self.pause_wait_s
                    first_why, failures = str(why), 0
                if time.monotonic() >= deadline:
                    raise EngineError(self._paused_too_long(first_why, why)) from None
                self.stats["retries"] += 1
                log.info("SGLang request interrupted after %d tokens (%s); re-sending the rest", len(produced), why)
                failures += 1
                await asyncio.sleep(min(0.05 * 2 ** (failures - 1), 1.0, max(0.0, deadline - time.monotonic())))
            finally:
                await stream.aclose()  # an early close by our caller aborts the request in SGLang now

    async def score(self, ids: Sequence[int], start: int) -> list[float]:
        """Teacher-forced log-probs (temperature 1) of ``ids[start:]`` given ``ids[:start]``."""
        if not 1 <= start <= len(ids):
            raise EngineError(f"score: start must be in [1, {len(ids)}], got {start}")
        if start == len(ids):
            return []
        if self._context_length is not None and len(ids) > self._context_length:
            raise EngineError(f"score: {len(ids)} tokens; the context is {self._context_length}")
        ids = [int(t) for t in ids]
        payload = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
            "return_logprob": True,
            "logprob_start_len": start - 1,
            "stream": False,
            **({"lora_path": self._adapter[0]} if self._adapter else {}),  # scored by the served policy
        }
        deadline: float | None = None
        first_why = ""
        failures = 0
        while True:
            try:
                body = await self._post_once(payload, deadline)
                break
            except _Retry as why:
                if deadline is None:
                    deadline, first_why = time.monotonic() + self.pause_wait_s, str(why)
                if time.monotonic() >= deadline:
                    raise EngineError(self._paused_too_long(first_why, why)) from None
                self.stats["retries"] += 1
                failures += 1
                await asyncio.sleep(min(0.05 * 2 ** (failures - 1), 1.0, max(0.0, deadline - time.monotonic())))
        items = (body.get("meta_info") or {}).get("input_token_logprobs") or []
        want = len(ids) - start
        if len(items) == want + 1:  # SGLang pads the first position (ids[start - 1]) with None
            items = items[1:]
        if len(items) != want or any(it is None or it[0] is None for it in items):
            raise EngineError(f"score: SGLang returned {len(items)} input log-probs for {want} tokens")
        return [float(it[0]) for it in items]

    async def swap(self, update: Any, version: int) -> None:
        """In-place LoRA (``lora=True``): load the adapter folder ``update`` into the server under a new name that
        new requests name from now on; running streams on an older adapter are aborted and re-sent from where
        they were with the new one, so every token carries the version that computed it; adapters older than the
        previous one are unloaded. No pause, no restart."""
        if not self.lora:
            raise EngineError("the SGLang engine does not swap weights itself: with Slime, Slime syncs the trained "
                              "weights into SGLang (update_weights_from_*) and the new weight_version is read from "
                              "it; a server of ours on SGLang loads LoRA adapters (SGLangEngine(lora=True))")
        folder = Path(update) if isinstance(update, (str, Path)) else None
        if folder is None or not (folder / "adapter_config.json").is_file():
            raise EngineError(f"the SGLang engine loads LoRA adapters only (a folder with adapter_config.json), not "
                              f"{type(update).__name__ if folder is None else folder}: full-weight training needs the "
                              "embedded engine (--engine local) or Slime")
        name = f"openclaw-v{version}"
        await self._post_json("/load_lora_adapter", {"lora_name": name, "lora_path": str(folder.resolve())})
        self._loaded.append(name)
        self._adapter, self._version = (name, version), version
        self.stats["swaps"] += 1
        stale = [rid for rid, lora in self._streams.items() if lora is not None and lora != name]
        await asyncio.gather(*(self._post_json("/abort_request", {"rid": rid}, on_error=logging.DEBUG) for rid in stale))
        while len(self._loaded) > 2:  # the current adapter and the one before it stay loaded
            await self._post_json("/unload_lora_adapter", {"lora_name": self._loaded.pop(0)}, on_error=logging.WARNING)
        log.info("LoRA adapter v%d loaded into %s (%d running streams moved onto it)", version, self.url, len(stale))

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=2)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _sampling_params(sampling: SamplingParams, max_new_tokens: int, produced: int = 0) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": max(0.0, float(sampling.temperature)),  # 0: greedy
            "top_p": float(sampling.top_p) if sampling.top_p > 0 else 1.0,
            "max_new_tokens": int(max_new_tokens),
            "no_stop_trim": True,  # the stop token stays in the output: it is part of what was sampled
        }
        if sampling.top_p <= 0:  # our convention: top_p 0 keeps only the most likely token
            params["top_k"] = 1
        if sampling.stop_token_ids:
            params["stop_token_ids"] = [int(t) for t in sampling.stop_token_ids]
        if sampling.min_new_tokens > produced:  # resumed after a pause: what is still owed
            params["min_new_tokens"] = int(sampling.min_new_tokens - produced)
        if sampling.seed is not None:
            params["sampling_seed"] = int(sampling.seed)  # honoured with --enable-deterministic-inference
        return params

    def _paused_too_long(self, first: str, last: Exception) -> str:
        detail = first if first == str(last) else f"{first}; then {last}"
        return (f"the SGLang engine at {self.url} did not resume within {self.pause_wait_s:g}s: generation "
                f"paused (e.g. for a weight sync) or refused ({detail})")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _client(self):
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is not None and not self._session.closed and self._loop is not loop:
            raise EngineError("this SGLangEngine's HTTP session belongs to another event loop; "
                              "use one SGLangEngine per event loop")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s),
                connector=aiohttp.TCPConnector(limit=self.max_connections),
            )
            self._loop = loop
        return self._session

    def _note_version(self, value: Any) -> int | None:
        v = parse_weight_version(value)
        if v is not None:
            self._version = v
        return v

    async def _get_json(self, path: str, fallback: str | None = None) -> dict[str, Any]:
        import aiohttp

        try:
            async with _timeout(self.timeout_s):
                async with self._client().get(self.url + path, headers=self._headers()) as resp:
                    if resp.status == 404 and fallback:
                        return await self._get_json(fallback)
                    text = await resp.text()
                    self._check_status(resp.status, text, path)
                    return json.loads(text)
        except aiohttp.ClientError as e:
            raise EngineError(self._unreachable(e)) from None
        except (asyncio.TimeoutError, ValueError) as e:
            raise EngineError(f"GET {path} on the SGLang server at {self.url} failed: {type(e).__name__} {e}") from None

    def _unreachable(self, e: Exception) -> str:
        return f"cannot reach the SGLang server at {self.url}: {type(e).__name__}: {e}"

    def _check_status(self, status: int, text: str, path: str) -> None:
        if status < 400:
            return
        if status in (401, 403):
            raise EngineError(f"the SGLang server at {self.url} refused the request (HTTP {status}): "
                              f"{'the API key was not accepted' if self._api_key else 'it requires an API key'}")
        message = _error_message(text)
        if status in _RETRYABLE_STATUS:
            raise _Retry(f"HTTP {status}: {message}")
        raise EngineError(f"SGLang {path} answered HTTP {status}: {message}")

    def _abort_later(self, rid: str) -> None:
        """Tell SGLang to drop a request we stopped reading (best effort, in the background)."""

        try:  # a failure is only logged: the stream's closed connection aborts it too
            task = asyncio.get_running_loop().create_task(
                self._post_json("/abort_request", {"rid": rid}, on_error=logging.DEBUG, timeout_s=5))
        except RuntimeError:
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post_once(self, payload: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        """One non-streaming ``/generate``; raises ``_Retry`` when SGLang aborted or refused it."""
        import aiohttp

        rid = payload["rid"] = "openclaw-" + uuid.uuid4().hex
        self.stats["requests"] += 1
        wait = self.timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            async with _timeout(wait):
                async with self._client().post(self.url + "/generate", json=payload, headers=self._headers()) as resp:
                    text = await resp.text()
                    self._check_status(resp.status, text, "/generate")
        except aiohttp.ClientConnectorError as e:
            raise EngineError(self._unreachable(e)) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as e:
            raise _Retry(f"connection lost: {type(e).__name__}") from None
        except aiohttp.ClientError as e:
            raise EngineError(self._unreachable(e)) from None
        except asyncio.TimeoutError:
            self._abort_later(rid)
            if deadline is not None:
                raise _Retry(f"no answer within {wait:.1f}s") from None
            raise EngineError(f"the SGLang server at {self.url} did not answer within {self.timeout_s:g}s") from None
        try:
            body = json.loads(text)
        except ValueError:
            raise EngineError(f"SGLang /generate returned a body that is not JSON: {text[:200]!r}") from None
        if isinstance(body, list):
            body = body[0]
        meta = body.get("meta_info") or {}
        self._note_version(meta.get("weight_version"))
        self._check_finish(meta.get("finish_reason"))
        return body

    def _check_finish(self, finish: Any) -> None:
        if not isinstance(finish, dict) or finish.get("type") != "abort":
            return
        status = finish.get("status_code")
        message = finish.get("message") or "aborted"
        if status in (None, 503):  # a pause, an abort_all, or an overloaded server: worth re-sending
            self.stats["aborted_by_server"] += 1
            raise _Retry(f"aborted by the server: {message}")
        raise EngineError(f"SGLang aborted the request (status {status}): {message}")

    async def _post_json(self, path: str, body: dict[str, Any], on_error: int | None = None,
                         timeout_s: float | None = None) -> dict[str, Any]:
        """POST ``body`` to ``path``; EngineError when it fails, or (``on_error``: a logging level, for best-effort
        calls) the failure logged at that level and ``{}``."""
        try:
            async with _timeout(timeout_s or self.timeout_s):
                async with self._client().post(self.url + path, json=body, headers=self._headers()) as resp:
                    text = await resp.text()
                    if resp.status >= 400:
                        self._check_status(resp.status, text, path)
            out = json.loads(text) if text.strip() else {}
            if isinstance(out, dict) and out.get("success") is False:
                raise EngineError(f"SGLang {path} failed: {out.get('error_message') or out.get('message') or out}")
            return out if isinstance(out, dict) else {}
        except Exception as e:
            if on_error is None:
                raise e if isinstance(e, EngineError) else EngineError(f"SGLang {path} failed: {e}") from None
            log.log(on_error, "SGLang %s %s: %s", path, body, e)
            return {}

    async def _stream(self, payload: dict[str, Any], deadline: float | None, version: int | None = None,
                      frozen_base: bool = False) -> AsyncIterator[TokenOut]:
        """One streaming ``/generate``: yields its new tokens, with ``version`` (else the server's
        ``weight_version``); raises ``_Retry`` when it was cut short."""
        import aiohttp

        rid = payload["rid"] = "openclaw-" + uuid.uuid4().hex
        self._streams[rid] = None if frozen_base else payload.get("lora_path", "")  # what a swap moves
        self.stats["requests"] += 1
        seen = 0
        finished = False
        resp = None
        # until the first chunk: the rest of the pause budget when re-sending after a pause
        wait = self.timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            try:
                async with _timeout(wait):
                    resp = await self._client().post(self.url + "/generate", json=payload, headers=self._headers())
                    if resp.status >= 400:
                        self._check_status(resp.status, await resp.text(), "/generate")
                while True:
                    async with _timeout(wait):
                        line = await resp.content.readline()
                    if not line:
                        raise _Retry("the stream ended before the request finished")
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        if not finished:
                            raise _Retry("the stream ended before the request finished")
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise EngineError(f"SGLang sent a chunk that is not JSON: {data[:200]!r}") from None
                    if isinstance(chunk, dict) and "error" in chunk:
                        err = chunk["error"]
                        message = err.get("message") if isinstance(err, dict) else str(err)
                        if isinstance(err, dict) and err.get("retryable"):
                            raise _Retry(message)
                        raise EngineError(f"SGLang /generate failed: {message}")
                    meta = chunk.get("meta_info") or {}
                    served = version if version is not None else self._note_version(meta.get("weight_version"))
                    for item in _new_items(meta, seen):
                        seen += 1
                        yield TokenOut(int(item[1]), float(item[0]), self._version if served is None else served)
                    wait = self.timeout_s
                    if meta.get("finish_reason") is not None:
                        finished = True
                        self._check_finish(meta["finish_reason"])
            except aiohttp.ClientConnectorError as e:
                raise EngineError(self._unreachable(e)) from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as e:
                raise _Retry(f"connection lost: {type(e).__name__}") from None
            except aiohttp.ClientError as e:
                raise EngineError(self._unreachable(e)) from None
            except asyncio.TimeoutError:
                if deadline is not None and seen == 0:
                    raise _Retry(f"no token within {wait:.1f}s") from None
                raise EngineError(f"the SGLang server at {self.url} sent nothing for {wait:g}s "
                                  f"({seen} tokens into the request)") from None
        finally:
            self._streams.pop(rid, None)
            if resp is not None:
                if finished:
                    resp.release()  # the connection goes back to the pool
                else:
                    self._abort_later(rid)
                    resp.close()


def image_data_url(png: bytes) -> str:
    """An image as SGLang's ``image_data`` takes it (and Slime sends it): a base64 ``data:`` URL."""
    kind = "jpeg" if png[:3] == b"\xff\xd8\xff" else "png"
    return f"data:image/{kind};base64," + base64.b64encode(png).decode("ascii")


def _new_items(meta: dict[str, Any], seen: int) -> list:
    """The ``output_token_logprobs`` entries of a chunk that were not in earlier chunks.

    SGLang's chunks are cumulative by default and incremental with
    ``--incremental-streaming-output``; ``completion_tokens`` (cumulative in both) says which.
    """
    items = meta.get("output_token_logprobs") or []
    total = meta.get("completion_tokens")
    if isinstance(total, int) and not isinstance(total, bool):
        fresh = max(0, total - seen)
        if fresh > len(items):
            raise EngineError(f"SGLang reported {total} output tokens but {len(items)} log-probs "
                              "(is return_logprob ignored by this server?)")
        new = items[len(items) - fresh:] if fresh else []
    else:
        new = items[seen:]
    if any(not isinstance(it, (list, tuple)) or len(it) < 2 or it[0] is None for it in new):
        raise EngineError(f"SGLang returned malformed output_token_logprobs: {new[:3]!r}")
    return new


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:500]
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])[:500]
    return text.strip()[:500]


def _timeout(seconds: float):
    """``asyncio.timeout`` (3.11+), or an equivalent for Python 3.10."""
    if hasattr(asyncio, "timeout"):
        return asyncio.timeout(seconds)
    return _Timeout310(seconds)


class _Timeout310:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._handle = None
        self._task = None
        self._fired = False

    async def __aenter__(self):
        self._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(max(0.0, self.seconds), self._fire)
        return self

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    async def __aexit__(self, exc_type, exc, tb):
        self._handle.cancel()
        if self._fired and exc_type is asyncio.CancelledError:
            raise asyncio.TimeoutError from None
        return False
