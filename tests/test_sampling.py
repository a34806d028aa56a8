"""The engine's token sampler: the right distribution, the right nucleus, seeds replay."""

from __future__ import annotations

import math

import pytest
import torch

from slime_ext.engines.sampling import FIRST_K, draw, nucleus, sample_token


def sorted_nucleus(probs: torch.Tensor, top_p: float) -> set[int]:
    """The nucleus by its definition: sort, keep while the mass before a token is below top_p."""
    p, ids = probs.sort(descending=True)
    before = p.cumsum(0) - p
    keep = before < top_p
    keep[0] = True
    return set(ids[keep].tolist())


@pytest.mark.parametrize("scale", [0.5, 3.0, 8.0])
@pytest.mark.parametrize("top_p", [0.0, 0.3, 0.9, 0.99])
def test_nucleus_is_the_sorted_definition(scale, top_p):
    gen = torch.Generator().manual_seed(int(scale * 10 + top_p * 100))
    probs = torch.softmax(torch.randn(20_000, generator=gen) * scale, -1)  # flat ones need far more than FIRST_K
    ids, p = nucleus(probs, top_p)
    assert set(ids.tolist()) == sorted_nucleus(probs, top_p)
    assert torch.equal(p, probs[ids]) and bool((p[:-1] >= p[1:]).all())
    if scale == 0.5 and top_p >= 0.9:
        assert len(ids) > FIRST_K  # the widening path ran


def test_draw_never_picks_a_zero_weight():
    w = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    assert [draw(w, u) for u in (0.0, 0.25, 0.4999, 0.5, 0.75, 0.999999)] == [1, 1, 1, 4, 4, 4]


def frequencies(logp: torch.Tensor, top_p: float, n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(len(logp))
    for _ in range(n):
        counts[sample_token(logp, 1.0, top_p, gen)] += 1
    return counts / n


@pytest.mark.parametrize("top_p", [1.0, 0.75])
def test_draws_follow_the_renormalized_nucleus(top_p):
    probs = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    want = probs.clone()
    if top_p < 1:
        want[3:] = 0.0  # 0.4 + 0.25 = 0.65 < 0.75 before token 2; 0.8 before token 3
        want /= want.sum()
    n = 20_000
    got = frequencies(probs.log(), top_p, n)
    sigma = (want * (1 - want) / n).sqrt()
    assert bool(((got - want).abs() <= 5 * sigma + 1e-9).all()), (got, want)
    assert bool((got[want == 0] == 0).all())


def test_greedy_and_seeded_replay():
    logp = torch.log_softmax(torch.randn(1000, generator=torch.Generator().manual_seed(3)), -1)
    best = int(logp.argmax())
    gen = torch.Generator().manual_seed(1)
    assert sample_token(logp, 0.0, 1.0, gen) == best and sample_token(logp, 1.0, 0.0, gen) == best
    runs = [[sample_token(logp, 1.0, 0.9, g) for _ in range(50)]
            for g in (torch.Generator().manual_seed(7), torch.Generator().manual_seed(7))]
    assert runs[0] == runs[1] and len(set(runs[0])) > 5
    assert not math.isnan(float(logp[runs[0][0]]))
