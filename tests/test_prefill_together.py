"""New prompts waiting together are prefilled in one left-padded pass, with the same results."""

from __future__ import annotations

import asyncio

import pytest

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.models import resolve_model

PROMPTS = [list(range(3, 3 + n)) for n in (5, 17, 9, 30, 12, 2)]


async def run(engine, ids):
    return [(t.token_id, t.logprob) async for t in engine.generate(ids, SamplingParams(temperature=0, max_new_tokens=6))]


@pytest.fixture
async def engine():
    eng = LocalEngine(resolve_model("tiny"), dtype="float32", threads=1, prefix_cache_tokens=0)
    yield eng
    await eng.close()


async def test_prompts_prefilled_together_match_each_alone(engine):
    alone = [await run(engine, p) for p in PROMPTS]
    assert engine.stats["prefilled_together"] == 0
    together = await asyncio.gather(*(run(engine, p) for p in PROMPTS))
    assert engine.stats["prefilled_together"] >= 2
    for got, want in zip(together, alone):
        assert [t for t, _ in got] == [t for t, _ in want]
        assert max(abs(a - b) for (_, a), (_, b) in zip(got, want)) < 1e-4
