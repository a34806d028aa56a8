"""Drawing one token from temperature-scaled log-probs, exactly and cheaply.

Invariant: ``sample_token`` draws from the same distribution the engine records log-probs for
(greedy at temperature 0; otherwise the nucleus of ``top_p`` renormalized), with one uniform
number from the request's seeded generator per token, so a seed replays the same tokens.

Why not ``torch.multinomial`` and a full sort: over SmolLM2's 49,152 tokens they cost 0.85 ms and
3.6 ms per row (a 16-stream decode step spent 13-57 ms sampling). An inverse-CDF draw costs a
cumulative sum, and the nucleus comes from ``topk`` of a few candidates, widened only when they
hold less than ``top_p`` of the mass (temperature-scaled distributions are peaked: 0.3 ms at
temperature 0.2, top_p 0.9).
"""

from __future__ import annotations

import torch

FIRST_K = 64  # candidates tried first for the nucleus; 4x more while they hold less than top_p


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest most-likely set holding ``top_p`` of ``probs`` (1-D, summing to 1): token ids
    and their probabilities, most likely first. A token is kept while the mass before it is below
    ``top_p``; the most likely token is always kept (``top_p = 0`` is greedy)."""
    k = min(FIRST_K, probs.numel())
    while True:
        p, ids = probs.topk(k)
        before = p.cumsum(0) - p
        if before[-1] >= top_p or k == probs.numel():
            n = max(1, int((before < top_p).sum()))
            return ids[:n], p[:n]
        k = min(4 * k, probs.numel()) if k < 4096 else probs.numel()


def draw(weights: torch.Tensor, u: float) -> int:
    """Inverse-CDF draw: the index whose interval of the cumulative ``weights`` holds ``u`` times
    their sum (``u`` in [0, 1)). A zero weight has an empty interval and is never drawn."""
    cdf = weights.double().cumsum(0)
    return min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), weights.numel() - 1)


def sample_token(logp: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """One token from ``logp`` (1-D log-probs at ``temperature``): greedy at temperature 0,
    else from the ``top_p`` nucleus, with one uniform draw from ``generator``."""
    if temperature <= 0:
        return int(logp.argmax())
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    probs = logp.exp()
    if top_p < 1.0:
        ids, p = nucleus(probs, top_p)
        return int(ids[draw(p, u)])
    return draw(probs, u)
