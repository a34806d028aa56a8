"""Top-k distillation loss against a brute-force reference over a small vocabulary."""

import math

import pytest
import torch

from slime_ext.algorithms import TopK, teacher_topk, topk, topk_distillation_loss, topk_reverse_kl
from slime_ext.algorithms.topk import binned_reverse_kl, gather_log_softmax

B, T, V, K = 2, 4, 11, 3
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


def logits(seed, scale=2.0, shape=(B, T, V)):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).requires_grad_()


def explicit_softmax(row):
    """softmax of a 1-D tensor with plain Python sums (autograd still flows)."""
    total = sum(torch.exp(row[j]) for j in range(len(row)))
    return [torch.exp(row[j]) / total for j in range(len(row))]


def top_ids(row, k):
    return sorted(range(len(row)), key=lambda j: -float(row[j].detach()))[:k]


def brute_force(student, teacher_logits, mask, k, support):
    """Per-token top-k reverse KL with explicit per-bin loops, and the per-sample-mean loss."""
    per_token = [[torch.zeros((), dtype=torch.float64) for _ in range(student.shape[1])]
                 for _ in range(student.shape[0])]
    for b in range(student.shape[0]):
        for t in range(student.shape[1]):
            if not mask[b, t]:
                continue
            q_all = explicit_softmax(student[b, t])
            p_all = [x.detach() for x in explicit_softmax(teacher_logits[b, t].detach())]
            ids = top_ids(p_all if support == "teacher" else q_all, k)
            q = [q_all[i] for i in ids]
            p = [p_all[i] for i in ids]
            q.append(1 - sum(q))  # the tail bin
            p.append(1 - sum(p))
            per_token[b][t] = sum(q[i] * (torch.log(q[i]) - torch.log(p[i])) for i in range(k + 1))
    rows = []
    for b in range(student.shape[0]):
        n = int(mask[b].sum())
        if n:
            rows.append(sum(per_token[b][t] for t in range(student.shape[1]) if mask[b, t]) / n)
    return torch.stack([torch.stack(r) for r in per_token]), sum(rows) / len(rows)


def teacher_inputs(teacher_logits, k):
    """Every way of passing the teacher, by support."""
    full = torch.log_softmax(teacher_logits.detach(), dim=-1)
    return {
        "teacher": {"topk": teacher_topk(teacher_logits.detach(), k), "full": full},
        "student": {"full": full, "callable": lambda ids: full.gather(-1, ids)},
    }


CASES = [("teacher", "topk"), ("teacher", "full"), ("student", "full"), ("student", "callable")]


@pytest.mark.parametrize("support, form", CASES)
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_equals_brute_force_with_the_tail_bin_values_and_gradient(support, form, chunk_size):
    teacher_logits = logits(1)
    s_ref = logits(0)
    ref_tok, ref_loss = brute_force(s_ref, teacher_logits, MASK, K, support)
    ref_loss.backward()

    s = logits(0)
    teacher = teacher_inputs(teacher_logits, K)[support][form]
    out = topk_reverse_kl(s, teacher, MASK, k=K, support=support, chunk_size=chunk_size)
    assert torch.allclose(out.per_token, ref_tok.detach(), atol=1e-12)
    loss, m = topk_distillation_loss(s, teacher, MASK, k=K, support=support, chunk_size=chunk_size)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-12)
    loss.backward()
    assert torch.allclose(s.grad, s_ref.grad, atol=1e-12)
    assert s.grad[~MASK.bool()].abs().max().item() == 0.0  # masked rows get no gradient
    # the tail is a real part of it: both tails hold mass, and the tail bin contributes
    assert 0 < m["student_tail_mass"].item() < 1 and 0 < m["teacher_tail_mass"].item() < 1
    assert m["topk_kl_tail"].item() != 0.0


def test_the_tail_bin_matters():
    """Dropping the tail bin (renormalizing over S instead) gives a different value."""
    teacher_logits, s = logits(1), logits(0)
    _, ref = brute_force(s, teacher_logits, MASK, K, "teacher")
    no_tail = 0.0
    for b, n in ((0, 3), (1, 2)):
        for t in range(n):
            ids = top_ids(teacher_logits[b, t], K)
            q = torch.softmax(s[b, t, ids], -1)
            p = torch.softmax(teacher_logits[b, t, ids], -1)
            no_tail += float((q * (q.log() - p.log())).sum().detach()) / n / 2
    assert abs(no_tail - ref.item()) > 1e-3


