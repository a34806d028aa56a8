"""The Slime hooks on a CPU machine without Slime: signatures from ``slime-contract.md`` and the
custom loss against the embedded trainer's loss on the same data."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig, policy_loss
from slime_ext.hooks.config import plugin_config
from slime_ext.hooks.loss import combine_loss
from slime_ext.hooks.reward import known_reward, post_process_rewards
from slime_ext.trainers.step import collate
from slime_ext.types import Sample


# ------------------------------------------------------------------ Slime's semantics, from its source
def slime_get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False):
    """Packed logits [1, T, V] (TP 1, CP 1): each sample's response log-probs, as Slime returns them."""
    logits = logits.squeeze(0)
    out, offset = [], 0
    for tokens, total, resp in zip(unconcat_tokens, total_lengths, response_lengths):
        start = offset + total - resp
        lp = torch.log_softmax(logits[start - 1 : offset + total - 1], dim=-1)
        out.append(lp.gather(1, tokens[total - resp :][:, None])[:, 0])
        offset += total
    return torch.empty(0), {"log_probs": out}


def slime_sum_of_sample_mean(response_lengths, loss_masks):
    def reduce(x):
        return sum((x_i * m).sum() / torch.clamp_min(m.sum(), 1) for x_i, m in zip(x.split(response_lengths), loss_masks))
    return reduce


@pytest.fixture
def slime_loss_module(monkeypatch):
    names = ["slime", "slime.backends", "slime.backends.megatron_utils", "slime.backends.megatron_utils.loss"]
    for n in names:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))
    sys.modules["slime.backends.megatron_utils.loss"].get_log_probs_and_entropy = slime_get_log_probs_and_entropy


# ------------------------------------------------------------------ signatures (slime-contract.md)
def test_hook_signatures_match_the_contract():
    from slime_ext.hooks.rollout import live_rollout

    assert list(inspect.signature(live_rollout).parameters) == ["args", "rollout_id", "data_source", "evaluation"]
    assert inspect.signature(live_rollout).parameters["evaluation"].default is False
    assert list(inspect.signature(post_process_rewards).parameters) == ["args", "samples"]
    assert list(inspect.signature(combine_loss).parameters) == ["args", "batch", "logits", "sum_of_sample_mean"]
    assert inspect.iscoroutinefunction(known_reward)
    assert list(inspect.signature(known_reward).parameters)[:2] == ["args", "sample"]


