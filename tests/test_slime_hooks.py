"""The Slime hooks on a CPU machine without Slime: signatures from ``slime-contract.md``, the settings Slime
is refused, and the custom loss against the embedded trainer's step on the same batch (the same loss and
gradients, for every method and distillation kind both drivers run, KL on, TIS on and off, built-in and
user policy losses)."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from slime_ext.hooks.config import plugin_config, slime_notes, slime_refusals
from slime_ext.hooks.loss import openclaw_loss
from slime_ext.hooks.reward import known_reward, post_process_rewards
from slime_ext.types import Sample


# ------------------------------------------------------------------ Slime's semantics, from its source
def slime_get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False):
    """Packed logits [1, T, V] (TP 1, CP 1): each sample's response log-probs, as Slime returns them (the
    logits divided by --rollout-temperature first)."""
    logits = logits.squeeze(0) / float(getattr(args, "rollout_temperature", 1.0) or 1.0)
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
    assert list(inspect.signature(openclaw_loss).parameters) == ["args", "batch", "logits", "sum_of_sample_mean"]
    assert inspect.iscoroutinefunction(known_reward)
    assert list(inspect.signature(known_reward).parameters)[:2] == ["args", "sample"]


def test_hooks_import_without_slime_sglang_megatron_or_ray():
    import subprocess

    code = ("import sys; import slime_ext.hooks.rollout, slime_ext.hooks.reward, slime_ext.hooks.loss, "
            "slime_ext.hooks.config, slime_ext.hooks.generate, slime_ext.hooks.filters, slime_ext.hooks.sft; "
            "bad = [m for m in ('slime', 'sglang', 'megatron', 'ray') if m in sys.modules]; assert not bad, bad")
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
def sample(i, reward, n=3, raw=None):
    return Sample(index=i, tokens=[1, 2, 3 + i] + list(range(10, 10 + n)), response_length=n, loss_mask=[1] * n,
                  rollout_log_probs=[-1.0 - i] * n, reward=reward, metadata={} if raw is None else {"raw_reward": raw})


def test_reward_post_process_keeps_what_the_rollout_set_and_logs_the_raw_reward():
    samples = [sample(0, 1.0), sample(1, 0.62, raw=-1.0), sample(2, 0.0)]
    raw, rewards = post_process_rewards(SimpleNamespace(openclaw_rl={"method": "combine"}), samples)
    assert rewards == [1.0, 0.62, 0.0] and raw == [1.0, -1.0, 0.0]  # not normalized per group
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


# ------------------------------------------------------------------ the loss: Slime hook == embedded step
def tiny_policy_and_reference():
    """The tiny model (the policy, full weights) and a reference that differs from it (as after training)."""
    import copy

    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model

    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return policy, reference


def samples_of_a_step(policy):
    """What a step's pipeline hands the optimizer: recorded turns (verdicts +1, -1, 0, with and without a
    teacher) sampled by an older version, and a fresh group member with its group advantage."""
    from slime_ext.logprobs import teacher_forced_logprobs

    torch.manual_seed(1)
    specs = [  # (prompt, response, verdict, hinted, group advantage)
        ([5, 6, 7, 8], [100, 200, 300, 400, 500], 1.0, True, None),
        ([9, 10, 11], [600, 700, 800, 900], -1.0, False, None),
        ([12, 13], [1000, 1100, 1200], -1.0, True, None),
        ([14, 15, 16, 17, 18], [1300, 1400, 1500, 1600, 1700, 1800], 0.0, True, None),
        ([5, 6, 7, 8], [1900, 2000, 2100], 0.4, True, -0.8),
    ]
    out = []
    for prompt, response, verdict, hinted, group in specs:
        with torch.no_grad():
            rollout = teacher_forced_logprobs(policy, prompt + response, len(prompt))
        rollout = (rollout + torch.randn_like(rollout) * 0.3).tolist()  # sampled by an older version
        teacher = (torch.tensor(rollout) + torch.randn(len(response)) * 1.5).tolist() if hinted else None
        meta = {"temperature": 1.0, **({"group_advantage": group} if group is not None else {})}
        out.append(Sample(tokens=prompt + response, response_length=len(response), loss_mask=[1] * len(response),
                          rollout_log_probs=rollout, teacher_log_probs=teacher, reward=verdict, metadata=meta))
    return out


def embedded_loss(policy, reference, samples, objective, loss_fn, baseline):
    """The embedded trainer's micro-batch loss (``trainers/step.py``) and its gradient on the policy."""
    from slime_ext.trainers.step import _chunk_loss, collate, response_logprobs

    policy.zero_grad()
    batch = collate(samples, baseline=baseline, objective=objective)
    loss, _ = _chunk_loss(policy, batch, objective, loss_fn, lambda b: response_logprobs(reference, b))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in policy.parameters()]


