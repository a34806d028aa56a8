"""The embedded engine: a transformers causal LM served with continuous batching on one thread.

One worker thread owns the model. Each loop iteration it
  1. takes new work (requests, weight swaps, scoring) from a thread-safe queue,
  2. applies pending weight swaps (so a swap lands between two decode steps, atomically),
  3. prefills waiting requests in arrival order, at most ``prefill_chunk`` prompt tokens per
     iteration, each into its own KV cache (a long prompt's partial cache stays on its request
     across iterations); a request whose prompt is done gets its first token and its KV cache is
     merged into the running batch (left-padded),
  4. runs ONE forward pass for all active sequences and samples one token for each,
  5. rests for a share of that time when a trainer beside it has waited too long for a core
     (``cores``: ``engines/cores.py``).
So a long prompt is prefilled one chunk per iteration with a decode step of the running batch
between chunks: running streams keep producing tokens. A swap that lands while a prompt is part
prefilled restarts that prefill, so no sequence's KV mixes two sets of weights.
Finished or cancelled rows are dropped from the batch cache; columns that are padding for every
remaining row are trimmed. Results go back to each request's asyncio queue on its own loop.
A failure admitting, prefilling or sampling one request fails that request alone (it gets the
error, the batch continues); a request stays in ``_waiting`` until it has joined the batch, so
even a failure of a whole step (which fails everything in flight) answers it.

A LoRA update is merged into the weights (no per-token adapter cost). The merged weights are
computed outside the worker thread into new tensors, and the swap itself only re-points each
module's weight at them, so decoding stalls for microseconds, not for the merge (which costs a
second copy of the adapted weights while it runs). The base weights of adapted modules are kept
(the tensors they had before their first merge), so the next adapter merges onto the base again. Rows marked
``frozen_base`` (the ``self`` judge) are computed with those base copies by forward hooks that
run only while such rows are in the batch, so the judge stays frozen while the policy learns.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from slime_ext.engines.base import EngineError, SamplingParams, TokenOut
from slime_ext.engines.cores import CoreShare
from slime_ext.engines.decode import LeanDecode, lean_decoder
from slime_ext.engines.packed import PackedLinears, head_logits, pack_weight, packing_available
from slime_ext.engines.prefix_cache import PrefixCache
from slime_ext.engines.sampling import sample_token
from slime_ext.logprobs import log_distributions, output_logits, target_logprobs, without_tokens

log = logging.getLogger(__name__)

_END = object()


@dataclass
class LoraUpdate:
    """LoRA weights to merge into the base weights: ``W = W_base + scaling * B @ A``.

    ``tensors`` uses peft names (``<module>.lora_A.weight`` / ``<module>.lora_B.weight``, with or
    without peft's ``base_model.model.`` prefix).
    """

    tensors: dict[str, Any]
    scaling: float


@dataclass
class _MergedLora:
    """A LoRA update merged off the worker thread: ``{weight name: base + scaling * B @ A}``, and
    the packings of those weights (``PackedLinears.prepared``)."""

    weights: dict[str, Any]
    packs: dict[str, Any] = field(default_factory=dict)
    int4_lora: dict[Any, Any] = field(default_factory=dict)  # PackedLinears.lora_prepared: one row reads int4 + A, B


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue
    generator: Any
    id: int = 0
    generated: int = 0
    last_token: int = -1
    position: int = 0  # tokens so far (prompt + generated); the last one sits at position - 1
    cancelled: bool = False
    cache: Any = None  # the prompt's KV while it is being prefilled (None: prefill not started)
    prefilled: int = 0  # prompt tokens in ``cache``
    shared: bool = False  # whether the prefix cache serves this prompt
    enqueued_at: float = field(default_factory=time.monotonic)

    def emit(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)
        except RuntimeError:  # the client's loop is gone
            self.cancelled = True


class LocalEngine:
    """A transformers model served token-in / token-out (see ``slime_ext.engines.base``)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        dtype: str = "auto",
        threads: int | None = None,
        max_batch_size: int = 32,
        prefill_chunk: int = 1024,
        prefix_cache_tokens: int = 32768,
        context_length: int | None = None,
        attn_implementation: str = "sdpa",
        device: str = "cpu",
        pack_weights: bool = True,
        cores: CoreShare | None = None,
    ) -> None:
        import torch

        from slime_ext.engines.device import resolve_device

        self._torch = torch
        self.device = resolve_device(device)
        self.threads = threads or os.cpu_count() or 1
        cpu = self.device.type == "cpu"
        cpuinfo = _read_cpuinfo() if cpu else ""
        name, why = resolve_dtype(dtype, cpuinfo, device=self.device.type)
        # how the CPU's linear layers compute (engines/packed.py): packed bf16 where bf16 is native; auto's float32
        # (no native bf16) may still read a 4-bit checkpoint's int4 weights for one row
        self._pack_bf16 = cpu and name == "bfloat16" and native_bf16(cpuinfo)
        self._int4_float32 = cpu and dtype == "auto" and name == "float32"
        log.info("engine dtype %s (%s), on %s", name, why, self.device)
        self.dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[name]
        self.model_dir = Path(model_dir)
        self.max_batch_size = max_batch_size
        self.cores = cores
        self.prefill_chunk = prefill_chunk
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._version = 0
        self._ops: queue.Queue = queue.Queue()
        self._rows: list[_Request] = []
        self._cache = None
        self._mask = None
        self._waiting: list[_Request] = []
        self._lora_base: dict[str, Any] | None = None  # base weights of modules an adapter changed
        self._base_replaced = False  # a full-weight update replaced the base: no frozen base left
        self._swap_lock = threading.Lock()
        self._head = None  # fp32 copy of the output layer, refreshed after each swap
        self._head_packed = None  # its packed bfloat16 weight (packed engines only), refreshed with it
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self.stats = {"steps": 0, "tokens": 0, "prefill_tokens": 0, "prefilled_together": 0, "swaps": 0,
                      "rested_s": 0.0}  # rested_s: time left to a starved trainer (engines/cores.py)
        self._packed: PackedLinears | None = None  # the linear layers' oneDNN packings (CPU; engines/packed.py)
        self._lean = None
        loaded: list[BaseException | None] = []
        self._thread = threading.Thread(target=self._run, name="local-engine", daemon=True,
                                        args=(attn_implementation, pack_weights, loaded))
        self._thread.start()
        while not loaded and self._thread.is_alive():
            self._thread.join(0.05)
        if not loaded or loaded[0] is not None:
            raise EngineError(f"could not load the model from {model_dir}: {loaded[0] if loaded else 'the engine thread died'}") \
                from (loaded[0] if loaded else None)
        model_ctx = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._context_length = min(context_length, model_ctx) if context_length else model_ctx

    def _load(self, attn_implementation: str, pack_weights: bool) -> None:
        """Load the model on the worker thread. Its OpenMP team is then the only one in the process
        that has run parallel work: libgomp stops spinning between parallel regions once there are
        more of its threads than cores, and a bfloat16 decode step on 2 cores took 54 ms instead of
        24 when the loading thread had run parallel work too (docs/engine.md)."""
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype,
                                                          attn_implementation=attn_implementation).to(self.device)
        self.model.eval()
        self.model.requires_grad_(False)
        packing = None
        if pack_weights and self._pack_bf16:
            packing = "bf16"
        elif pack_weights and self._int4_float32:
            packing = "int4"
        self._lean, self._packed = decode_paths(self.model, packing)

    # ----------------------------------------------------------------- public API
    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def active_requests(self) -> int:
        return len(self._rows) + len(self._waiting)

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams,
                       images: Sequence[bytes] = ()) -> AsyncIterator[TokenOut]:
        """Stream sampled tokens; closing the iterator early cancels the request."""
        if not prompt_ids:
            raise EngineError("prompt is empty")
        if images:
            raise EngineError(f"the embedded engine is text-only: it cannot take the request's {len(images)} image(s); "
                              "a vision-language model runs on SGLang (gui-rl/gui_qwen3vl_8b_rl.sh)")
        if len(prompt_ids) >= self._context_length:
            raise EngineError(f"prompt has {len(prompt_ids)} tokens; the context is {self._context_length}")
        if sampling.frozen_base and self._base_replaced:
            raise EngineError(_NO_FROZEN_BASE)
        torch = self._torch
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(63)
        req = _Request(
            prompt_ids=list(prompt_ids),
            sampling=sampling,
            loop=asyncio.get_running_loop(),
            out=asyncio.Queue(),
            generator=torch.Generator().manual_seed(seed),
            id=next(self._ids),
        )
        self._ops.put(("add", req))
        try:
            while True:
                item = await req.out.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise EngineError(str(item)) from item
                yield item
        finally:
            req.cancelled = True

    async def score(self, ids: Sequence[int], start: int) -> list[float]:
        """Teacher-forced log-probs (temperature 1) of ``ids[start:]`` given ``ids[:start]``."""
        if not 1 <= start <= len(ids):
            raise EngineError(f"score: start must be in [1, {len(ids)}], got {start}")
        fut = asyncio.get_running_loop().create_future()
        self._ops.put(("score", (list(ids), start), fut))
        return await fut

    async def swap(self, update: Any, version: int) -> None:
        """Install new weights between two decode steps and set ``policy_version`` to ``version``.

        ``update`` is a state dict (full or partial), a ``LoraUpdate``, or a directory holding
        either safetensors weights or a peft adapter (``adapter_config.json``).
        """
        await asyncio.to_thread(self._swap_lock.acquire)  # one swap at a time: each merges onto the base
        try:
            prepared = await asyncio.to_thread(self._prepare_update, update)
            fut = asyncio.get_running_loop().create_future()
            self._ops.put(("swap", (prepared, int(version)), fut))
            await fut
        finally:
            self._swap_lock.release()

    async def close(self) -> None:
        self._stop.set()
        self._ops.put(("stop", None))
        await asyncio.to_thread(self._thread.join, 10)

    # ------------------------------------------------------------ worker thread
    def _run(self, attn_implementation: str, pack_weights: bool, loaded: list) -> None:
        torch = self._torch
        torch.set_num_threads(self.threads)
        try:
            self._load(attn_implementation, pack_weights)
        except BaseException as exc:  # reported by __init__
            loaded.append(exc)
            return
        loaded.append(None)
        with torch.inference_mode():
            while not self._stop.is_set():
                try:
                    self._take_ops(block=not self._rows and not self._waiting)
                    started = time.monotonic()
                    self._admit_waiting()
                    if self._rows:
                        self._decode_step()
                    self._rest(time.monotonic() - started)
                except Exception as exc:  # keep serving: fail what was in flight, reset the batch
                    log.exception("engine step failed")
                    for req in {id(r): r for r in self._rows + self._waiting}.values():  # one joining is in both
                        req.emit(exc)
                    self._rows, self._waiting, self._cache, self._mask = [], [], None, None

    def _rest(self, step_s: float) -> None:
        """Leave the cores to a starved trainer for its share of the time (``engines/cores.py``)."""
        rest = self.cores.rest_after(step_s) if self.cores else 0.0
        if rest > 0.0:
            self.stats["rested_s"] += rest
            self._stop.wait(rest)

    def _take_ops(self, block: bool) -> None:
        while True:
            try:
                kind, payload, *rest = self._ops.get(block=block, timeout=0.5 if block else None)
            except queue.Empty:
                return
            block = False
            if kind == "add":
                self._waiting.append(payload)
            elif kind == "stop":
                return
            else:
                fut = rest[0]
                try:
                    result = self._apply_swap(*payload) if kind == "swap" else self._score(*payload)
                except Exception as exc:  # reported to the caller, engine keeps going
                    fut.get_loop().call_soon_threadsafe(_set_exception, fut, exc)
                else:
                    fut.get_loop().call_soon_threadsafe(_set_result, fut, result)

    def _admit_waiting(self) -> None:
        """Prefill waiting requests in arrival order, ``prefill_chunk`` prompt tokens per call:
        first the new prompts that fit whole, together in one forward pass, then one at a time.

        A request leaves ``_waiting`` only once it has joined the batch or been answered."""
        budget = self.prefill_chunk - self._prefill_together()
        while self._waiting and budget > 0 and len(self._rows) < self.max_batch_size:
            req = self._waiting[0]
            if req.cancelled:
                self._drop_waiting(req, _END)
                continue
            try:
                computed, logits = self._prefill_step(req, budget)
                budget -= computed
                if logits is not None:
                    self._start_decoding(req, logits)
            except Exception as exc:  # this request alone fails; the batch and the queue go on
                log.exception("request %d failed in prefill", req.id)
                self._drop_waiting(req, exc)

    def _prefill_together(self) -> int:
        """Prefill the leading waiting prompts that are new, missed the prefix cache and fit the
        chunk whole, in one left-padded forward pass (several 70-token prompts cost 41 ms each one
        at a time); each then samples its first token and joins the batch. Returns the tokens
        computed. If the pass fails, they are left to the one-at-a-time path, which fails only the
        request at fault."""
        torch = self._torch
        group, budget = [], self.prefill_chunk
        for req in self._waiting:
            if len(group) + len(self._rows) >= self.max_batch_size or req.cancelled or req.cache is not None \
                    or len(req.prompt_ids) > budget:
                break
            try:
                self._start_prefill(req)
            except Exception:  # refused (a frozen-base request with no base left): answered one at a time
                break
            if req.prefilled:  # a prefix-cache hit: the one-at-a-time path computes only the rest
                break
            group.append(req)
            budget -= len(req.prompt_ids)
        if len(group) < 2:
            return 0
        width = max(len(r.prompt_ids) for r in group)
        ids = torch.tensor([[0] * (width - len(r.prompt_ids)) + r.prompt_ids for r in group], device=self.device)
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in group], device=self.device)
        cache = _growing_cache(self.model.config)
        try:
            with self._frozen_base_rows([i for i, r in enumerate(group) if r.sampling.frozen_base]):
                out = self.model.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                                       cache=cache, use_cache=True)
            logits = self._logits(out.last_hidden_state[:, -1])
        except Exception:
            log.exception("prefilling %d prompts together failed; each is prefilled alone", len(group))
            for req in group:
                req.cache = None
            return 0
        for i, req in enumerate(group):
            pad = width - len(req.prompt_ids)
            for layer, full in zip(req.cache.layers, cache.layers):
                layer.set_kv(full.keys[i : i + 1, :, pad:].contiguous(), full.values[i : i + 1, :, pad:].contiguous())
            req.prefilled = len(req.prompt_ids)
            self.stats["prefill_tokens"] += req.prefilled
            try:
                if req.shared:
                    self.prefix_cache.add(req.prompt_ids, [(layer.keys, layer.values) for layer in req.cache.layers])
                self._start_decoding(req, logits[i])
            except Exception as exc:  # this request alone fails
                log.exception("request %d failed in prefill", req.id)
                self._drop_waiting(req, exc)
        self.stats["prefilled_together"] += len(group)
        return self.prefill_chunk - budget

    def _drop_waiting(self, req: _Request, item: Any) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(req)
        req.cache = None
        req.emit(item)

    def _prefill_step(self, req: _Request, budget: int) -> tuple[int, Any]:
        """Prefill up to ``budget`` more prompt tokens of ``req`` into its own cache.

        Returns the tokens computed and, once the whole prompt is in, the next token's logits."""
        torch = self._torch
        ids = req.prompt_ids
        if req.cache is None:
            self._start_prefill(req)
        begin, end = req.prefilled, min(len(ids), req.prefilled + budget)
        with self._frozen_base_rows([0] if req.sampling.frozen_base else []):
            out = self.model.model(input_ids=torch.tensor([ids[begin:end]], device=self.device), cache=req.cache,
                                   use_cache=True)
        req.prefilled = end
        self.stats["prefill_tokens"] += end - begin
        if end < len(ids):
            return end - begin, None
        if req.shared:
            self.prefix_cache.add(ids, [(layer.keys, layer.values) for layer in req.cache.layers])
        return end - begin, self._logits(out.last_hidden_state[0, -1:])[0]

    def _start_prefill(self, req: _Request) -> None:
        """A fresh cache for ``req``, seeded from the prefix cache when one of its entries matches."""
        if req.sampling.frozen_base and self._base_replaced:
            raise EngineError(_NO_FROZEN_BASE)
        req.cache, req.prefilled = _growing_cache(self.model.config), 0
        # the prefix cache holds KV of the served weights; frozen-base KV differs once an adapter is in
        req.shared = self.prefix_cache is not None and not (req.sampling.frozen_base and self._lora_base)
        hit = self.prefix_cache.lookup(req.prompt_ids) if req.shared else None
        if hit:
            req.prefilled, kv = hit
            for layer, (k, v) in zip(req.cache.layers, kv):
                layer.set_kv(k, v)

    def _start_decoding(self, req: _Request, logits) -> None:
        """Sample a prefilled request's first token and move it from the queue into the batch."""
        req.position = len(req.prompt_ids)
        cache, req.cache = req.cache, None
        if self._sample_and_emit([req], logits[None, :])[0]:
            self._merge(req, cache)
        self._waiting.remove(req)

    def _restart_prefills(self) -> None:
        """Drop partial prefills (computed with the weights a swap just replaced): they start over."""
        for req in self._waiting:
            if req.cache is not None:
                log.info("request %d: prefill restarts on the new weights (%d tokens were done)", req.id, req.prefilled)
                req.cache, req.prefilled = None, 0

    @contextlib.contextmanager
    def _frozen_base_rows(self, rows: list[int]):
        """While active, each adapter-changed linear layer computes batch ``rows`` with its base weights."""
        if not rows or not self._lora_base:
            yield
            return
        torch = self._torch
        index = torch.tensor(rows, device=self.device)
        handles = []

        def hook(module, args, output, base):
            x = args[0].index_select(0, index)
            return output.index_copy(0, index, torch.nn.functional.linear(x, base, module.bias))

        try:
            for name, base in self._lora_base.items():
                module = self.model.get_submodule(name.removesuffix(".weight"))
                handles.append(module.register_forward_hook(lambda m, a, o, base=base: hook(m, a, o, base)))
            yield
        finally:
            for h in handles:
                h.remove()

    def _merge(self, req: _Request, cache) -> None:
        """Add one prefilled sequence to the batch, left-padding whichever side is shorter."""
        torch = self._torch
        n = len(req.prompt_ids)
        new_mask = torch.ones(1, n, dtype=torch.long, device=self.device)
        if self._cache is None:
            self._cache, self._mask, self._rows = cache, new_mask, [req]
            return
        length = self._mask.shape[1]
        width = max(length, n)
        kv = [(torch.cat([_left_pad(old.keys, width), _left_pad(new.keys, width)], dim=0),
               torch.cat([_left_pad(old.values, width), _left_pad(new.values, width)], dim=0))
              for old, new in zip(self._cache.layers, cache.layers)]  # all built before any is set
        self._mask = torch.cat([_left_pad(self._mask, width, 1), _left_pad(new_mask, width, 1)], dim=0)
        for layer, (k, v) in zip(self._cache.layers, kv):
            layer.set_kv(k, v)
        self._rows.append(req)

    def _decode_step(self) -> None:
        torch = self._torch
        rows = self._rows
        input_ids = torch.tensor([[r.last_token] for r in rows], device=self.device)
        positions = torch.tensor([[r.position - 1] for r in rows], device=self.device)  # where last_token sits
        self._mask = torch.cat([self._mask, torch.ones(len(rows), 1, dtype=torch.long, device=self.device)], dim=1)
        with self._frozen_base_rows([i for i, r in enumerate(rows) if r.sampling.frozen_base]):
            if self._lean is not None:
                hidden = self._lean(input_ids, positions, self._mask, self._cache)
            else:
                hidden = self.model.model(input_ids=input_ids, attention_mask=self._mask, position_ids=positions,
                                          cache=self._cache, use_cache=True).last_hidden_state[:, -1]
        self.stats["steps"] += 1
        keep = self._sample_and_emit(rows, self._logits(hidden))
        self._keep_rows(keep)

    def _sample_and_emit(self, rows: list[_Request], logits) -> list[bool]:
        """Sample one token per row, emit it, and return which rows continue.

        The step's outputs reach each event loop in one wake-up, not one per row. A row whose
        sampling fails gets the error and ends; the other rows go on."""
        torch = self._torch
        temps = torch.tensor([r.sampling.temperature if r.sampling.temperature > 0 else 1.0 for r in rows],
                             device=logits.device)
        # sampled on the CPU with each request's seeded generator, whatever the device (the same tokens)
        logp = log_distributions(logits / temps[:, None]).cpu()
        keep = []
        out: dict[asyncio.AbstractEventLoop, list[tuple[_Request, Any]]] = {}
        version = self._version
        for i, req in enumerate(rows):
            items = out.setdefault(req.loop, [])
            if req.cancelled:
                items.append((req, _END))
                keep.append(False)
                continue
            row = logp[i]
            if req.generated < req.sampling.min_new_tokens and req.sampling.stop_token_ids:
                row = without_tokens(row, req.sampling.stop_token_ids)
            try:
                token = sample_token(row, req.sampling.temperature, req.sampling.top_p, req.generator)
            except Exception as exc:
                log.exception("request %d: sampling failed", req.id)
                items.append((req, EngineError(f"sampling failed: {exc}")))
                keep.append(False)
                continue
            items.append((req, TokenOut(token, float(row[token]), version)))
            req.generated += 1
            req.last_token = token
            req.position += 1
            self.stats["tokens"] += 1
            done = (
                token in req.sampling.stop_token_ids
                or req.generated >= req.sampling.max_new_tokens
                or req.position >= self._context_length
            )
            if done:
                items.append((req, _END))
            keep.append(not done)
        for loop, items in out.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # that loop is closed: its requests are gone
                for req, _ in items:
                    req.cancelled = True
        return keep

    def _keep_rows(self, keep: list[bool]) -> None:
        if all(keep):
            return
        torch = self._torch
        idx = [i for i, k in enumerate(keep) if k]
        self._rows = [self._rows[i] for i in idx]
        if not idx:
            self._cache, self._mask = None, None
            return
        index = torch.tensor(idx, device=self.device)
        mask = self._mask.index_select(0, index)
        first = int(mask.any(dim=0).nonzero()[0])  # leading columns that are padding for every row
        self._mask = mask[:, first:]
        for layer in self._cache.layers:
            layer.set_kv(layer.keys.index_select(0, index)[:, :, first:], layer.values.index_select(0, index)[:, :, first:])

    # ------------------------------------------------------------- scoring
    def _fp32_head(self):
        if self._head is None:
            self._head = self.model.get_output_embeddings().weight.float()
        return self._head

    def _logits(self, hidden):
        if self._packed is None or hidden.dtype != self._torch.bfloat16:
            return output_logits(hidden, self._fp32_head())
        if self._head_packed is None:
            self._head_packed = pack_weight(self.model.get_output_embeddings().weight)
        return head_logits(hidden, self._head_packed, self._fp32_head())

    def _score(self, ids: list[int], start: int) -> list[float]:
        torch = self._torch
        if start == len(ids):
            return []
        hidden = self.model.model(input_ids=torch.tensor([ids], device=self.device), use_cache=False).last_hidden_state
        return target_logprobs(hidden[0, start - 1 : -1], self._fp32_head(),
                               torch.tensor(ids[start:], device=self.device)).tolist()

    # ------------------------------------------------------------- weight swaps
    def _prepare_update(self, update: Any) -> Any:
        """Load files and cast tensors outside the worker thread, so the swap itself is a copy.
        On one thread: a second OpenMP team would slow the worker's down (see ``_load``)."""
        self._torch.set_num_threads(1)
        if isinstance(update, (str, Path)):
            update = load_weights(Path(update))
        names = self.model.state_dict(keep_vars=True)
        if isinstance(update, LoraUpdate):
            pairs = lora_pairs(update.tensors)
            for module, (a, b) in pairs.items():
                if f"{module}.weight" not in names:
                    raise EngineError(f"LoRA module {module!r} is not in the model")
                w = names[f"{module}.weight"]
                if w.dim() != 2 or a.dim() != 2 or b.dim() != 2 or (b.shape[0], a.shape[1]) != tuple(w.shape) or a.shape[0] != b.shape[1]:
                    raise EngineError(f"LoRA module {module!r}: A {tuple(a.shape)} / B {tuple(b.shape)} do not fit "
                                      f"its weight {tuple(w.shape)}")
            torch = self._torch
            merged, bases = {}, self._lora_base or {}
            with torch.no_grad():  # not inference_mode: these become the model's weights
                for module, (a, b) in pairs.items():
                    name = f"{module}.weight"
                    base = bases.get(name, names[name].detach())
                    merged[name] = torch.addmm(base, b.to(self.device, self.dtype), a.to(self.device, self.dtype),
                                               alpha=update.scaling)
                packs = self._packed.prepared({_module(n): w for n, w in merged.items()}) if self._packed else {}
                int4_lora = self._packed.lora_prepared(  # a module the adapter leaves goes back to its base
                    lambda m: merged.get(f"{m}.weight", bases.get(f"{m}.weight", names[f"{m}.weight"])),
                    {m: (a.to(self.device, torch.float32), (b * update.scaling).to(self.device, torch.float32))
                     for m, (a, b) in pairs.items()}) if self._packed else {}
            return _MergedLora(merged, packs, int4_lora)
        if isinstance(update, dict):
            unknown = [k for k in update if k not in names]
            if unknown:
                raise EngineError(f"weights not in the model: {unknown[:5]}")
            misshaped = [f"{k} {tuple(v.shape)} != {tuple(names[k].shape)}" for k, v in update.items() if v.shape != names[k].shape]
            if misshaped:  # copy_ would broadcast them silently
                raise EngineError(f"weights with the wrong shape: {misshaped[:5]}")
            return {k: v.detach().to(self.device, self.dtype) for k, v in update.items()}
        raise EngineError(f"cannot swap in a {type(update).__name__}")

    def _apply_swap(self, update: Any, version: int) -> None:
        started = time.perf_counter()
        params = self.model.state_dict(keep_vars=True)
        if isinstance(update, _MergedLora):
            bases = self._lora_base if self._lora_base is not None else {}
            restored = [n for n in bases if n not in update.weights]  # not in this adapter: back to base
            for name in restored:
                params[name].data = bases.pop(name)
            for name, weight in update.weights.items():
                bases.setdefault(name, params[name].data)  # first merge: the current tensor is the base
                params[name].data = weight
            self._lora_base = bases
            if self._packed:
                self._packed.install(update.packs)
                self._packed.install_lora(update.int4_lora)
                self._packed.pack(map(_module, restored))
        else:
            for name, tensor in update.items():
                params[name].copy_(tensor)
            if self._packed:  # changed in place: the packings are stale
                self._packed.pack(map(_module, update), in_place=True)
            self._lora_base = None  # new base weights: later adapters merge onto these
            self._base_replaced = True
            frozen = [r.sampling.frozen_base for r in self._rows]
            if any(frozen):  # their base is gone: end them rather than continue on other weights
                for r in self._rows:
                    if r.sampling.frozen_base:
                        r.emit(EngineError(_NO_FROZEN_BASE))
                self._keep_rows([not f for f in frozen])
        self._head = self._head_packed = None
        if self.prefix_cache:
            self.prefix_cache.clear()  # computed with the old weights
        self._restart_prefills()
        self._version = version
        self.stats["swaps"] += 1
        self.stats["last_swap_pause_s"] = time.perf_counter() - started  # decoding waited this long
        log.info("policy version %d installed", version)


