"""The embedded engine's linear layers with weights pre-packed for oneDNN, on the CPU.

Invariant: a packed layer computes ``F.linear(x, weight, bias)`` of the weight tensor its module
holds now, up to the kernel's summation order. A packing is made for one weight tensor: when a
swap re-points the module at another tensor, the layer computes with ``F.linear`` until it is
packed again (``pack``), and an in-place change of a weight must be followed by ``pack``.

Why (measured on 2 cores, SmolLM2-135M's 211 layers per decode step, docs/engine.md): oneDNN
reorders a plain weight into its blocked layout at every call: packed, the model body's bfloat16
decode step takes 24.4 / 26.0 / 28.7 ms at 1 / 8 / 16 rows against 30.4 / 32.3 / 34.6 unpacked.
Only bfloat16 is packed: MKL serves float32 as fast (27.2 / 42.3 / 49.6 ms packed against 26.9 / 42.1 /
50.5). Forward hooks (the ``self`` judge's frozen-base rows) still run:
the module is called as before, only its ``forward`` is replaced.

A float32 model (``bf16=False``: a CPU without native bf16, where ``--dtype auto`` is float32) gets no
packings, only the one-row int4 path of a 4-bit checkpoint: its row is rounded to bf16 for the int4
kernel (the one vectorized there) and the result read back as float32. One stream then reads 4-bit
weights instead of float32 ones (8x fewer bytes per step) at bf16's precision; batches and prefill stay
float32.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Sequence

import torch


def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed linear (x86 CPU builds have)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


EXACT_TOP = 32  # logits recomputed in float32 per row: the ones that carry the distribution's mass


def head_logits(hidden: torch.Tensor, packed_head: Any, head_fp32: torch.Tensor, exact_top: int = EXACT_TOP) -> torch.Tensor:
    """float32 logits ``[B, V]`` of bfloat16 ``hidden`` ``[B, H]``: all from the packed bfloat16
    output layer, then the ``exact_top`` largest of each row recomputed with the float32 copy.

    The packed layer rounds each logit to bfloat16 (about 0.03 at a logit of 10); recomputing the
    top ones makes the log-normalizer exact up to the mass outside them times that rounding. The
    float32 layer alone read 113 MB per step for SmolLM2: 15-23% of a decode step."""
    logits = torch.ops.mkldnn._linear_pointwise(hidden, packed_head, None, "none", [], "").float()
    top = logits.topk(min(exact_top, logits.shape[-1]), dim=-1).indices  # [B, k]
    exact = torch.einsum("bh,bkh->bk", hidden.float(), head_fp32[top])
    return logits.scatter_(1, top, exact)


Q4_GROUP = 32  # weights per scale and zero point, as in GGUF's Q4_0 / Q4_1


def pack_int4(weight: torch.Tensor) -> tuple[Any, torch.Tensor] | None:
    """A bfloat16 ``[out, in]`` weight as int4 with a bf16 scale and zero point per group of 32, for
    ``aten::_weight_int4pack_mm_for_cpu``; None unless the weight already lies on such a grid (a
    checkpoint converted from a 4-bit GGUF, like SmolLM2's): within 1/128 of each group's range, i.e.
    bf16 rounding of the grid, never a real quantization of a full-precision weight."""
    out_f, in_f = weight.shape
    if in_f % Q4_GROUP or out_f % 8:
        return None
    w = weight.detach().float().reshape(out_f, in_f // Q4_GROUP, Q4_GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = (hi - lo) / 15
    q = ((w - lo) / scale.clamp_min(1e-12)).round().clamp(0, 15)
    if ((q * scale + lo - w).abs() > (hi - lo) / 128 + 1e-12).any():
        return None
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).reshape(out_f, in_f), 1)
    # the kernel computes (q - 8) * scale + zero
    scales_zeros = torch.stack([scale.reshape(out_f, -1).t(), (lo + 8 * scale).reshape(out_f, -1).t()], dim=-1)
    return packed, scales_zeros.contiguous().to(torch.bfloat16)


def pack_weight(weight: torch.Tensor) -> Any:
    """oneDNN's blocked layout of a ``[out, in]`` weight."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


class PackedLinears:
    """Packs the bfloat16 linear layers of ``model`` (not its output layer, see ``head_logits``) and
    routes their forward through the packed weights.

    Where the checkpoint is 4-bit, one row (a single stream's decode step) reads int4 weights: of
    each of ``groups`` (module names whose outputs a caller concatenates, engines/decode.py), and of
    each layer in no group on its own. A trained LoRA version keeps that path: its merged weights are
    off the 4-bit grid, so one row reads the base's int4 weights and adds the adapter's low-rank term
    ``x A^T (s B)^T`` (``lora_prepared`` / ``install_lora``), instead of the merged weights in bf16.
    With ``bf16=False`` (a float32 model) nothing is packed for oneDNN: only that int4 path is served."""

    def __init__(self, model: torch.nn.Module, groups: Sequence[tuple[str, ...]] = (), bf16: bool = True) -> None:
        self.bf16 = bf16  # oneDNN packings of the bf16 layers; False: a float32 model's one-row int4 path only
        head = model.get_output_embeddings()
        self.modules = {name: m for name, m in model.named_modules()
                        if isinstance(m, torch.nn.Linear) and m is not head}
        grouped = {n for g in groups for n in g}
        singles = [(n,) for n in self.modules if n not in grouped]
        self._int4 = {g: q for g in [*groups, *singles] if (q := self._pack_int4(g)) is not None}
        self._packs: dict[str, tuple[int, Any]] = {}  # module name -> (weight data_ptr, packed weight)
        self._lora: dict[tuple[str, ...], _Int4Lora] = {}  # int4 group -> the served adapter's term on it
        # what ``steps`` decided, kept while the layers hold the same tensors and nothing above changed
        self._linears = list(self.modules.values())
        self._generation = 0  # bumped when _int4 or _lora change
        self._steps: tuple[Any, list[Int4Step | None]] | None = None
        self.pack(self.modules)
        # a float32 model's layers compute as before unless one row may read them as int4
        int4_names = {n for g in self._int4 for n in g}
        for name, module in self.modules.items():
            if bf16 or name in int4_names:
                module.forward = self._forward_of(name, module)

    def _pack_int4(self, group: tuple[str, ...]) -> _Int4Group | None:
        mods = tuple(self.modules[n] for n in group)
        q = pack_int4(torch.cat([m.weight for m in mods]))
        if q is None:
            return None
        bias = None if all(m.bias is None for m in mods) else torch.cat(
            [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in mods])
        return _Int4Group(mods, _tensors_of(mods), *q, bias)

    @property
    def has_int4(self) -> bool:
        """Whether any layer lies on the 4-bit grid (a checkpoint converted from a 4-bit GGUF)."""
        return bool(self._int4)

    def int4(self, group: tuple[str, ...], x: torch.Tensor) -> torch.Tensor | None:
        """The group's layers' outputs for ``x``, concatenated, from their int4 weights, in ``x``'s dtype;
        None where that does not hold: ``x`` is not one bfloat16 or float32 row, a layer holds another
        weight tensor than the packed one, or has forward hooks (the caller must then call the modules)."""
        if x.dtype not in _INT4_INPUTS or x.numel() != x.shape[-1]:
            return None
        step = self._step(group)
        return None if step is None or step.hooked() else step(x)

    def steps(self, groups: Sequence[tuple[str, ...]], dtype: torch.dtype) -> list[Int4Step | None]:
        """``int4``'s decision for each of ``groups`` at once, for one decode step of one row in ``dtype``: the
        group's ``Int4Step``, or None where its modules must be called. One pass over the layers reads which
        tensors they hold and whether any has hooks; the decision is kept while neither changes, nor the int4
        packings, nor the served adapter. Per group and call, those checks cost about 2 ms of a 14 ms step
        (SmolLM2, 120 groups). The list returned is shared: read it, do not change it."""
        if dtype not in _INT4_INPUTS:
            return [None] * len(groups)
        tensors = [p.data_ptr() for m in self._linears for p in m._parameters.values() if p is not None]
        hooked = any(m._forward_hooks or m._forward_pre_hooks for m in self._linears)
        key = (tuple(groups), tensors, self._generation)
        if self._steps is None or self._steps[0] != key:
            self._steps = (key, [self._step(g) for g in groups])
        steps = self._steps[1]
        return [None if s is None or s.hooked() else s for s in steps] if hooked else steps

    def _step(self, group: tuple[str, ...]) -> Int4Step | None:
        entry = self._int4.get(group)
        if entry is None:
            return None
        tensors, lora = _tensors_of(entry.modules), None
        if tensors != entry.tensors:  # a swap re-pointed a layer: int4 only for a LoRA version on this base
            lora = self._lora.get(group)
            if lora is None or tensors != lora.tensors:
                return None
        return Int4Step(entry.modules, entry.packed, entry.scales_zeros, entry.bias, lora)

    def pack(self, names: Iterable[str], in_place: bool = False) -> None:
        """(Re)pack the named modules' current weights (names of other modules are ignored);
        ``in_place``: they were changed in place, so they are no longer the 4-bit checkpoint's (a
        re-pointed module is told apart by its tensor)."""
        names = [n for n in names if n in self.modules]
        if self.bf16:
            for name in names:
                weight = self.modules[name].weight
                self._packs[name] = (weight.data_ptr(), pack_weight(weight))
        if in_place:
            self._int4 = {g: q for g, q in self._int4.items() if not set(g) & set(names)}
            self._generation += 1

    def prepared(self, weights: dict[str, torch.Tensor]) -> dict[str, tuple[int, Any]]:
        """Packings of new weights (``{module name: tensor}``), made off the worker thread, to
        ``install`` when the module holds exactly these tensors."""
        if not self.bf16:
            return {}
        return {name: (w.data_ptr(), pack_weight(w)) for name, w in weights.items() if name in self.modules}

    def install(self, packs: dict[str, tuple[int, Any]]) -> None:
        self._packs.update(packs)

    def lora_prepared(self, weight_of: Callable[[str], torch.Tensor],
                      factors: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[tuple[str, ...], _Int4Lora]:
        """The int4 path of a LoRA version, made off the worker thread: for each int4 group, the tensors its
        modules will hold once it is installed (``weight_of(module name)``: the merged weight, or the base's)
        and the group's low-rank term from ``factors`` (``{module: (A [r, in], scaling * B [out, r])}``, bf16):
        A's stacked, B's block-diagonal, so the group's term is two small matmuls. Groups the adapter leaves
        alone are not in it (their base tensors pass the check as they are)."""
        out = {}
        for group, entry in self._int4.items():
            touched = [n for n in group if n in factors]
            if not touched:
                continue
            tensors = _tensors_of(entry.modules, [weight_of(n) for n in group])
            a = torch.cat([factors[n][0] for n in touched]).float()  # [R, in]
            b = torch.zeros(sum(m.out_features for m in entry.modules), a.shape[0])  # [out, R]
            row = col = 0
            for name, module in zip(group, entry.modules):
                if name in factors:
                    r = factors[name][0].shape[0]
                    b[row:row + module.out_features, col:col + r] = factors[name][1]
                    col += r
                row += module.out_features
            out[group] = _Int4Lora(tensors, a.t().contiguous(), b.t().contiguous())
        return out

    def install_lora(self, lora: dict[tuple[str, ...], _Int4Lora]) -> None:
        """Serve ``lora`` (``lora_prepared``) on the int4 path from now on, in place of the previous version's."""
        self._lora = lora
        self._generation += 1

    def unpacked(self) -> list[str]:
        """Modules whose packing is not of the weight tensor they hold (they compute unpacked)."""
        return [n for n, m in self.modules.items() if self._packs.get(n, (None,))[0] != m.weight.data_ptr()]

    def _forward_of(self, name: str, module: torch.nn.Linear):
        plain = torch.nn.functional.linear
        single = (name,)

        def forward(x: torch.Tensor) -> torch.Tensor:
            y = self.int4(single, x)
            if y is not None:
                return y
            entry = self._packs.get(name)
            weight = module.weight
            if entry is None or entry[0] != weight.data_ptr() or x.dtype != weight.dtype:
                return plain(x, weight, module.bias)
            return torch.ops.mkldnn._linear_pointwise(x, entry[1], module.bias, "none", [], "")

        return forward


def _tensors_of(modules: tuple[torch.nn.Module, ...], weights: Sequence[torch.Tensor] | None = None) -> list[int]:
    """Which weight and bias tensors the modules hold now (a swap re-points them), or will hold with ``weights``."""
    ptrs = []
    for i, m in enumerate(modules):
        params = m._parameters  # not m.weight: Module.__getattr__ costs more than the check (per call)
        bias = params["bias"]
        weight = params["weight"] if weights is None else weights[i]
        ptrs += (weight.data_ptr(), 0 if bias is None else bias.data_ptr())
    return ptrs


class _Int4Group(NamedTuple):
    modules: tuple[torch.nn.Module, ...]
    tensors: list[int]  # _tensors_of(modules) when packed
    packed: Any
    scales_zeros: torch.Tensor
    bias: torch.Tensor | None


class _Int4Lora(NamedTuple):
    tensors: list[int]  # _tensors_of(group's modules) once the version is installed
    a_t: torch.Tensor  # [in, R]: the group's A's, stacked and transposed (float32)
    b_t: torch.Tensor  # [R, out]: scaling x the B's, block-diagonal and transposed (float32)


class Int4Step(NamedTuple):
    """One group's int4 product for one row: the base's int4 weights, plus the served LoRA version's term."""

    modules: tuple[torch.nn.Module, ...]
    packed: Any
    scales_zeros: torch.Tensor
    bias: torch.Tensor | None
    lora: _Int4Lora | None

    def hooked(self) -> bool:
        """Whether a module has forward hooks: it must then be called as a module, which this does not do."""
        return any(m._forward_hooks or m._forward_pre_hooks for m in self.modules)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The group's outputs, concatenated, for one row ``x`` (``[1, in]`` or ``[.., in]`` holding one row),
        in ``x``'s dtype."""
        row = x if x.dim() == 2 else x.reshape(1, -1)
        y = _INT4_MM(row if row.dtype == torch.bfloat16 else row.to(torch.bfloat16), self.packed, Q4_GROUP,
                     self.scales_zeros)
        if self.lora is not None:  # in float32: MKL takes 13 us a group for these tiny products where bf16 takes 50
            y = torch.addmm(y.float(), torch.mm(row.float(), self.lora.a_t), self.lora.b_t)
        if y.dtype != x.dtype:
            y = y.to(x.dtype)
        if x.dim() != 2:
            y = y.reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


_INT4_MM = torch.ops.aten._weight_int4pack_mm_for_cpu.default
_INT4_INPUTS = (torch.bfloat16, torch.float32)
