"""The SGLang engine client against a server speaking SGLang's native API, backed by the local engine.

The fake server (``tests/_sglang_server.py``) delegates to a ``LocalEngine`` on the tiny model,
so what the client streams can be compared token for token with that engine's own output.
"""

import asyncio
import logging
import socket
import time

import aiohttp
import pytest
import torch

from slime_ext.engines import EngineError, SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.engines.sglang import SGLangEngine, parse_weight_version
from slime_ext.models import resolve_model
from tests._sglang_server import FakeSGLangServer


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("tiny")


@pytest.fixture(scope="module")
def local(model_dir):
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture
async def own(model_dir):
    """A local engine of the test's own, for tests that change its weights."""
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
    yield eng
    await eng.close()


@pytest.fixture
async def make_server(local):
    started = []

    async def make(engine=None, **kw) -> FakeSGLangServer:
        srv = await FakeSGLangServer(engine or local, **kw).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        await srv.stop()


@pytest.fixture
async def make_engine():
    made = []

    async def make(url, **kw) -> SGLangEngine:
        eng = await SGLangEngine.connect(url, **kw)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        await eng.close()


async def post(url, path, body=None):
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body or {}) as r:
        assert r.status == 200, await r.text()
        return await r.read()


def prompts(n, length=20):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(100, 40000, (length + 7 * i,), generator=g).tolist() for i in range(n)]


async def collect(eng, ids, **kw):
    return [t async for t in eng.generate(ids, SamplingParams(**{"max_new_tokens": 12, **kw}))]


async def test_streams_the_local_engines_tokens_and_logprobs(local, make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url)
    assert eng.context_length == local.context_length - 1  # SGLang refuses input + max_new_tokens >= context
    assert eng.policy_version == 0  # "default": weights never updated
    for i, p in enumerate(prompts(3)):
        for kw in ({"temperature": 0.8, "top_p": 0.9, "seed": 40 + i}, {"temperature": 0.0}, {"temperature": 1.0, "seed": i}):
            got = await collect(eng, p, **kw)
            want = await collect(local, p, **kw)
            assert [t.token_id for t in got] == [t.token_id for t in want]
            assert [t.logprob for t in got] == [t.logprob for t in want]  # exact: floats survive JSON
            assert {t.policy_version for t in got} == {0}
    body = srv.requests[-1]
    assert body["return_logprob"] is True and body["stream"] is True and body["rid"].startswith("openclaw-")
    assert body["sampling_params"]["sampling_seed"] == 2 and body["sampling_params"]["max_new_tokens"] == 12
    # top_p 0 (our "most likely token only") is sent as top_k 1
    assert [t.token_id for t in await collect(eng, prompts(1)[0], temperature=1.0, top_p=0.0, seed=1)] == \
        [t.token_id for t in await collect(local, prompts(1)[0], temperature=0.0)]
    assert srv.requests[-1]["sampling_params"]["top_k"] == 1


async def test_concurrent_requests_stream_independently(local, make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url)
    ps = prompts(4)
    outs = await asyncio.gather(*[collect(eng, p, temperature=1.0, seed=i) for i, p in enumerate(ps)])
    for i, (p, out) in enumerate(zip(ps, outs)):
        assert [t.token_id for t in out] == [t.token_id for t in await collect(local, p, temperature=1.0, seed=i)]


async def test_score_equals_the_local_engine(local, make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url)
    (p,) = prompts(1, 30)
    for start in (1, 5, 29):
        assert await eng.score(p, start) == await local.score(p, start)
    body = srv.requests[-1]
    assert body["logprob_start_len"] == 28 and body["sampling_params"]["max_new_tokens"] == 0
    assert body["sampling_params"]["temperature"] == 1.0
    assert await eng.score(p, len(p)) == []
    with pytest.raises(EngineError, match="start"):
        await eng.score(p, 0)