_NO_FROZEN_BASE = ("frozen_base: a full-weight update replaced the base weights, so there is no frozen base "
                   "model to sample from (the self judge needs LoRA training)")


def decode_paths(model, packing: str | None) -> tuple[LeanDecode | None, PackedLinears | None]:
    """A loaded model's fast decode paths: its lean decode step (None: transformers' forward decodes,
    engines/decode.py) and its packed linear layers (engines/packed.py), wired into the lean step for one row.
    ``packing``: "bf16" (a CPU with native bf16: packed bf16 layers, one row on a 4-bit checkpoint's int4
    weights), "int4" (a float32 model: only that one-row int4 path, and nothing where the checkpoint is not
    4-bit) or None (no packing)."""
    lean = lean_decoder(model)
    if packing is None or not packing_available():
        return lean, None
    groups = lean.groups if lean else ()
    packed = PackedLinears(model, groups=groups, bf16=packing == "bf16")
    if packing == "int4":
        if not packed.has_int4:  # not a 4-bit checkpoint: nothing to serve differently
            return lean, None
        log.info("one stream reads the checkpoint's 4-bit weights through the bf16 int4 kernel (the rest is "
                 "float32): recorded log-probs are then as close as a bf16 engine's (docs/engine.md, 'dtype')")
    if lean is not None:
        lean.int4_steps = packed.steps
    return lean, packed


