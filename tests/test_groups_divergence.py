"""Group-normalized advantages, the implicit reward, and forward KL / JSD(beta) over top-k + tail."""

import math

import pytest
import torch

from slime_ext.algorithms import TopK, teacher_topk, topk_reverse_kl
from slime_ext.algorithms.divergence import binned_divergence, topk_divergence, topk_divergence_loss
from slime_ext.algorithms.groups import group_advantages, implicit_reward

B, T, V = 2, 3, 9
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


# ----------------------------------------------------------------- groups
def test_grpo_normalizes_by_the_group_and_drgrpo_only_centers():
    r = [1.0, -1.0, 0.5, -0.5]
    mean, std = 0.0, math.sqrt(sum(x * x for x in r) / 3)  # unbiased std, as Slime and TRL
    grpo = group_advantages(r, "grpo", eps=0.0)
    assert grpo.dropped is None and grpo.advantages == pytest.approx([(x - mean) / std for x in r])
    dr = group_advantages([2.0, 0.0, 1.0], "drgrpo")
    assert dr.advantages == pytest.approx([1.0, -1.0, 0.0]) and dr.dropped is None
    assert sum(group_advantages([0.3, 0.9, -0.2]).advantages) == pytest.approx(0.0, abs=1e-9)


def test_constant_groups_are_dropped_with_a_reason():
    out = group_advantages([-1.0, -1.0, -1.0, -1.0])
    assert out.advantages == [0.0] * 4 and "constant rewards" in out.dropped
    assert group_advantages([1.0, 1.0 + 1e-9], "drgrpo").dropped  # within the tolerance


@pytest.mark.parametrize("rewards, estimator, match", [([1.0], "grpo", "at least 2"), ([1.0, 0.0], "mean", "estimator"),
                                                       ([1.0, float("nan")], "grpo", "finite")])
def test_bad_groups_are_refused_clearly(rewards, estimator, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, estimator)


def test_implicit_reward_is_the_mean_teacher_gap_squashed_into_the_verdict_range():
    assert implicit_reward([-1.0, -2.0], [-2.0, -3.0]) == pytest.approx(math.tanh(1.0))
    assert implicit_reward([-3.0], [-1.0], scale=4.0) == pytest.approx(math.tanh(-0.5))
    assert -1 < implicit_reward([0.0], [-50.0]) <= 1
    with pytest.raises(ValueError, match="one teacher and one student"):
        implicit_reward([0.0], [0.0, 1.0])


