"""``POST /v1/feedback``: a user's explicit verdict (and hint) on one of their replies, through real HTTP.

It must land where an inferred verdict lands (the turn's verdict and hint, which the trainer reads, and the user's
preferences), win over what the judge infers from the next message, stay within the caller's own replies, and
train: a -1 with a hint reaches the trainer as a hinted turn.
"""

from __future__ import annotations

import csv
import subprocess
import sys

from openai import OpenAI
from test_dashboard import call
from test_learning_e2e import wait

KEYS = ["--user-key", "alice=ak", "--user-key", "bob=bk"]


def post(srv, path, body, key="anything"):  # a server without keys takes any token, as the one local user
    return call(srv, "POST", path, key, body)


def turn_of(srv, response_id):
    return next(t for s in srv.records()["sessions"] for t in s["turns"] if t["request_id"] == response_id)


def test_explicit_feedback_is_the_turns_verdict_and_hint_and_the_judge_does_not_override_it(make_server):
    # the judge runs (heuristic), nothing trains (a batch never fills)
    srv = make_server(extra=["--method", "binary", "--batch-size", "64", "--judge", "heuristic", *KEYS])
    alice = OpenAI(base_url=srv.url, api_key="ak")
    question = [{"role": "user", "content": "Tell me about the sea."}]
    reply = alice.chat.completions.create(model="policy", messages=question, max_tokens=6)

    status, out = post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": "bad",
                                              "hint": "From now on, answer in one short sentence."}, "ak")
    assert status == 200, out
    assert out["verdict"] == -1 and out["standing"] is True and out["batch_size"] == 64
    assert out["replaced_verdict"] is None and out["served_by_version"] == 0 and out["waiting_to_train"] == 1

    # the next message would be judged +1; the user's own verdict stands
    follow = [*question, {"role": "assistant", "content": reply.choices[0].message.content},
              {"role": "user", "content": "Thanks, perfect!"}]
    second = alice.chat.completions.create(model="policy", messages=follow, max_tokens=6)
    wait(lambda: srv.health()["judged_turns"] >= 1 and turn_of(srv, reply.id)["next_state"] is not None)
    assert post(srv, "/v1/feedback", {"response_id": second.id, "verdict": 1}, "ak")[0] == 200
    turn = turn_of(srv, reply.id)
    assert turn["verdict"] == -1 and turn["hint"] == "From now on, answer in one short sentence."
    assert turn["feedback"]["verdict"] == -1 and turn["feedback"]["hint"] == turn["hint"]
    assert turn_of(srv, second.id)["verdict"] == 1
    # the hint is alice's standing preference now
    memory = call(srv, "GET", "/v1/memory", "ak")[1]
    assert [(p["hint"], p["standing"]) for p in memory["data"]] == [("From now on, answer in one short sentence.",
                                                                      True)]

    # what became of each reply, as its user can ask (and no one else)
    status, seen = call(srv, "GET", f"/v1/feedback/{reply.id}", "ak")
    assert (status, seen["verdict"], seen["source"], seen["trained_in_version"]) == (200, -1, "user", None)
    assert call(srv, "GET", f"/v1/feedback/{reply.id}", "bk")[0] == 404
    # another user's reply is not found, like an unknown one; bad fields are named
    assert post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": "good"}, "bk")[0] == 404
    status, out = post(srv, "/v1/feedback", {"response_id": "chatcmpl-nope", "verdict": "good"}, "ak")
    assert status == 404 and out["error"]["param"] == "response_id"
    status, out = post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": "meh"}, "ak")
    assert status == 400 and out["error"]["param"] == "verdict"
    status, out = post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": 1, "score": 3}, "ak")
    assert status == 400 and out["error"]["param"] == "score"
    assert turn_of(srv, reply.id)["verdict"] == -1  # none of the refused ones changed it


def test_a_bad_verdict_with_a_hint_trains_as_a_hinted_turn(make_server):
    srv = make_server(extra=["--method", "opd", "--batch-size", "1", "--lora-rank", "4", "--no-canary",
                             "--unfollowed-hints", "train", "--judge", "heuristic"])
    client = OpenAI(base_url=srv.url, api_key="anything")
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Describe a cat."}],
                                           max_tokens=8)
    status, out = post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": "bad",
                                              "hint": "Answer in one short sentence."})
    assert status == 200, out
    wait(lambda: srv.health()["policy_version"] >= 1)
    turn = turn_of(srv, reply.id)
    assert turn["trained_in_version"] == 1 and turn["hint"] == "Answer in one short sentence."
    with open(srv.run_dir / "scalars" / "scalars.csv") as f:
        step = {r["tag"]: float(r["value"]) for r in csv.DictReader(f) if r["version"] == "1"}
    assert step["train/turns"] == 1 and step["train/hinted_turns"] == 1
    # what a person sees: the served version in a sentence, and the turn trained in it
    served = srv.health()["training"]["served"]
    assert served.startswith("now serving version 1: it learned from 1 turn (1 corrected, 1 with a hint)"), served
    readable = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(srv.run_dir)],
                              capture_output=True, text=True, check=True).stdout
    assert "verdict -1 from the user's feedback; trained in v1" in readable
    # trained on: feedback can no longer change what it taught
    status, out = post(srv, "/v1/feedback", {"response_id": reply.id, "verdict": "good"})
    assert status == 409 and "version 1" in out["error"]["message"]


def test_a_judge_verdict_that_lands_after_the_users_own_feedback_is_not_kept(tmp_path):
    """The race the HTTP test cannot time: the judge read the turn as pending, the user's feedback landed, then the
    judge's verdict arrived."""
    from slime_ext.store import Store, export_records
    from slime_ext.types import Turn

    store = Store(tmp_path / "run")
    store.create_session("s", None, "header")
    store.insert_turn(Turn(session_id="s", index=0, main_line=True, reason="test", request_id="chatcmpl-1",
                           prompt_token_ids=[1, 2], response_token_ids=[3], response_logprobs=[-0.1],
                           response_text="x", policy_version=0, policy_version_end=0, finish_reason="stop",
                           messages=[], reply_key="k"))
    store.set_next_state("s", 0, "Thanks, perfect!", "user")
    assert store.pending_judgement()  # the judge has read it
    store.record_feedback("chatcmpl-1", None, -1, "shorter please")
    store.record_verdict("s", 0, 1, [(1, "judge: approval")])  # then its verdict arrives
    (turn,) = export_records(tmp_path / "run")["sessions"][0]["turns"]
    assert turn["verdict"] == -1 and turn["hint"] == "shorter please"
    assert turn["votes"] == [-1]
