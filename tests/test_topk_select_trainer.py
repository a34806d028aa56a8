"""``--distill topk_select`` in the embedded trainer (tiny model): candidate hints from the hint
votes, the overlap-guided choice recorded per turn, and the top-K OPD term's gradient."""

import json

import pytest
import torch

from slime_ext.judge.hints import candidate_hints
from slime_ext.judge.prompts import HINT_END, HINT_START
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.store import Store
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from tests.test_trainer_loop import record, record_hinted, tiny_model_and_renderer

# the trainer's mechanics, whatever the teacher check says (tiny's random teacher follows no hint; the
# default, unfollowed hints dropped, would leave nothing to train): trained anyway
TRAIN_ANYWAY = TeacherCheckConfig(unfollowed="train")

N_TURNS = 2
LONG = "Always answer in French, please."
SHORT = "Answer in French."


def vote(hint: str) -> tuple[int, str]:
    return 1, f"{HINT_START}{hint}{HINT_END}\n\\boxed{{1}}"


@pytest.fixture
def hinted(tmp_path):
    """Two turns judged -1 whose three hint votes give two distinct hints (the longer one accepted)."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")
    for i in range(N_TURNS):
        record_hinted(store, base, renderer, f"t{i}", f"question {i}", [500 + i, 600 + i, 700 + i, 2], -1, LONG,
                      hint_votes=[vote(LONG), vote(SHORT), vote(LONG.upper())])
    return base, store, renderer, tmp_path / "run"


def trainer_for(hinted, **overrides):
    base, store, renderer, run = hinted
    # topk_select's own defaults: upstream's K 4 over the student's top-K, clip 1.0, 3 candidates
    settings = dict(method="opd", batch_size=N_TURNS, lr=1e-3, lora_rank=8, lora_alpha=16, distill="topk_select",
                    teacher_check=TRAIN_ANYWAY)
    cfg = TrainerConfig(**{**settings, **overrides})
    return OnlineTrainer(wrap_lora(base, cfg), store, run, cfg, renderer=renderer)


def test_a_step_scores_every_candidate_records_the_choice_and_has_gradient(hinted):
    trainer = trainer_for(hinted)
    m = trainer.step()
    assert m["turns"] == N_TURNS and "topk_select_loss" in m
    assert m["grad_norm"] > 0  # method opd with distill topk_select: the top-K OPD term is the only one
    for rec in m["topk_select"]:
        assert rec["candidates"] == [SHORT, LONG]  # distinct (case-insensitive), shortest first
        assert sum(rec["chosen"]) == 4 and len(rec["overlap"]) == 2  # every response position taught by one
        assert rec["chosen"][max(range(2), key=lambda h: rec["overlap"][h])] == 4  # sequence_optimal
    state = json.loads((hinted[3] / "checkpoints" / "v000001" / "trainer_state.json").read_text())
    assert state["metrics"]["topk_select"][0]["candidates"] == [SHORT, LONG]


@pytest.mark.parametrize("overrides, candidates, chosen", [
    ({"topk_select_rule": "shortest", "topk_support": "overlap"}, [SHORT, LONG], [4, 0]),
    ({"hint_m": 1, "topk_support": "teacher", "topk_select_rule": "token_optimal"}, [LONG], [4]),
])
def test_shortest_takes_candidate_zero_and_hint_m_one_the_accepted_hint(hinted, overrides, candidates, chosen):
    m = trainer_for(hinted, **overrides).step()
    assert m["grad_norm"] > 0 and "topk_select_support_size" in m
    assert all(rec["candidates"] == candidates and rec["chosen"] == chosen for rec in m["topk_select"])


def test_with_groups_the_recorded_response_carries_the_top_k_term_and_fresh_members_the_grpo_term(hinted):
    m = trainer_for(hinted, method="combine", group_size=2, group_max_new_tokens=4, group_temperature=1.0).step()
    assert m["groups"] == N_TURNS and m["fresh_samples"] == N_TURNS and len(m["topk_select"]) == N_TURNS
    assert m["grad_norm"] > 0 and m["topk_select_support_size"] == pytest.approx(4.0)


def test_a_turn_without_a_hint_gets_the_top_k_term_against_the_unhinted_teacher(tmp_path):
    """Upstream's recipe: under Combine a turn judged without a hint (the verdict alone) still gets the top-K term,
    against the frozen teacher shown the turn's own prompt: where the policy moved from the base, it pulls back."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")
    messages = [{"role": "user", "content": "question"}]
    record(store, base, "plain", renderer.render(messages, []), [500, 600, 700, 2], 1, messages=messages)
    store.record_verdict("plain", 0, 1, [(1, "test")])
    cfg = TrainerConfig(method="combine", batch_size=1, lr=1e-3, lora_rank=8, lora_alpha=16, distill="topk_select",
                        teacher_check=TRAIN_ANYWAY)
    model = wrap_lora(base, cfg)
    gen = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():  # the policy away from the base, as after earlier steps
        if "lora_B" in name:
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    m = OnlineTrainer(model, store, tmp_path / "run", cfg, renderer=renderer).step()
    assert m["turns"] == 1 and m["hinted_turns"] == 0
    (rec,) = m["topk_select"]
    assert rec["candidates"] == [""] and rec["chosen"] == [4]  # the unhinted teacher taught every position
    assert m["topk_select_abs_advantage"] > 0 and m["topk_select_support_size"] == pytest.approx(4.0)


