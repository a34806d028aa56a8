"""The judge loop of a running server: next states become stored votes and verdicts."""

import json
import sqlite3
import time
import urllib.error
import urllib.request

from slime_ext.store import SCHEMA, Store, export_records


def chat(srv, messages, seed=1):
    return srv.chat(messages, seed=seed, max_tokens=4)["choices"][0]["message"]["content"]


def conversation(srv, first, feedback, seed=1):
    u1 = {"role": "user", "content": first}
    reply = chat(srv, [u1], seed)
    chat(srv, [u1, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}])
    return reply


def wait_for_verdicts(srv, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        turns = [t for s in srv.records()["sessions"] for t in s["turns"] if t["verdict"] is not None]
        if len(turns) >= n:
            return turns
        time.sleep(0.3)
    raise AssertionError(f"fewer than {n} verdicts after {timeout} s")


def test_heuristic_judge_scores_next_states_and_stores_votes(tiny_server):
    good = conversation(tiny_server, "What is 2+2?", "Thanks, that's perfect!")
    bad = conversation(tiny_server, "Name a colour.", "No, that's wrong. Try again.", seed=2)
    assert good != bad
    judged = {t["response_text"]: t for t in wait_for_verdicts(tiny_server, 2)}
    assert judged[good]["verdict"] == 1 and judged[good]["votes"] == [1]
    assert judged[bad]["verdict"] == -1 and judged[bad]["votes"] == [-1]
    for s in tiny_server.records()["sessions"]:
        last = s["turns"][-1]
        assert last["verdict"] is None and last["votes"] == []  # no next state yet: not judged
        assert last["trained_in_version"] is None and last["dropped"] is None
    health = tiny_server.health()
    assert health["judged_turns"] == 2 and health["mean_verdict"] == 0
    with urllib.request.urlopen(tiny_server.base + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert 'openclaw_user_verdict_mean{user="anonymous"} 0' in metrics
    assert 'openclaw_user_judged_turns{user="anonymous"} 2' in metrics


def test_judge_off_leaves_turns_unjudged(make_server):
    srv = make_server(extra=["--judge", "off"])
    conversation(srv, "hello", "thanks!")
    time.sleep(1.5)
    assert all(t["verdict"] is None for s in srv.records()["sessions"] for t in s["turns"])


def test_old_run_directories_gain_the_new_columns(tmp_path):
    old_schema = SCHEMA.split("CREATE TABLE IF NOT EXISTS votes")[0]
    conn = sqlite3.connect(tmp_path / "records.sqlite")
    conn.executescript(old_schema)
    conn.close()
    assert export_records(tmp_path) == {"sessions": []}
    Store(tmp_path).close()
    cols = {r[1] for r in sqlite3.connect(tmp_path / "records.sqlite").execute("PRAGMA table_info(turns)")}
    assert {"verdict", "judged_at", "trained_in_version", "dropped"} <= cols


def test_self_judge_votes_come_from_the_served_engine(make_server):
    """`--judge self`: the tiny model's own (unparsable) answers are the stored votes; they abstain."""
    srv = make_server(extra=["--judge", "self", "--judge-votes", "2"])
    conversation(srv, "hello", "thanks!")
    (turn,) = wait_for_verdicts(srv, 1, timeout=120)
    assert turn["votes"] == [None, None] and turn["verdict"] == 0  # random weights never write \boxed{}
    texts = [r[0] for r in sqlite3.connect(srv.run_dir / "records.sqlite").execute("SELECT text FROM votes WHERE kind='reward'")]
    assert len(texts) == 2 and all(t and not t.startswith("abstained") for t in texts)


def test_per_user_keys_name_the_user_of_turns_and_metrics(make_server):
    srv = make_server(extra=["--user-key", "alice=key-a", "--user-key", "bob=key-b"])

    def chat_as(key, messages):
        body = json.dumps({"model": "m", "messages": messages, "max_tokens": 4, "seed": 1}).encode()
        req = urllib.request.Request(srv.url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["choices"][0]["message"]["content"]

    for key, first, feedback in (("key-a", "alice asks", "Thanks, perfect!"), ("key-b", "bob asks", "No, that's wrong.")):
        u = {"role": "user", "content": first}
        reply = chat_as(key, [u])
        chat_as(key, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}])
    judged = wait_for_verdicts(srv, 2)
    assert {(t["verdict"]) for t in judged} == {1, -1}
    assert {s["user"] for s in srv.records()["sessions"]} == {"alice", "bob"}
    metrics = {}
    for key in ("key-a", "key-b"):
        req = urllib.request.Request(srv.base + "/metrics", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            metrics[key] = r.read().decode()
    # each user's key shows that user's own per-user series, never another user's
    assert 'openclaw_user_verdict_mean{user="alice"} 1' in metrics["key-a"] and 'user="bob"' not in metrics["key-a"]
    assert 'openclaw_user_verdict_mean{user="bob"} -1' in metrics["key-b"] and 'user="alice"' not in metrics["key-b"]
    try:
        chat_as("key-c", [{"role": "user", "content": "who?"}])
        raise AssertionError("an unknown key was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    assert "key-a" not in srv.log_tail(10**6) and "key-b" not in srv.log_tail(10**6)  # keys are never logged
