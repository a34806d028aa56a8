"""Session inference, main/side classification and next-state pairing, against a real store file."""

import pytest

from slime_ext.sessions import SessionTracker, message_key
from slime_ext.store import Store, export_records
from slime_ext.types import Turn

SYSTEM = {"role": "system", "content": "You are a personal assistant. " * 50}
CTX = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>> runtime: sessionId=s1 ..."


def ctx_msg(n):
    return {"role": "user", "content": [{"type": "text", "text": f"{CTX} #{n}"}]}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def env(tmp_path):
    store = Store(tmp_path / "run")
    clock = Clock()
    tracker = SessionTracker(store, clock=clock, idle_timeout_s=60)
    return store, tracker, clock


def serve(store, tracker, messages, reply, headers=None, user=None):
    """What the server does around one request: assign, store the turn, index the reply."""
    a = tracker.assign(messages, headers or {}, user)
    reply_msg = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
    turn = Turn(session_id=a.session_id, index=a.turn_index, main_line=a.main_line, reason=a.reason,
                request_id=f"req-{a.session_id}-{a.turn_index}", prompt_token_ids=[1, 2], response_token_ids=[3],
                response_logprobs=[-0.5], response_text=reply_msg.get("content") or "", policy_version=0,
                policy_version_end=0, finish_reason="stop", messages=messages,
                tool_calls=reply_msg.get("tool_calls"), reply_key=message_key(reply_msg), history_keys=a.history_keys)
    store.insert_turn(turn)
    tracker.record_reply(a, turn.reply_key)
    return a


def turns(store, sid):
    (s,) = [s for s in export_records(store.run_dir)["sessions"] if s["id"] == sid]
    return s["turns"]


def test_openclaw_shape_two_turns_is_one_session_with_next_state(env):
    store, tracker, _ = env
    u1 = {"role": "user", "content": "[Sun 2026-11-29 20:01 UTC] What is 2+2?\nruntime: sessionId=s1"}
    a1 = serve(store, tracker, [SYSTEM, u1, ctx_msg(1)], "4")
    assert a1.main_line and a1.new_session
    u2 = {"role": "user", "content": "[Sun 2026-11-29 20:02 UTC] Thanks! And 3+3?"}
    # the previous internal-context message is dropped, a new one is appended
    a2 = serve(store, tracker, [SYSTEM, u1, {"role": "assistant", "content": "4"}, u2, ctx_msg(2)], "6")
    assert a2.session_id == a1.session_id and a2.turn_index == 1 and a2.main_line
    t = turns(store, a1.session_id)
    assert t[0]["next_state"] == u2["content"] and t[0]["next_state_role"] == "user"
    assert t[1]["next_state"] is None
    kinds = [d["kind"] for d in t[0]["decisions"]]
    assert {"session", "turn_type", "next_state"} <= set(kinds)


def test_header_wins_over_inference(env):
    store, tracker, _ = env
    u1 = {"role": "user", "content": "hello"}
    a1 = serve(store, tracker, [u1], "hi there")
    a2 = serve(store, tracker, [u1, {"role": "assistant", "content": "hi there"}, {"role": "user", "content": "more"}],
               "ok", headers={"x-session-id": "client-7", "x-turn-type": "side"})
    assert a2.session_id == "client-7" and a2.session_id != a1.session_id
    assert not a2.main_line and "X-Turn-Type" in a2.reason
    assert a2.session_reason == "X-Session-Id header"


def test_header_session_pairs_next_state_without_history(env):
    store, tracker, _ = env
    h = {"x-session-id": "h1", "x-turn-type": "main"}
    serve(store, tracker, [{"role": "user", "content": "q1"}], "a1", headers=h)
    serve(store, tracker, [{"role": "user", "content": "no, shorter"}], "a2", headers=h)
    t = turns(store, "h1")
    assert t[0]["next_state"] == "no, shorter" and t[0]["next_state_role"] == "user"


def test_tool_result_is_the_next_state_of_a_tool_call(env):
    store, tracker, _ = env
    u = {"role": "user", "content": "weather in Paris?"}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    a1 = serve(store, tracker, [u], {"role": "assistant", "content": None, "tool_calls": [call]})
    # the client re-sends the call with a different id and reformatted JSON arguments
    echoed = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "other", "type": "function", "function": {"name": "get_weather", "arguments": '{ "city":"Paris" }'}}]}
    a2 = serve(store, tracker, [u, echoed, {"role": "tool", "tool_call_id": "other", "content": "18C sunny"}], "It is 18C.")
    assert a2.session_id == a1.session_id and a2.main_line
    t = turns(store, a1.session_id)
    assert t[0]["next_state"] == "18C sunny" and t[0]["next_state_role"] == "tool"


