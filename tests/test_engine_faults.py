"""One request's failure stays its own, and a long prefill does not stall running streams.

Engine-level tests inject a failure into one row's sampling and check the other rows continue;
they run a long prompt beside a running stream and count the stream's tokens while the long
prompt is prefilled (chunked prefill, interleaved with decode steps). A swap or a cancellation that
lands mid-prefill is checked too. The server-level test sends a request with a tiny temperature
(which used to raise inside the engine) beside a running stream.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

import pytest
import test_engine
from test_engine import prompts, random_lora, run

import slime_ext.engines.local as local
from slime_ext.engines import EngineError, SamplingParams
from slime_ext.engines.base import GREEDY_BELOW
from slime_ext.engines.local import LocalEngine

model_dir, engine = test_engine.model_dir, test_engine.engine  # the same fixtures as test_engine.py


async def idle(eng) -> None:
    for _ in range(250):
        if eng.active_requests == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{eng.active_requests} requests still active")


# ------------------------------------------------------------------ one row's failure
@pytest.mark.parametrize("fail_at", [0, 5])  # the first token (admission) or a later decode step
async def test_a_sampling_failure_fails_that_request_alone(engine, monkeypatch, fail_at):
    ps = prompts(3)
    alone = [await run(engine, p, temperature=1.0, seed=i, max_new_tokens=20) for i, p in enumerate(ps)]
    real_sample, calls = local.sample_token, {}

    def sample(logp, temperature, top_p, generator):
        if top_p == 0.999:  # the bad request's mark
            calls[99] = calls.get(99, 0) + 1
            if calls[99] > fail_at:
                raise ValueError("injected sampling failure")
        return real_sample(logp, temperature, top_p, generator)

    monkeypatch.setattr(local, "sample_token", sample)

    async def bad():
        with pytest.raises(EngineError, match="injected sampling failure"):
            await run(engine, ps[1], temperature=1.0, top_p=0.999, seed=99, max_new_tokens=20)

    async def good(i):
        await asyncio.sleep(0.01 * i)  # admitted before and after the bad one
        return await run(engine, ps[i], temperature=1.0, seed=i, max_new_tokens=20)

    results = await asyncio.wait_for(asyncio.gather(good(0), bad(), good(2)), 60)
    for got, want in ((results[0], alone[0]), (results[2], alone[2])):
        assert [t.token_id for t in got] == [t.token_id for t in want]
    await idle(engine)
    assert len(await run(engine, ps[0], max_new_tokens=3)) == 3  # still serving


async def test_a_failure_while_admitting_reaches_that_request(engine, monkeypatch):
    """A failure anywhere in admitting a request (here: merging it into the batch) answers it."""
    (p,) = prompts(1)

    def merge(req, cache):
        raise RuntimeError("injected merge failure")

    monkeypatch.setattr(engine, "_merge", merge)
    with pytest.raises(EngineError, match="injected merge failure"):
        await asyncio.wait_for(run(engine, p), 30)
    monkeypatch.undo()
    await idle(engine)
    assert len(await run(engine, p, max_new_tokens=3)) == 3


async def test_a_failed_step_answers_every_request_even_one_mid_prefill(model_dir, monkeypatch):
    """A failure of a whole decode step fails what is in flight, a part-prefilled request included."""
    chunk = 128
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0, prefill_chunk=chunk)
    try:
        real_step = eng._decode_step

        def step():
            if eng._waiting and eng._waiting[0].prefilled:
                raise RuntimeError("injected step failure")
            real_step()

        monkeypatch.setattr(eng, "_decode_step", step)
        running = asyncio.create_task(run(eng, prompts(1)[0], max_new_tokens=10_000))
        while eng.stats["tokens"] == 0:
            await asyncio.sleep(0.005)
        for task in (running, asyncio.create_task(run(eng, prompts(1, length=8 * chunk)[0]))):
            with pytest.raises(EngineError, match="injected step failure"):
                await asyncio.wait_for(task, 30)
        monkeypatch.undo()
        await idle(eng)
        assert len(await run(eng, prompts(1)[0], max_new_tokens=3)) == 3
    finally:
        await eng.close()


@pytest.mark.parametrize("temperature", [1e-39, 1e-30, GREEDY_BELOW / 2])
async def test_a_tiny_temperature_is_greedy(engine, temperature):
    (p,) = prompts(1)
    greedy = await run(engine, p, temperature=0.0)
    tiny = await asyncio.wait_for(run(engine, p, temperature=temperature, seed=3), 30)
    assert [t.token_id for t in tiny] == [t.token_id for t in greedy]
    assert [t.logprob for t in tiny] == [t.logprob for t in greedy]  # raw-logit log-probs, as greedy records
    assert SamplingParams(temperature=temperature).temperature == 0.0
    assert SamplingParams(temperature=GREEDY_BELOW).temperature == GREEDY_BELOW


# ------------------------------------------------------------------ chunked prefill
class PrefillGate:
    """Counts prefill forwards (no attention mask) of ``length`` tokens; can hold the first one."""

    def __init__(self, model, length: int, hold=None) -> None:
        self.length, self.hold, self.chunks = length, hold, 0
        self.handle = model.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        if kwargs.get("attention_mask") is None and kwargs["input_ids"].shape[1] == self.length:
            self.chunks += 1
            if self.hold and self.chunks == 1:
                self.hold()


async def test_running_streams_decode_while_a_long_prompt_is_prefilled(model_dir):
    chunk = 256
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0, prefill_chunk=chunk)
    try:
        long_prompt = prompts(1, length=16 * chunk)[0]
        alone = await run(eng, long_prompt, temperature=1.0, seed=5, max_new_tokens=8)
        got: list[int] = []
        first_of_long = asyncio.Event()
        at_first: list[int] = []

        async def stream():
            async for t in eng.generate(prompts(1)[0], SamplingParams(max_new_tokens=10_000, temperature=1.0, seed=1)):
                got.append(t.token_id)
                if first_of_long.is_set():
                    return

        async def long_request():
            out = []
            async for t in eng.generate(long_prompt, SamplingParams(temperature=1.0, seed=5, max_new_tokens=8)):
                if not out:
                    at_first.append(len(got))
                    first_of_long.set()
                out.append(t)
            return out

        task = asyncio.create_task(stream())
        while len(got) < 2:
            await asyncio.sleep(0.005)
        before = len(got)
        long_out = await asyncio.wait_for(long_request(), 120)
        during = at_first[0] - before
        await asyncio.wait_for(task, 30)
        print(f"{during} tokens of the running stream while a {len(long_prompt)}-token prompt was prefilled")
        assert during >= 8, during  # one decode step between chunks: about 16; it was 0
        # chunked across iterations, the long request's result is exactly its result alone
        assert [t.token_id for t in long_out] == [t.token_id for t in alone]
        assert max(abs(a.logprob - b.logprob) for a, b in zip(long_out, alone)) < 1e-4
    finally:
        await eng.close()


async def test_a_swap_mid_prefill_restarts_it_on_the_new_weights(model_dir):
    """The prompt's KV is never half old weights, half new: the prefill starts over after the swap."""
    chunk = 128
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0, prefill_chunk=chunk)
    fresh = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0, prefill_chunk=chunk)
    try:
        long_prompt = prompts(1, length=8 * chunk)[0]
        update = random_lora(eng.model, 1)
        await fresh.swap(update, 1)
        want = await run(fresh, long_prompt, temperature=0.0, max_new_tokens=6)

        def hold():  # the first chunk waits until the swap is queued, so it lands mid-prefill
            deadline = time.time() + 30
            while eng._ops.qsize() == 0 and time.time() < deadline:
                time.sleep(0.005)

        gate = PrefillGate(eng.model, chunk, hold)
        request = asyncio.create_task(run(eng, long_prompt, temperature=0.0, max_new_tokens=6))
        while gate.chunks == 0:
            await asyncio.sleep(0.005)
        await eng.swap(update, 1)
        got = await asyncio.wait_for(request, 60)
        gate.handle.remove()
        assert gate.chunks > 8  # started over
        assert {t.policy_version for t in got} == {1}
        assert [t.token_id for t in got] == [t.token_id for t in want]
        assert max(abs(a.logprob - b.logprob) for a, b in zip(got, want)) < 1e-4
    finally:
        await eng.close()
        await fresh.close()


