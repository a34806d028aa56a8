"""The local engine on the tiny model in float32, where batched decode must be exact."""

import asyncio

import pytest
import torch

from slime_ext.engines import EngineError, SamplingParams
from slime_ext.engines.local import LocalEngine, resolve_dtype
from slime_ext.engines.prefix_cache import PrefixCache, common_prefix_len
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model

EOS = 2


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("tiny")


@pytest.fixture
async def engine(model_dir):
    eng = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
    yield eng
    await eng.close()


async def run(eng, ids, **kw):
    sp = SamplingParams(**{"max_new_tokens": 12, **kw})
    return [t async for t in eng.generate(ids, sp)]


def prompts(n, length=20):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(100, 40000, (length + 7 * i,), generator=g).tolist() for i in range(n)]


async def test_batched_decode_equals_one_at_a_time_and_teacher_forcing(engine):
    ps = prompts(5)
    alone = [await run(engine, p, temperature=1.0, seed=i) for i, p in enumerate(ps)]
    together = await asyncio.gather(*[run(engine, p, temperature=1.0, seed=i) for i, p in enumerate(ps)])
    for p, a, b in zip(ps, alone, together):
        assert [t.token_id for t in a] == [t.token_id for t in b]
        ref = teacher_forced_logprobs(engine.model, p + [t.token_id for t in a], len(p))
        assert torch.allclose(torch.tensor([t.logprob for t in b]), ref, atol=1e-4)
    assert engine.stats["steps"] > 0


async def test_score_equals_forward(engine):
    (p,) = prompts(1)
    scored = await engine.score(p, 5)
    assert torch.allclose(torch.tensor(scored), teacher_forced_logprobs(engine.model, p, 5), atol=1e-5)
    with pytest.raises(EngineError):
        await engine.score(p, 0)


async def test_seed_and_top_p_and_greedy(engine):
    (p,) = prompts(1)
    a = await run(engine, p, temperature=0.8, top_p=0.9, seed=42)
    b = await run(engine, p, temperature=0.8, top_p=0.9, seed=42)
    assert [t.token_id for t in a] == [t.token_id for t in b]
    greedy = await run(engine, p, temperature=0.0)
    nucleus0 = await run(engine, p, temperature=1.0, top_p=0.0, seed=1)  # top_p 0 keeps only the top token
    assert [t.token_id for t in greedy] == [t.token_id for t in nucleus0]


async def test_stop_tokens_and_max_tokens(engine):
    (p,) = prompts(1)
    first = (await run(engine, p, temperature=0.0, max_new_tokens=1))[0].token_id
    out = await run(engine, p, temperature=0.0, stop_token_ids=(first,))
    assert [t.token_id for t in out] == [first]
    assert len(await run(engine, p, max_new_tokens=7)) == 7


async def test_min_new_tokens_samples_no_stop_token_before_them_and_records_that_distribution(engine):
    """The memory's opening is never the whole answer (api/server.py): the first sampled token is not a stop token,
    and its recorded log-prob is under the distribution without them, renormalized."""
    (p,) = prompts(1)
    first = (await run(engine, p, temperature=0.0, max_new_tokens=1))[0]
    out = await run(engine, p, temperature=0.0, stop_token_ids=(first.token_id,), min_new_tokens=1, max_new_tokens=3)
    assert out[0].token_id != first.token_id and len(out) == 3
    full = torch.log_softmax(engine.model(input_ids=torch.tensor([p])).logits[0, -1].float(), -1)
    without = full[out[0].token_id] - torch.log1p(-full[first.token_id].exp())
    assert out[0].logprob == pytest.approx(float(without), abs=1e-4) and out[0].logprob > float(full[out[0].token_id])
    sampled = await run(engine, p, temperature=1.0, seed=3, stop_token_ids=(first.token_id,), min_new_tokens=2)
    assert first.token_id not in [t.token_id for t in sampled[:2]]


async def test_closing_the_stream_cancels_and_frees_the_row(engine):
    (p,) = prompts(1)
    gen = engine.generate(p, SamplingParams(max_new_tokens=10_000))
    async for _ in gen:
        break
    await gen.aclose()
    for _ in range(100):
        if engine.active_requests == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.active_requests == 0
    assert len(await run(engine, p, max_new_tokens=3)) == 3  # still serving