async def test_stop_ids_and_max_tokens_are_honoured(make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url)
    (p,) = prompts(1)
    greedy = await collect(eng, p, temperature=0.0, max_new_tokens=6)
    stop = greedy[2].token_id
    out = await collect(eng, p, temperature=0.0, stop_token_ids=(stop, 99999))
    assert [t.token_id for t in out] == [t.token_id for t in greedy[: [t.token_id for t in greedy].index(stop) + 1]]
    assert srv.requests[-1]["sampling_params"]["stop_token_ids"] == [stop, 99999]
    assert len(await collect(eng, p, max_new_tokens=7)) == 7
    first = greedy[0].token_id  # a request that may not stop yet does not stop on its first token
    out = await collect(eng, p, temperature=0.0, stop_token_ids=(first,), min_new_tokens=1, max_new_tokens=3)
    assert out[0].token_id != first and srv.requests[-1]["sampling_params"]["min_new_tokens"] == 1


async def test_context_length_is_read_from_the_server_and_respected(make_server, make_engine):
    srv = await make_server(context_length=40)
    eng = await make_engine(srv.url)
    assert eng.context_length == 39
    out = await collect(eng, prompts(1, 30)[0], max_new_tokens=100)
    assert len(out) == 9  # clamped so that SGLang does not refuse input + max_new_tokens >= 40
    assert srv.requests[-1]["sampling_params"]["max_new_tokens"] == 9
    with pytest.raises(EngineError, match="context"):
        await collect(eng, list(range(100, 139)))
    # a client told a larger context than the server's gets the server's own refusal, clearly
    loose = SGLangEngine(srv.url, context_length=1000)
    try:
        with pytest.raises(EngineError, match="context length"):
            await collect(loose, list(range(100, 135)), max_new_tokens=50)
    finally:
        await loose.close()


async def test_weight_version_is_reported_per_token_and_follows_a_weight_update(own, tmp_path, make_server,
                                                                                  make_engine):
    from safetensors.torch import save_file

    srv = await make_server(own, weight_version="default", token_delay_s=0.02)
    eng = await make_engine(srv.url)
    (p,) = prompts(1)
    before = await eng.score(p, 5)
    assert eng.policy_version == 0
    norm = own.model.model.norm.weight
    save_file({"model.norm.weight": torch.ones_like(norm) * 1.5}, str(tmp_path / "model.safetensors"))
    await post(srv.url, "/update_weights_from_disk", {"model_path": str(tmp_path), "weight_version": "3"})
    await eng.refresh()
    assert eng.policy_version == 3
    after = await eng.score(p, 5)
    assert after == await own.score(p, 5) and max(abs(a - b) for a, b in zip(after, before)) > 1e-3
    # the version changes in the middle of a stream: earlier tokens keep the old one
    versions = []
    async for t in eng.generate(p, SamplingParams(max_new_tokens=12, temperature=0.0)):
        versions.append(t.policy_version)
        if len(versions) == 4:
            await post(srv.url, "/update_weight_version", {"new_version": "4"})
    assert versions[:4] == [3] * 4 and versions[-1] == 4 and versions == sorted(versions)
    assert eng.policy_version == 4


def test_parse_weight_version():
    assert [parse_weight_version(v) for v in ("7", 7, " 12 ", "v3", "step_000010", "default", None, "")] == \
        [7, 7, 12, 3, 10, None, None, None]


async def test_a_pause_during_generation_waits_and_completes(local, make_server, make_engine):
    """Slime's weight sync: pause_generation aborts the request; it is re-sent and finishes after continue."""
    srv = await make_server(token_delay_s=0.02)
    eng = await make_engine(srv.url, pause_wait_s=30)
    (p,) = prompts(1)
    out, gap = [], 0.0
    gen = eng.generate(p, SamplingParams(max_new_tokens=40, temperature=0.0))
    last = time.monotonic()
    async for t in gen:
        out.append(t)
        gap = max(gap, time.monotonic() - last)
        if len(out) == 5:
            await post(srv.url, "/pause_generation")  # returns once running requests are aborted
            asyncio.get_running_loop().call_later(0.6, lambda: asyncio.ensure_future(post(srv.url, "/continue_generation")))
        last = time.monotonic()
    want = await collect(local, p, max_new_tokens=40, temperature=0.0)
    assert [t.token_id for t in out] == [t.token_id for t in want]
    assert max(abs(a.logprob - b.logprob) for a, b in zip(out, want)) < 1e-4  # resumed by prefill: fp32 rounding
    assert srv.stats["aborted"] >= 1 and srv.stats["waited_for_pause"] >= 1 and eng.stats["retries"] >= 1
    assert gap >= 0.5  # it really waited for continue_generation
    resent = srv.requests[-1]
    k = len(resent["input_ids"]) - len(p)
    assert 5 <= k < 40 and resent["input_ids"] == p + [t.token_id for t in out[:k]]
    assert resent["sampling_params"]["max_new_tokens"] == 40 - k