def test_hooks_import_without_slime_sglang_megatron_or_ray():
    import subprocess

    code = ("import sys; import slime_ext.hooks.rollout, slime_ext.hooks.reward, slime_ext.hooks.loss, "
            "slime_ext.hooks.config; bad = [m for m in ('slime', 'sglang', 'megatron', 'ray') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_plugin_config_is_the_serve_config_under_one_key():
    cfg = plugin_config(SimpleNamespace(openclaw_rl={"method": "opd", "w-opd": 2.0, "port": 31000}))
    assert (cfg.method, cfg.w_opd, cfg.port) == ("opd", 2.0, 31000)
    assert plugin_config(SimpleNamespace()).method == "combine"  # defaults when the key is absent
    with pytest.raises(ValueError, match="metod"):
        plugin_config(SimpleNamespace(openclaw_rl={"metod": "opd"}))
    with pytest.raises(ValueError, match="must be a mapping"):
        plugin_config(SimpleNamespace(openclaw_rl=["method"]))


# ------------------------------------------------------------------ rewards
def sample(i, reward, n=3, teacher=None):
    return Sample(index=i, tokens=[1, 2, 3 + i] + list(range(10, 10 + n)), response_length=n, loss_mask=[1] * n,
                  rollout_log_probs=[-1.0 - i] * n, reward=reward, metadata={"teacher_log_probs": teacher} if teacher else {})


def test_reward_post_process_keeps_verdicts_and_sets_teacher_log_probs():
    samples = [sample(0, 1.0, teacher=[-0.5, -0.2, -3.0]), sample(1, -1.0), sample(2, 0.0)]
    raw, rewards = post_process_rewards(SimpleNamespace(openclaw_rl={"method": "combine"}), samples)
    assert raw == rewards == [1.0, -1.0, 0.0]  # not normalized per group
    assert samples[0].teacher_log_probs == [-0.5, -0.2, -3.0]
    assert samples[1].teacher_log_probs == samples[1].rollout_log_probs  # no hint: teacher - rollout = 0
    binary = [sample(0, 1.0, teacher=[-0.5, -0.2, -3.0])]
    post_process_rewards(SimpleNamespace(openclaw_rl={"method": "binary"}), binary)
    assert binary[0].teacher_log_probs is None
    # Slime's contract test calls it with a bare args object and samples without log-probs
    bare = [Sample(index=0, reward=0.5, tokens=[0, 1], response_length=2, loss_mask=[1, 1])]
    assert post_process_rewards(type("Args", (), {})(), bare) == ([0.5], [0.5])


def test_known_reward_reads_metadata_then_reward():
    s = sample(0, 0.25)
    assert asyncio.run(known_reward(None, s)) == 0.25
    s.metadata["reward"] = 1
    assert asyncio.run(known_reward(None, [s, sample(1, -1.0)])) == [1.0, -1.0]
    with pytest.raises(ValueError, match="no reward"):
        asyncio.run(known_reward(None, Sample(index=3)))


# ------------------------------------------------------------------ the loss: Slime hook == embedded trainer
def test_custom_loss_equals_the_embedded_trainers_loss(slime_loss_module):
    torch.manual_seed(0)
    V = 40
    specs = [  # (prompt length, response length, reward, has a hint, loss mask)
        (4, 5, 1.0, True, [1, 1, 1, 1, 1]),
        (3, 4, -1.0, False, [1, 1, 0, 1]),
        (6, 3, 0.0, True, [1, 1, 1]),
        (2, 6, -1.0, True, [1, 1, 1, 1, 1, 0]),
    ]
    samples, unconcat, teacher_lists = [], [], []
    for p, r, reward, hinted, mask in specs:
        tokens = torch.randint(0, V, (p + r,))
        rollout = (torch.rand(r) * -3).tolist()
        teacher = (torch.tensor(rollout) + torch.randn(r) * 4).tolist() if hinted else None
        samples.append(Sample(tokens=tokens.tolist(), response_length=r, loss_mask=mask, rollout_log_probs=rollout,
                              reward=reward, teacher_log_probs=teacher))
        unconcat.append(tokens)
        teacher_lists.append(teacher if hinted else rollout)  # what post_process_rewards gives Slime
    total = sum(p + r for p, r, *_ in specs)
    logits = torch.randn(1, total, V, requires_grad=True)
    args = SimpleNamespace(openclaw_rl={"method": "combine", "w_rl": 0.5, "w_opd": 2.0, "opd_clip": 3.0},
                           eps_clip=0.2, eps_clip_high=0.28)
    batch = {
        "unconcat_tokens": unconcat,
        "total_lengths": [p + r for p, r, *_ in specs],
        "response_lengths": [r for _, r, *_ in specs],
        "loss_masks": [torch.tensor(m, dtype=torch.float32) for *_, m in specs],
        "rollout_log_probs": [torch.tensor(s.rollout_log_probs) for s in samples],
        "teacher_log_probs": [torch.tensor(t) for t in teacher_lists],
        # Slime's estimator as the launch scripts set it: the verdict, unnormalized, on every token
        "advantages": [torch.full((r,), reward) for _, r, reward, *_ in specs],
    }
    reduce = slime_sum_of_sample_mean(batch["response_lengths"], batch["loss_masks"])
    hook_loss, metrics = combine_loss(args, batch, logits, reduce)
    assert set(metrics) >= {"loss", "pg_loss", "clip_fraction"} and all(v.dim() == 0 for v in metrics.values())

    # the embedded trainer: collate + policy_loss on the same log-probs (taken from the same logits)
    b = collate(samples, weights=AdvantageWeights.for_method("combine", 0.5, 2.0, 3.0))
    _, per = slime_get_log_probs_and_entropy(logits, args=None, unconcat_tokens=unconcat,
                                             total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"])
    logp = torch.zeros_like(b.rollout_logprobs)
    logp = torch.stack([torch.nn.functional.pad(x, (0, logp.shape[1] - len(x))) for x in per["log_probs"]])
    embedded_loss, _ = policy_loss(logp, b.rollout_logprobs, b.advantages, b.response_mask, PolicyLossConfig())
    # Slime's sum_of_sample_mean sums per-sample means; the embedded trainer averages them
    assert torch.allclose(hook_loss / len(specs), embedded_loss, atol=1e-6)
    g_hook = torch.autograd.grad(hook_loss / len(specs), logits, retain_graph=True)[0]
    g_emb = torch.autograd.grad(embedded_loss, logits)[0]
    assert torch.allclose(g_hook, g_emb, atol=1e-6)
    assert float(hook_loss) != 0.0


def test_custom_loss_keeps_the_graph_when_nothing_is_trainable(slime_loss_module):
    logits = torch.randn(1, 5, 11, requires_grad=True)
    batch = {"unconcat_tokens": [torch.tensor([1, 2, 3, 4, 5])], "total_lengths": [5], "response_lengths": [2],
             "loss_masks": [torch.zeros(2)], "rollout_log_probs": [torch.zeros(2)], "teacher_log_probs": [torch.zeros(2)],
             "advantages": [torch.ones(2)]}
    loss, _ = combine_loss(SimpleNamespace(), batch, logits, slime_sum_of_sample_mean([2], batch["loss_masks"]))
    loss.backward()
    assert float(loss) == 0.0 and logits.grad is not None


@pytest.mark.parametrize("settings, named", [({"distill": "forward_kl"}, "distill: forward_kl needs the embedded"),
                                             ({"sft_coef": 0.5}, "sft_coef: 0")])
def test_the_live_rollout_refuses_what_only_the_embedded_trainer_does_yet(settings, named):
    from slime_ext.hooks.rollout import live_source

    args = SimpleNamespace(openclaw_rl={"method": "combine", "teacher": "policy", "port": 1, **settings},
                           n_samples_per_prompt=1, sglang_router_ip="127.0.0.1", sglang_router_port=1)
    with pytest.raises(ValueError, match=named):
        live_source(args)
