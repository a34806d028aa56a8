"""Sessions through a real server: hostile messages never cause a 500, and a session belongs to the
user who started it (per-user keys), also after a restart."""

import json
import urllib.error
import urllib.request

USERS = ["--user-key", "alice=key-a", "--user-key", "bob=key-b", "--judge", "off"]


def post(srv, messages, key=None, headers=None, max_tokens=4):
    """POST a chat completion; returns (status, body)."""
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "seed": 1}).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    if key:
        h["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(srv.url + "/chat/completions", data=body, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def reply_of(srv, messages, key=None, headers=None):
    status, body = post(srv, messages, key, headers)
    assert status == 200, body
    return body["choices"][0]["message"]


def sessions(srv):
    return {s["id"]: s for s in srv.records()["sessions"]}


def deep_tool_call(args):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]}


def test_deeply_nested_tool_call_arguments_never_cause_a_500(tiny_server):
    for args in ("[" * 100000, "{\"a\": " * 50000, "[" * 3000 + "]" * 3000):
        msgs = [{"role": "user", "content": "hi"}, deep_tool_call(args),
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
        status, body = post(tiny_server, msgs)
        assert status in (200, 400), (status, body)
        if status == 400:
            assert body["error"]["message"] and body["error"]["type"] == "invalid_request_error"
    # the server is still healthy and answers the next request
    assert reply_of(tiny_server, [{"role": "user", "content": "still there?"}])["role"] == "assistant"


def _bob_turn_and_alice_intrusion(srv):
    """Bob starts a header session; alice then sends feedback and X-Session-Done under his id."""
    h = {"X-Session-Id": "bob-chat"}
    u1 = {"role": "user", "content": "bob's question"}
    reply = reply_of(srv, [u1], "key-b", h)
    status, _ = post(srv, [{"role": "user", "content": "No, that's wrong."}], "key-a",
                     {**h, "X-Session-Done": "true"})
    assert status == 200  # alice gets a normal answer: nothing tells her the id is someone else's
    return u1, reply


def _assert_bob_untouched(srv, n_bob_turns):
    recs = sessions(srv)
    bob = recs["bob-chat"]
    assert bob["user"] == "bob" and not bob["closed"], bob
    assert len(bob["turns"]) == n_bob_turns
    assert all(t["next_state"] != "No, that's wrong." for t in bob["turns"])
    alice = [s for s in recs.values() if s["user"] == "alice"]
    assert len(alice) == 1 and alice[0]["id"] != "bob-chat" and alice[0]["closed"]
    assert alice[0]["turns"][0]["main_line"]  # her own session: her turn is still recorded and trainable
    return alice[0]


def test_another_users_session_id_never_reaches_that_users_session(make_server, tmp_path):
    srv = make_server(extra=USERS, run_dir=tmp_path / "run")
    u1, reply = _bob_turn_and_alice_intrusion(srv)
    _assert_bob_untouched(srv, 1)
    # bob's next turn continues his own session and pairs his own feedback
    u2 = {"role": "user", "content": "thanks bob-style"}
    reply_of(srv, [u1, reply, u2], "key-b", {"X-Session-Id": "bob-chat"})
    bob = sessions(srv)["bob-chat"]
    assert len(bob["turns"]) == 2 and bob["turns"][0]["next_state"] == "thanks bob-style"
    # inferred sessions (no header) never match across users either: alice echoes bob's history
    msgs = [u1, reply, u2, {"role": "assistant", "content": bob["turns"][1]["response_text"]},
            {"role": "user", "content": "No, that's wrong."}]
    reply_of(srv, msgs, "key-a")
    bob = sessions(srv)["bob-chat"]
    assert len(bob["turns"]) == 2 and bob["turns"][1]["next_state"] is None
    srv.stop()

    # after a restart: the same intrusions, the same outcome; bob continues his session
    srv2 = make_server(extra=USERS, run_dir=tmp_path / "run")
    status, _ = post(srv2, [{"role": "user", "content": "No, that's wrong."}], "key-a",
                     {"X-Session-Id": "bob-chat", "X-Session-Done": "true"})
    assert status == 200
    reply_of(srv2, msgs, "key-a")
    bob = sessions(srv2)["bob-chat"]
    assert len(bob["turns"]) == 2 and not bob["closed"] and bob["turns"][1]["next_state"] is None
    alice = [s for s in sessions(srv2).values() if s["user"] == "alice"]
    assert sum(len(s["turns"]) for s in alice) == 4 and "bob-chat" not in {s["id"] for s in alice}
    reply_of(srv2, [{"role": "user", "content": "bob again"}], "key-b", {"X-Session-Id": "bob-chat"})
    bob = sessions(srv2)["bob-chat"]
    assert len(bob["turns"]) == 3 and bob["turns"][1]["next_state"] == "bob again"


def test_anonymous_requests_share_sessions_as_before(tiny_server):
    """No key at all: a session id names one session whoever sends it (today's behaviour)."""
    h = {"X-Session-Id": "anon-chat"}
    reply_of(tiny_server, [{"role": "user", "content": "first"}], headers=h)
    reply_of(tiny_server, [{"role": "user", "content": "second"}], headers=h)
    s = sessions(tiny_server)["anon-chat"]
    assert len(s["turns"]) == 2 and s["turns"][0]["next_state"] == "second"


def test_a_shared_key_cannot_claim_a_keyed_user_nor_learn_whose_session_an_id_is(make_server):
    srv = make_server(extra=[*USERS, "--api-key", "shared"])
    reply_of(srv, [{"role": "user", "content": "bob's question"}], "key-b", {"X-Session-Id": "bob-chat"})
    # the shared key naming a keyed user in `user` is refused, and nothing reaches bob's session
    body = json.dumps({"model": "m", "user": "bob", "max_tokens": 2,
                       "messages": [{"role": "user", "content": "No, that's wrong."}]}).encode()
    req = urllib.request.Request(srv.url + "/chat/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer shared", "X-Session-Id": "bob-chat"})
    try:
        urllib.request.urlopen(req, timeout=60)
        raise AssertionError("a shared key acted as bob")
    except urllib.error.HTTPError as e:
        err = json.loads(e.read())["error"]
        assert e.code == 403 and err["param"] == "user" and "per-user API key" in err["message"]
    # a user field that names no keyed user is still that request's user
    status, _ = post(srv, [{"role": "user", "content": "hello"}], "shared")
    assert status == 200
    # alice streaming with bob's id is answered with the id she sent, not a derived one that tells her it is taken
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(srv.url + "/chat/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer key-a", "X-Session-Id": "bob-chat"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["X-Session-Id"] == "bob-chat"
        r.read()
    bob = sessions(srv)["bob-chat"]
    assert bob["user"] == "bob" and len(bob["turns"]) == 1 and bob["turns"][0]["next_state"] is None
