"""Groups of fresh on-policy samples in the embedded trainer (tiny model): members, log-probs,
rewards, constant groups, and the distillation term at every position of every member."""

import pytest
import torch

from slime_ext.learning.example import Example
from slime_ext.learning.select import select
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.store import Store
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from tests.test_trainer_loop import record_hinted, tiny_model_and_renderer

# the trainer's mechanics, whatever the teacher check says (tiny's random teacher follows no hint; the
# default, unfollowed hints dropped, would leave nothing to train): trained anyway
TRAIN_ANYWAY = TeacherCheckConfig(unfollowed="train")

N_TURNS = 4


@pytest.fixture
def hinted(tmp_path):
    """A store with four hinted turns (verdict -1, a hint) on the tiny model, and its renderer."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")
    for i in range(N_TURNS):
        record_hinted(store, base, renderer, f"hinted{i}", f"question {i}", [500 + i, 600 + i, 2], -1,
                      "Always answer in French.")
    return base, store, renderer, tmp_path / "run"


def trainer_for(hinted, **overrides):
    base, store, renderer, run = hinted
    settings = dict(method="combine", batch_size=N_TURNS, lr=1e-3, lora_rank=8, lora_alpha=16, distill="forward_kl",
                    topk=20, group_size=3, group_max_new_tokens=6, group_temperature=1.0,
                    teacher_check=TRAIN_ANYWAY)
    cfg = TrainerConfig(**{**settings, **overrides})
    return OnlineTrainer(wrap_lora(base, cfg), store, run, cfg, renderer=renderer)


def prepared(trainer):
    """The pipeline's output for the waiting turns, as the trainer's step gets it."""
    candidates, _ = select([Example.from_row(r) for r in trainer.store.trainable_turns(16)], trainer.config.method, 0)
    return trainer.pipeline.prepare(candidates, N_TURNS, N_TURNS, 0)


def test_each_hinted_turn_gets_n_members_with_on_policy_logprobs_and_teacher_topk(hinted):
    trainer = trainer_for(hinted)
    p = prepared(trainer)
    samples, groups, rows = p.samples, p.metrics["group_records"], p.taken
    assert len(samples) == 3 * N_TURNS and len(groups) == N_TURNS
    for g in range(N_TURNS):
        recorded, *fresh = samples[3 * g: 3 * g + 3]
        assert not recorded.metadata.get("fresh") and recorded.rollout_log_probs == rows[g].rollout_logprobs
        assert recorded.reward == -1.0 and groups[g]["rewards"][0] == -1.0
        for s in fresh:
            prompt_len = len(s.tokens) - s.response_length
            assert s.tokens[:prompt_len] == rows[g].prompt_ids and 1 <= s.response_length <= 6
            assert s.loss_mask == [1] * s.response_length and s.metadata["policy_version"] == 0
            expected = teacher_forced_logprobs(trainer.model, s.tokens, prompt_len)
            assert torch.allclose(torch.tensor(s.rollout_log_probs), expected, atol=1e-5)
            ids, lps = s.metadata["teacher_topk"]
            assert ids.shape == lps.shape == (s.response_length, 20) and len(s.teacher_log_probs) == s.response_length
            assert -1 < s.reward < 1  # the implicit reward
        advantages = [m.metadata["group_advantage"] for m in (recorded, *fresh)]
        assert sum(advantages) == pytest.approx(0, abs=1e-6) and advantages[0] < 0  # the corrected answer is worst


def test_a_grouped_step_trains_every_member_with_ratio_one_and_records_the_groups(hinted):
    trainer = trainer_for(hinted)
    m = trainer.step()
    assert m["turns"] == N_TURNS and m["groups"] == N_TURNS and m["fresh_samples"] == 2 * N_TURNS
    assert m["constant_groups"] == 0 and m["grad_norm"] > 0 and "topk_forward_kl" in m
    assert abs(m["ratio_min"] - 1) < 1e-4 and abs(m["ratio_max"] - 1) < 1e-4  # fresh samples are on-policy
    state = (hinted[3] / "checkpoints" / "v000001" / "trainer_state.json").read_text()
    assert '"group_records"' in state and '"rewards"' in state


def test_constant_groups_are_dropped_from_the_rl_term_and_recorded(hinted, monkeypatch):
    import slime_ext.learning.groups as groups

    monkeypatch.setattr(groups, "implicit_reward", lambda *a, **k: -1.0)  # every member scores like the verdict
    trainer = trainer_for(hinted, distill="token")
    m = trainer.step()
    assert m["constant_groups"] == N_TURNS and all("constant rewards" in g["dropped"] for g in m["group_records"])
    assert m["grad_norm"] > 0  # the token-level teacher term still trains the members


def test_group_size_one_keeps_todays_samples(hinted):
    trainer = trainer_for(hinted, group_size=1)
    p = prepared(trainer)
    samples = p.samples
    assert len(samples) == N_TURNS and "group_records" not in p.metrics
    assert all("group_advantage" not in s.metadata for s in samples)


@pytest.mark.parametrize("overrides, match", [({"distill": "kl"}, "distill 'kl'"), ({"jsd_beta": 2.0}, "jsd_beta"),
                                              ({"group_size": 0}, "group_size"),
                                              ({"group_estimator": "ppo"}, "group_estimator"),
                                              ({"method": "binary", "group_size": 4}, "group_size > 1 and sft_coef need")])
def test_bad_group_and_distill_settings_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        TrainerConfig(**overrides).validate()


def test_cached_sampling_is_the_models_own_distribution_and_stops_at_a_stop_token(hinted):
    from slime_ext.learning.scorers import sample_responses
    from slime_ext.logprobs import teacher_forced_logits

    base, _, _, _ = hinted
    prompt = [11, 12, 13, 14]
    greedy = sample_responses(base, prompt, 2, temperature=0.0, max_new_tokens=6, stop_ids=[])
    assert greedy[0] == greedy[1] == [14, 14, 14, 25409, 25409, 25409]  # the tiny random model's greedy answer
    logits = teacher_forced_logits(base, prompt + greedy[0], len(prompt))
    assert logits.argmax(-1).tolist() == greedy[0]  # each token is the uncached forward's argmax
    stopped = sample_responses(base, prompt, 2, temperature=0.0, max_new_tokens=6, stop_ids=[25409])
    assert stopped == [[14, 14, 14, 25409]] * 2  # the stop token is kept and ends the response
    g = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    hot = sample_responses(base, prompt, 3, temperature=1.0, max_new_tokens=4, stop_ids=[], generator=g())
    assert hot == sample_responses(base, prompt, 3, temperature=1.0, max_new_tokens=4, stop_ids=[], generator=g())


def test_collate_takes_a_members_group_advantage_in_place_of_its_reward():
    from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig
    from slime_ext.learning.objective import Objective
    from slime_ext.trainers.step import collate
    from slime_ext.types import Distill, Sample

    def sample(**metadata):
        return Sample(tokens=[1, 2, 3, 4], response_length=2, loss_mask=[1, 1], rollout_log_probs=[-1.0, -2.0],
                      teacher_log_probs=[-0.5, -2.5], reward=-1.0, metadata=metadata)

    w = AdvantageWeights.for_method("combine", 1.0, 1.0, 5.0)
    batch = collate([sample(group_advantage=0.75), sample()], baseline=0.25,
                    objective=Objective(w, Distill.TOKEN, PolicyLossConfig()))
    assert batch.advantages[0].tolist() == pytest.approx([0.75 + 0.5, 0.75 - 0.5])  # no baseline on a group member
    assert batch.advantages[1].tolist() == pytest.approx([-1.25 + 0.5, -1.25 - 0.5])


def test_serve_flags_map_onto_the_trainer_and_bad_ones_are_named():
    from slime_ext.cli import build_parser, serve_config

    args = build_parser().parse_args(["serve", "--distill", "jsd", "--jsd-beta", "0.3", "--group-size", "4",
                                      "--group-temperature", "0.5", "--group-max-new-tokens", "32",
                                      "--group-estimator", "drgrpo", "--implicit-reward-scale", "2", "--sft-coef",
                                      "0.5", "--sft-samples", "2"])
    t = serve_config(args).trainer_config()
    g = t.groups
    assert (t.distill, t.jsd_beta, t.distill.divergence, g.size, g.temperature, g.max_new_tokens, g.estimator,
            g.reward_scale) == ("jsd", 0.3, "jsd", 4, 0.5, 32, "drgrpo", 2.0)
    assert (t.sft_coef, t.sft_samples) == (0.5, 2)
    from slime_ext.config import ServeConfig

    d = ServeConfig().trainer_config()
    assert (d.groups.size, d.distill) == (1, "token")  # opt-in: today's behaviour by default
    for bad, named in [({"method": "binary", "group_size": 4}, "group_size > 1 and sft_coef need"), ({"jsd_beta": -1}, "jsd_beta"),
                       ({"distill": "kl"}, "distill 'kl'"), ({"implicit_reward_scale": 0}, "implicit_reward_scale"),
                       ({"sft_coef": -1}, "sft_coef"), ({"method": "binary", "sft_coef": 1}, "sft_coef need")]:
        with pytest.raises(ValueError, match=named):
            ServeConfig(**bad).validated()


def test_context_distillation_trains_the_hinted_teachers_own_answer_after_the_students_prompt(hinted):
    """sft_coef > 0: per hinted turn, the base model's answer to the *hinted* prompt (greedy here),
    EOS kept, is put after the student's prompt and trained as SFT: its likelihood rises."""
    from slime_ext.learning.scorers import sample_responses

    trainer = trainer_for(hinted, group_size=1, distill="token", sft_coef=1.0, sft_samples=1, group_temperature=0.0,
                          w_rl=0.0, w_opd=0.0, lr=1e-2)
    p = prepared(trainer)
    samples = p.samples
    demos = [s for s in samples if s.metadata.get("sft")]
    assert len(samples) == 2 * N_TURNS and len(demos) == N_TURNS and "group_records" not in p.metrics
    ex, demo = p.taken[0], demos[0]
    expected = sample_responses(trainer.model, ex.teaching.prompt_ids, 1, temperature=0.0, max_new_tokens=6,
                                stop_ids=[2])[0]  # LoRA starts at zero: the current model is the base teacher
    prompt_len = len(demo.tokens) - demo.response_length
    assert demo.tokens[:prompt_len] == ex.prompt_ids and demo.tokens[prompt_len:] == expected
    before = teacher_forced_logprobs(trainer.model, demo.tokens, prompt_len)
    assert torch.allclose(torch.tensor(demo.rollout_log_probs), before, atol=1e-5)  # ratio 1
    m = trainer.step()  # w_rl = w_opd = 0: only the SFT term moves the model
    assert m["sft_samples"] == N_TURNS and m["sft_tokens"] > 0
    after = teacher_forced_logprobs(trainer.model, demo.tokens, prompt_len)
    assert after.sum() > before.sum() + 0.1
