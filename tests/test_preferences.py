"""Preferences persist and are replayed (#15 item 5): accepted hints kept per user, deduplicated and
capped; the trainer replays a user's earlier prompts under all of that user's standing preferences,
with several optimizer passes per step within a time budget; another user's preferences never leak."""

import json
import time
import urllib.request

import pytest

import slime_ext.store as store_module
from slime_ext.cli import main as cli_main
from slime_ext.judge.worker import is_standing_preference, standing_part
from slime_ext.learning.example import Example
from slime_ext.learning.replay import replay_examples
from slime_ext.learning.settings import ReplayConfig, TeacherCheckConfig
from slime_ext.learning.teacher import HINT_BLOCK, hint_text, teacher_messages
from slime_ext.store import Store, export_records
from slime_ext.trainers import loop
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from slime_ext.types import Turn
from tests.test_trainer_loop import tiny_model_and_renderer

ALICE = ["Start every answer with 'Sure!'.", "End every answer with a question."]
BOB = "Answer in French."


def add_turn(store, sid, user, idx=0, prompt=(1, 2, 3), response=(4, 5), content="question", version=0):
    store.create_session(sid, user, "header")
    store.insert_turn(Turn(session_id=sid, index=idx, main_line=True, reason="test", request_id=f"r-{sid}-{idx}",
                           user=user, prompt_token_ids=list(prompt), response_token_ids=list(response),
                           response_logprobs=[-1.0] * len(response), response_text="x", policy_version=version,
                           policy_version_end=version, finish_reason="stop",
                           messages=[{"role": "user", "content": content}], reply_key=f"{sid}-{idx}"))


def judge(store, sid, hint, verdict=-1, standing=True, idx=0):
    store.set_next_state(sid, idx, "feedback", "user")
    store.record_verdict(sid, idx, verdict, [(verdict, "t")], hint=hint, hint_votes=[(1, "t")], standing=standing)


# ------------------------------------------------------------------ store

def test_preferences_are_kept_per_user_deduplicated_and_standing_once_stated_so(tmp_path):
    store = Store(tmp_path / "run")
    for sid, user in (("a1", "alice"), ("a2", "alice"), ("a3", "alice"), ("b1", "bob")):
        add_turn(store, sid, user)
    judge(store, "a1", "  Start every answer with 'Sure!'.", standing=False)
    judge(store, "a2", "start every answer with 'sure!'", standing=True)  # the same preference again
    judge(store, "b1", BOB)
    judge(store, "a3", None)  # no hint: no preference
    alice = store.preferences("alice")
    assert [p["hint"] for p in alice] == ["Start every answer with 'Sure!'."]  # first wording kept
    assert alice[0]["standing"] and alice[0]["times"] == 2 and (alice[0]["session_id"], alice[0]["turn"]) == ("a2", 0)
    assert [p["hint"] for p in store.preferences("bob")] == [BOB]
    assert store.preferences("carol") == [] and store.preferences(None) == []
    assert store.preference_counts() == {"alice": {"preferences": 1, "standing": 1},
                                         "bob": {"preferences": 1, "standing": 1}}
    exported = export_records(tmp_path / "run")["preferences"]
    assert set(exported) == {"alice", "bob"} and exported["bob"][0]["hint"] == BOB


def test_the_least_recently_stated_preference_is_dropped_past_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "PREFERENCES_PER_USER", 2)
    store = Store(tmp_path / "run")
    for i in range(4):
        add_turn(store, f"s{i}", "alice")
    judge(store, "s0", "hint zero")
    judge(store, "s1", "hint one")
    judge(store, "s2", "Hint zero!")  # restated: now the most recent
    judge(store, "s3", "hint two")
    assert [p["hint"] for p in store.preferences("alice")] == ["hint zero", "hint two"]
    assert [p["hint"] for p in store.preferences("alice", standing_only=True)] == ["hint zero", "hint two"]


def test_an_older_run_directory_gains_the_preferences_table(tmp_path):
    Store(tmp_path / "run").close()
    import sqlite3

    conn = sqlite3.connect(tmp_path / "run" / "records.sqlite")
    conn.execute("DROP TABLE preferences")
    conn.commit()
    conn.close()
    store = Store(tmp_path / "run")
    add_turn(store, "s", "alice")
    judge(store, "s", "a hint")
    assert [p["hint"] for p in store.preferences("alice")] == ["a hint"]


