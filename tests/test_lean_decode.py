"""The lean decode step equals transformers' forward on a left-padded batch with a KV cache."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from slime_ext.engines.decode import lean_decoder
from slime_ext.engines.local import _growing_cache, _left_pad
from slime_ext.models import resolve_model


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request):
    """The built-in tiny Llama, and a tiny Qwen2 (biased q/k/v projections) with random weights."""
    if request.param == "llama":
        return AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32).eval()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # random init leaves the biases at zero
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def padded_batch(model, prompts: list[list[int]]):
    """Each prompt prefilled by transformers into its own cache, then left-padded into one batch."""
    caches = []
    for ids in prompts:
        c = _growing_cache(model.config)
        model.model(input_ids=torch.tensor([ids]), cache=c, use_cache=True)
        caches.append(c)
    width = max(map(len, prompts))
    batch = _growing_cache(model.config)
    for i, layer in enumerate(batch.layers):
        layer.lazy_initialization(caches[0].layers[i].keys, caches[0].layers[i].values)
        layer.set_kv(torch.cat([_left_pad(c.layers[i].keys, width) for c in caches]),
                     torch.cat([_left_pad(c.layers[i].values, width) for c in caches]))
    mask = torch.cat([_left_pad(torch.ones(1, len(p), dtype=torch.long), width, 1) for p in prompts])
    return batch, mask


@pytest.mark.parametrize("prompts", [[list(range(3, 20)), list(range(30, 36)), list(range(50, 61))],  # padded
                                     [list(range(3, 20))]])  # one row, no padding
@torch.inference_mode()
def test_lean_steps_equal_the_full_forward(model, prompts):
    lean = lean_decoder(model)
    assert lean is not None  # both are supported architectures
    n = len(prompts)
    full_cache, mask = padded_batch(model, prompts)
    lean_cache, _ = padded_batch(model, prompts)
    last = torch.tensor([[7 + i] for i in range(n)])
    pos = torch.tensor([[len(p)] for p in prompts])
    for step in range(4):
        mask = torch.cat([mask, torch.ones(n, 1, dtype=torch.long)], dim=1)
        want = model.model(input_ids=last, attention_mask=mask, position_ids=pos, cache=full_cache,
                           use_cache=True).last_hidden_state[:, -1]
        got = lean(last, pos, mask, lean_cache)
        assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4, step
        for a, b in zip(full_cache.layers, lean_cache.layers):
            assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)
        last, pos = want.argmax(-1, keepdim=True) % 100 + 3, pos + 1


def test_unknown_architectures_keep_the_full_forward(model):
    class Other(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Linear(2, 2)
            self.config = model.config

    assert lean_decoder(Other()) is None


@torch.inference_mode()
def test_the_norm_and_rotation_give_transformers_values_exactly_in_bfloat16():
    """The lean step's RMS norm and rotary embedding, in fewer ops, are transformers' own values bit for bit
    in bfloat16 (not only within rounding): a one-row decode then differs from the full forward only where
    the attention and the linear layers sum in another order."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    from slime_ext.engines.decode import _rms_norm, _rotate, rotation_sign

    torch.manual_seed(0)
    norm = LlamaRMSNorm(96, eps=1e-5).bfloat16()
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
    x = (torch.randn(3, 96) * 4).bfloat16()
    assert torch.equal(_rms_norm(norm, x), norm(x))
    q, k = (torch.randn(1, h, 1, 64).bfloat16() for h in (6, 2))
    angles = torch.rand(1, 1, 1, 32) * 50
    cos, sin = (torch.cat([f(angles)] * 2, -1).bfloat16() for f in (torch.cos, torch.sin))
    want_q, want_k = apply_rotary_pos_emb(q, k, cos[0], sin[0], unsqueeze_dim=0)
    signed = sin * rotation_sign(64, torch.bfloat16)
    assert torch.equal(_rotate(q, cos, signed), want_q) and torch.equal(_rotate(k, cos, signed), want_k)
