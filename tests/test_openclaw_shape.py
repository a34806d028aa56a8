"""Requests shaped like a real OpenClaw client (see shared/openclaw-client.md), over HTTP."""

import json
import sqlite3
import urllib.request

import pytest

SYSTEM = "You are OpenClaw, a personal assistant.\n" + ("## Rule\nBe helpful and precise. " * 400)
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": f"tool number {i}",
                                           "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
         for i in range(12)]


def ctx(n):
    return {"role": "user", "content": [{"type": "text", "text": f"<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>> turn {n} memory ... <<<END>>>"}]}


def post_stream(srv, messages, headers=None):
    """POST like OpenClaw does (bearer key, traceparent, stream with usage); return (text, finish, saw_done)."""
    body = {"model": "policy", "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "tools": TOOLS, "tool_choice": "auto", "max_completion_tokens": 8192}
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer oc-key", "User-Agent": "OpenAI/JS 7.1.0",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", **(headers or {})})
    text, finish, done, chunks = "", None, False, []
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for line in r:
            line = line.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            chunks.append(chunk)
            for ch in chunk["choices"]:
                text += ch["delta"].get("content") or ""
                finish = ch["finish_reason"] or finish
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0  # usage chunk last
    return text, finish, done


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server


def test_two_turns_without_headers_are_one_session(server):
    u1 = {"role": "user", "content": "[Sun 2026-11-29 20:01 UTC] Plan my day.\nruntime: sessionId=s1 channel=cli"}
    text1, finish1, done1 = post_stream(server, [{"role": "system", "content": SYSTEM}, u1, ctx(1)])
    assert done1 and finish1 in ("stop", "length")
    u2 = {"role": "user", "content": "[Sun 2026-11-29 20:02 UTC] Shorter please."}
    history = [{"role": "system", "content": SYSTEM}, u1, {"role": "assistant", "content": text1}, u2, ctx(2)]
    text2, _, done2 = post_stream(server, history)
    assert done2
    sessions = [s for s in server.records()["sessions"] if any(t["response_text"] == text1 for t in s["turns"])]
    assert len(sessions) == 1
    t0, t1 = sessions[0]["turns"]
    assert t0["main_line"] and t1["main_line"]
    assert t0["next_state"] == u2["content"] and t0["next_state_role"] == "user"
    assert t1["response_text"] == text2 and t1["next_state"] is None
    # a server without keys: the token OpenClaw sends names no one, the turns are the one local user's
    assert sessions[0]["user"] is None and "oc-key" not in json.dumps(sessions[0])


def test_with_headers_the_header_wins(server):
    u1 = {"role": "user", "content": "hello with headers"}
    text1, _, _ = post_stream(server, [u1], headers={"X-Session-Id": "oc-1", "X-Turn-Type": "main"})
    u2 = {"role": "user", "content": "second"}
    post_stream(server, [u1, {"role": "assistant", "content": text1}, u2],
                headers={"X-Session-Id": "oc-2", "X-Turn-Type": "side"})
    sessions = {s["id"]: s for s in server.records()["sessions"]}
    assert len(sessions["oc-1"]["turns"]) == 1 and len(sessions["oc-2"]["turns"]) == 1
    assert sessions["oc-2"]["turns"][0]["main_line"] is False
    assert "X-Turn-Type" in sessions["oc-2"]["turns"][0]["reason"]
    # X-Session-Id header is a new session: turn 0 of oc-1 does not get a next state from oc-2
    assert sessions["oc-1"]["turns"][0]["next_state"] is None


def openclaw_post(srv, messages, max_tokens=8192):
    """One streamed OpenClaw-shaped request; (status, cut header, body text)."""
    body = {"model": "policy", "messages": messages, "stream": True, "tools": TOOLS, "max_completion_tokens": max_tokens}
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.headers.get("X-OpenClaw-RL-Prompt-Tokens-Cut"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, None, e.read().decode()


def test_a_prompt_past_the_context_loses_the_system_prompts_middle_and_the_session_goes_on(make_server):
    """The tiny model capped at 2,048 tokens takes OpenClaw's shape with a ~4,000-token system prompt: each turn's
    system prompt is cut to fit, the user's words are not, the recorded prompt is what the model saw, and two turns
    are still one session (the tracker matched the messages as sent)."""
    srv = make_server(extra=["--context-length", "2048", "--max-tokens-cap", "16"])
    u1, u2 = {"role": "user", "content": "Plan my day."}, {"role": "user", "content": "Shorter please."}
    status, cut, text = openclaw_post(srv, [{"role": "system", "content": SYSTEM}, u1, ctx(1)])
    assert status == 200 and int(cut) > 1000, text
    first = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in text.splitlines()
                    if line.startswith("data: {") and json.loads(line[6:])["choices"])
    history = [{"role": "system", "content": SYSTEM}, u1, {"role": "assistant", "content": first}, u2, ctx(2)]
    status2, cut2, _ = openclaw_post(srv, history)
    assert status2 == 200 and int(cut2) >= int(cut)  # a longer conversation: more of the system prompt goes
    [session] = [s for s in srv.records()["sessions"] if len(s["turns"]) == 2]
    t0, t1 = session["turns"]
    assert t0["main_line"] and t1["main_line"] and t0["next_state"] == u2["content"]
    with sqlite3.connect(f"file:{srv.run_dir / 'records.sqlite'}?mode=ro", uri=True) as db:
        stored = [json.loads(m) for (m,) in db.execute("SELECT messages FROM turns WHERE session_id=? ORDER BY idx",
                                                       (session["id"],))]
    for turn, messages, n in ((t0, stored[0], int(cut)), (t1, stored[1], int(cut2))):
        assert len(turn["prompt_token_ids"]) <= 2048 - 16
        system = messages[0]["content"]  # what the model saw, for the teacher to re-render
        assert f"[... {n} tokens of this message were cut" in system and system.startswith(SYSTEM[:100])
    assert stored[0][1:] == [u1, ctx(1)] and stored[1][1:] == history[1:]  # the conversation: whole
    refusing = make_server(extra=["--context-length", "2048", "--context-overflow", "error"])
    status, _, body = openclaw_post(refusing, [{"role": "system", "content": SYSTEM}, u1])
    assert status == 400 and json.loads(body)["error"]["code"] == "context_length_exceeded"
    assert "--context-overflow trim" in json.loads(body)["error"]["message"]


@pytest.mark.slow
def test_smollm2_answers_an_openclaw_sized_prompt_by_cutting_its_system_prompt(make_server):
    srv = make_server("smollm2-135m")
    status, cut, text = openclaw_post(srv, [{"role": "system", "content": SYSTEM * 4}, {"role": "user", "content": "hi"}],
                                      max_tokens=8)
    assert status == 200 and int(cut) > 5000 and "data: [DONE]" in text, text
    assert srv.health()["status"] == "ok"
