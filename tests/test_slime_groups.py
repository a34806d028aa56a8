"""Groups through Slime's live rollout (``group_size`` = ``--n-samples-per-prompt`` > 1), driven on
CPU with the SGLang engine client against the SGLang-protocol test server on tiny."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from slime_ext.hooks.reward import post_process_rewards
from slime_ext.hooks.rollout import live_rollout, live_source
from slime_ext.types import Sample
from tests.test_slime_rollout import FEEDBACK, converse, sglang_source  # noqa: F401  (a fixture)


def test_each_turn_is_a_group_hinted_ones_with_fresh_samples_unhinted_ones_padded(sglang_source, monkeypatch):  # noqa: F811
    src = sglang_source("combine", teacher="policy", group_size=3, group_max_new_tokens=4, group_temperature=1.0,
                        teacher_check=False)
    args = SimpleNamespace(openclaw_rl={"method": "combine"}, rollout_batch_size=3, n_samples_per_prompt=3)
    monkeypatch.setattr("slime_ext.hooks.rollout.live_source", lambda a: src)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", live_rollout(args, 0, None)))
    t.start()
    converse(src.port, 4)
    t.join(180)
    out = result["out"]
    assert len(out.samples) == 3 and all(len(g) == 3 for g in out.samples)
    taught = [ex.teaching is not None for ex in src.taken]
    hinted = [g for g, yes in zip(out.samples, taught) if yes]
    plain = [g for g, yes in zip(out.samples, taught) if not yes]
    assert len(hinted) == 1 and len(plain) == 2  # FEEDBACK[1] is the one correction with a hint
    recorded, *fresh = hinted[0]
    assert recorded.metadata["raw_reward"] == -1.0 and all(f.metadata["fresh"] for f in fresh)
    for f in fresh:
        assert 1 <= f.response_length <= 4 and len(f.rollout_log_probs) == len(f.teacher_log_probs) \
            == len(f.loss_mask) == f.response_length and sum(f.loss_mask) == f.response_length
        assert f.tokens[: len(f.tokens) - f.response_length] == recorded.tokens[: len(recorded.tokens) - recorded.response_length]
        assert -1 < f.metadata["raw_reward"] < 1 and f.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    advantages = [m.metadata["group_advantage"] for m in hinted[0]]
    assert sum(advantages) == pytest.approx(0, abs=1e-6) and advantages[0] < 0  # GRPO advantages, the -1 lowest
    for g in plain:  # no teacher: the recorded verdict on every token, two copies that train nothing
        advantage = [t - r for t, r in zip(g[0].teacher_log_probs, g[0].rollout_log_probs)]
        assert g[0].reward in (1.0, -1.0) and advantage == pytest.approx([g[0].reward] * g[0].response_length)
        assert all(p.metadata["padding"] and sum(p.loss_mask) == 0 and p.reward == 0 for p in g[1:])
    assert len({s.index for g in out.samples for s in g}) == 9
    raw, _ = post_process_rewards(args, [s for g in out.samples for s in g])
    assert raw[:3] == [s.metadata["raw_reward"] for s in out.samples[0]]
    m = out.metrics
    assert m["openclaw/groups"] == 1 and m["openclaw/fresh_samples"] == 2 and m["openclaw/constant_groups"] == 0
    assert m["openclaw/reward_mean"] == pytest.approx(sum(ex.verdict for ex in src.taken) / 3)


def test_n_samples_per_prompt_must_equal_the_group_size():
    args = SimpleNamespace(openclaw_rl={"method": "combine", "teacher": "policy", "group_size": 4, "port": 1},
                           n_samples_per_prompt=1, sglang_router_ip="127.0.0.1", sglang_router_port=1)
    with pytest.raises(ValueError, match="--n-samples-per-prompt .1. must equal group_size .4."):
        live_source(args)
