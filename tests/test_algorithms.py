"""Binary RL math against hand-computed values."""

import math

import pytest
import torch

from slime_ext.algorithms import (
    AdvantageWeights,
    PolicyLossConfig,
    RunningBaseline,
    combined_advantages,
    masked_sample_mean,
    policy_loss,
    staleness_filter,
)
from slime_ext.algorithms.advantages import mix_advantages
from slime_ext.algorithms.staleness import catchup_size, staleness_metrics


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_binary_advantage_is_the_verdict_on_every_token_minus_baseline():
    binary = AdvantageWeights.for_method("binary")
    assert combined_advantages(1, torch.zeros(3), None, binary).tolist() == [1.0, 1.0, 1.0]
    assert combined_advantages(-1, torch.zeros(2), torch.zeros(2), binary, baseline=0.5).tolist() == [-1.5, -1.5]
    assert combined_advantages(1, torch.zeros(0), None, binary).numel() == 0


def test_running_baseline_uses_only_earlier_verdicts():
    b = RunningBaseline(decay=0.5)
    assert b.value == 0.0  # read before the first update: no information yet
    assert b.update(1) == 1.0
    assert b.update(-1) == 0.0  # 0.5 * 1 + 0.5 * -1
    assert b.update(1) == 0.5


def test_masked_sample_mean_weighs_samples_equally():
    v = torch.tensor([[1.0, 3.0, 100.0], [10.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_sample_mean(v, m).item() == pytest.approx((2.0 + 10.0) / 2)
    empty = masked_sample_mean(v.requires_grad_(), torch.zeros(2, 3))
    assert empty.item() == 0.0 and empty.requires_grad


def test_ratio_one_gives_the_plain_policy_gradient():
    logp = leaf([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, m = policy_loss(logp, logp.detach().clone(), adv, mask)
    loss.backward()
    # d loss / d logp = -A / (tokens in the sample) / (samples)
    expected = torch.tensor([[-1 / 3 / 2] * 3, [1 / 2 / 2, 1 / 2 / 2, 0.0]], dtype=torch.float64)
    assert torch.allclose(logp.grad, expected)
    assert loss.item() == pytest.approx(-(1.0 + -1.0) / 2)
    assert m["clip_fraction"].item() == 0.0 and m["ratio_mean"].item() == pytest.approx(1.0)
    assert m["kl_rollout"].item() == pytest.approx(0.0)


@pytest.mark.parametrize(
    "ratio, adv, clipped",
    [
        (1.5, 1.0, True),    # above 1 + eps_high with A > 0: clipped, no gradient
        (1.2, 1.0, False),   # inside [0.8, 1.28]
        (0.5, 1.0, False),   # below 1 - eps_low with A > 0: min picks the unclipped term
        (0.5, -1.0, True),   # below 1 - eps_low with A < 0: clipped
        (1.5, -1.0, False),  # above with A < 0: unclipped, the penalty keeps growing
        (0.79, -2.0, True),
        (1.29, 2.0, True),
    ],
)
def test_clipping_engages_beyond_eps_on_the_right_side(ratio, adv, clipped):
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    logp = leaf([[-1.0 + math.log(ratio)]])
    loss, m = policy_loss(logp, old, torch.tensor([[adv]], dtype=torch.float64), torch.ones(1, 1),
                          PolicyLossConfig(eps_low=0.2, eps_high=0.28))
    loss.backward()
    if clipped:
        bound = 1.28 if ratio > 1 else 0.8
        assert logp.grad.item() == 0.0 and loss.item() == pytest.approx(-bound * adv)
        assert m["clip_fraction"].item() == 1.0
    else:
        assert logp.grad.item() == pytest.approx(-adv * ratio) and loss.item() == pytest.approx(-ratio * adv)
        assert m["clip_fraction"].item() == 0.0


def test_ratio_is_taken_against_the_recorded_rollout_logprobs():
    behaviour = torch.tensor([[-2.0, -2.0]], dtype=torch.float64)
    logp = leaf([[-1.9, -2.1]])  # the policy moved since sampling
    _, m = policy_loss(logp, behaviour, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2))
    assert m["ratio_max"].item() == pytest.approx(math.exp(0.1))
    assert m["ratio_min"].item() == pytest.approx(math.exp(-0.1))
    assert m["kl_rollout"].item() > 0


def test_tis_weights_are_truncated():
    behaviour = torch.tensor([[-3.0, -1.0]], dtype=torch.float64)
    proximal = torch.tensor([[-1.0, -1.5]], dtype=torch.float64)  # weights e^2 = 7.39 and e^-0.5 = 0.61
    logp = leaf([[-1.0, -1.5]])
    adv = torch.ones(1, 2, dtype=torch.float64)
    loss, m = policy_loss(logp, behaviour, adv, torch.ones(1, 2), PolicyLossConfig(tis_cap=2.0),
                          proximal_logprobs=proximal)
    loss.backward()
    w = [2.0, math.exp(-0.5)]  # the first is truncated at the cap
    assert m["tis_weight_mean"].item() == pytest.approx(sum(w) / 2)
    assert logp.grad[0].tolist() == pytest.approx([-w[0] / 2, -w[1] / 2])


def test_kl_term():
    logp = leaf([[-1.0, -2.0]])
    ref = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    zero_adv = torch.zeros(1, 2, dtype=torch.float64)
    loss, m = policy_loss(logp, logp.detach(), zero_adv, torch.ones(1, 2), PolicyLossConfig(kl_coef=0.1),
                          ref_logprobs=ref)
    kl = [0.0, math.exp(1.0) - 1.0 - 1.0]
    assert m["kl_to_ref"].item() == pytest.approx(sum(kl) / 2)
    assert loss.item() == pytest.approx(0.1 * sum(kl) / 2)


def test_age_never_drops_a_sample_a_newer_version_does():
    reasons = staleness_filter([5, 4, 2, -100, 6], current_version=5)
    assert reasons[:4] == [None] * 4
    assert reasons[4].startswith("newer than the trainer:") and "version 6" in reasons[4]


def test_catchup_size_trains_a_backlog_before_it_ages_past_the_cap():
    assert catchup_size([0, 0, 1], batch_size=4, max_staleness=4) == 4  # no backlog: one batch
    assert catchup_size([0] * 200, batch_size=4, max_staleness=4) == 40  # 5 steps of 40: ages 0..4
    assert catchup_size([3] * 20, batch_size=4, max_staleness=4) == 10  # 2 steps left for each
    assert catchup_size([0] * 10, batch_size=4, max_staleness=0) == 10  # strictly fresh: all at once
    assert catchup_size([9] + [0] * 6, batch_size=4, max_staleness=4) == 4  # past the cap: sets no bound
    for ages, cap in (([0] * 37 + [2] * 50 + [1] * 13, 4), ([5, 4, 4, 3, 0, 0, 1] * 9, 5)):
        n = catchup_size(ages, 4, cap)  # simulate: turn k is trained in step k // n
        assert all(age + k // n <= cap for k, age in enumerate(ages) if age <= cap)
        assert any(age + k // (n - 1) > cap for k, age in enumerate(ages) if age <= cap) or n == 4  # the smallest


def test_staleness_metrics():
    assert staleness_metrics([0, 2, 7], 4) == {"staleness_mean": 3.0, "staleness_max": 7, "over_cap_turns": 1}
    assert staleness_metrics([], 4)["staleness_max"] == 0


@pytest.mark.parametrize("ratio, adv, grad", [
    (5.0, -1.0, 0.0),  # a stale token the policy now prefers 5x, judged bad: capped at ratio_cap, no gradient
    (2.0, -1.0, 2.0),  # under the cap: the plain ratio-weighted gradient (PPO keeps it for A < 0)
    (5.0, 1.0, 0.0),  # judged good: PPO's own clip already holds it
    (0.1, 1.0, -0.1),  # the policy moved away: down-weighted by the ratio, not dropped
])
def test_dual_clip_bounds_the_ratio_of_stale_tokens(ratio, adv, grad):
    behaviour = torch.tensor([[-2.0]], dtype=torch.float64)
    logp = leaf([[-2.0 + math.log(ratio)]])
    loss, m = policy_loss(logp, behaviour, torch.tensor([[adv]], dtype=torch.float64), torch.ones(1, 1))
    loss.backward()
    assert logp.grad.item() == pytest.approx(grad)
    assert m["dual_clip_fraction"].item() == (1.0 if ratio > 3 and adv < 0 else 0.0)
    if ratio > 3 and adv < 0:
        assert loss.item() == pytest.approx(3.0)
    off, _ = policy_loss(logp, behaviour, torch.tensor([[adv]], dtype=torch.float64), torch.ones(1, 1),
                         PolicyLossConfig(ratio_cap=None))
    assert off.item() == pytest.approx(-min(ratio * adv, min(max(ratio, 0.8), 1.28) * adv))


def test_combined_advantages_opd_rl_and_their_absence():
    rollout = torch.tensor([-1.0, -2.0, -8.0, -0.5])
    teacher = torch.tensor([-0.5, -3.0, -0.1, -0.5])  # gaps +0.5, -1.0, +7.9 (clipped to 5), 0
    w = AdvantageWeights(w_rl=0.5, w_opd=2.0, opd_clip=5.0)
    got = combined_advantages(-1, rollout, teacher, w, baseline=0.2)
    want = torch.tensor([2 * 0.5, 2 * -1.0, 2 * 5.0, 0.0]) + 0.5 * (-1 - 0.2)
    assert torch.allclose(got, want)
    # no hint: no OPD term at all (not rollout-vs-anything noise); verdict 0: no RL term, even with a baseline
    assert torch.allclose(combined_advantages(1, rollout, None, w), torch.full((4,), 0.5))
    assert torch.allclose(combined_advantages(0, rollout, teacher, w, baseline=0.7), want - 0.5 * (-1.2))
    assert torch.count_nonzero(combined_advantages(0, rollout, None, w, baseline=0.7)) == 0
    # the methods are weight choices of one formula
    assert combined_advantages(1, rollout, teacher, AdvantageWeights.for_method("binary")).tolist() == [1.0] * 4
    opd = combined_advantages(1, rollout, teacher, AdvantageWeights.for_method("opd"))
    assert torch.allclose(opd, torch.tensor([0.5, -1.0, 5.0, 0.0]))
    with pytest.raises(ValueError, match="do not match"):
        combined_advantages(1, rollout, teacher[:3], w)
    with pytest.raises(ValueError, match="method 'nope': expected one of combine, binary, opd, none"):
        AdvantageWeights.for_method("nope")
    with pytest.raises(ValueError, match="'none' trains nothing"):
        AdvantageWeights.for_method("none")


def test_teacher_credit_lands_a_minus_one_where_the_teacher_disagrees():
    rollout = torch.tensor([-1.0, -2.0, -0.2, -0.5, -3.0])
    teacher = torch.tensor([-4.0, -2.5, -0.1, -0.5, -2.0])  # gaps -3.0, -0.5, +0.1, 0, +1.0
    credit = AdvantageWeights.for_method("combine", w_rl=1.0, w_opd=0.0, verdict_credit="teacher")
    # the teacher a nat or more against: the whole -1; half a nat: half; agreeing or preferring it: none
    assert combined_advantages(-1, rollout, teacher, credit).tolist() == pytest.approx([-1.0, -0.5, 0.0, 0.0, 0.0])
    assert combined_advantages(1, rollout, teacher, credit).tolist() == [1.0] * 5  # a +1 stays on every token
    assert combined_advantages(-1, rollout, None, credit).tolist() == [-1.0] * 5  # no teacher: uniform, as Binary RL
    both = AdvantageWeights.for_method("combine", verdict_credit="teacher")  # with the OPD term added
    want = torch.tensor([-1.0, -0.5, 0.0, 0.0, 0.0]) + torch.tensor([-3.0, -0.5, 0.1, 0.0, 1.0])
    assert torch.allclose(combined_advantages(-1, rollout, teacher, both), want)
    # Slime's per-token reward term: only its negative tokens are re-credited
    rl = torch.tensor([-1.0, -1.0, 1.0, -1.0, 1.0])
    assert mix_advantages(rl, rollout, teacher, credit).tolist() == pytest.approx([-1.0, -0.5, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="verdict_credit 'sideways': expected one of uniform, teacher"):
        AdvantageWeights.for_method("combine", verdict_credit="sideways")