def test_gather_log_softmax_matches_autograd_and_gradcheck():
    x = logits(3)
    ids = torch.randint(0, V, (B, T, K), generator=torch.Generator().manual_seed(0))
    w = torch.randn(B, T, K, dtype=torch.float64)
    for chunk in (None, 1, 3, 100):
        y = gather_log_softmax(x, ids, chunk)
        ref = torch.log_softmax(x, -1).gather(-1, ids)
        assert torch.allclose(y, ref, atol=1e-13)
        (g,) = torch.autograd.grad((y * w).sum(), x)
        (g_ref,) = torch.autograd.grad((ref * w).sum(), x)
        assert torch.allclose(g, g_ref, atol=1e-13)
    assert torch.autograd.gradcheck(lambda z: gather_log_softmax(z, ids, 2), (x,))


def test_default_chunks_hold_about_chunk_values(monkeypatch):
    monkeypatch.setattr(topk, "CHUNK_VALUES", 2 * B * V)  # 2 positions per chunk
    assert topk._chunks(torch.Size((B, T, V)), None) == [slice(0, 2), slice(2, 4)]
    x, ids = logits(3), torch.randint(0, V, (B, T, K), generator=torch.Generator().manual_seed(1))
    y = gather_log_softmax(x, ids)
    (g,) = torch.autograd.grad(y.sum(), x)
    ref = torch.log_softmax(x, -1).gather(-1, ids)
    assert torch.allclose(y, ref, atol=1e-13)
    assert torch.allclose(g, torch.autograd.grad(ref.sum(), x)[0], atol=1e-13)


def test_low_precision_logits_are_computed_in_float32():
    x32 = logits(4).detach().float()
    x16 = x32.bfloat16().requires_grad_()
    ids = teacher_topk(logits(5).detach(), K).ids
    y = gather_log_softmax(x16, ids, chunk_size=2)
    assert y.dtype == torch.float32
    ref = torch.log_softmax(x16.detach().float(), -1).gather(-1, ids)
    assert torch.allclose(y, ref, atol=1e-6)
    y.sum().backward()
    assert x16.grad.dtype == torch.bfloat16 and torch.isfinite(x16.grad.float()).all()


@pytest.mark.parametrize("support, form", CASES)
def test_zero_when_student_equals_teacher(support, form):
    s = logits(7)
    teacher = teacher_inputs(s, K)[support][form]
    loss, m = topk_distillation_loss(s, teacher, MASK, k=K, support=support)
    loss.backward()
    assert abs(loss.item()) < 1e-14 and abs(m["topk_kl_tail"].item()) < 1e-14  # log_softmax vs logsumexp rounding
    assert s.grad.abs().max().item() < 1e-14


def test_masked_positions_contribute_nothing_even_with_garbage_there():
    teacher_logits, s = logits(1), logits(0)
    tk = teacher_topk(teacher_logits.detach(), K)
    loss = topk_distillation_loss(s, tk, MASK)[0]
    off = ~MASK.bool()
    ids = tk.ids.clone()
    ids[off] = 0  # repeated ids at padding
    lp = tk.logprobs.clone()
    lp[off] = float("nan")
    s2 = s.detach().clone()
    s2[off] += 5.0 * torch.randn(int(off.sum()), V, dtype=torch.float64)
    s2.requires_grad_()
    loss2 = topk_distillation_loss(s2, TopK(ids, lp), MASK)[0]
    assert loss2.item() == pytest.approx(loss.item(), abs=1e-14)
    loss2.backward()
    assert torch.isfinite(s2.grad).all() and s2.grad[off].abs().max().item() == 0.0
    per_token = topk_reverse_kl(s2, TopK(ids, lp), MASK).per_token
    assert per_token[off].abs().max().item() == 0.0
    empty, _ = topk_distillation_loss(s2, TopK(ids, lp), torch.zeros(B, T))
    assert empty.item() == 0.0 and empty.requires_grad


@pytest.mark.parametrize("support", ["teacher", "student"])
def test_near_zero_tail_is_finite(support):
    """The top-k holds (almost) all the mass, in float32: tails underflow or round past 1."""
    x = torch.full((1, 3, V), -30.0)
    x[0, :, :K] = torch.tensor([12.0, 11.0, 10.0])
    x[0, 1, :K] = 60.0  # ties, and every other token 90 nats below
    x[0, 2, K] = 12.0   # this position's tail holds real mass
    teacher_lp = torch.log_softmax(torch.flip(x, dims=[-1]).roll(K, dims=-1), -1)  # the same tokens, reordered
    teacher_lp[0, 0, 0] = -float("inf")  # the teacher rules out one of the student's top tokens
    s = x.clone().requires_grad_()
    loss, m = topk_distillation_loss(s, teacher_lp, torch.ones(1, 3), k=K, support=support)
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() >= 0
    assert torch.isfinite(s.grad).all()
    assert 0 <= m["student_tail_mass"].item() < 1 and 0 <= m["teacher_tail_mass"].item() < 1
    # student tail ~0 while the teacher's is not: a large but finite penalty the other way round
    kl, s_tail, t_tail = binned_reverse_kl(torch.tensor([[0.0, -40.0]], requires_grad=True),
                                           torch.tensor([[-1.0, -2.0]]))
    assert torch.isfinite(kl).all() and s_tail.item() == pytest.approx(math.log(torch.finfo().eps))