def resolve_dtype(dtype: str, cpuinfo: str | None = None, device: str = "cpu",
                  capability: str | None = None) -> tuple[str, str]:
    """The engine's dtype for ``dtype`` (``auto``, ``float32``, ``bfloat16``) on ``device`` (its type) and why.

    ``auto`` is bfloat16 where it is computed natively: on a CUDA GPU, and on a CPU with AVX-512 BF16 or
    AMX, with packed weights (about twice the float32 tokens/s and prefill speed: docs/engine.md, "dtype").
    Also while the server trains: the trainer re-scores each turn's log-probs in float32 itself and corrects
    the ~3e-2 per-token gap with truncated importance weights (``learning/memory.py: rescored``). Without
    native bf16 it would be emulated, slower: float32, where one stream of a 4-bit checkpoint still reads its
    int4 weights (``LocalEngine._load``). ``cpuinfo`` and ``capability``: see ``native_bf16``.
    """
    if dtype != "auto":
        return dtype, "asked for"
    if device == "cuda":
        return "bfloat16", "auto on a CUDA GPU"
    if native_bf16(_read_cpuinfo() if cpuinfo is None else cpuinfo, capability):
        return "bfloat16", ("auto on a CPU with native bf16: packed bf16 decodes and prefills about 2x faster than "
                            "float32 (a trainer re-scores what it learns from in float32)")
    return "float32", ("auto on a CPU without native bf16 (AVX-512 BF16 or AMX): bfloat16 would be emulated, slower; "
                       "one stream of a 4-bit checkpoint reads its int4 weights")