async def test_prompt_too_long_is_refused(model_dir):
    eng = LocalEngine(model_dir, dtype="float32", threads=1, context_length=32)
    try:
        with pytest.raises(EngineError, match="context"):
            await run(eng, list(range(100, 140)))
    finally:
        await eng.close()


async def test_prefix_cache_reuses_kv_exactly_and_is_dropped_on_swap(model_dir):
    base = prompts(1, length=600)[0]
    longer = base + prompts(1, length=30)[0]
    cold = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
    warm = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=10_000)
    try:
        await run(warm, base, max_new_tokens=2)
        before = warm.stats["prefill_tokens"]
        a = await run(warm, longer, temperature=1.0, seed=3)
        assert warm.prefix_cache.hits == 1 and warm.stats["prefill_tokens"] - before == len(longer) - len(base)
        b = await run(cold, longer, temperature=1.0, seed=3)
        assert [t.token_id for t in a] == [t.token_id for t in b]
        assert torch.allclose(torch.tensor([t.logprob for t in a]), torch.tensor([t.logprob for t in b]), atol=1e-4)
        await warm.swap({}, 1)
        assert warm.prefix_cache.tokens == 0
    finally:
        await cold.close()
        await warm.close()


def test_prefix_cache_budget_and_lookup():
    import numpy as np

    assert common_prefix_len(np.array([1, 2, 3]), np.array([1, 2, 4, 5])) == 2
    pc = PrefixCache(budget_tokens=1000, min_tokens=4)
    kv = lambda n: [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]  # noqa: E731
    pc.add(list(range(600)), kv(600))
    pc.add(list(range(1, 501)), kv(500))  # over budget: the first entry is evicted
    assert pc.tokens == 500
    assert pc.lookup(list(range(600))) is None
    n, layers = pc.lookup(list(range(1, 501)))
    assert n == 499 and layers[0][0].shape[2] == 499  # at least one token is left to compute
    assert pc.lookup([1, 2, 3, 9, 9]) is None  # below min_tokens


async def test_swap_in_a_peft_adapter_directory(model_dir, tmp_path):
    """An adapter saved by peft (the embedded trainer's format) is merged and matches peft's own forward."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    peft_model.save_pretrained(tmp_path / "adapter")
    ids = prompts(1)[0]
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([ids])).logits[0, 4:-1]
    expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids[5:])[:, None])[:, 0]

    eng = LocalEngine(model_dir, dtype="float32", threads=1)
    try:
        before = torch.tensor(await eng.score(ids, 5))
        await eng.swap(tmp_path / "adapter", 3)
        after = torch.tensor(await eng.score(ids, 5))
        assert eng.policy_version == 3
        assert (after - before).abs().max() > 1e-3  # the adapter changed the policy
        assert torch.allclose(after, expected, atol=1e-4)
    finally:
        await eng.close()


def random_lora(model, seed: int, modules=("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj",
                                           "model.layers.1.self_attn.v_proj")):
    from slime_ext.engines.local import LoraUpdate

    sd = model.state_dict()
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for m in modules:
        out_f, in_f = sd[f"{m}.weight"].shape
        tensors[f"base_model.model.{m}.lora_A.weight"] = torch.randn(4, in_f, generator=g) * 0.5
        tensors[f"base_model.model.{m}.lora_B.weight"] = torch.randn(out_f, 4, generator=g) * 0.5
    return LoraUpdate(tensors, 4.0)


async def test_frozen_base_rows_ignore_the_adapter_while_policy_rows_use_it(model_dir):
    """The `self` judge's rows: base weights, batched beside adapter rows, never via the prefix cache."""
    eng = LocalEngine(model_dir, dtype="float32", threads=1)  # prefix cache on
    try:
        ps = prompts(3)
        ps[0] = ps[0] * 15  # long enough (300 tokens) for the prefix cache to keep it
        greedy = {"temperature": 0.0, "max_new_tokens": 10}
        before = [await run(eng, p, **greedy) for p in ps]
        assert [t.token_id for t in await run(eng, ps[0], frozen_base=True, **greedy)] == [t.token_id for t in before[0]]
        await eng.swap(random_lora(eng.model, 1), 1)
        # the policy row fills the prefix cache with adapter KV for ps[0] first
        policy = await run(eng, ps[0], **greedy)
        hits = eng.prefix_cache.hits
        assert len(eng.prefix_cache._entries) == 1
        assert [t.token_id for t in policy] != [t.token_id for t in before[0]]
        # frozen-base rows decode in the same batch as policy rows
        outs = await asyncio.gather(run(eng, ps[0], frozen_base=True, **greedy), run(eng, ps[1], **greedy),
                                    run(eng, ps[1], frozen_base=True, **greedy), run(eng, ps[2], frozen_base=True, **greedy))
        for got, want in zip([outs[0], outs[2], outs[3]], [before[0], before[1], before[2]]):
            assert [t.token_id for t in got] == [t.token_id for t in want]
            assert max(abs(a.logprob - b.logprob) for a, b in zip(got, want)) < 1e-4
            assert {t.policy_version for t in got} == {1}  # tagged with the engine's version, computed by the base
        assert [t.token_id for t in outs[1]] == [t.token_id for t in await run(eng, ps[1], **greedy)]
        assert eng.prefix_cache.hits == hits  # the frozen-base row did not reuse the adapter's KV
        # a full-weight update replaces the base: frozen-base requests are refused, the policy still serves
        await eng.swap({"model.norm.weight": torch.ones_like(eng.model.model.norm.weight) * 1.5}, 2)
        with pytest.raises(EngineError, match="frozen_base"):
            await run(eng, ps[0], frozen_base=True)
        assert len(await run(eng, ps[0])) == 12
    finally:
        await eng.close()