async def test_a_request_cancelled_mid_prefill_stops_prefilling(model_dir):
    chunk = 128
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0, prefill_chunk=chunk)
    try:
        long_prompt = prompts(1, length=40 * chunk)[0]
        started = threading.Event()
        gate = PrefillGate(eng.model, chunk, started.set)
        gen = eng.generate(long_prompt, SamplingParams(max_new_tokens=5))
        task = asyncio.create_task(gen.__anext__())
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await gen.aclose()
        await idle(eng)
        assert len(await run(eng, prompts(1)[0], max_new_tokens=3)) == 3  # served after the cancelled one
        gate.handle.remove()
        assert gate.chunks < 40, gate.chunks  # it did not prefill the whole prompt
    finally:
        await eng.close()


# ------------------------------------------------------------------ through the server
def post(srv, body: dict, timeout: float = 60) -> tuple[int, dict]:
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stream_tokens(srv, body: dict, events: list) -> None:
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                events.append(json.loads(line[6:]))


def test_a_tiny_temperature_beside_a_running_stream(tiny_server):
    hi = [{"role": "user", "content": "hi"}]
    events: list = []
    streamer = threading.Thread(target=stream_tokens, args=(tiny_server, {"messages": hi, "max_tokens": 300, "seed": 1}, events))
    streamer.start()
    deadline = time.time() + 60
    while not events and time.time() < deadline:
        time.sleep(0.01)
    status, tiny = post(tiny_server, {"messages": hi, "temperature": 1e-39, "max_tokens": 12}, timeout=30)
    assert status == 200, tiny
    streamer.join(120)
    assert not [e for e in events if "error" in e], events[-1]
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    status, greedy = post(tiny_server, {"messages": hi, "temperature": 0, "max_tokens": 12})
    assert tiny["choices"][0]["message"]["content"] == greedy["choices"][0]["message"]["content"]
    for _ in range(100):
        if tiny_server.health()["requests_in_flight"] == 0:
            break
        time.sleep(0.05)
    assert tiny_server.health()["requests_in_flight"] == 0