def test_regenerate_branch_is_side_and_does_not_steal_the_next_state(env):
    store, tracker, _ = env
    u1 = {"role": "user", "content": "tell me a joke"}
    a1 = serve(store, tracker, [u1], "joke one")
    h1 = [u1, {"role": "assistant", "content": "joke one"}]
    a2 = serve(store, tracker, h1 + [{"role": "user", "content": "another"}], "joke two")
    a3 = serve(store, tracker, h1 + [{"role": "user", "content": "a different one"}], "joke three")
    assert a2.main_line and a2.session_id == a3.session_id == a1.session_id
    assert not a3.main_line and "branches" in a3.reason
    assert turns(store, a1.session_id)[0]["next_state"] == "another"


def test_continuation_request_is_side(env):
    store, tracker, _ = env
    a = serve(store, tracker, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "partial"}], "rest")
    assert not a.main_line and "continuation" in a.reason


def test_unknown_assistant_reply_starts_a_new_session(env):
    store, tracker, _ = env
    a = serve(store, tracker, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "not ours"},
                               {"role": "user", "content": "y"}], "z")
    assert a.new_session and a.main_line and "not produced by this server" in a.session_reason


def test_invented_history_does_not_join_a_session(env):
    store, tracker, _ = env
    u1 = {"role": "user", "content": "secret plan"}
    a1 = serve(store, tracker, [u1], "reply")
    other = {"role": "user", "content": "something else entirely"}
    a2 = serve(store, tracker, [other, {"role": "assistant", "content": "reply"}, {"role": "user", "content": "go"}], "ok")
    assert a2.session_id != a1.session_id


def test_sessions_resume_from_the_store_after_restart_and_idle_close(env, tmp_path):
    store, tracker, clock = env
    u1 = {"role": "user", "content": "remember me"}
    a1 = serve(store, tracker, [u1], "I will")
    clock.t += 61
    assert tracker.close_idle() == 1 and tracker.open_sessions == 0
    fresh = SessionTracker(Store(tmp_path / "run"), clock=clock)  # as after a restart
    a2 = serve(fresh.store, fresh, [u1, {"role": "assistant", "content": "I will"}, {"role": "user", "content": "good"}], "ok")
    assert a2.session_id == a1.session_id and a2.turn_index == 1 and a2.main_line
    assert turns(store, a1.session_id)[0]["next_state"] == "good"


def test_session_done_header_closes_and_frees_memory(env):
    store, tracker, _ = env
    serve(store, tracker, [{"role": "user", "content": "bye"}], "bye!", headers={"x-session-id": "d1", "x-session-done": "true"})
    assert tracker.open_sessions == 0
    (s,) = export_records(store.run_dir)["sessions"]
    assert s["closed"] and "X-Session-Done" in s["close_reason"]


def test_open_session_cap_closes_least_recent(env):
    store, tracker, clock = env
    tracker.max_open_sessions = 3
    for i in range(5):
        clock.t += 1
        serve(store, tracker, [{"role": "user", "content": f"q{i}"}], f"a{i}")
    assert tracker.close_idle() == 2 and tracker.open_sessions == 3
    assert len(tracker._replies) == 3 and len(tracker._history) == 3


# ---------------------------------------------------------------- hostile input
def _call(args):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}]}


@pytest.mark.parametrize("args", ["[" * 100000, '{"a": ' * 50000, "[" * 5000 + "]" * 5000, "not json {"])
def test_message_key_treats_unparsable_or_too_deep_arguments_as_an_opaque_string(args):
    key = message_key(_call(args))
    assert key == message_key(_call(args)) and len(key) == 24
    assert key != message_key(_call(args + "x"))  # the text itself is what is compared


def test_message_key_never_raises_on_odd_shapes():
    deep: object = []
    for _ in range(100000):
        deep = [deep]
    odd = [_call(deep), {"role": "assistant", "tool_calls": ["x", {"function": "f"}, {"function": {"arguments": 3}}]},
           {"role": "user", "content": [{"type": "text", "text": 5}, "x"]}, {"role": "user", "content": "\ud800 lone"},
           {"role": 7, "content": {"not": "a list"}}]
    for msg in odd:
        assert len(message_key(msg)) == 24
    # well-formed arguments still compare as parsed JSON (keys stored by earlier versions stay valid)
    assert message_key(_call('{"b": 1, "a": [1, 2]}')) == message_key(_call('{ "a":[1,2],"b":1 }'))