def native_bf16(cpuinfo: str, capability: str | None = None) -> bool:
    """Whether ``/proc/cpuinfo`` text lists a native bf16 unit (AVX-512 BF16 or AMX) that PyTorch's kernels
    may use: ``capability`` (``torch.backends.cpu.get_cpu_capability()`` by default) is AVX-512's.
    ``ATEN_CPU_CAPABILITY=avx2`` lowers it, so an AVX2-only CPU can be emulated (bench/README.md)."""
    if capability is None:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    return ("avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo) and "AVX512" in capability


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def _growing_cache(config):
    """A DynamicCache whose layers append into buffers with spare room (amortized O(1) per token),
    instead of re-concatenating the whole cache at every decode step."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def set_kv(self, keys, values) -> None:
            self._kbuf, self._vbuf, self._len = keys, values, keys.shape[2]
            self.keys, self.values = keys, values
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.set_kv(key_states[:, :, :0], value_states[:, :, :0])
            n = self._len + key_states.shape[2]
            if n > self._kbuf.shape[2] or self._kbuf.shape[:2] != key_states.shape[:2]:
                room = max(64, n + n // 2)
                kb = key_states.new_empty(*key_states.shape[:2], room, key_states.shape[3])
                vb = value_states.new_empty(*value_states.shape[:2], room, value_states.shape[3])
                kb[:, :, : self._len] = self._kbuf[:, :, : self._len]
                vb[:, :, : self._len] = self._vbuf[:, :, : self._len]
                self._kbuf, self._vbuf = kb, vb
            self._kbuf[:, :, self._len : n] = key_states
            self._vbuf[:, :, self._len : n] = value_states
            self._len = n
            self.keys, self.values = self._kbuf[:, :, :n], self._vbuf[:, :, :n]
            return self.keys, self.values

    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


def _module(param_name: str) -> str:
    """The module a parameter belongs to (``...q_proj.weight`` and ``...q_proj.bias``: ``...q_proj``)."""
    return param_name.rpartition(".")[0]


def _deliver(items: list[tuple[_Request, Any]]) -> None:
    for req, item in items:
        req.out.put_nowait(item)


def _set_result(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _left_pad(t, width: int, dim: int = 2):
    """Zero-pad ``t`` on the left of ``dim`` to ``width`` (KV: [B, H, L, D]; mask: dim 1)."""
    import torch

    pad = width - t.shape[dim]
    if pad == 0:
        return t
    shape = list(t.shape)
    shape[dim] = pad
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def lora_pairs(tensors: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Group peft LoRA tensors into ``{module_name: (A, B)}`` with model-relative module names."""
    pairs: dict[str, dict[str, Any]] = {}
    for name, t in tensors.items():
        for part in ("lora_A", "lora_B"):
            marker = f".{part}."
            if marker in name:
                module = name.split(marker)[0]
                module = module.removeprefix("base_model.model.")
                pairs.setdefault(module, {})[part] = t
    bad = [m for m, p in pairs.items() if set(p) != {"lora_A", "lora_B"}]
    if bad or not pairs:
        raise EngineError(f"incomplete LoRA adapter (modules missing A or B: {bad[:5]})" if bad else "no LoRA tensors")
    return {m: (p["lora_A"], p["lora_B"]) for m, p in pairs.items()}


def load_weights(path: Path) -> Any:
    """Read a peft adapter directory as a ``LoraUpdate``, or safetensors files as a state dict."""
    from safetensors.torch import load_file

    if (path / "adapter_config.json").exists():
        config = json.loads((path / "adapter_config.json").read_text())
        tensors = load_file(str(path / "adapter_model.safetensors"))
        return LoraUpdate(tensors, float(config["lora_alpha"]) / float(config["r"]))
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise EngineError(f"no safetensors weights in {path}")
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state
