"""Reuse the KV cache of a previous prompt's longest common prefix.

Agents resend a long system prompt and the whole history on every turn (OpenClaw's is ~13k
tokens), so most of each prefill is work already done. Entries are the prompt KV of recent
requests, evicted least-recently-used beyond a token budget, and dropped on every weight swap
(they were computed with the old weights). Entries are never mutated: a hit hands out slices,
and the engine's cache copies them into a new buffer before appending.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


class PrefixCache:
    def __init__(self, budget_tokens: int = 32768, min_tokens: int = 256) -> None:
        self.budget_tokens = budget_tokens
        self.min_tokens = min_tokens
        self._entries: OrderedDict[int, tuple[np.ndarray, list[tuple[Any, Any]]]] = OrderedDict()
        self._next = 0
        self.hits = 0
        self.reused_tokens = 0

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids, _ in self._entries.values())

    def lookup(self, ids: list[int]) -> tuple[int, list[tuple[Any, Any]]] | None:
        """The longest cached prefix of ``ids`` (leaving at least one token to compute), as
        ``(length, [(keys, values) per layer])`` with tensors ``[1, heads, length, dim]``."""
        if not self._entries:
            return None
        query = np.asarray(ids)
        best, best_key = 0, None
        for key, (cached, _) in self._entries.items():
            n = min(common_prefix_len(query, cached), len(ids) - 1)
            if n > best:
                best, best_key = n, key
        if best_key is None or best < self.min_tokens:
            return None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        _, kv = self._entries[best_key]
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in kv]

    def add(self, ids: list[int], kv: list[tuple[Any, Any]]) -> None:
        """Keep a copy of a prompt's KV (tensors ``[1, heads, len(ids), dim]``)."""
        if len(ids) < self.min_tokens or len(ids) > self.budget_tokens:
            return
        self._entries[self._next] = (np.asarray(ids), [(k.clone(), v.clone()) for k, v in kv])
        self._next += 1
        while self.tokens > self.budget_tokens:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
