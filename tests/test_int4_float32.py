"""A float32 engine on a CPU without native bf16 (``--dtype auto`` there) reads a 4-bit checkpoint's
int4 weights for one row, and only for one row; an engine asked for float32 never does.

The CPU kind is emulated by making ``native_bf16`` say no, so this runs the same on an AVX2-only CPU
(where it is what ``auto`` does) and on one with AMX. The int4 kernel takes bf16 activations: one row's
log-probs are then as close as a bf16 engine's to the float32 ones (bound 5e-2, as for the bf16 int4
path in test_packed_weights.py), batches stay exact float32.
"""

from __future__ import annotations

import pytest
import torch
from test_engine import random_lora
from test_packed_weights import IDS, MODULES, grid_weight

from slime_ext.engines import local
from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.engines.packed import PackedLinears, packing_available
from slime_ext.models import resolve_model

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN / int4 CPU kernels")


@pytest.fixture(scope="module")
def grid_model(tmp_path_factory):
    """The tiny model with every linear layer on a Q4_1 grid, saved in float32 (a 4-bit GGUF's values)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("grid")
    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    with torch.no_grad():
        for i, m in enumerate(model.modules()):
            if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings():
                m.weight.copy_(grid_weight(*m.weight.shape, seed=10 + i).float() * 4)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(resolve_model("tiny")).save_pretrained(out)
    return out


async def test_auto_float32_reads_int4_for_one_row_through_lora_swaps(grid_model, monkeypatch):
    monkeypatch.setattr(local, "native_bf16", lambda *a, **k: False)  # an AVX2-only CPU
    auto = LocalEngine(grid_model, dtype="auto", threads=1, prefix_cache_tokens=0)
    exact = LocalEngine(grid_model, dtype="float32", threads=1, prefix_cache_tokens=0)
    calls = []  # each step's decision per group: its int4 product, or None (its modules are called)
    steps = auto._packed.steps
    auto._lean.int4_steps = lambda groups, dtype: calls.extend(r := steps(groups, dtype)) or r
    try:
        assert auto.dtype == exact.dtype == torch.float32
        assert isinstance(auto._packed, PackedLinears) and not auto._packed.bf16 and exact._packed is None
        assert auto._packed._packs == {}  # nothing packed for oneDNN: float32 layers compute as before
        sampling = SamplingParams(temperature=0, max_new_tokens=8)
        for version, modules in enumerate([(), MODULES, MODULES[:1]]):
            if version:  # a LoRA version: one row keeps int4, plus the adapter's term in float32
                update = random_lora(auto.model, version, tuple(modules))
                for eng in (auto, exact):
                    await eng.swap(update, version)
            calls.clear()
            got = [(t.token_id, t.logprob) async for t in auto.generate(IDS[:12], sampling)]
            want = [(t.token_id, t.logprob) async for t in exact.generate(IDS[:12], sampling)]
            assert calls and all(c is not None for c in calls), version
            row = torch.ones(1, auto.model.config.hidden_size)
            assert calls[0](row).dtype == torch.float32  # a float32 row in, a float32 row out
            assert [t for t, _ in got] == [t for t, _ in want], version
            gap = max(abs(a - b) for (_, a), (_, b) in zip(got, want))
            assert 0 < gap < 5e-2, (version, gap)  # bf16 activations: close, not float32-exact
        # more than one row (scoring, prefill, batches) computes the float32 layers: the float32 numbers
        assert await auto.score(IDS, 10) == pytest.approx(await exact.score(IDS, 10), abs=1e-5)
        assert auto._packed.int4(auto._lean.groups[0], torch.zeros(2, auto.model.config.hidden_size)) is None
    finally:
        await auto.close()
        await exact.close()


async def test_auto_float32_without_a_4bit_checkpoint_serves_plain_float32(monkeypatch):
    monkeypatch.setattr(local, "native_bf16", lambda *a, **k: False)
    eng = LocalEngine(resolve_model("tiny"), dtype="auto", threads=1)
    try:
        assert eng.dtype == torch.float32 and eng._packed is None  # random weights: no int4, no wrappers
        assert not any("forward" in m.__dict__ for m in eng.model.modules())  # every layer's own forward
    finally:
        await eng.close()