def test_the_worker_marks_standing_preferences_by_the_heuristic_rule():
    assert is_standing_preference("From now on, start every answer with 'Sure!'", "user")
    assert is_standing_preference("Please always answer in one short sentence.", "user")
    assert not is_standing_preference("That's wrong, the capital is Paris.", "user")
    assert not is_standing_preference("error: from now on always fails", "tool")


@pytest.mark.parametrize("said, kept", [
    ("The answer is 42, not 40. From now on, show your working.", "Show your working."),
    ("Use the student's name, Lena, in the comment. Please always encourage them.", "Always encourage them."),
    ("From now on, answer in one short sentence.", None),  # all of it standing: the accepted hint, as before
    ("Next time, keep it under 10 words. Always answer in English.", None),
])
def test_a_standing_preference_keeps_only_what_the_user_stated_for_every_answer(said, kept):
    """A message that corrects this answer and states a standing preference: the memory keeps the latter only (the
    correct answer 42, or Lena's name, would be wrong in every later answer); the turn keeps its whole hint."""
    assert standing_part(said, "THE ACCEPTED HINT") == (kept or "THE ACCEPTED HINT")


async def test_the_judge_worker_stores_the_standing_part_as_the_preference_and_the_whole_hint_on_the_turn(tmp_path):
    from slime_ext.judge.backends import HeuristicBackend, Judge
    from slime_ext.judge.hints import HintJudge
    from slime_ext.judge.worker import JudgeWorker

    store = Store(tmp_path / "run")
    add_turn(store, "s", "alice")
    said = "The answer is 42, not 40. From now on, show your working."
    store.set_next_state("s", 0, said, "user")
    judge = Judge(HeuristicBackend())
    assert await JudgeWorker(judge, store, hints=HintJudge.from_judge(judge)).run_once() == 1
    (pref,) = store.preferences("alice")
    assert pref["hint"] == "Show your working." and pref["standing"]
    turn = export_records(store.run_dir)["sessions"][0]["turns"][0]
    assert "42" in turn["hint"] and "working" in turn["hint"]  # the turn's teacher still sees all of it


# ------------------------------------------------------------------ teacher prompt

def test_several_hints_render_in_one_block_in_order_and_one_hint_as_before():
    msgs = [{"role": "user", "content": "q"}]
    assert teacher_messages(msgs, ALICE)[0]["content"] == "q" + HINT_BLOCK.format(hint="\n".join(ALICE))
    assert teacher_messages(msgs, [" only one "]) == teacher_messages(msgs, "only one")
    assert hint_text(["a", " ", "b"]) == "a\nb"
    with pytest.raises(ValueError, match="empty"):
        teacher_messages(msgs, ["", "  "])


def test_replay_settings_are_checked_by_name():
    with pytest.raises(ValueError, match="replay_steps"):
        ReplayConfig(steps=0).validate("opd")
    with pytest.raises(ValueError, match="replay_turns > 0 needs method opd or combine"):
        ReplayConfig(turns=2).validate("binary")
    with pytest.raises(ValueError, match="distill topk_select"):
        TrainerConfig(method="combine", distill="topk_select", replay_turns=2).validate()
    with pytest.raises(ValueError, match="replay_budget_s"):
        TrainerConfig(replay_budget_s=0).validate()


# ------------------------------------------------------------------ trainer (tiny model)