# ----------------------------------------------------------------- divergences
def rand(seed, shape=(B, T, V), scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


def full_divergence(student_logits, teacher_logits, divergence, beta):
    """Per-token divergence over the whole vocabulary, by plain autograd."""
    q = torch.log_softmax(student_logits, -1)
    p = torch.log_softmax(teacher_logits, -1)
    kl = lambda a, b: (a.exp() * (a - b)).sum(-1)  # noqa: E731
    if divergence == "forward_kl":
        return kl(p, q)
    if divergence == "reverse_kl":
        return kl(q, p)
    m = torch.logsumexp(torch.stack([p + math.log(beta), q + math.log(1 - beta)]), 0)
    return beta * kl(p, m) + (1 - beta) * kl(q, m)


@pytest.mark.parametrize("divergence, beta", [("forward_kl", 0.5), ("jsd", 0.5), ("jsd", 0.2), ("reverse_kl", 0.5)])
def test_with_k_v_minus_1_the_binned_divergence_is_the_full_one_values_and_gradients(divergence, beta):
    # k = V - 1: the tail bin holds exactly one token, so the binned distributions are the full ones
    teacher_logits = rand(1)
    mine = rand(2).requires_grad_()
    ref = mine.detach().clone().requires_grad_()
    out = topk_divergence(mine, teacher_topk(teacher_logits, V - 1), MASK, divergence=divergence, beta=beta)
    expected = full_divergence(ref, teacher_logits, divergence, beta) * MASK
    assert torch.allclose(out.per_token, expected, atol=1e-10)
    out.per_token.sum().backward()
    expected.sum().backward()
    assert torch.allclose(mine.grad, ref.grad, atol=1e-10)
    assert mine.grad[0, 2].abs().max() == 0  # masked position: no gradient


def test_jsd_limits_are_forward_and_reverse_kl_and_jsd_is_symmetric_at_one_half():
    s, t = torch.log_softmax(rand(3)[..., :5], -1), torch.log_softmax(rand(4)[..., :5], -1)
    fwd = binned_divergence(s, t, "forward_kl")[0]
    rev = binned_divergence(s, t, "reverse_kl")[0]
    assert torch.allclose(binned_divergence(s, t, "jsd", 0.0)[0], fwd)
    assert torch.allclose(binned_divergence(s, t, "jsd", 1.0)[0], rev)
    assert torch.allclose(binned_divergence(s, t, "jsd", 0.5)[0], binned_divergence(t, s, "jsd", 0.5)[0])
    assert bool((binned_divergence(s, t, "jsd", 0.5)[0] <= math.log(2) + 1e-12).all())


@pytest.mark.parametrize("divergence", ["forward_kl", "jsd"])
def test_zero_when_equal_and_never_above_the_full_divergence(divergence):
    teacher_logits, student = rand(5), rand(6)
    top = teacher_topk(teacher_logits, 3)
    same = topk_divergence(teacher_logits.clone(), top, MASK, divergence=divergence).per_token
    assert same.abs().max() < 1e-12
    binned = topk_divergence(student, top, MASK, divergence=divergence).per_token
    assert bool((binned >= -1e-12).all()) and bool((binned <= full_divergence(student, teacher_logits, divergence, 0.5) * MASK + 1e-12).all())


def test_loss_metrics_and_reverse_kl_is_the_existing_loss():
    teacher_logits, student = rand(7), rand(8).requires_grad_()
    top = teacher_topk(teacher_logits, 4)
    loss, metrics = topk_divergence_loss(student, top, MASK, divergence="forward_kl")
    assert set(metrics) == {"topk_forward_kl", "student_tail_mass", "teacher_tail_mass"}
    assert loss.requires_grad and float(metrics["topk_forward_kl"]) == pytest.approx(float(loss.detach()))
    rev, rev_metrics = topk_divergence_loss(student, top, MASK, divergence="reverse_kl")
    per_row = topk_reverse_kl(student, top, MASK).per_token.sum(-1) / MASK.sum(-1)
    assert float(rev.detach()) == pytest.approx(float(per_row.mean().detach())) and "topk_kl" in rev_metrics
    with pytest.raises(ValueError, match="divergence 'kl'"):
        topk_divergence(student, top, MASK, divergence="kl")
    with pytest.raises(ValueError, match="beta"):
        topk_divergence(student, top, MASK, divergence="jsd", beta=1.5)


def test_forward_kl_raises_a_token_the_teacher_prefers_that_the_student_never_sampled():
    """What token-level OPD lacks: the student puts ~0 on token 3, the teacher prefers it. The
    token-level gap acts only on the sampled token (0): lowering it lifts every other token in
    proportion to its probability, so token 3 falls further behind the rest (here token 1). Forward KL over the
    teacher's top-k raises token 3 itself; reverse KL, weighted by the student's ~0 probability on
    it, barely moves it."""
    sampled, preferred, other = 0, 3, 1
    student = torch.tensor([[[6.0, 1.0, 1.0, -6.0, 0.0, 0.0]]])
    teacher = torch.log_softmax(torch.tensor([[[1.0, 0.0, 0.0, 4.0, 0.0, 0.0]]]), -1)
    values, ids = teacher.topk(3, dim=-1)
    top, mask = TopK(ids, values), torch.ones(1, 1)

    def train(loss_fn, steps=20, lr=0.5):
        z = student.clone().requires_grad_()
        for _ in range(steps):
            (g,) = torch.autograd.grad(loss_fn(z), z)
            z = (z - lr * g).detach().requires_grad_()
        return torch.softmax(z.detach(), -1)[0, 0]

    before = torch.softmax(student, -1)[0, 0]
    fwd = train(lambda z: topk_divergence_loss(z, top, mask, divergence="forward_kl")[0])
    rev = train(lambda z: topk_divergence_loss(z, top, mask, divergence="reverse_kl")[0])
    gap = float(teacher[0, 0, sampled] - torch.log_softmax(student, -1)[0, 0, sampled])  # token-level advantage
    token = train(lambda z: -(gap * torch.log_softmax(z, -1)[0, 0, sampled]))
    assert before[preferred] < 1e-5 and fwd[preferred] > 0.5  # from ~0 to the most likely token
    assert fwd[preferred] / before[preferred] > 10 * rev[preferred] / before[preferred]
    relative = lambda p: float(p[preferred] / p[other])  # noqa: E731
    assert relative(token) <= relative(before)  # the token-level term lifts the likelier tokens more, never token 3
    assert relative(fwd) > 1000 * relative(before)