async def test_a_pause_longer_than_pause_wait_s_is_a_clear_error(make_server, make_engine):
    srv = await make_server(token_delay_s=0.02)
    eng = await make_engine(srv.url, pause_wait_s=0.5)
    (p,) = prompts(1)
    got = []
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"did not resume within 0.5s: generation paused.*aborted by the server"):
        async for t in eng.generate(p, SamplingParams(max_new_tokens=40)):
            got.append(t)
            if len(got) == 3:
                await post(srv.url, "/pause_generation")
    assert len(got) >= 3 and time.monotonic() - started < 10
    await post(srv.url, "/continue_generation")
    assert len(await collect(eng, p, max_new_tokens=3)) == 3  # serving again


async def test_requests_sent_while_paused_wait_for_continue(local, make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url, pause_wait_s=30)
    (p,) = prompts(1)
    await post(srv.url, "/pause_generation")
    gen = asyncio.ensure_future(collect(eng, p, temperature=0.0))
    score = asyncio.ensure_future(eng.score(p, 3))
    await asyncio.sleep(0.4)
    assert not gen.done() and not score.done()
    await post(srv.url, "/continue_generation")
    assert [t.token_id for t in await gen] == [t.token_id for t in await collect(local, p, temperature=0.0)]
    assert await score == await local.score(p, 3)


async def test_refusals_while_paused_are_retried(local, make_server, make_engine):
    """A server (or router) that answers 503 during the pause instead of holding the request."""
    srv = await make_server(refuse_while_paused=True)
    eng = await make_engine(srv.url, pause_wait_s=30)
    (p,) = prompts(1)
    await post(srv.url, "/pause_generation")
    gen = asyncio.ensure_future(collect(eng, p, temperature=0.0))
    score = asyncio.ensure_future(eng.score(p, 3))
    await asyncio.sleep(0.4)
    assert srv.stats["refused"] >= 2 and not gen.done()
    await post(srv.url, "/continue_generation")
    assert [t.token_id for t in await gen] == [t.token_id for t in await collect(local, p, temperature=0.0)]
    assert await score == await local.score(p, 3)
    short = await make_engine(srv.url, pause_wait_s=0.3)
    await post(srv.url, "/pause_generation")
    with pytest.raises(EngineError, match="did not resume within 0.3s.*HTTP 503"):
        await collect(short, p)
    await post(srv.url, "/continue_generation")


async def test_an_in_place_pause_just_holds_the_stream(local, make_server, make_engine):
    srv = await make_server(token_delay_s=0.02)
    eng = await make_engine(srv.url, pause_wait_s=30)
    (p,) = prompts(1)
    out = []
    async for t in eng.generate(p, SamplingParams(max_new_tokens=20, temperature=0.0)):
        out.append(t)
        if len(out) == 3:
            await post(srv.url, "/pause_generation", {"mode": "in_place"})
            asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(post(srv.url, "/continue_generation")))
    assert [t.token_id for t in out] == [t.token_id for t in await collect(local, p, max_new_tokens=20, temperature=0.0)]
    assert srv.stats["aborted"] == 0


