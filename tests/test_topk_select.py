"""``algorithms/topk_select.py``: overlap, the three selection rules, the supports, the clipped
student-softmax-weighted advantage and the PPO-clipped loss summed over S_t, on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from slime_ext.algorithms.topk_select import (
    SelectedSupport,
    gather_candidate,
    overlap_counts,
    select_advantages,
    select_candidates,
    select_per_token,
    select_support,
    support_ids,
    topk_select_loss,
)

STUDENT = torch.tensor([[0, 1], [2, 3], [4, 5]])  # [T=3, K=2]
TEACHERS = torch.tensor([[[0, 1], [7, 8], [7, 8]],   # candidate 0: overlaps 2, 0, 0 (sum 2)
                         [[1, 9], [3, 2], [5, 9]]])  # candidate 1: overlaps 1, 2, 1 (sum 4)


def test_overlap_counts_by_hand():
    assert overlap_counts(STUDENT, TEACHERS).tolist() == [[2, 0, 0], [1, 2, 1]]


def test_overlap_counts_rejects_shapes():
    with pytest.raises(ValueError, match="teacher ids"):
        overlap_counts(STUDENT, TEACHERS[0])


def test_selection_rules():
    o = overlap_counts(STUDENT, TEACHERS)
    assert select_candidates(o, "shortest").tolist() == [0, 0, 0]
    assert select_candidates(o, "sequence_optimal").tolist() == [1, 1, 1]
    assert select_candidates(o, "token_optimal").tolist() == [0, 1, 1]
    # only trained positions count: position 0 alone favours candidate 0
    assert select_candidates(o, "sequence_optimal", torch.tensor([1, 0, 0])).tolist() == [0, 0, 0]


def test_selection_ties_go_to_the_earlier_candidate():
    tie = torch.tensor([[1, 2], [1, 2], [1, 0]])
    assert select_candidates(tie, "token_optimal").tolist() == [0, 0]
    assert select_candidates(tie, "sequence_optimal").tolist() == [0, 0]
    with pytest.raises(ValueError, match="selection rule"):
        select_candidates(tie, "longest")


def test_gather_candidate():
    choice = torch.tensor([0, 1, 1])
    assert gather_candidate(TEACHERS, choice).tolist() == [[0, 1], [3, 2], [5, 9]]


def test_supports():
    teacher = torch.tensor([[1, 9], [3, 2]])
    student = STUDENT[:2]
    ids, m = support_ids(student, teacher, "student")
    assert ids.tolist() == student.tolist() and m.all()
    ids, m = support_ids(student, teacher, "teacher")
    assert ids.tolist() == teacher.tolist() and m.all()
    ids, m = support_ids(student, teacher, "overlap")
    assert ids.tolist() == student.tolist() and m.tolist() == [[False, True], [True, True]]
    with pytest.raises(ValueError, match="support"):
        support_ids(student, teacher, "union")


def test_advantage_is_clipped_difference_times_student_softmax():
    old = torch.log(torch.tensor([[0.3, 0.1]]))  # softmax over S: 0.75, 0.25
    teacher = torch.log(torch.tensor([[0.6, 0.001]]))  # differences log 2 = 0.693, log 0.01 = -4.6
    adv = select_advantages(old, teacher, torch.tensor([[True, True]]), clip=1.0)
    assert adv[0, 0].item() == pytest.approx(0.75 * math.log(2), abs=1e-6)
    assert adv[0, 1].item() == pytest.approx(0.25 * -1.0, abs=1e-6)  # clipped at -1
    unclipped = select_advantages(old, teacher, torch.tensor([[True, True]]), clip=None)
    assert unclipped[0, 1].item() == pytest.approx(0.25 * math.log(0.01), abs=1e-5)
    # a support of one id: its weight is 1; off the support: 0; an empty support: all 0
    one = select_advantages(old, teacher, torch.tensor([[False, True]]), clip=1.0)
    assert one.tolist()[0] == pytest.approx([0.0, -1.0])
    none = select_advantages(old, teacher, torch.tensor([[False, False]]), clip=1.0)
    assert none.tolist() == [[0.0, 0.0]]


def test_per_token_loss_is_ppo_clipped_and_summed_over_the_support():
    old = torch.log(torch.tensor([0.5, 0.2]))
    adv = torch.tensor([0.4, -0.2])
    cur = old + torch.log(torch.tensor([2.0, 1.0]))  # ratios 2 (clipped to 1.28 for A > 0) and 1
    loss, frac = select_per_token(cur, old, adv, torch.tensor([True, True]))
    assert loss.item() == pytest.approx(-0.4 * 1.28 + 0.2 * 1.0, abs=1e-6)
    assert frac.item() == pytest.approx(0.5)
    only_first, _ = select_per_token(cur, old, adv, torch.tensor([True, False]))
    assert only_first.item() == pytest.approx(-0.4 * 1.28, abs=1e-6)


def _support(ids, in_support, old, teacher, clip=1.0):
    return SelectedSupport(ids, in_support, select_advantages(old, teacher, in_support, clip), old)


def test_loss_gradient_raises_the_token_the_teacher_prefers():
    torch.manual_seed(0)
    logits = torch.randn(1, 2, 6, requires_grad=True)
    ids = torch.tensor([[[0, 1], [2, 3]]])
    lp = torch.log_softmax(logits.detach(), -1).gather(-1, ids)
    teacher = lp + torch.tensor([0.5, -0.5])  # the teacher likes id 0 / 2 more, id 1 / 3 less
    support = _support(ids, torch.ones(1, 2, 2, dtype=torch.bool), lp, teacher)
    loss, metrics = topk_select_loss(logits, support, torch.ones(1, 2))
    expected = -(torch.softmax(lp, -1) * torch.tensor([0.5, -0.5])).sum(-1).mean()  # ratio 1: -sum_v A_v
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    loss.backward()
    g = logits.grad[0]
    assert g[0, 0] < 0 and g[0, 1] > 0 and g[1, 2] < 0 and g[1, 3] > 0  # descent raises 0 / 2, lowers 1 / 3
    assert metrics["topk_select_support_size"].item() == pytest.approx(2.0)


def test_loss_ignores_masked_positions_and_empty_supports():
    logits = torch.randn(1, 2, 5, requires_grad=True)
    ids = torch.tensor([[[0, 1], [2, 3]]])
    nan = torch.full((1, 2, 2), float("nan"))  # padding: must not leak
    in_support = torch.tensor([[[True, True], [False, False]]])
    old = nan.clone()
    old[0, 0] = torch.log_softmax(logits.detach()[0, 0], -1)[:2]
    adv = nan.clone()
    adv[0, 0] = torch.tensor([0.3, -0.1])
    loss, _ = topk_select_loss(logits, SelectedSupport(ids, in_support, adv, old), torch.tensor([[1.0, 1.0]]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1].abs().sum().item() == 0.0
    masked, _ = topk_select_loss(logits, SelectedSupport(ids, in_support, adv, old), torch.zeros(1, 2))
    assert masked.item() == 0.0


def test_loss_is_averaged_over_every_sample_of_the_batch_as_upstream():
    """A sample without a support (a turn the term does not reach) counts 0 in the mean, as upstream's
    ``sum_of_sample_mean`` over the batch: the loss of a batch of one taught and one untaught sample is half
    of the taught sample's alone."""
    logits = torch.randn(2, 2, 5, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[[0, 1], [2, 3]], [[0, 1], [2, 3]]])
    in_support = torch.tensor([[[True, True], [True, False]], [[False, False], [False, False]]])
    old = torch.log_softmax(logits, -1).gather(-1, ids)
    adv = torch.tensor([[[0.3, -0.1], [0.2, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    mask = torch.ones(2, 2)
    both, _ = topk_select_loss(logits, SelectedSupport(ids, in_support, adv, old), mask)
    alone, _ = topk_select_loss(logits[:1], SelectedSupport(ids[:1], in_support[:1], adv[:1], old[:1]), mask[:1])
    assert alone.item() != 0.0
    assert both.item() == pytest.approx(alone.item() / 2)


def _lp(rows):
    return torch.log(torch.tensor(rows))


def test_select_support_picks_the_overlapping_candidate_and_fixes_the_advantages():
    student = _lp([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.4, 0.4]])  # top-2: {0, 1}, {2, 3}
    far = _lp([[0.1, 0.1, 0.4, 0.4], [0.4, 0.4, 0.1, 0.1]])  # top-2: {2, 3}, {0, 1}: overlap 0, 0
    near = _lp([[0.6, 0.1, 0.2, 0.1], [0.1, 0.1, 0.2, 0.6]])  # top-2: {0, 2}, {3, 2}: overlap 1, 2
    out = select_support(student, torch.stack([far, near]), 2, "sequence_optimal", "student", clip=1.0)
    assert out.overlap.tolist() == [[0, 0], [1, 2]]
    assert out.choice.tolist() == [1, 1]
    s = out.support
    assert s.ids.tolist() == [[0, 1], [2, 3]] and s.in_support.all()
    # position 0: weights softmax(log 0.5, log 0.3) = 0.625, 0.375; differences log(0.6/0.5), log(0.1/0.3) -> -1 (clip)
    assert s.advantages[0].tolist() == pytest.approx([0.625 * math.log(1.2), 0.375 * -1.0], abs=1e-6)
    assert s.old_logprobs[0].tolist() == pytest.approx([math.log(0.5), math.log(0.3)], abs=1e-6)
    shortest = select_support(student, torch.stack([far, near]), 2, "shortest", "teacher")
    assert shortest.choice.tolist() == [0, 0] and shortest.support.ids[0].tolist() == [2, 3]
    overlap = select_support(student, torch.stack([far, near]), 2, "token_optimal", "overlap")
    assert overlap.support.in_support.tolist() == [[True, False], [True, True]]  # {0, 1} & {0, 2}; {2, 3} & {3, 2}
    with pytest.raises(ValueError, match="k must be"):
        select_support(student, torch.stack([far]), 5, "shortest", "student")


def test_topk_select_token_clips_each_term_on_its_own():
    """``distill: topk_select_token`` (both drivers: learning/objective.py): the verdict term and the teacher term
    are each PPO-clipped, then added; ``token`` clips their sum once."""
    from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig, policy_loss
    from slime_ext.learning.objective import Objective
    from slime_ext.types import Distill

    old, mask = torch.log(torch.tensor([[0.5]])), torch.ones(1, 1)
    verdict, teacher = torch.tensor([[-1.0]]), torch.tensor([[0.5]])
    apart = Objective(AdvantageWeights(1.0, 1.0, 1.0), Distill.TOPK_SELECT_TOKEN, PolicyLossConfig())
    summed = Objective(AdvantageWeights(1.0, 1.0, 1.0), Distill.TOKEN, PolicyLossConfig())
    moved = old + math.log(1.5)  # ratio 1.5: -min(1.5 * -1, 1.28 * -1) = 1.5 and -min(1.5 * 0.5, 1.28 * 0.5) = -0.64
    loss, metrics = apart.policy_loss(policy_loss, moved, old, [verdict, teacher], mask)
    assert loss.item() == pytest.approx(1.5 - 0.64, abs=1e-5)
    assert (metrics["verdict_loss"].item(), metrics["teacher_loss"].item()) == pytest.approx((1.5, -0.64), abs=1e-5)
    assert summed.policy_loss(policy_loss, moved, old, [verdict + teacher], mask)[0].item() == pytest.approx(0.75)
    same = apart.policy_loss(policy_loss, old, old, [verdict, teacher], mask)[0]  # ratio 1: equal
    assert same.item() == pytest.approx(summed.policy_loss(policy_loss, old, old, [verdict + teacher], mask)[0].item())


def test_slime_token_level_hook_runs_through_slimes_log_probs_with_gradient(monkeypatch):
    import inspect
    import sys
    import types
    from types import SimpleNamespace

    from slime_ext.hooks.loss import openclaw_loss
    from tests.test_slime_hooks import slime_get_log_probs_and_entropy

    for n in ["slime", "slime.backends", "slime.backends.megatron_utils", "slime.backends.megatron_utils.loss"]:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))
    sys.modules["slime.backends.megatron_utils.loss"].get_log_probs_and_entropy = slime_get_log_probs_and_entropy
    assert list(inspect.signature(openclaw_loss).parameters) == ["args", "batch", "logits", "sum_of_sample_mean"]
    logits = torch.randn(1, 5, 11, requires_grad=True)
    batch = {"unconcat_tokens": [torch.tensor([1, 2, 3, 4, 5])], "total_lengths": [5], "response_lengths": [2],
             "loss_masks": [torch.ones(2)], "rollout_log_probs": [torch.full((2,), -2.0)],
             "teacher_log_probs": [torch.full((2,), -1.0)], "advantages": [torch.full((2,), -1.0)]}
    args = SimpleNamespace(openclaw_rl={"method": "combine", "opd_clip": 1.0, "distill": "topk_select_token"})
    loss, metrics = openclaw_loss(args, batch, logits, torch.sum)
    loss.backward()
    assert {"verdict_loss", "teacher_loss", "teacher_clip_fraction"} <= set(metrics) and logits.grad.abs().sum() > 0