def slime_loss(policy, reference, samples, objective, cfg, baseline, args_extra):
    """Slime's side: the rollout hook puts each sample's advantage where the loss finds it, Slime builds its
    batch (packed logits of the policy, ``ref_log_probs`` of the reference, ``log_probs`` of the policy before
    the step for TIS), and the custom loss runs; its loss and gradient on the policy."""
    import copy

    from slime_ext.hooks.rollout import carry_advantages
    from slime_ext.logprobs import teacher_forced_logprobs

    carried = [copy.deepcopy(s) for s in samples]
    for s in carried:
        carry_advantages(s, objective, baseline)
    prompts = [len(s.tokens) - s.response_length for s in carried]
    with torch.no_grad():
        ref = [teacher_forced_logprobs(reference, s.tokens, n) for s, n in zip(carried, prompts)]
        old = [teacher_forced_logprobs(policy, s.tokens, n) for s, n in zip(carried, prompts)]
    policy.zero_grad()
    logits = torch.cat([policy(input_ids=torch.tensor([s.tokens])).logits for s in carried], dim=1)
    r = [s.response_length for s in carried]
    batch = {"unconcat_tokens": [torch.tensor(s.tokens) for s in carried], "total_lengths": [len(s.tokens) for s in carried],
             "response_lengths": r, "loss_masks": [torch.tensor(s.loss_mask, dtype=torch.int) for s in carried],
             "rollout_log_probs": [torch.tensor(s.rollout_log_probs) for s in carried],
             "teacher_log_probs": [torch.tensor(s.teacher_log_probs) for s in carried],
             "advantages": [torch.full((n,), float(s.reward)) for s, n in zip(carried, r)],  # grpo, unnormalized
             "ref_log_probs": ref, "log_probs": old}
    args = SimpleNamespace(openclaw_rl=cfg, rollout_temperature=1.0, **args_extra)
    loss, metrics = openclaw_loss(args, batch, logits, sum_of_sample_mean=None)
    assert all(v.dim() == 0 for v in metrics.values())
    (loss / len(samples)).backward()  # Slime divides the summed micro-batch losses by the step's samples
    return loss.detach() / len(samples), [p.grad.clone() for p in policy.parameters()]


PARITY = [  # (method, distill, verdict_credit, baseline) both drivers run
    ("binary", "token", "uniform", 0.0),
    ("binary", "token", "uniform", 0.3),
    ("opd", "token", "uniform", 0.0),
    ("combine", "token", "uniform", 0.0),
    ("combine", "token", "teacher", 0.3),
    ("opd", "topk_select_token", "uniform", 0.0),
    ("combine", "topk_select_token", "uniform", -0.2),
]