async def test_closing_the_stream_early_aborts_the_request_in_sglang(make_server, make_engine):
    srv = await make_server(token_delay_s=0.01)
    eng = await make_engine(srv.url)
    gen = eng.generate(prompts(1)[0], SamplingParams(max_new_tokens=5000))
    async for _ in gen:
        break
    await gen.aclose()
    for _ in range(200):
        if not srv.running:
            break
        await asyncio.sleep(0.02)
    assert not srv.running
    assert len(await collect(eng, prompts(1)[0], max_new_tokens=2)) == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match=f"cannot reach the SGLang server at {url}"):
        await SGLangEngine.connect(url, api_key="never-shown")
    eng = SGLangEngine(url, context_length=100, pause_wait_s=5)
    try:
        started = time.monotonic()
        with pytest.raises(EngineError, match="cannot reach"):
            await collect(eng, [1, 2, 3])
        with pytest.raises(EngineError, match="cannot reach"):
            await eng.score([1, 2, 3], 1)
        assert time.monotonic() - started < 5  # refused is not a pause: no waiting it out
    finally:
        await eng.close()


async def test_api_key_is_sent_and_never_shown(make_server, make_engine, caplog):
    caplog.set_level(logging.DEBUG)
    srv = await make_server(api_key="s3cret-key")
    with pytest.raises(EngineError, match="requires an API key") as e:
        await SGLangEngine.connect(srv.url)
    with pytest.raises(EngineError, match="not accepted") as e2:
        await SGLangEngine.connect(srv.url, api_key="wrong-key-123")
    eng = await make_engine(srv.url, api_key="s3cret-key")
    assert len(await collect(eng, prompts(1)[0], max_new_tokens=3)) == 3
    shown = str(e.value) + str(e2.value) + repr(eng) + caplog.text
    assert "s3cret" not in shown and "wrong-key-123" not in shown


async def test_swap_and_frozen_base_are_refused(make_server, make_engine):
    srv = await make_server()
    eng = await make_engine(srv.url)
    with pytest.raises(EngineError, match="Slime syncs"):
        await eng.swap({}, 1)
    with pytest.raises(EngineError, match="frozen_base"):
        await collect(eng, [1, 2, 3], frozen_base=True)
    with pytest.raises(EngineError, match="empty"):
        await collect(eng, [])


async def test_chat_completions_served_through_sglang_end_to_end(local, model_dir, tmp_path, make_server, make_engine):
    """The OpenAI-compatible server on the SGLang client: turns record SGLang's tokens, log-probs and version."""
    from aiohttp import web
    from transformers import AutoTokenizer

    from slime_ext.api.server import ChatServer, ServerSettings
    from slime_ext.sessions import SessionTracker
    from slime_ext.store import Store, export_records

    srv = await make_server(weight_version="5", token_delay_s=0.01)
    eng = await make_engine(srv.url, pause_wait_s=30)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    store = Store(tmp_path / "run")
    server = ChatServer(eng, tok, store, SessionTracker(store, submit=store.submit), ServerSettings(model_name="tiny"))
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        user = {"role": "user", "content": "hello there"}
        async with aiohttp.ClientSession() as s:
            async with s.post(base + "/v1/chat/completions", json={"model": "tiny", "messages": [user],
                                                                   "max_tokens": 12, "temperature": 1.0, "seed": 3}) as r:
                assert r.status == 200, await r.text()
                first = await r.json()
            # streamed, with a weight-sync pause in the middle: the client sees no error
            reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
            follow = {"model": "tiny", "messages": [user, reply, {"role": "user", "content": "and?"}], "max_tokens": 16,
                      "temperature": 1.0, "seed": 4, "stream": True}
            chunks = []
            async with s.post(base + "/v1/chat/completions", json=follow) as r:
                assert r.status == 200
                async for line in r.content:
                    chunks.append(line)
                    if len(chunks) == 6:
                        await post(srv.url, "/pause_generation")
                        await post(srv.url, "/update_weight_version", {"new_version": "6"})
                        asyncio.get_running_loop().call_later(
                            0.3, lambda: asyncio.ensure_future(post(srv.url, "/continue_generation")))
        events = [c.strip() for c in chunks if c.strip()]
        assert events[-1] == b"data: [DONE]" and not any(b'"error"' in c for c in events)
        assert srv.stats["aborted"] >= 1
        await store.run(lambda: None)
        (session,) = export_records(store.run_dir)["sessions"]
        t0, t1 = session["turns"]
        for t, v0, v1 in ((t0, 5, 5), (t1, 5, 6)):
            ids, start = t["prompt_token_ids"] + t["response_token_ids"], len(t["prompt_token_ids"])
            assert t["response_token_ids"] and len(t["response_logprobs"]) == len(t["response_token_ids"])
            # temperature 1: the recorded log-probs are the teacher-forced ones
            ref = await local.score(ids, start)
            assert max(abs(a - b) for a, b in zip(t["response_logprobs"], ref)) < 1e-4
            assert (t["policy_version"], t["policy_version_end"]) == (v0, v1)
        assert t1["finish_reason"] in ("length", "stop")
    finally:
        await runner.cleanup()
        store.close()


