"""What the hinted teacher can teach (``learning/teachability.py``, issue #15 item 6): each hinted
turn's measure and decision are stored, shown by ``records``, ``/healthz`` and ``/metrics``, and a
hint the teacher does not follow trains no teacher term when ``unfollowed: skip``, and nothing at all
(nor is it replayed) when ``unfollowed: drop``."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from slime_ext.learning.scorers import TorchScorer
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.learning.teachability import (
    NOT_FOLLOWED,
    TeacherCheck,
    TeacherChecker,
    decide,
    excluded,
    mean_gap,
    measure,
    median,
)
from slime_ext.store import Store, export_records
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora

# ---------------------------------------------------------------- pure parts


def test_mean_gap_is_the_mean_per_token_difference():
    assert mean_gap([-1.0, -2.0], [-3.0, -3.0]) == pytest.approx(1.5)
    assert mean_gap([-2.0], [-1.0]) == pytest.approx(-1.0)
    assert mean_gap([], []) == 0.0
    with pytest.raises(ValueError, match="2 hinted log-probs but 1"):
        mean_gap([-1.0, -1.0], [-1.0])


def test_median_of_odd_and_even_counts():
    assert median([0.3, -1.0, 0.1]) == pytest.approx(0.1)
    assert median([0.4, 0.0, 0.1, 10.0]) == pytest.approx(0.25)


def test_decision_rule():
    follows, why = decide(0.3, False, 0.15, checks=3)
    assert follows and "+0.300" in why and "median over 3 prompts" in why
    follows, why = decide(0.1, False, 0.15)
    assert not follows and why.startswith(NOT_FOLLOWED + ":") and "< 0.15" in why
    follows, why = decide(5.0, True, 0.15)  # a large gap but the same answer: nothing changes
    assert not follows and "same without the hint" in why


def check(follows: bool) -> TeacherCheck:
    return TeacherCheck(0.0, not follows, 0.0, 1, follows, "x", "", 0)


@pytest.mark.parametrize("method, verdict, strip, drop", [
    ("opd", -1, True, True), ("combine", 0, True, True), ("combine", -1, True, False), ("combine", 1, True, False)])
def test_an_unfollowed_hint_loses_its_teacher_term_and_the_turn_goes_only_when_nothing_is_left(method, verdict, strip, drop):
    skip = TeacherCheckConfig(unfollowed="skip")
    assert excluded(method, verdict, check(False), skip) == (strip, "x" if drop else None)
    assert excluded(method, verdict, check(True), skip) == (False, None)
    assert excluded(method, verdict, check(False), TeacherCheckConfig(unfollowed="train")) == (False, None)


@pytest.mark.parametrize("method, verdict", [("opd", -1), ("combine", 0), ("combine", -1), ("combine", 1)])
def test_drop_leaves_nothing_of_an_unfollowed_hint_whatever_its_verdict(method, verdict):
    drop = TeacherCheckConfig(unfollowed="drop")
    assert excluded(method, verdict, check(False), drop) == (True, "x")
    assert excluded(method, verdict, check(True), drop) == (False, None)


def test_bad_settings_are_refused_by_name():
    from slime_ext.config import ServeConfig

    with pytest.raises(ValueError, match="unfollowed_hints 'forget': expected one of drop, skip, train"):
        ServeConfig(unfollowed_hints="forget").validated()
    with pytest.raises(ValueError, match="teacher_checks_per_hint"):
        ServeConfig(teacher_checks_per_hint=-1).validated()
    with pytest.raises(ValueError, match="teacher_check_tokens"):
        ServeConfig(teacher_check_tokens=0).validated()
    cfg = ServeConfig(teacher_check=False, teacher_min_gap=0.4, teacher_check_tokens=12,
                      unfollowed_hints="skip").trainer_config().teacher_check
    assert cfg == TeacherCheckConfig(enabled=False, min_gap=0.4, max_new_tokens=12, unfollowed="skip")


# ---------------------------------------------------------------- the measure on tiny (random weights: mechanical)


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.models import resolve_model

    model_dir = resolve_model("tiny")
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), tok, PromptRenderer(tok)


def test_a_hint_that_changes_nothing_has_gap_zero_and_the_same_answer(tiny):
    model, _, renderer = tiny
    prompt = renderer.render([{"role": "user", "content": "question"}], [])
    gap, same, answer = measure(TorchScorer.of(model, []), prompt, prompt, max_new_tokens=6)
    assert gap == pytest.approx(0.0, abs=1e-5) and same and len(answer) == 6


def test_checks_are_cached_per_prompt_and_hint_and_decided_by_the_hints_median(tiny):
    from slime_ext.learning.teacher import teacher_prompt_ids

    model, tok, renderer = tiny
    teacher = TorchScorer.of(model, [])
    checker = TeacherChecker(TeacherCheckConfig(min_gap=-100.0, max_new_tokens=4), tok)
    msgs = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    hint = "Answer in one short sentence."
    first = checker.check(teacher, renderer.render(msgs[0], []), teacher_prompt_ids(renderer, msgs[0], hint), hint)
    assert not first.cached and first.seconds > 0 and first.tokens == 4 and first.hint_checks == 1
    assert first.hint_gap == first.gap and first.follows == (not first.same_answer)
    again = checker.check(teacher, renderer.render(msgs[0], []), teacher_prompt_ids(renderer, msgs[0], hint), hint)
    assert again.cached and again.seconds == 0 and again.gap == first.gap and again.hint_checks == 1
    gaps = [first.gap]
    for m in msgs[1:]:
        c = checker.check(teacher, renderer.render(m, []), teacher_prompt_ids(renderer, m, hint), hint)
        gaps.append(c.gap)
    assert c.hint_checks == 3 and c.hint_gap == pytest.approx(median(gaps), abs=1e-4)


def test_a_hint_measured_on_per_hint_prompts_is_decided_by_its_median_without_measuring_again(tiny):
    from slime_ext.learning.teacher import teacher_prompt_ids

    model, tok, renderer = tiny
    teacher = TorchScorer.of(model, [])
    checker = TeacherChecker(TeacherCheckConfig(min_gap=-100.0, max_new_tokens=4, per_hint=2), tok)
    hint = "Be brief."
    msgs = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    checks = [checker.check(teacher, renderer.render(m, []), teacher_prompt_ids(renderer, m, hint), hint) for m in msgs]
    assert [c.cached for c in checks] == [False, False, True] and checks[2].seconds == 0
    assert checks[2].same_answer is None and checks[2].tokens == 0 and checks[2].hint_checks == 2
    assert checks[2].hint_gap == pytest.approx(median([checks[0].gap, checks[1].gap]), abs=1e-4)
    assert checks[2].follows and "not measured on this prompt" in checks[2].reason
    other = checker.check(teacher, renderer.render(msgs[0], []), teacher_prompt_ids(renderer, msgs[0], "Be kind."), "Be kind.")
    assert not other.cached and other.hint_checks == 1  # per hint


# ---------------------------------------------------------------- the trainer


def hinted_store(tmp_path, model, renderer, verdict: int, n: int = 4, hint: str = "Always answer in French."):
    from tests.test_trainer_loop import record_hinted

    store = Store(tmp_path / "run")
    for i in range(n):
        record_hinted(store, model, renderer, f"hinted{i}", f"question {i}", [500 + i, 600 + i, 700 + i], verdict,
                      hint)
    return store


def trainer_for(tmp_path, tiny, method: str, verdict: int, check: TeacherCheckConfig):
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model

    _, _, renderer = tiny
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    store = hinted_store(tmp_path, base, renderer, verdict)
    cfg = TrainerConfig(method=method, batch_size=4, lr=1e-3, lora_rank=4, lora_alpha=8, teacher_check=check)
    return OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, renderer=renderer), store


def turns_of(store):
    return {s["id"]: s["turns"][0] for s in export_records(store.run_dir)["sessions"]}


def test_combine_trains_an_unfollowed_hint_by_its_verdict_only_and_records_why(tmp_path, tiny):
    trainer, store = trainer_for(tmp_path, tiny, "combine", -1, TeacherCheckConfig(min_gap=1e9, unfollowed="skip"))
    m = trainer.step()
    assert m["turns"] == 4 and m["hinted_turns"] == 0 and m["hints_unfollowed"] == 4 and m["teacher_check_s"] > 0
    turns = turns_of(store)
    assert all(t["trained_in_version"] == 1 and t["dropped"] is None for t in turns.values())
    checks = [t["teacher_check"] for t in turns.values()]
    assert all(not c["follows"] and c["reason"].startswith(NOT_FOLLOWED) and c["tokens"] > 0 for c in checks)
    summary = store.teacher_check_summary()
    assert summary["hints_teacher_follows"] == 0 and summary["hints_teacher_cannot_follow"] == 4
    assert [u["hint"] for u in summary["hints_unfollowed_recent"]] == ["Always answer in French."] * 4


def test_opd_drops_a_turn_whose_hint_the_teacher_does_not_follow(tmp_path, tiny):
    trainer, store = trainer_for(tmp_path, tiny, "opd", -1, TeacherCheckConfig(min_gap=1e9, unfollowed="skip"))
    assert trainer.step() is None
    turns = turns_of(store)
    assert all(t["dropped"].startswith(NOT_FOLLOWED + ":") and t["trained_in_version"] is None for t in turns.values())
    assert store.counts()["dropped_by_reason"] == {NOT_FOLLOWED: 4}


def test_serve_by_default_does_not_train_an_unfollowed_hint():
    from slime_ext.config import ServeConfig

    assert ServeConfig().teacher_check.unfollowed == "drop"
    assert ServeConfig().trainer_config().teacher_check.unfollowed == "drop"


def test_combine_drops_a_minus_one_turn_whose_hint_the_teacher_does_not_follow(tmp_path, tiny):
    trainer, store = trainer_for(tmp_path, tiny, "combine", -1, TeacherCheckConfig(min_gap=1e9, unfollowed="drop"))
    assert trainer.step() is None  # all four turns dropped: the -1 verdicts do not train alone
    turns = turns_of(store)
    assert all(t["dropped"].startswith(NOT_FOLLOWED + ":") and t["trained_in_version"] is None for t in turns.values())
    assert store.teacher_check_summary()["hints_teacher_cannot_follow"] == 4


@pytest.mark.parametrize("unfollowed, replayed", [("drop", False), ("skip", False), ("train", True)])
def test_replay_leaves_out_a_preference_the_teacher_does_not_follow(unfollowed, replayed):
    class Checker:
        def follows(self, hint):
            return {"Be brief.": True, "Say Sure!": False}.get(hint)

    from slime_ext.learning.pipeline import Pipeline

    pipeline = Pipeline.__new__(Pipeline)  # only the replay decision: no model, no store
    pipeline.config = TrainerConfig(method="combine", teacher_check=TeacherCheckConfig(unfollowed=unfollowed))
    pipeline.checker = Checker()
    assert pipeline.replays_hint("Be brief.") and pipeline.replays_hint("never measured")
    assert pipeline.replays_hint("Say Sure!") is replayed
    pipeline.config = TrainerConfig(method="combine", teacher_check=TeacherCheckConfig(enabled=False))
    assert pipeline.replays_hint("Say Sure!")  # no check: everything is replayed


def test_train_records_an_unfollowed_hint_and_still_distills_it(tmp_path, tiny):
    trainer, store = trainer_for(tmp_path, tiny, "opd", -1, TeacherCheckConfig(min_gap=1e9, unfollowed="train"))
    m = trainer.step()
    assert m["hinted_turns"] == 4 and m["hints_unfollowed"] == 4
    assert store.teacher_check_summary()["hints_teacher_cannot_follow"] == 4


def test_no_check_no_record(tmp_path, tiny):
    trainer, store = trainer_for(tmp_path, tiny, "opd", -1, TeacherCheckConfig(enabled=False))
    m = trainer.step()
    assert m["hinted_turns"] == 4 and "teacher_check_s" not in m
    assert all(t["teacher_check"] is None for t in turns_of(store).values())


def test_an_older_run_directory_gets_the_table(tmp_path):
    Store(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "records.sqlite")
    conn.execute("DROP TABLE teacher_checks")  # as a run directory written before this table existed
    conn.close()
    store = Store(tmp_path)
    store.record_teacher_check("s", 0, "Be brief.", TeacherCheck(0.1, False, 0.1, 1, False, "why", "x", 1).record())
    assert store.teacher_check_summary()["hints_teacher_cannot_follow"] == 1
    store._exec("DELETE FROM teacher_checks")
    assert store.teacher_check_summary() == {"hints_teacher_follows": 0, "hints_teacher_cannot_follow": 0,
                                             "hints_unfollowed_recent": []}


# ---------------------------------------------------------------- over HTTP: records, /healthz, /metrics


def chat(srv, messages, seed):
    return srv.chat(messages, seed=seed)


def test_server_shows_hints_the_teacher_cannot_follow(make_server):
    srv = make_server(extra=["--method", "opd", "--batch-size", "2", "--no-canary", "--teacher-min-gap", "1000",
                             "--unfollowed-hints", "skip"])
    for i in range(2):
        u = {"role": "user", "content": f"What is the capital of country {i}?"}
        reply = chat(srv, [u], seed=i)["choices"][0]["message"]["content"]
        chat(srv, [u, {"role": "assistant", "content": reply},
                   {"role": "user", "content": "From now on, answer in one short sentence."}], seed=100 + i)
    deadline = time.time() + 120
    while srv.health()["hints_teacher_cannot_follow"] < 2:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.3)
    health = srv.health()
    assert health["hints_teacher_follows"] == 0 and health["trained_turns"] == 0
    recent = health["hints_unfollowed_recent"]
    assert len(recent) == 2 and all(r["hint"] == "Answer in one short sentence." for r in recent)
    assert health["dropped_by_reason"] == {NOT_FOLLOWED: 2}
    with urllib.request.urlopen(srv.base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert "openclaw_hints_teacher_cannot_follow 2" in text and "openclaw_hints_teacher_follows 0" in text
    turns = [t for s in srv.records()["sessions"] for t in s["turns"] if t["hint"]]
    assert len(turns) == 2 and all(t["teacher_check"]["follows"] is False for t in turns)
    out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(srv.run_dir)],
                         capture_output=True, text=True, check=True).stdout
    assert out.count("teacher DOES NOT FOLLOW the hint (median gap") == 2 and out.count(f"dropped: {NOT_FOLLOWED}: ") == 2


# ---------------------------------------------------------------- the default threshold on the real model


@pytest.mark.slow
def test_smollm2_follows_one_short_sentence_and_not_lowercase():
    """The measurement behind ``min_gap`` (docs/learning.md): over eight short questions, the hint
    "Answer in one short sentence." adds a median of about 0.26 nats/token to SmolLM2's own greedy
    answers, "Write everything in lowercase." about 0.06 (it never writes lowercase); the default
    threshold sits between them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.teachability import QUESTIONS
    from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
    from slime_ext.learning.teacher import teacher_prompt_ids
    from slime_ext.models import resolve_model

    model_dir = str(resolve_model("smollm2-135m"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    renderer = PromptRenderer(tok)
    checker = TeacherChecker(TeacherCheckConfig(per_hint=0), tok)
    teacher = TorchScorer.of(model, stop_token_ids(tok))
    hints = ["Answer in one short sentence.", "Write everything in lowercase."]
    for hint in hints:
        for q in QUESTIONS:
            msgs = [{"role": "user", "content": q}]
            checker.check(teacher, renderer.render(msgs, []), teacher_prompt_ids(renderer, msgs, hint), hint)
    sentence, lowercase = (median(list(checker.gaps[h].values())) for h in hints)
    assert sentence > TeacherCheckConfig().min_gap > lowercase, (sentence, lowercase)