async def test_an_adapter_replaces_the_previous_one_even_on_fewer_modules(model_dir):
    """Modules the new adapter does not touch go back to their base weights."""
    ids = prompts(1, 30)[0]
    one = LocalEngine(model_dir, dtype="float32", threads=1)
    fresh = LocalEngine(model_dir, dtype="float32", threads=1)
    try:
        base = await one.score(ids, 10)
        await one.swap(random_lora(one.model, 1), 1)
        small = random_lora(one.model, 2, modules=("model.layers.1.mlp.down_proj",))
        await one.swap(small, 2)
        await fresh.swap(small, 1)
        got, want = await one.score(ids, 10), await fresh.score(ids, 10)
        assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5
        assert max(abs(a - b) for a, b in zip(got, base)) > 1e-2  # the small adapter does change the model
        await one.swap({}, 3)  # an empty full-weight update: the last merged weights become the base
        assert max(abs(a - b) for a, b in zip(await one.score(ids, 10), want)) < 1e-5
    finally:
        await one.close()
        await fresh.close()


async def test_auto_dtype_is_bf16_where_native_and_the_engine_says_why(model_dir, caplog):
    """bfloat16 where the CPU computes it natively (faster; also while training: the trainer re-scores in
    float32), float32 where it would be emulated; the engine logs which and why."""
    assert resolve_dtype("bfloat16")[0] == "bfloat16"
    amx, avx2 = "flags : fpu avx2 avx512f amx_bf16 amx_tile", "flags : fpu avx2 fma"
    assert resolve_dtype("auto", amx, capability="AVX512")[0] == "bfloat16"
    assert resolve_dtype("auto", "flags : avx512_bf16", capability="AVX512")[0] == "bfloat16"
    assert resolve_dtype("auto", avx2, capability="AVX2")[0] == "float32"
    assert "emulated" in resolve_dtype("auto", avx2, capability="AVX2")[1]
    # PyTorch's kernels held to AVX2 (ATEN_CPU_CAPABILITY=avx2, how an AVX2-only CPU is emulated): no bf16 unit
    assert resolve_dtype("auto", amx, capability="AVX2")[0] == "float32"
    assert resolve_dtype("float32", amx)[0] == "float32"
    with caplog.at_level("INFO", logger="slime_ext.engines.local"):
        eng = LocalEngine(model_dir, threads=1)
    try:
        want = resolve_dtype("auto")[0]  # this machine's CPU decides
        assert str(eng.dtype) == f"torch.{want}"
        assert any(f"engine dtype {want} (auto on a CPU" in r.getMessage() for r in caplog.records)
    finally:
        await eng.close()