def test_student_support_with_tail_of_zero_mass_is_finite_in_float64_too():
    s = torch.full((1, 1, V), -800.0, dtype=torch.float64)
    s[0, 0, :K] = 0.0
    s.requires_grad_()
    loss, _ = topk_distillation_loss(s, torch.log_softmax(s.detach(), -1), torch.ones(1, 1), k=K, support="student")
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(s.grad).all()


def test_kl_is_nonnegative_and_below_the_full_reverse_kl():
    s, teacher_logits = logits(11, shape=(3, 5, V)), logits(12, shape=(3, 5, V))
    mask = torch.ones(3, 5)
    full = torch.log_softmax(teacher_logits.detach(), -1)
    logq = torch.log_softmax(s.detach(), -1)
    full_kl = (logq.exp() * (logq - full)).sum(-1)
    for support in ("teacher", "student"):
        for k in (1, 3, V - 1):
            tok = topk_reverse_kl(s, full, mask, k=k, support=support).per_token
            assert (tok >= -1e-12).all() and (tok <= full_kl + 1e-12).all()
    assert torch.allclose(topk_reverse_kl(s, full, mask, k=V - 1).per_token, full_kl, atol=1e-12)


def test_teacher_topk_and_narrowing_a_stored_topk():
    teacher_logits = logits(1).detach()
    tk = teacher_topk(teacher_logits, 5, chunk_size=3)
    ref_lp, ref_ids = torch.log_softmax(teacher_logits, -1).topk(5, -1)
    assert torch.equal(tk.ids, ref_ids) and torch.allclose(tk.logprobs, ref_lp, atol=1e-13)
    s = logits(0)
    shuffled = TopK(tk.ids.flip(-1), tk.logprobs.flip(-1))  # the order of the stored ids does not matter
    narrowed = topk_reverse_kl(s, shuffled, MASK, k=K).per_token
    assert torch.allclose(narrowed, topk_reverse_kl(s, teacher_topk(teacher_logits, K), MASK).per_token, atol=1e-13)


def test_bad_arguments_are_refused_clearly():
    s, teacher_logits = logits(0), logits(1).detach()
    full = torch.log_softmax(teacher_logits, -1)
    tk = teacher_topk(teacher_logits, K)
    for k in (0, V, V + 2):
        with pytest.raises(ValueError, match="tail bin"):
            topk_reverse_kl(s, full, MASK, k=k)
        with pytest.raises(ValueError, match="tail bin"):
            topk_reverse_kl(s, full, MASK, k=k, support="student")
    with pytest.raises(ValueError, match="tail bin"):
        topk_reverse_kl(s, teacher_topk(teacher_logits, V), MASK)
    with pytest.raises(ValueError, match="holds only"):
        topk_reverse_kl(s, tk, MASK, k=K + 1)
    with pytest.raises(ValueError, match="k is required"):
        topk_reverse_kl(s, full, MASK)
    with pytest.raises(ValueError, match="support='student'"):
        topk_reverse_kl(s, tk, MASK, support="student")
    with pytest.raises(ValueError, match="support='teacher'"):
        topk_reverse_kl(s, lambda ids: full.gather(-1, ids), MASK, k=K)
    with pytest.raises(ValueError, match="support 'both': expected one of teacher, student, overlap"):
        topk_reverse_kl(s, full, MASK, k=K, support="both")
    dup = tk.ids.clone()
    dup[0, 0, 1] = dup[0, 0, 0]
    with pytest.raises(ValueError, match="distinct"):
        topk_reverse_kl(s, TopK(dup, tk.logprobs), MASK)
    with pytest.raises(ValueError, match="shape"):
        topk_reverse_kl(s, full[:, :2], MASK, k=K)
    with pytest.raises(ValueError, match="callable"):
        topk_reverse_kl(s, lambda ids: full.gather(-1, ids)[..., :1], MASK, k=K, support="student")