@pytest.fixture(scope="module")
def adapter(model_dir, tmp_path_factory):
    """A LoRA adapter of the tiny model, saved as the trainer saves its checkpoints (PEFT), with non-zero B."""
    from transformers import AutoModelForCausalLM

    from slime_ext.trainers.loop import TrainerConfig, wrap_lora

    torch.manual_seed(0)
    model = wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), TrainerConfig(lora_rank=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("adapter") / "v1"
    model.save_pretrained(out)
    return out


async def test_an_in_place_lora_swap_under_8_streams_fails_none_and_versions_every_token(own, adapter,
                                                                                         make_server, make_engine):
    """``serve --engine sglang``: the trainer's adapter is loaded into the running server while 8 streams decode.
    None fails; tokens before the load carry version 0 and after it 1 (the streams were moved onto the new adapter
    and re-sent from where they were: the re-sent prompt is the old one plus exactly the tokens already streamed);
    new requests name the new adapter; a frozen-base request names none."""
    srv = await make_server(own, token_delay_s=0.02)
    eng = await make_engine(srv.url, lora=True)
    streams = prompts(8)
    got: list[list] = [[] for _ in streams]

    async def one(i):
        async for t in eng.generate(streams[i], SamplingParams(max_new_tokens=30, temperature=1.0, seed=i)):
            got[i].append(t)

    tasks = [asyncio.create_task(one(i)) for i in range(8)]
    while sum(len(g) for g in got) < 8 * 5:  # every stream is well under way
        await asyncio.sleep(0.01)
    await eng.swap(adapter, 1)
    await asyncio.gather(*tasks)  # none raised
    assert [len(g) for g in got] == [30] * 8
    for g in got:
        versions = [t.policy_version for t in g]
        assert versions == sorted(versions) and set(versions) <= {0, 1}
    assert sum(1 for g in got if {t.policy_version for t in g} == {0, 1}) >= 4  # the swap landed mid-stream
    resent = [b for b in srv.requests if b.get("lora_path") == "openclaw-v1"]
    for i, g in enumerate(got):  # each moved stream went on from exactly where it was
        old = [t.token_id for t in g if t.policy_version == 0]
        if len(old) < 30:
            assert any(b["input_ids"] == streams[i] + old for b in resent), i
    assert srv.lora_calls == [("load", "openclaw-v1")] and eng.policy_version == 1
    base = [t async for t in eng.generate(streams[0], SamplingParams(max_new_tokens=2, frozen_base=True))]
    assert len(base) == 2 and "lora_path" not in srv.requests[-1]  # the base weights: no adapter named
    with pytest.raises(EngineError, match="loads LoRA adapters only"):
        await eng.swap(adapter.parent, 2)  # not an adapter folder


async def test_older_adapters_are_unloaded_and_a_client_without_lora_refuses_to_swap(own, adapter, make_server,
                                                                                    make_engine):
    srv = await make_server(own)
    eng = await make_engine(srv.url, lora=True)
    for v in (1, 2, 3):
        await eng.swap(adapter, v)
    assert sorted(srv.adapters) == ["openclaw-v2", "openclaw-v3"]  # the served one and the one before it
    assert ("unload", "openclaw-v1") in srv.lora_calls
    await collect(eng, prompts(1)[0])
    assert srv.requests[-1]["lora_path"] == "openclaw-v3"
    plain = await make_engine(srv.url)
    with pytest.raises(EngineError, match="does not swap weights itself"):
        await plain.swap(adapter, 4)