@pytest.fixture
def users(tmp_path):
    """Tiny model; alice has three earlier turns and two new hinted ones, bob one earlier and one hinted."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")

    def turn(sid, user, content):
        prompt = renderer.render([{"role": "user", "content": content}], [])
        add_turn(store, sid, user, prompt=prompt, response=(500, 600, 2), content=content)

    for i in range(3):
        turn(f"alice-old{i}", "alice", f"alice asks {i}")
    turn("bob-old", "bob", "bob asks")
    for i, hint in enumerate(ALICE):
        turn(f"alice-new{i}", "alice", f"alice corrects {i}")
        judge(store, f"alice-new{i}", hint)
    turn("bob-new", "bob", "bob corrects")
    judge(store, "bob-new", BOB)
    return base, store, renderer, tmp_path / "run"


def trainer_for(users, turns=0, steps=1, budget_s=5.0):
    base, store, renderer, run = users
    cfg = TrainerConfig(method="opd", batch_size=2, lr=1e-3, lora_rank=8, lora_alpha=16,
                        teacher_check=TeacherCheckConfig(enabled=False), replay_turns=turns,
                        replay_steps=steps, replay_budget_s=budget_s)
    return OnlineTrainer(wrap_lora(base, cfg), store, run, cfg, renderer=renderer)


def spy_train_step(monkeypatch):
    calls = []
    real = loop.train_step

    def spy(model, optimizer, samples, *a, **k):
        calls.append(list(samples))
        return real(model, optimizer, samples, *a, **k)

    monkeypatch.setattr(loop, "train_step", spy)
    return calls


def test_replay_teaches_the_users_earlier_turns_under_all_their_preferences_in_k_passes(users, monkeypatch):
    calls = spy_train_step(monkeypatch)
    trainer = trainer_for(users, turns=2, steps=3, budget_s=60)
    m = trainer.step()
    assert m["turns"] == 2 and m["replayed_turns"] == 2 and m["replay_passes"] == 3 and m["replay_s"] > 0
    assert len(calls) == 3 and all(c == calls[0] for c in calls)  # K passes over the same samples
    batch = [s for s in calls[0] if not s.metadata.get("replay")]
    replayed = [s for s in calls[0] if s.metadata.get("replay")]
    assert {s.metadata["session_id"] for s in batch} == {"alice-new0", "alice-new1"}
    assert [s.metadata["session_id"] for s in replayed] == ["alice-old2", "alice-old1"]  # newest first, not the batch
    tokenizer = trainer.renderer.tokenizer
    for s in replayed:
        text = tokenizer.decode(s.metadata["teacher_prompt_ids"])
        assert text.index(ALICE[0]) < text.index(ALICE[1]) and BOB not in text  # every preference, in order
        assert s.reward == 0.0 and len(s.teacher_log_probs) == s.response_length == 3
    state = json.loads((users[3] / "checkpoints" / "v000001" / "trainer_state.json").read_text())
    assert state["metrics"]["replayed_turns"] == 2 and state["turns"] == [["alice-new0", 0], ["alice-new1", 0]]
    assert state["metrics"]["replayed"] == [["alice-old2", 0], ["alice-old1", 0]]
    # the replayed turns keep their own (absent) teacher log-probs: the replay's are not stored
    assert all(r["teacher_logprobs"] is None for r in users[1].replay_turns("alice", set(), 10)
               if r["session_id"].startswith("alice-old"))


def replay_rows(store, rows, limit, **kw):
    """(session id, preferences) of the turns replay would re-teach after ``rows``."""
    return [(ex.session_id, hints) for ex, hints in replay_examples(store, [Example.from_row(r) for r in rows], limit,
                                                                    **kw)]


def test_bob_is_replayed_under_his_preference_only(users):
    bob = users[1].trainable_turns(10)[-1:]
    assert bob[0]["session_id"] == "bob-new"
    pairs = replay_rows(users[1], bob, 5)
    assert pairs == [("bob-old", [BOB])]  # none of alice's
    both = users[1].trainable_turns(10)
    assert {sid for sid, _ in replay_rows(users[1], both, 5)} == {"alice-old0", "alice-old1", "alice-old2", "bob-old"}
    assert all((BOB in hints) == sid.startswith("bob") for sid, hints in replay_rows(users[1], both, 5))


def test_a_preference_left_out_is_not_replayed_and_a_user_left_with_none_is_not_either(users):
    both = users[1].trainable_turns(10)
    pairs = replay_rows(users[1], both, 5, keep=lambda hint: hint != ALICE[0])
    assert dict(pairs)["alice-old0"] == [ALICE[1]]
    pairs = replay_rows(users[1], both, 5, keep=lambda hint: hint == BOB)
    assert pairs == [("bob-old", [BOB])]


def test_no_pass_starts_once_the_budget_is_spent(users, monkeypatch):
    calls = spy_train_step(monkeypatch)
    m = trainer_for(users, turns=2, steps=5, budget_s=1e-6).step()
    assert len(calls) == 1 and m["replay_passes"] == 1 and m["replayed_turns"] == 2


def test_replay_off_changes_nothing(users, monkeypatch):
    calls = spy_train_step(monkeypatch)
    m = trainer_for(users).step()
    assert len(calls) == 1 and len(calls[0]) == 2 and not any(s.metadata.get("replay") for s in calls[0])
    assert not any(k.startswith("replay") for k in m)


# ------------------------------------------------------------------ a real server, two users

def chat(srv, key, messages):
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": 4, "seed": 1}).encode()
    req = urllib.request.Request(srv.url + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["message"]


def test_a_users_preferences_are_theirs_alone_through_the_server(make_server, tmp_path, capsys):
    srv = make_server(extra=["--user-key", "alice=key-a", "--user-key", "bob=key-b", "--method", "opd",
                             "--batch-size", "1000"])
    for key, question, feedback in (("key-a", "What is 2+2?", "From now on, start every answer with 'Sure!'"),
                                    ("key-b", "Name a color.", "Please always answer in one short sentence.")):
        first = [{"role": "user", "content": question}]
        reply = chat(srv, key, first)
        chat(srv, key, [*first, {"role": "assistant", "content": reply["content"]}, {"role": "user", "content": feedback}])
    deadline = time.time() + 60
    while time.time() < deadline and srv.health()["judged_turns"] < 2:
        time.sleep(0.5)
    # each user's key shows that user's own preferences, and only theirs; no key shows no one's
    assert srv.health("key-a")["preferences_by_user"] == {"alice": {"preferences": 1, "standing": 1}}
    assert srv.health("key-b")["preferences_by_user"] == {"bob": {"preferences": 1, "standing": 1}}
    assert "preferences_by_user" not in srv.health()
    prefs = srv.records()["preferences"]
    assert "sure!" in prefs["alice"][0]["hint"].lower() and "sure" not in prefs["bob"][0]["hint"].lower()
    assert "short sentence" in prefs["bob"][0]["hint"] and prefs["alice"][0]["standing"]
    assert cli_main(["records", "--run-dir", str(srv.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "preferences of alice: 1" in out and "preferences of bob: 1" in out and "standing" in out


def test_each_users_replay_holds_only_their_own_turns_through_the_server(make_server):
    srv = make_server(extra=["--user-key", "alice=key-a", "--user-key", "bob=key-b", "--method", "opd",
                             "--batch-size", "1", "--replay-turns", "3", "--replay-steps", "2", "--no-canary",
                             "--no-teacher-check"])
    for key, question, feedback in (("key-a", "What is 2+2?", "From now on, start every answer with 'Sure!'"),
                                    ("key-b", "Name a color.", "Please always answer in one short sentence."),
                                    ("key-a", "Name a fruit.", "Going forward, end every answer with a question."),
                                    ("key-b", "Name a city.", "From now on, answer in French.")):
        first = [{"role": "user", "content": question}]
        reply = chat(srv, key, first)
        chat(srv, key, [*first, {"role": "assistant", "content": reply["content"]}, {"role": "user", "content": feedback}])
    deadline = time.time() + 120
    while time.time() < deadline and srv.health()["trained_turns"] < 4:
        time.sleep(0.5)
    owner = {s["id"]: s["user"] for s in srv.records()["sessions"]}
    states = [json.loads(p.read_text()) for p in sorted((srv.run_dir / "checkpoints").glob("v*/trainer_state.json"))]
    assert len(states) == 4, srv.log_tail()
    replayed_any = 0
    for state in states:
        (sid, _), = state["turns"]
        replayed = state["metrics"]["replayed"]
        assert all(owner[r[0]] == owner[sid] for r in replayed), (owner, state)  # never another user's turn
        assert state["metrics"]["replay_passes"] >= 1
        replayed_any += len(replayed)
    assert replayed_any > 0
