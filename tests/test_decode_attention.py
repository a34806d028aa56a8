"""The engine's one-token bfloat16 attention equals transformers' SDPA attention."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from slime_ext.engines.attention import attention


class Layer(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
def test_one_token_attention_matches_sdpa(dtype, masked):
    g = torch.Generator().manual_seed(0)
    b, kv, group, length, d = 4, 3, 3, 37, 16
    q = torch.randn(b, kv * group, 1, d, generator=g).to(dtype)
    buf_k, buf_v = (torch.randn(b, kv, length + 20, d, generator=g).to(dtype) for _ in range(2))
    k, v = buf_k[:, :, :length], buf_v[:, :, :length]  # the cache's views into its buffers
    mask = None
    if masked:
        mask = torch.ones(b, 1, 1, length, dtype=torch.bool)
        mask[1, :, :, :9] = False  # left padding of a shorter row
        mask[3, :, :, :30] = False
    got, _ = attention(Layer(), q, k, v, mask, scaling=0.25)
    want, _ = sdpa_attention_forward(Layer(), q, k, v, mask, scaling=0.25)
    assert got.shape == want.shape == (b, 1, kv * group, d)
    tol = 2e-2 if dtype == torch.bfloat16 else 0.0  # float32 goes to SDPA itself
    assert (got.float() - want.float()).abs().max().item() <= tol
    if masked:  # padding is never attended: changing it changes nothing
        buf_v[3, :, :30] = 1e3
        again, _ = attention(Layer(), q, k, v, mask, scaling=0.25)
        assert torch.equal(again, got)
