"""Packed bfloat16 weights (engines/packed.py) compute what the module's weights say, through swaps.

Two engines on the same checkpoint, one with packed weights and one without, must agree on the
teacher-forced log-probs and the greedy tokens before any swap, after a LoRA swap, after a second
adapter that leaves out a module (which goes back to its base weights), and after a full-weight
update written in place. A packing left stale by any of these would compute with the old weights.
"""

from __future__ import annotations

import pytest
import torch
from test_engine import random_lora

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine, _read_cpuinfo, native_bf16
from slime_ext.engines.packed import PackedLinears, packing_available
from slime_ext.models import resolve_model

pytestmark = pytest.mark.skipif(
    not (packing_available() and native_bf16(_read_cpuinfo())),
    reason="packed weights are used for bfloat16 on CPUs that compute it natively (AVX-512 BF16 or AMX); "
           "this one does not, so the engine never packs here")

MODULES = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj", "model.layers.1.self_attn.o_proj"]
IDS = list(range(5, 45))


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
        steps = [(random_lora(packed.model, 1, tuple(MODULES)), 1), (random_lora(packed.model, 2, tuple(MODULES[:1])), 2),
                 (full, 3)]
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


def grid_weight(out_f: int, in_f: int, seed: int) -> torch.Tensor:
    """A weight as a Q4_1 GGUF stores it: per group of 32, scale * q + min with q in 0..15, where
    the group's smallest weight is q = 0 and its largest q = 15 (how Q4_1 picks scale and min)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (out_f, in_f // 32, 32), generator=g).float()
    q[..., 0], q[..., 1] = 0, 15
    scale = torch.rand(out_f, in_f // 32, 1, generator=g) * 0.01 + 1e-3
    low = -8 * scale + torch.randn(out_f, in_f // 32, 1, generator=g) * 1e-3
    return (q * scale + low).reshape(out_f, in_f).bfloat16()


def two_linears(b_out: int, b_bias: bool) -> torch.nn.Module:
    """A model of two bf16 linear layers, ``a`` (96 -> 64, no bias) and ``b`` (96 -> ``b_out``), and no output
    layer; the caller sets their weights."""
    model = torch.nn.Module()
    model.a = torch.nn.Linear(96, 64, bias=False).bfloat16()
    model.b = torch.nn.Linear(96, b_out, bias=b_bias).bfloat16()
    model.get_output_embeddings = lambda: None
    return model


def test_one_row_reads_int4_only_while_the_weight_is_the_4bit_checkpoints():
    from slime_ext.engines.packed import pack_int4

    assert pack_int4(grid_weight(64, 96, 0)) is not None
    assert pack_int4((torch.randn(64, 96) * 0.02).bfloat16()) is None  # full precision: never quantized

    model = two_linears(b_out=64, b_bias=False)
    with torch.no_grad():
        model.a.weight.copy_(grid_weight(64, 96, 1))
        model.b.weight.copy_((torch.randn(64, 96) * 0.02).bfloat16())
    packed = PackedLinears(model)
    assert set(packed._int4) == {("a",)}
    x = torch.randn(1, 1, 96).bfloat16()
    orig = model.a.weight.data
    with torch.inference_mode():
        want = torch.nn.functional.linear(x.float(), orig.float())
        assert (model.a(x).float() - want).abs().max().item() < 2e-2 * want.abs().max().item()
        new = grid_weight(64, 96, 2) * 0.5
        model.a.weight.data = new  # a swap re-points the module at another tensor: not read as int4
        assert torch.allclose(model.a(x).float(), torch.nn.functional.linear(x, new).float(), atol=1e-2, rtol=1e-2)
        model.a.weight.data = orig  # back to base: int4 again
        assert (model.a(x).float() - want).abs().max().item() < 2e-2 * want.abs().max().item()
    with torch.no_grad():
        orig.copy_(new)  # an in-place update, which the engine follows with pack(in_place=True): int4 is gone
    packed.pack(["a"], in_place=True)
    assert ("a",) not in packed._int4
    with torch.inference_mode():
        assert torch.allclose(model.a(x).float(), torch.nn.functional.linear(x, new).float(), atol=1e-2, rtol=1e-2)


def test_a_steps_decision_follows_swaps_adapters_and_hooks_at_once():
    """``steps`` decides for every group in one pass what ``int4`` decides per call: a re-pointed weight, a
    dropped packing or a hook sends only that group to its modules, an adapter's term brings it back, and a
    dtype the kernel does not take sends every group; the decision is re-made as soon as any of these changes."""
    model = two_linears(b_out=32, b_bias=True)
    with torch.no_grad():
        model.a.weight.copy_(grid_weight(64, 96, 1))
        model.b.weight.copy_(grid_weight(32, 96, 2))
        model.b.bias.normal_()
    groups = [("a",), ("b",)]
    packed = PackedLinears(model, groups=groups)
    x = torch.randn(1, 96).bfloat16()

    def decided():
        return [s is not None for s in packed.steps(groups, torch.bfloat16)]

    with torch.inference_mode():
        assert decided() == [True, True]
        got = packed.steps(groups, torch.bfloat16)[1](x)  # bias included, in x's dtype
        want = torch.nn.functional.linear(x.float(), model.b.weight.float(), model.b.bias.float())
        assert got.dtype == torch.bfloat16 and (got.float() - want).abs().max().item() < 2e-2 * want.abs().max().item()
        assert packed.steps(groups, torch.float16) == [None, None]
        base = model.a.weight.data
        merged = grid_weight(64, 96, 3) * 0.5
        model.a.weight.data = merged  # a swap re-points a
        assert decided() == [False, True]
        a_t, b_t = torch.randn(96, 4) * 0.1, torch.randn(4, 64) * 0.1
        packed.install_lora(packed.lora_prepared(lambda n: merged if n == "a" else model.b.weight,
                                                 {"a": (a_t.t().contiguous(), b_t.t().contiguous())}))
        assert decided() == [True, True]  # base int4 plus the adapter's term
        with_term = packed.steps(groups, torch.bfloat16)[0](x).float()
        plain = torch.nn.functional.linear(x.float(), base.float()) + x.float() @ a_t @ b_t
        assert (with_term - plain).abs().max().item() < 2e-2 * plain.abs().max().item()
        handle = model.b.register_forward_hook(lambda m, a, o: None)
        assert decided() == [True, False]
        handle.remove()
        assert decided() == [True, True]
        model.a.weight.data = base
        packed.install_lora({})
        assert decided() == [True, True]
        model.a.weight = torch.nn.Parameter(merged, requires_grad=False)  # a new Parameter, not a re-pointed one
        assert decided() == [False, True]
        model.a.weight = torch.nn.Parameter(base, requires_grad=False)
        assert decided() == [True, True]
        packed.pack(["b"], in_place=True)  # b's weights changed in place: its packing is gone
        assert decided() == [True, False]


@torch.inference_mode()
def test_lean_decode_reads_grouped_int4_weights_and_still_runs_hooks():
    """One row of the lean decode step computes q/k/v and gate/up from one int4 packing each,
    and equals transformers' forward within bfloat16 rounding; a hooked layer is called instead."""
    from transformers import AutoModelForCausalLM

    from slime_ext.engines.decode import lean_decoder
    from slime_ext.engines.local import _growing_cache

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for i, m in enumerate(model.modules()):
            if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings():
                m.weight.copy_(grid_weight(*m.weight.shape, seed=10 + i) * 4)
    lean = lean_decoder(model)
    packed = PackedLinears(model, groups=lean.groups)
    assert set(lean.groups) <= set(packed._int4)  # every group is on the 4-bit grid
    assert any(len(g) == 3 for g in lean.groups) and any(len(g) == 2 for g in lean.groups)
    ids = list(range(3, 20))
    full, mine = _growing_cache(model.config), _growing_cache(model.config)
    for cache in (full, mine):
        model.model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    calls = []  # each step's decision per group: its int4 product, or None (its modules are called)
    lean.int4_steps = lambda groups, dtype: calls.extend(r := packed.steps(groups, dtype)) or r
    mask = torch.ones(1, len(ids) + 1, dtype=torch.long)
    last, pos = torch.tensor([[7]]), torch.tensor([[len(ids)]])
    want = model.model(input_ids=last, attention_mask=mask, position_ids=pos, cache=full, use_cache=True).last_hidden_state[:, -1]
    got = lean(last, pos, mask, mine)
    assert calls and all(c is not None for c in calls)  # int4 computed every group
    assert (got.float() - want.float()).abs().max().item() < 0.05 * want.float().abs().max().item()

    seen = []
    q_proj = model.model.layers[0].self_attn.q_proj
    handle = q_proj.register_forward_hook(lambda m, a, o: seen.append(o.shape))
    calls.clear()
    mask = torch.ones(1, len(ids) + 2, dtype=torch.long)
    lean(torch.tensor([[8]]), pos + 1, mask, mine)
    handle.remove()
    assert seen == [torch.Size([1, q_proj.out_features])]  # the hooked layer was called as a module
    assert calls.count(None) == 1  # only its group fell back


