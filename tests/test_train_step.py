"""One Binary RL step on the tiny model moves recorded responses the way their verdicts say."""

import pytest
import torch

from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model
from slime_ext.trainers.step import (
    collate,
    response_logits,
    response_logprobs,
    target_logprobs_of,
    train_step,
)
from slime_ext.types import Sample


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("tiny")


def load(model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def make_sample(model, prompt, response, reward):
    lp = teacher_forced_logprobs(model, prompt + response, len(prompt)).tolist()
    return Sample(tokens=prompt + response, response_length=len(response), loss_mask=[1] * len(response),
                  rollout_log_probs=lp, reward=reward)


def total_logprob(model, sample):
    with torch.no_grad():
        return response_logprobs(model, collate([sample])).sum().item()


def test_logprobs_match_the_recording_and_padding_does_not_matter(model_dir):
    model = load(model_dir)
    a = make_sample(model, [5, 6, 7, 8], [100, 200, 300], 1)
    b = make_sample(model, [9, 10], [400, 500, 600, 700, 800], -1)
    lp = response_logprobs(model, collate([a, b]))
    assert torch.allclose(lp[0, :3], torch.tensor(a.rollout_log_probs), atol=1e-4)
    assert torch.allclose(lp[1, :5], torch.tensor(b.rollout_log_probs), atol=1e-4)
    assert lp[0, 3:].abs().sum() == 0


def test_logprobs_at_trained_positions_only_equal_the_full_computation_with_the_same_gradient(model_dir):
    model = load(model_dir)
    a = make_sample(model, [5, 6, 7, 8], [100, 200, 300, 400, 500, 600], 1)
    b = make_sample(model, [9, 10], [700, 800, 900], -1)
    a.loss_mask = [1, 0, 0, 1, 1, 0]  # an agent episode: observation tokens masked out
    c = make_sample(model, [11], [12, 13], 1)
    c.loss_mask = [0, 0]              # nothing trained in this one
    batch = collate([a, b, c])
    grads = []
    def full_logits(m, b):  # every response position's logits, then masked
        return target_logprobs_of(response_logits(m, b), b)

    for fn in (full_logits, response_logprobs):
        model.zero_grad()
        lp = fn(model, batch)
        (lp * torch.arange(1, lp.numel() + 1, dtype=torch.float32).view_as(lp)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        if fn is full_logits:
            full = lp.detach()
        else:
            assert torch.allclose(lp.detach(), full, atol=1e-5)
    assert full[0, 1] == 0 and full[0, 3] != 0 and full[2].abs().sum() == 0
    assert len(grads[0]) == len(grads[1]) > 0
    assert all(torch.allclose(g0, g1, rtol=1e-4, atol=1e-4 * g0.abs().max().item()) for g0, g1 in zip(*grads))


@pytest.mark.parametrize("lora", [False, True])
def test_positive_verdicts_rise_and_negative_ones_fall(model_dir, lora):
    model = load(model_dir)
    good = make_sample(model, [11, 12, 13], [1000, 1001, 1002, 1003], +1)
    bad = make_sample(model, [21, 22, 23], [2000, 2001, 2002], -1)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    before = (total_logprob(model, good), total_logprob(model, bad))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-3 if lora else 1e-3)
    metrics = train_step(model, opt, [good, bad])
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # first step: on-policy
    for _ in range(3):
        metrics = train_step(model, opt, [good, bad])
    after = (total_logprob(model, good), total_logprob(model, bad))
    assert after[0] > before[0] and after[1] < before[1]
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-6)  # later steps are off-policy, corrected
    if lora:
        assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def test_ambiguous_verdicts_do_not_move_the_policy(model_dir):
    model = load(model_dir)
    s = make_sample(model, [1, 2, 3], [40, 41], 0)
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    train_step(model, opt, [s])
    assert all(torch.equal(ref[k], v) for k, v in model.state_dict().items())


def test_collate_rejects_missing_rollout_logprobs():
    with pytest.raises(ValueError, match="rollout_log_probs"):
        collate([Sample(tokens=[1, 2, 3], response_length=2, rollout_log_probs=[-1.0], reward=1)])