@pytest.mark.parametrize("tis", [0.0, 2.0], ids=["no-tis", "tis"])
@pytest.mark.parametrize("method, distill, credit, baseline", PARITY, ids=["-".join(map(str, p)) for p in PARITY])
def test_slime_loss_equals_the_embedded_step_with_kl(slime_loss_module, method, distill, credit, baseline, tis):
    from slime_ext.config import ServeConfig
    from slime_ext.learning.objective import Objective, resolve_policy_loss

    cfg = {"method": method, "distill": distill, "verdict_credit": credit, "w_rl": 0.7, "w_opd": 1.3,
           "opd_clip": 2.0, "kl_coef": 0.2, "tis_cap": tis, "teacher": "policy"}
    objective = Objective.of(ServeConfig(**cfg))
    policy, reference = tiny_policy_and_reference()
    samples = samples_of_a_step(policy)
    loss_fn = resolve_policy_loss("ppo")
    emb, g_emb = embedded_loss(policy, reference, samples, objective, loss_fn, baseline)
    hook, g_hook = slime_loss(policy, reference, samples, objective, cfg, baseline, {"use_kl_loss": True})
    assert float(emb) != 0.0 and torch.allclose(hook, emb, atol=1e-5), (float(hook), float(emb))
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(g_hook, g_emb))


def test_a_users_policy_loss_runs_the_same_on_slime(slime_loss_module, monkeypatch):
    """``policy_loss: module:attr`` (docs/extending.md's template) is the loss on both drivers."""
    from slime_ext.config import ServeConfig
    from slime_ext.learning.objective import Objective, resolve_policy_loss

    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "custom_loss"))
    cfg = {"method": "combine", "policy_loss": "token_mean_loss:token_mean_ppo", "teacher": "policy"}
    objective = Objective.of(ServeConfig(**cfg))
    policy, reference = tiny_policy_and_reference()
    samples = samples_of_a_step(policy)
    loss_fn = resolve_policy_loss(cfg["policy_loss"])
    emb, g_emb = embedded_loss(policy, reference, samples, objective, loss_fn, 0.0)
    hook, g_hook = slime_loss(policy, reference, samples, objective, cfg, 0.0, {})
    assert torch.allclose(hook, emb, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(g_hook, g_emb))


def test_custom_loss_keeps_the_graph_when_nothing_is_trainable(slime_loss_module):
    logits = torch.randn(1, 5, 11, requires_grad=True)
    batch = {"unconcat_tokens": [torch.tensor([1, 2, 3, 4, 5])], "total_lengths": [5], "response_lengths": [2],
             "loss_masks": [torch.zeros(2)], "rollout_log_probs": [torch.zeros(2)], "teacher_log_probs": [torch.zeros(2)],
             "advantages": [torch.ones(2)]}
    loss, _ = openclaw_loss(SimpleNamespace(), batch, logits, None)
    loss.backward()
    assert float(loss) == 0.0 and logits.grad is not None


@pytest.mark.parametrize("cfg, missing", [({"kl_coef": 0.1}, "kl_coef needs Slime's ref_log_probs"),
                                          ({"tis_cap": 2.0}, "tis_cap needs Slime's log_probs")])
def test_the_loss_says_which_slime_flag_a_setting_needs(slime_loss_module, cfg, missing):
    logits = torch.randn(1, 5, 11, requires_grad=True)
    batch = {"unconcat_tokens": [torch.tensor([1, 2, 3, 4, 5])], "total_lengths": [5], "response_lengths": [2],
             "loss_masks": [torch.ones(2)], "rollout_log_probs": [torch.zeros(2)], "teacher_log_probs": [torch.zeros(2)]}
    with pytest.raises(ValueError, match=missing):
        openclaw_loss(SimpleNamespace(openclaw_rl=cfg), batch, logits, None)


# ------------------------------------------------------------------ what Slime is refused, by name
SLIME_ARGS = dict(n_samples_per_prompt=1, rollout_temperature=1.0, eps_clip=0.2, eps_clip_high=0.28)


def refusals(settings, **args):
    cfg = plugin_config(SimpleNamespace(openclaw_rl=settings))
    return slime_refusals(cfg, set(settings), SimpleNamespace(**{**SLIME_ARGS, **args}))


def test_the_launch_scripts_settings_run_on_slime():
    for method in ("binary", "opd", "combine"):
        assert refusals({"method": method, "teacher": "policy", "canary": False}) == []