@torch.inference_mode()
def test_an_in_place_bias_update_is_not_read_from_the_int4_packing():
    """The int4 packing holds its own copy of a biased layer's bias; a full-weight update that
    changes only that bias (in place) must drop it, as the engine does for every updated parameter."""
    from slime_ext.engines.local import _module

    model = torch.nn.Module()
    model.b = torch.nn.Linear(96, 64, bias=True).bfloat16()
    model.get_output_embeddings = lambda: None
    model.b.weight.copy_(grid_weight(64, 96, 3))
    packed = PackedLinears(model)
    assert ("b",) in packed._int4
    x = torch.randn(1, 96).bfloat16()
    model.b.bias.add_(5.0)  # an in-place update of the bias alone
    packed.pack(map(_module, ["b.bias"]), in_place=True)
    want = torch.nn.functional.linear(x.float(), model.b.weight.float(), model.b.bias.float())
    assert (model.b(x).float() - want).abs().max().item() < 0.1  # the new bias, not the packed copy


async def test_a_lora_version_keeps_one_row_on_the_int4_path(tmp_path):
    """After a LoRA swap the merged weights are off the 4-bit grid; one row still reads the base's int4
    weights and adds the adapter's low-rank term, and decodes what an unpacked engine with the merged
    weights decodes. A second adapter that leaves a module out sends it back to its base, still int4."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.bfloat16)
    with torch.no_grad():
        for i, m in enumerate(model.modules()):
            if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings():
                m.weight.copy_(grid_weight(*m.weight.shape, seed=10 + i) * 4)
    model.save_pretrained(tmp_path / "grid")
    AutoTokenizer.from_pretrained(resolve_model("tiny")).save_pretrained(tmp_path / "grid")
    packed = LocalEngine(tmp_path / "grid", dtype="bfloat16", threads=1, prefix_cache_tokens=0)
    plain = LocalEngine(tmp_path / "grid", dtype="bfloat16", threads=1, prefix_cache_tokens=0, pack_weights=False)
    calls = []  # each step's decision per group: its int4 product, or None (its modules are called)
    steps = packed._packed.steps
    packed._lean.int4_steps = lambda groups, dtype: calls.extend(r := steps(groups, dtype)) or r
    try:
        assert set(packed._lean.groups) <= set(packed._packed._int4)  # the checkpoint is on the grid
        sampling = SamplingParams(temperature=0, max_new_tokens=8)
        before = [t.logprob async for t in packed.generate(IDS[:12], sampling)]
        # q_proj alone of its q/k/v group, and a whole single layer
        for version, modules in enumerate([MODULES, MODULES[:1]], start=1):
            update = random_lora(packed.model, version, tuple(modules))
            for eng in (packed, plain):
                await eng.swap(update, version)
            calls.clear()
            got = [(t.token_id, t.logprob) async for t in packed.generate(IDS[:12], sampling)]
            want = [(t.token_id, t.logprob) async for t in plain.generate(IDS[:12], sampling)]
            assert calls and all(c is not None for c in calls), version  # every group, every step: int4
            assert [t for t, _ in got] == [t for t, _ in want]
            assert max(abs(a - b) for (_, a), (_, b) in zip(got, want)) < 5e-2
            assert max(abs(a - b) for (_, a), b in zip(got, before)) > 0.1  # the adapter changed the answer
        # without the term, the adapted group (layer 0's q/k/v) is computed from the merged weights instead
        packed._packed.install_lora({})
        calls.clear()
        fallback = [(t.token_id, t.logprob) async for t in packed.generate(IDS[:12], sampling)]
        assert calls[0] is None and all(c is not None for c in calls[1:4])
        assert [t for t, _ in fallback] == [t for t, _ in want]
    finally:
        await packed.close()
        await plain.close()
