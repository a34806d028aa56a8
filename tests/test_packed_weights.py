"""Packed bfloat16 weights (engines/packed.py) compute what the module's weights say, through swaps.

Two engines on the same checkpoint, one with packed weights and one without, must agree on the
teacher-forced log-probs and the greedy tokens before any swap, after a LoRA swap, after a second
adapter that leaves out a module (which goes back to its base weights), and after a full-weight
update written in place. A packing left stale by any of these would compute with the old weights.
"""

from __future__ import annotations

import pytest
import torch

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine, LoraUpdate, _read_cpuinfo, native_bf16
from slime_ext.engines.packed import PackedLinears, packing_available
from slime_ext.models import resolve_model

pytestmark = pytest.mark.skipif(
    not (packing_available() and native_bf16(_read_cpuinfo())),
    reason="packed weights are used for bfloat16 on CPUs that compute it natively (AVX-512 BF16 or AMX); "
           "this one does not, so the engine never packs here")

MODULES = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj", "model.layers.1.self_attn.o_proj"]
IDS = list(range(5, 45))


def adapter(engine: LocalEngine, modules: list[str], seed: int) -> LoraUpdate:
    sd = engine.model.state_dict()
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for m in modules:
        out_f, in_f = sd[f"{m}.weight"].shape
        tensors[f"{m}.lora_A.weight"] = torch.randn(4, in_f, generator=g) * 0.3
        tensors[f"{m}.lora_B.weight"] = torch.randn(out_f, 4, generator=g) * 0.3
    return LoraUpdate(tensors, 2.0)


async def outputs(engine: LocalEngine) -> tuple[list[float], list[int]]:
    scores = await engine.score(IDS, 10)
    tokens = [t.token_id async for t in engine.generate(IDS[:12], SamplingParams(temperature=0, max_new_tokens=8))]
    return scores, tokens


async def test_packed_engine_agrees_with_the_plain_one_through_swaps():
    model_dir = resolve_model("tiny")
    packed = LocalEngine(model_dir, dtype="bfloat16", threads=1, prefix_cache_tokens=0)
    plain = LocalEngine(model_dir, dtype="bfloat16", threads=1, prefix_cache_tokens=0, pack_weights=False)
    try:
        assert isinstance(packed._packed, PackedLinears) and plain._packed is None
        full = {f"{m}.weight": (w.float() + torch.randn(w.shape, generator=torch.Generator().manual_seed(5)) * 0.2)
                for m in MODULES[:2] for w in [packed.model.state_dict()[f"{m}.weight"]]}
        steps = [(adapter(packed, MODULES, 1), 1), (adapter(packed, MODULES[:1], 2), 2), (full, 3)]
        seen = [await outputs(packed)]
        assert _close(await outputs(plain), seen[0])
        for update, version in steps:
            for eng in (packed, plain):
                await eng.swap(update, version)
            got, want = await outputs(packed), await outputs(plain)
            assert _close(got, want), (version, got, want)
            assert packed._packed.unpacked() == []  # every layer still computes packed
            seen.append(got)
        assert all(seen[i][0] != seen[i + 1][0] for i in range(len(seen) - 1))  # each swap changed the outputs
    finally:
        await packed.close()
        await plain.close()


def _close(a: tuple[list[float], list[int]], b: tuple[list[float], list[int]]) -> bool:
    return a[1] == b[1] and max(abs(x - y) for x, y in zip(a[0], b[0])) < 1e-3


def test_head_logits_keep_the_distribution_exact_where_its_mass_is():
    from slime_ext.engines.packed import EXACT_TOP, head_logits, pack_weight

    g = torch.Generator().manual_seed(0)
    head = (torch.randn(5000, 64, generator=g) * 0.5).bfloat16()
    hidden = (torch.randn(6, 64, generator=g) * 2).bfloat16()
    exact = hidden.float() @ head.float().T
    got = head_logits(hidden, pack_weight(head), head.float())
    top = exact.topk(EXACT_TOP // 2, dim=-1).indices  # a margin: rounding may reorder the last few of the top
    assert torch.allclose(got.gather(1, top), exact.gather(1, top), atol=1e-5)  # the top ones: float32
    rounded = (got - exact).abs().max().item()
    assert 0 < rounded < 0.1  # the rest: bfloat16 rounding of the logits, nothing worse
    logp_err = (torch.log_softmax(got, -1) - torch.log_softmax(exact, -1)).gather(1, top).abs().max().item()
    assert logp_err < 1e-3, logp_err  # the log-normalizer barely moves