@pytest.mark.parametrize("key, value", [
    ("canary", True), ("replay_turns", 2), ("sft_coef", 0.5), ("batch_size", 8), ("lr", 1e-5), ("lora_rank", 16),
    ("max_staleness", 2), ("keep_checkpoints", 5), ("topk", 8), ("topk_support", "student"), ("jsd_beta", 0.3),
    ("canary_max_nll_rise", 0.5), ("replay_steps", 3), ("dtype", "bfloat16"), ("threads", 2), ("engine", "sglang"),
])
def test_a_setting_only_the_embedded_trainer_honours_is_refused_naming_it(key, value):
    settings = {"method": "combine", "teacher": "policy", key: value}
    if key == "engine":
        settings["sglang_url"] = "http://x"
    reasons = refusals(settings)
    assert any(r.startswith(f"{key}: ") for r in reasons), reasons


@pytest.mark.parametrize("settings, args, named", [
    ({"distill": "topk"}, {}, "distill: topk needs the teacher's top-k"),
    ({"distill": "jsd"}, {}, "distill: jsd"),
    ({"teacher": "base"}, {}, "teacher: base needs the frozen initial model"),
    ({"judge": "self"}, {}, "judge: self"),
    ({"method": "none"}, {}, "method: none"),
    ({"distill": "topk_select_token", "verdict_credit": "teacher"}, {}, "verdict_credit: teacher with distill"),
    ({"group_size": 4}, {}, "group_size: --n-samples-per-prompt"),
    ({"group_size": 4}, {"n_samples_per_prompt": 4}, "group_temperature: fresh group samples are drawn at 0.7"),
    ({"kl_coef": 0.1}, {}, "kl_coef: 0.1 needs Slime's --use-kl-loss"),
    ({}, {"use_kl_loss": True}, "kl_coef: Slime was given --use-kl-loss"),
    ({"tis_cap": 2.0}, {"use_rollout_logprobs": True}, "tis_cap: needs Slime to recompute"),
    ({}, {"eps_clip": 0.1}, "--eps-clip 0.1"),
    ({}, {"calculate_per_token_loss": True}, "--calculate-per-token-loss"),
    ({}, {"use_opd": True}, "--use-opd"),
    ({}, {"context_parallel_size": 2}, "--context-parallel-size"),
])
def test_what_slime_cannot_run_as_the_embedded_trainer_does_is_refused_naming_it(settings, args, named):
    reasons = refusals({"method": "combine", "teacher": "policy", **settings}, **args)
    assert any(named in r for r in reasons), reasons


def test_settings_that_do_run_on_slime_are_not_refused():
    ok = {"method": "combine", "teacher": "policy", "kl_coef": 0.1, "tis_cap": 2.0, "baseline": "running",
          "verdict_credit": "teacher", "group_size": 4, "group_temperature": 1.0, "distill": "token",
          "teacher_check": True, "unfollowed_hints": "skip", "policy_loss": "ppo", "lora_rank": 0, "canary": False}
    assert refusals(ok, use_kl_loss=True, get_mismatch_metrics=True, use_rollout_logprobs=True,
                    n_samples_per_prompt=4) == []


def test_slime_says_plainly_that_it_runs_without_the_canary():
    cfg = plugin_config(SimpleNamespace(openclaw_rl={"method": "combine"}))
    assert "without the canary gate" in slime_notes(cfg, {"method"})[0]
    assert slime_notes(plugin_config(SimpleNamespace(openclaw_rl={"canary": False})), {"canary"}) == []


def test_the_live_rollout_refuses_before_anything_starts():
    from slime_ext.hooks.rollout import live_source

    args = SimpleNamespace(openclaw_rl={"method": "combine", "teacher": "policy", "port": 1, "sft_coef": 0.5,
                                        "distill": "forward_kl"}, **SLIME_ARGS, sglang_router_ip="127.0.0.1",
                           sglang_router_port=1)
    with pytest.raises(ValueError, match="cannot run on Slime") as e:
        live_source(args)
    assert "sft_coef: " in str(e.value) and "distill: forward_kl" in str(e.value)
