"""Weight swaps (full state dicts and LoRA) land between decode steps of live streams.

The server runs in-process on a real port. Eight streaming requests are in flight when
``engine.swap`` installs new weights: none may fail, each recorded turn says which policy version
started and finished it, later requests run on the new version, and the new weights are the ones
actually computing (checked against an independent reference forward pass).
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
import pytest
import torch
from aiohttp import web
from transformers import AutoModelForCausalLM

from slime_ext.config import ServeConfig
from slime_ext.engines.base import EngineError
from slime_ext.engines.local import LoraUpdate
from slime_ext.launch import sse_chunks
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.serve import build_server
from slime_ext.store import export_records

N_STREAMS = 8
MAX_TOKENS = 64
TIMEOUT = aiohttp.ClientTimeout(total=180)


class Served:
    def __init__(self, server, runner, url: str, run_dir) -> None:
        self.server, self.runner, self.url, self.run_dir = server, runner, url, run_dir
        self.engine = server.engine

    def turns(self) -> dict[str, dict]:
        return {t["request_id"]: t for s in export_records(self.run_dir)["sessions"] for t in s["turns"]}


class DecodeThrottle:
    """Slows each decode step (prefill and scoring pass no attention mask and are not slowed) so
    that streams of MAX_TOKENS tokens are still running when a swap lands; never part of an
    assertion, only there to keep the streams long-lived on a fast machine."""

    def __init__(self, model, delay_s: float) -> None:
        self.delay_s = delay_s
        self.steps = 0
        self.handle = model.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        if kwargs.get("attention_mask") is not None:
            self.steps += 1
            if self.delay_s:
                time.sleep(self.delay_s)


@pytest.fixture
async def served(tmp_path):
    run_dir = tmp_path / "run"
    # float32: scores and recorded log-probs are compared with a reference forward pass to 1e-3
    server = build_server(ServeConfig(model="tiny", run_dir=str(run_dir), dtype="float32"))
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield Served(server, runner, f"http://{host}:{port}", run_dir)
    await runner.cleanup()
    await server.engine.close()
    server.store.close()


class Stream:
    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.text = ""
        self.finish_reason: str | None = None
        self.done = False
        self.errors: list = []
        self.got_content = asyncio.Event()


async def stream_chat(http, url: str, messages: list[dict], max_tokens: int, st: Stream, **extra) -> Stream:
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "stream": True, **extra}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for chunk in sse_chunks(resp):
            if chunk is None:
                st.done = True
                continue
            if "error" in chunk:
                st.errors.append(chunk["error"])
                continue
            st.ids.add(chunk["id"])
            for choice in chunk["choices"]:
                if choice["delta"].get("content"):
                    st.text += choice["delta"]["content"]
                    st.got_content.set()
                if choice.get("finish_reason"):
                    st.finish_reason = choice["finish_reason"]
    return st


async def complete(http, url: str, messages: list[dict], max_tokens: int, **extra) -> dict:
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, **extra}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def health(http, url: str) -> dict:
    async with http.get(url + "/healthz") as resp:
        assert resp.status == 200
        return await resp.json()


# ---------------------------------------------------------------------------- reference model
def reference_model(engine):
    """An independent copy of the served checkpoint (same dtype), to recompute log-probs."""
    model = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), dtype=engine.dtype)
    model.eval()
    return model


def reference_logprobs(model, ids: list[int], start: int) -> list[float]:
    return teacher_forced_logprobs(model, ids, start).tolist()


def max_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def perturbed_state_dict(engine, seed: int) -> dict[str, torch.Tensor]:
    sd = engine.model.state_dict()
    g = torch.Generator().manual_seed(seed)
    names = ["model.layers.0.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.v_proj.weight"]
    return {k: (sd[k].float() + torch.randn(sd[k].shape, generator=g) * 0.2).to(sd[k].dtype) for k in names}


LORA_MODULES = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj", "model.layers.1.self_attn.o_proj"]


def lora_update(engine, seed: int, scaling: float = 2.0) -> LoraUpdate:
    sd = engine.model.state_dict()
    g = torch.Generator().manual_seed(seed)
    r = 4
    tensors = {}
    for m in LORA_MODULES:
        out_f, in_f = sd[f"{m}.weight"].shape
        tensors[f"base_model.model.{m}.lora_A.weight"] = torch.randn(r, in_f, generator=g) * 0.3
        tensors[f"base_model.model.{m}.lora_B.weight"] = torch.randn(out_f, r, generator=g) * 0.3
    return LoraUpdate(tensors, scaling)


def lora_expected(base: dict[str, torch.Tensor], upd: LoraUpdate, dtype) -> dict[str, torch.Tensor]:
    """W = W_base + scaling * B @ A, computed the way the engine documents it."""
    out = {}
    for m in LORA_MODULES:
        a = upd.tensors[f"base_model.model.{m}.lora_A.weight"].to(dtype)
        b = upd.tensors[f"base_model.model.{m}.lora_B.weight"].to(dtype)
        out[f"{m}.weight"] = base[f"{m}.weight"] + upd.scaling * (b @ a)
    return out


def install(model, weights: dict[str, torch.Tensor]) -> None:
    params = model.state_dict()
    with torch.no_grad():
        for k, v in weights.items():
            params[k].copy_(v)


# ---------------------------------------------------------------------------- tests
FIXED_PROMPT = [{"role": "user", "content": "Say something about the weather in Paris."}]


@pytest.mark.parametrize("kind", ["full", "lora"])
async def test_swap_during_streaming(served, kind):
    engine = served.engine
    tok = served.server.tokenizer
    seq = tok("The quick brown fox jumps over the lazy dog, and then it runs far away.")["input_ids"]
    start = 4
    ref = reference_model(engine)
    base = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    if kind == "full":
        update = perturbed_state_dict(engine, seed=1)
        new_weights = update
    else:
        update = lora_update(engine, seed=1)
        new_weights = lora_expected(base, update, engine.dtype)

    score_before = await engine.score(seq, start)
    assert max_abs_diff(score_before, reference_logprobs(ref, seq, start)) < 1e-3

    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        assert (await health(http, served.url))["policy_version"] == 0
        greedy_before = await complete(http, served.url, FIXED_PROMPT, 16, temperature=0)

        throttle = DecodeThrottle(engine.model, delay_s=0.03)
        streams = [Stream() for _ in range(N_STREAMS)]
        tasks = [
            asyncio.create_task(stream_chat(http, served.url, [{"role": "user", "content": f"stream {i}: tell me a story"}],
                                            MAX_TOKENS, st, seed=i))
            for i, st in enumerate(streams)
        ]
        await asyncio.wait_for(asyncio.gather(*(st.got_content.wait() for st in streams)), 120)
        unfinished_at_swap = sum(not t.done() for t in tasks)
        await engine.swap(update, version=1)
        throttle.delay_s = 0.0
        assert engine.policy_version == 1
        results = await asyncio.wait_for(asyncio.gather(*tasks), 180)
        throttle.handle.remove()

        # All streams completed normally, none saw an error.
        for st in results:
            assert st.errors == []
            assert st.done and st.finish_reason in ("stop", "length")
            assert len(st.ids) == 1
        assert (await health(http, served.url))["policy_version"] == 1

        after = await complete(http, served.url, [{"role": "user", "content": "a request after the swap"}], 24, seed=7)
        greedy_after = await complete(http, served.url, FIXED_PROMPT, 16, temperature=0)

    # Each in-flight turn started on version 0; the ones still running when the swap landed end on 1.
    turns = served.turns()
    stream_turns = [turns[next(iter(st.ids))] for st in results]
    for st, t in zip(results, stream_turns):
        assert t["response_text"] == st.text
        assert t["finish_reason"] == st.finish_reason
        assert t["policy_version"] == 0, "the stream had content before the swap, so it started on version 0"
        assert t["policy_version_end"] in (0, 1)
        assert len(t["response_token_ids"]) == len(t["response_logprobs"]) > 0
        assert all(math.isfinite(x) and x <= 0 for x in t["response_logprobs"])
    spanning = [t for t in stream_turns if (t["policy_version"], t["policy_version_end"]) == (0, 1)]
    print(f"{kind}: {unfinished_at_swap} streams unfinished at the swap, {len(spanning)} span it, "
          f"{throttle.steps} decode steps")
    assert unfinished_at_swap > 0 and spanning, "no stream was still running when the swap landed"

    # A request started after the swap runs entirely on version 1 ...
    t_after = turns[after["id"]]
    assert (t_after["policy_version"], t_after["policy_version_end"]) == (1, 1)

    # ... on the new weights: the engine's weights are exactly the update, its scores match an
    # independent forward pass with those weights, and the recorded log-probs of the post-swap
    # reply are those of the new weights, not the old ones.
    params = engine.model.state_dict()
    for k, v in new_weights.items():
        assert torch.allclose(params[k].float(), v.float(), atol=1e-2, rtol=0), k
        assert not torch.equal(params[k], base[k]), k
    untouched = next(k for k in base if k not in new_weights and k.endswith("k_proj.weight"))
    assert torch.equal(params[untouched], base[untouched])
    score_after = await engine.score(seq, start)
    assert max_abs_diff(score_before, score_after) > 0.05, "the swap did not change what the engine computes"
    ids = t_after["prompt_token_ids"] + t_after["response_token_ids"]
    p = len(t_after["prompt_token_ids"])
    old_ref = reference_logprobs(ref, ids, p)
    install(ref, new_weights)
    assert max_abs_diff(score_after, reference_logprobs(ref, seq, start)) < 1e-3
    new_ref = reference_logprobs(ref, ids, p)
    err_new = max_abs_diff(t_after["response_logprobs"], new_ref)
    err_old = max_abs_diff(t_after["response_logprobs"], old_ref)
    print(f"{kind}: recorded vs reference log-probs: new weights {err_new:.4f}, old weights {err_old:.4f}")
    assert err_new < 0.05 and err_old > 4 * err_new, (err_new, err_old)
    # Greedy decoding of a fixed prompt changes with the weights.
    assert turns[greedy_after["id"]]["response_token_ids"] != turns[greedy_before["id"]]["response_token_ids"]
    assert turns[greedy_before["id"]]["policy_version"] == 0 and turns[greedy_after["id"]]["policy_version"] == 1


async def test_second_lora_replaces_the_first(served):
    """Adapters merge onto the base weights: a second LoRA replaces the first instead of stacking."""
    engine = served.engine
    base = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    first, second = lora_update(engine, seed=1), lora_update(engine, seed=2, scaling=0.5)
    await engine.swap(first, version=1)
    await engine.swap(second, version=2)
    assert engine.policy_version == 2
    params = engine.model.state_dict()
    for k, v in lora_expected(base, second, engine.dtype).items():
        assert torch.allclose(params[k].float(), v.float(), atol=1e-2, rtol=0), k
    # A full swap then resets the base: the next adapter merges onto the new full weights.
    full = perturbed_state_dict(engine, seed=3)
    full["model.layers.0.self_attn.q_proj.weight"] = base["model.layers.0.self_attn.q_proj.weight"] * 2
    await engine.swap(full, version=3)
    new_base = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    await engine.swap(first, version=4)
    params = engine.model.state_dict()
    for k, v in lora_expected(new_base, first, engine.dtype).items():
        assert torch.allclose(params[k].float(), v.float(), atol=1e-2, rtol=0), k


async def test_bad_swaps_are_refused_and_change_nothing(served):
    engine = served.engine
    tok = served.server.tokenizer
    seq = tok("A fixed sequence to score before and after the refused swaps.")["input_ids"]
    before_weights = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    score_before = await engine.score(seq, 2)
    good = perturbed_state_dict(engine, seed=5)
    good_name = next(iter(good))

    bad_updates = {
        "unknown name": {good_name: good[good_name], "model.layers.7.mlp.nonexistent.weight": torch.zeros(4, 4)},
        "wrong shape": {good_name: good[good_name], "model.layers.0.mlp.up_proj.weight": torch.zeros(64)},
        "unknown lora module": LoraUpdate({"model.layers.0.self_attn.nope.lora_A.weight": torch.zeros(2, 64),
                                           "model.layers.0.self_attn.nope.lora_B.weight": torch.zeros(64, 2)}, 1.0),
        "incomplete lora": LoraUpdate({"model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 64)}, 1.0),
        "wrong lora shape": LoraUpdate({"model.layers.0.self_attn.q_proj.lora_A.weight": torch.ones(2, 64),
                                        "model.layers.0.self_attn.q_proj.lora_B.weight": torch.ones(64, 3)}, 1.0),
    }
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for what, update in bad_updates.items():
            with pytest.raises(EngineError):
                await engine.swap(update, version=9)
                pytest.fail(f"a swap with {what} was accepted")
            assert engine.policy_version == 0, what
            params = engine.model.state_dict()
            changed = [k for k, v in before_weights.items() if not torch.equal(params[k], v)]
            assert changed == [], f"a refused swap ({what}) changed weights: {changed}"
            assert (await health(http, served.url))["policy_version"] == 0

        assert await engine.score(seq, 2) == score_before
        # Serving still works, on version 0.
        st = await stream_chat(http, served.url, [{"role": "user", "content": "still serving?"}], 12, Stream())
        assert st.done and st.errors == [] and st.finish_reason in ("stop", "length")
        t = served.turns()[next(iter(st.ids))]
        assert (t["policy_version"], t["policy_version_end"]) == (0, 0)
        assert t["response_text"] == st.text

        # And a valid swap afterwards still works.
        await engine.swap(good, version=1)
        assert (await health(http, served.url))["policy_version"] == 1
        assert await engine.score(seq, 2) != score_before