# ---------------------------------------------------------------- sessions belong to their users
def test_another_users_session_id_gets_a_separate_session(env):
    store, tracker, _ = env
    h = {"x-session-id": "bob-chat"}
    b1 = serve(store, tracker, [{"role": "user", "content": "bob asks"}], "answer", headers=h, user="bob")
    a1 = serve(store, tracker, [{"role": "user", "content": "No, that's wrong."}], "sorry",
               headers={**h, "x-session-done": "true"}, user="alice")
    assert b1.session_id == "bob-chat" and a1.session_id != "bob-chat" and a1.new_session and a1.main_line
    assert a1.client_session_id == "bob-chat"  # what the client named it: nothing tells alice the id is taken
    b2 = serve(store, tracker, [{"role": "user", "content": "thanks"}], "ok", headers=h, user="bob")
    assert b2.session_id == "bob-chat" and b2.turn_index == 1 and not b2.new_session
    recs = {s["id"]: s for s in export_records(store.run_dir)["sessions"]}
    assert not recs["bob-chat"]["closed"] and recs[a1.session_id]["closed"]
    assert recs["bob-chat"]["turns"][0]["next_state"] == "thanks"
    assert recs[a1.session_id]["user"] == "alice"
    # alice's later requests with that id keep going to her own session
    a2 = serve(store, tracker, [{"role": "user", "content": "again"}], "x", headers=h, user="alice")
    assert a2.session_id == a1.session_id and a2.turn_index == 1


def test_inferred_sessions_never_match_across_users(env):
    store, tracker, _ = env
    u1 = {"role": "user", "content": "bob's secret"}
    b1 = serve(store, tracker, [u1], "bob's answer", user="bob")
    echoed = [u1, {"role": "assistant", "content": "bob's answer"}, {"role": "user", "content": "No, that's wrong."}]
    a1 = serve(store, tracker, echoed, "x", user="alice")
    assert a1.session_id != b1.session_id and a1.new_session
    assert turns(store, b1.session_id)[0]["next_state"] is None
    b2 = serve(store, tracker, echoed[:2] + [{"role": "user", "content": "great"}], "y", user="bob")
    assert b2.session_id == b1.session_id and turns(store, b1.session_id)[0]["next_state"] == "great"


def test_ownership_holds_after_a_restart(env, tmp_path):
    store, tracker, _ = env
    h = {"x-session-id": "bob-chat"}
    u1 = {"role": "user", "content": "bob asks"}
    serve(store, tracker, [u1], "answer", headers=h, user="bob")
    a1 = serve(store, tracker, [{"role": "user", "content": "mine"}], "m", headers=h, user="alice")
    fresh = SessionTracker(Store(tmp_path / "run"))  # as after a restart: nothing in memory
    a2 = serve(fresh.store, fresh, [{"role": "user", "content": "No, that's wrong."}], "z", headers=h, user="alice")
    assert a2.session_id == a1.session_id and a2.turn_index == 1
    echoed = [u1, {"role": "assistant", "content": "answer"}, {"role": "user", "content": "No, that's wrong."}]
    a3 = serve(fresh.store, fresh, echoed, "w", user="alice")  # inferred, resumed from the store
    assert a3.session_id not in ("bob-chat", a1.session_id) and a3.new_session
    assert turns(store, "bob-chat")[0]["next_state"] is None
    b = serve(fresh.store, fresh, echoed[:2] + [{"role": "user", "content": "ok bob"}], "v", user="bob")
    assert b.session_id == "bob-chat" and turns(store, "bob-chat")[0]["next_state"] == "ok bob"


def test_anonymous_and_shared_key_requests_share_sessions_as_before(env):
    store, tracker, _ = env
    for user in (None, "key:0123456789ab"):
        h = {"x-session-id": f"shared-{user}"}
        a = serve(store, tracker, [{"role": "user", "content": "q"}], "a", headers=h, user=user)
        b = serve(store, tracker, [{"role": "user", "content": "q2"}], "b", headers=h, user=user)
        assert a.session_id == b.session_id == h["x-session-id"] and b.turn_index == 1
