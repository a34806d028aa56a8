"""The embedded engine's attention: transformers' SDPA, except one bfloat16 query token per row.

Invariant: the output equals ``sdpa_attention_forward``'s (the same masks, the same layout
``[batch, q_len, heads, head_dim]``) up to bfloat16 rounding; only the kernel differs. A decode
step in bfloat16 with a padding mask sent PyTorch's CPU SDPA to a path that cost 0.86 ms per layer
for 16 rows of ~250 positions; two grouped matmuls and a float32 softmax cost 0.44 ms.
Everything else (prefill, float32, scoring) goes to SDPA unchanged.
"""

from __future__ import annotations

import torch

NAME = "openclaw_sdpa"  # the attn_implementation the engine asks transformers for


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query [b, heads, q, d]``, ``key``/``value``
    ``[b, kv_heads, L, d]``, a boolean (True: attend) or additive mask ``[b, 1, q, L]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] != 1 or query.dtype != torch.bfloat16 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    b, heads, _, d = query.shape
    kv_heads = key.shape[1]
    q = query.reshape(b, kv_heads, heads // kv_heads, d)  # the query heads that share each key head
    scores = (q @ key.transpose(-1, -2)).float() * (scaling if scaling is not None else d ** -0.5)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, :]  # [b, 1, 1, L]: the one query row
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    out = torch.softmax(scores, dim=-1).to(value.dtype) @ value  # [b, kv_heads, group, d]
    return out.reshape(b, 1, heads, d), None


def register() -> str:
    """Make ``NAME`` an attention implementation transformers knows (with SDPA's masks); returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
