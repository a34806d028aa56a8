"""One decode step of a Llama-family model, without transformers' model-level forward.

Invariant: ``LeanDecode(...)`` returns what ``model.model(input_ids, attention_mask, position_ids,
cache)`` returns as ``last_hidden_state[:, -1]`` for one new token per row, and appends the same
keys and values to the cache, up to summation order. It reads the modules' weights at every step,
so weight swaps act on it as on the full forward. The linear layers are called as modules (their
forward hooks, the frozen-base rows, run) unless, for one row, ``int4_steps`` gives a group's int4
product, which it does only for a group with no hooks whose weights are the packed ones
(engines/packed.py, decided once per step for all groups). Norms, rotary embedding and attention
are computed here from the modules' parameters: the same values in fewer ops (one RMS norm call,
one rotation for queries and keys together as one roll, grouped-query attention without copying keys).

Why (docs/engine.md, 2 cores, SmolLM2 bf16, 150 cached tokens): dropping transformers' model-level
plumbing took one stream from 56 to 60 tok/s; these fewer ops and the grouped int4 reads took the
body of a step from 12.9 / 34.7 / 44.4 to 11.3 / 31.5 / 41.9 ms at 1 / 8 / 16 rows.

Prefill and scoring keep transformers' forward. Architectures this does not know (anything but
Llama- and Qwen2-style decoder layers without sliding windows) get ``None`` from ``lean_decoder``
and are decoded by transformers' forward as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

SUPPORTED = ("LlamaModel", "Qwen2Model")

# for one row: each group's product (its int4 weights), or None where the modules must be called (packed.py's steps)
Int4Steps = Callable[[Sequence[tuple[str, ...]], torch.dtype], "list[Callable[[torch.Tensor], torch.Tensor] | None]"]


def lean_decoder(model: torch.nn.Module) -> LeanDecode | None:
    """A lean decode step for ``model`` (a ``*ForCausalLM``), or None when its layers are not the
    plain pre-norm attention + SiLU-gated MLP this handles."""
    inner = getattr(model, "model", None)
    config = getattr(model, "config", None)
    if type(inner).__name__ not in SUPPORTED or config is None:
        return None
    if getattr(config, "use_sliding_window", False) or getattr(config, "hidden_act", "silu") != "silu":
        return None
    layer = inner.layers[0]
    needed = [(layer, "input_layernorm"), (layer, "post_attention_layernorm"), (layer, "self_attn"), (layer, "mlp"),
              (layer.self_attn, "q_proj"), (layer.self_attn, "k_proj"), (layer.self_attn, "v_proj"),
              (layer.self_attn, "o_proj"), (layer.mlp, "gate_proj"), (layer.mlp, "up_proj"), (layer.mlp, "down_proj"),
              (layer.input_layernorm, "variance_epsilon"), (inner.norm, "variance_epsilon"),
              (inner, "rotary_emb"), (inner, "norm"), (inner, "embed_tokens")]
    if not all(hasattr(obj, name) for obj, name in needed) or hasattr(layer.self_attn, "q_norm"):
        return None
    return LeanDecode(model)


@dataclass(frozen=True)
class Linears:
    """Linear layers that read the same input, their outputs concatenated (q/k/v, gate/up)."""

    names: tuple[str, ...]  # module names in the model, as ``named_modules`` gives them
    modules: tuple[torch.nn.Module, ...]


@dataclass(frozen=True)
class _Layer:
    layer: torch.nn.Module
    qkv: Linears
    o: Linears
    gate_up: Linears
    down: Linears


class LeanDecode:
    """The decode step of a supported model (see ``lean_decoder``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.inner = inner = model.model
        name_of = {id(m): n for n, m in model.named_modules()}

        def linears(*modules: torch.nn.Module) -> Linears:
            return Linears(tuple(name_of[id(m)] for m in modules), modules)

        self.layers = [_Layer(layer, linears(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                              linears(layer.self_attn.o_proj), linears(layer.mlp.gate_proj, layer.mlp.up_proj),
                              linears(layer.mlp.down_proj)) for layer in inner.layers]
        attn = inner.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.q_heads = attn.q_proj.out_features // self.head_dim
        self.kv_heads = attn.k_proj.out_features // self.head_dim
        self.intermediate = inner.layers[0].mlp.gate_proj.out_features
        # the module names of each group of linear layers this step computes together, four per layer
        self.groups = [lin.names for layer in self.layers
                       for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        self.int4_steps: Int4Steps | None = None  # set by the engine where one row can read int4 weights
        embed = inner.embed_tokens.weight
        self.rotation_sign = rotation_sign(self.head_dim, embed.dtype).to(embed.device)  # see _rotate

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        """``input_ids`` and ``positions`` ``[B, 1]``; ``mask`` ``[B, L]`` (1: a real token, the new
        one included); ``cache`` the batch's KV cache, one layer per decoder layer. Returns the
        final normed hidden state ``[B, H]``."""
        inner, d, nq, nkv = self.inner, self.head_dim, self.q_heads, self.kv_heads
        b = input_ids.shape[0]
        x = inner.embed_tokens(input_ids[:, 0])  # [B, H]
        cos, sin = (t.view(b, 1, 1, d) for t in inner.rotary_emb(x, positions))
        sin = sin * self.rotation_sign  # the sign of rotate_half, so that a rotation is one roll
        attend = None if bool(mask.all()) else mask.bool()[:, None, None, :]  # [B, 1, 1, L]; None: no padding
        one_row = self.int4_steps is not None and b == 1
        steps = self.int4_steps(self.groups, x.dtype) if one_row else [None] * len(self.groups)
        for i, (p, kv) in enumerate(zip(self.layers, cache.layers)):
            qkv_step, o_step, gate_up_step, down_step = steps[4 * i:4 * i + 4]
            qkv = self._project(p.qkv, qkv_step, _rms_norm(p.layer.input_layernorm, x)).view(b, nq + 2 * nkv, 1, d)
            qk = _rotate(qkv[:, :nq + nkv], cos, sin)
            keys, values = kv.update(qk[:, nq:], qkv[:, nq + nkv:])
            # one query token: its heads sharing a key head are that head's query rows (no repeated keys)
            out = F.scaled_dot_product_attention(qk[:, :nq].reshape(b, nkv, nq // nkv, d), keys, values,
                                                 attn_mask=attend, scale=p.layer.self_attn.scaling)
            x = x + self._project(p.o, o_step, out.reshape(b, nq * d))
            gate_up = self._project(p.gate_up, gate_up_step, _rms_norm(p.layer.post_attention_layernorm, x))
            x = x + self._project(p.down, down_step,
                                  F.silu(gate_up[:, :self.intermediate]) * gate_up[:, self.intermediate:])
        return _rms_norm(inner.norm, x)

    @staticmethod
    def _project(lin: Linears, step: Callable[[torch.Tensor], torch.Tensor] | None, x: torch.Tensor) -> torch.Tensor:
        if step is not None:
            return step(x)
        if len(lin.modules) == 1:
            return lin.modules[0](x)
        return torch.cat([m(x) for m in lin.modules], dim=-1)


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' Llama/Qwen2 RMS norm (float32 statistics, weight applied in the input dtype):
    ``F.rms_norm`` computes a bf16 row's statistics in float32 and rounds once, as transformers does after
    its explicit upcast (the same values, two ops fewer)."""
    return norm.weight * F.rms_norm(x, x.shape[-1:], None, norm.variance_epsilon)


def rotation_sign(head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """-1 over the first half of a head, +1 over the second (``_rotate``)."""
    half = head_dim // 2
    return torch.cat([torch.full((half,), -1.0, dtype=dtype), torch.ones(head_dim - half, dtype=dtype)])


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[B, heads, 1, d]``, as transformers' ``apply_rotary_pos_emb``: its
    ``rotate_half(x)`` is ``x`` rolled by half a head with the first half negated, a sign ``signed_sin``
    carries (``rotation_sign``); the same values in four ops instead of seven."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
