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