def test_candidate_hints_rule():
    assert candidate_hints(None, ["a hint here"], 3) == []  # no accepted hint: no candidates
    assert candidate_hints("be brief", ["be brief", "Be brief.", "use bullet points", None, "x y"], 2) == \
        ["x y", "be brief"]  # the accepted one always in, the shortest others; "Be brief." is "be brief"
    assert candidate_hints("be brief", ["use bullet points", "x y"], 3) == ["x y", "be brief", "use bullet points"]
    assert candidate_hints("be brief", ["use bullet points"], 1) == ["be brief"]
    with pytest.raises(ValueError, match="hint_m"):
        candidate_hints("be brief", [], 0)


@pytest.mark.parametrize("overrides, match", [
    ({"hint_m": 2}, "need distill topk_select"),
    ({"distill": "topk", "topk_support": "overlap"}, "need distill topk_select"),
    ({"distill": "topk_select", "method": "binary"}, "topk_select needs method opd or combine"),
    ({"distill": "topk_select", "topk_select_rule": "longest"}, "topk_select_rule 'longest'"),
    ({"distill": "topk_select", "hint_m": -1}, "hint_m must be >= 1"),
    ({"topk": -1}, "topk must be >= 0"),
    ({"opd_clip": -1.0}, "opd_clip > 0"),
])
def test_bad_topk_select_settings_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        TrainerConfig(**overrides).validate()


def test_topk_select_defaults_are_upstreams_recipe_and_the_other_kinds_keep_theirs():
    """Issue 28, item 5: upstream's run_qwen3_4b_openclaw_topk_select.sh runs K 4 over the student's top-K, clip 1.0,
    3 candidate hints; a setting given explicitly wins."""
    from slime_ext.types import TopkSupport

    def resolved(**kw):
        cfg = TrainerConfig(**kw)
        cfg.validate()
        return cfg.distill_topk, cfg.distill_support, cfg.distill_clip, cfg.hint_candidates

    assert resolved(distill="topk_select") == (4, TopkSupport.STUDENT, 1.0, 3)
    assert resolved(distill="topk_select_token") == (20, TopkSupport.TEACHER, 1.0, 1)
    assert resolved() == resolved(distill="forward_kl") == (20, TopkSupport.TEACHER, 5.0, 1)
    assert resolved(distill="topk_select", topk=8, topk_support="overlap", opd_clip=2.0, hint_m=2) == \
        (8, TopkSupport.OVERLAP, 2.0, 2)


def test_serve_flags_map_onto_the_trainer():
    from slime_ext.cli import build_parser, serve_config
    from slime_ext.config import ServeConfig

    args = build_parser().parse_args(["serve", "--distill", "topk_select", "--hint-m", "3", "--topk-select-rule",
                                      "token_optimal", "--topk-support", "overlap", "--topk", "4", "--opd-clip", "1"])
    t = serve_config(args).trainer_config()
    assert (t.distill, t.hint_m, t.topk_select_rule, t.topk_support, t.topk, t.opd_clip) == \
        ("topk_select", 3, "token_optimal", "overlap", 4, 1.0)
    d = ServeConfig().trainer_config()
    assert (d.distill, d.hint_candidates, d.distill_topk, d.distill_clip) == ("token", 1, 20, 5.0)  # opt-in
    with pytest.raises(ValueError, match="need distill topk_select"):
        ServeConfig(hint_m=2).validated()


def test_the_live_rollout_on_slime_refuses_topk_select_by_name():
    from types import SimpleNamespace

    from slime_ext.hooks.rollout import live_source

    args = SimpleNamespace(openclaw_rl={"method": "combine", "teacher": "policy", "port": 1, "distill": "topk_select",
                                        "hint_m": 3}, n_samples_per_prompt=1, sglang_router_ip="127.0.0.1",
                           sglang_router_port=1)
    with pytest.raises(ValueError, match="distill: topk_select needs the teacher's top-k"):
        live_source(args)
