"""A `kill -9` under load loses no reply a client fully received, and sessions resume afterwards.

The server commits a turn before it sends the final chunk (streaming) or the response body
(non-streaming). So every response a client saw to the end (``finish_reason`` and ``[DONE]`` for a
stream) must be in the store after the process is killed mid-load, byte-for-byte as the client got
it, with its token ids and log-probs; and a conversation that continues after the restart from a
reply served before the crash must land in the same session (the tracker resumes from the store).
"""

from __future__ import annotations

import asyncio
import math
import random

import aiohttp

from slime_ext.launch import sse_chunks

N_CONVERSATIONS = 20
TURNS = 4
KILL_AFTER = 25  # fully received load responses before the kill (> N_CONVERSATIONS: some reach turn 2)
TIMEOUT = aiohttp.ClientTimeout(total=120)


class Reply:
    def __init__(self) -> None:
        self.id: str | None = None
        self.text = ""
        self.finish_reason: str | None = None
        self.done = False  # saw everything: finish_reason (+ [DONE] when streaming)
        self.session_header: str | None = None


async def chat(http: aiohttp.ClientSession, url: str, messages: list[dict], *, stream: bool, max_tokens: int,
               **extra) -> Reply:
    """One chat completion; ``Reply.done`` only when the whole response arrived."""
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "stream": stream, **extra}
    r = Reply()
    async with http.post(url + "/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        if not stream:
            data = await resp.json()
            r.id = data["id"]
            r.text = data["choices"][0]["message"]["content"]
            r.finish_reason = data["choices"][0]["finish_reason"]
            r.done = r.finish_reason is not None
            return r
        r.session_header = resp.headers.get("X-Session-Id")
        ids = set()
        async for chunk in sse_chunks(resp):
            if chunk is None:
                r.done = r.finish_reason is not None
                break
            assert "error" not in chunk, chunk
            ids.add(chunk["id"])
            for choice in chunk["choices"]:
                r.text += choice["delta"].get("content") or ""
                if choice.get("finish_reason"):
                    r.finish_reason = choice["finish_reason"]
        assert len(ids) == 1, f"chunks of one response carry different ids: {ids}"
        r.id = ids.pop()
        return r


async def run_conversation(i: int, http, url: str, received: list[dict], interrupted: list[int]) -> None:
    rng = random.Random(i)
    messages: list[dict] = [{"role": "system", "content": f"You are assistant number {i}."}]
    for t in range(TURNS):
        messages.append({"role": "user", "content": f"conversation {i}, turn {t}: tell me about {rng.random():.6f}"})
        stream = (i + t) % 2 == 0
        max_tokens = rng.randint(8, 32)
        try:
            r = await chat(http, url, messages, stream=stream, max_tokens=max_tokens)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            interrupted.append(i)  # the server died under this request: expected
            return
        if not r.done:  # the stream ended early without finish_reason / [DONE]: not fully received
            interrupted.append(i)
            return
        received.append({"conv": i, "turn": t, "id": r.id, "text": r.text, "finish_reason": r.finish_reason,
                         "stream": stream, "max_tokens": max_tokens, "messages": list(messages)})
        messages.append({"role": "assistant", "content": r.text})


def turns_by_request_id(records: dict) -> dict[str, dict]:
    out = {}
    for s in records["sessions"]:
        for t in s["turns"]:
            assert t["request_id"] not in out, f"request id {t['request_id']} recorded twice"
            out[t["request_id"]] = {**t, "session_id": s["id"]}
    return out


async def test_kill9_under_load_loses_no_received_reply(make_server):
    srv = make_server()
    run_dir = srv.run_dir
    received: list[dict] = []  # fully received load responses
    interrupted: list[int] = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        # An anchor conversation that completes (two turns) before the load and the crash.
        anchor_msgs = [{"role": "user", "content": "anchor: first question"}]
        a0 = await chat(http, srv.url, anchor_msgs, stream=False, max_tokens=12)
        anchor_msgs += [{"role": "assistant", "content": a0.text}, {"role": "user", "content": "anchor: second question"}]
        a1 = await chat(http, srv.url, anchor_msgs, stream=True, max_tokens=12)
        assert a0.done and a1.done
        anchor_msgs.append({"role": "assistant", "content": a1.text})

        tasks = [asyncio.create_task(run_conversation(i, http, srv.url, received, interrupted))
                 for i in range(N_CONVERSATIONS)]
        while len(received) < KILL_AFTER and not all(t.done() for t in tasks):
            await asyncio.sleep(0.005)
        await asyncio.to_thread(srv.kill9)  # mid-load: requests are streaming / queued right now
        n_at_kill = len(received)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)

    print(f"received {len(received)} replies ({n_at_kill} at the kill), {len(interrupted)} conversations interrupted")
    # The crash really happened under load, after some replies completed.
    assert n_at_kill >= KILL_AFTER
    assert interrupted, "every conversation finished before the kill: the crash hit no in-flight request"
    assert len(received) < N_CONVERSATIONS * TURNS
    assert {r["stream"] for r in received} == {True, False}, "expected both streaming and non-streaming replies"
    assert any(r["turn"] >= 1 for r in received), "no conversation got past its first turn before the kill"

    srv2 = make_server(run_dir=run_dir)  # restart on the same run directory
    assert srv2.health()["policy_version"] == 0
    turns = turns_by_request_id(srv2.records())

    # 1. Every fully received reply is in the store exactly as the client got it.
    for r in received + [{"conv": "anchor", "turn": 0, "id": a0.id, "text": a0.text, "finish_reason": a0.finish_reason,
                          "max_tokens": 12}, {"conv": "anchor", "turn": 1, "id": a1.id, "text": a1.text,
                                              "finish_reason": a1.finish_reason, "max_tokens": 12}]:
        assert r["id"].startswith("chatcmpl-")
        assert r["id"] in turns, f"reply {r['id']} (conversation {r['conv']} turn {r['turn']}) was received but is not in the store"
        t = turns[r["id"]]
        assert t["response_text"] == r["text"]
        assert t["finish_reason"] == r["finish_reason"]
        assert t["index"] == r["turn"], "turns of one conversation are numbered in order within its session"
        assert t["main_line"] is True
        toks, lps = t["response_token_ids"], t["response_logprobs"]
        assert 0 < len(toks) <= r["max_tokens"]
        assert len(toks) == len(lps)
        assert all(isinstance(x, int) for x in toks)
        assert all(math.isfinite(x) and x <= 0.0 for x in lps)
        assert t["prompt_token_ids"], "the prompt ids are recorded"
        assert t["policy_version"] == t["policy_version_end"] == 0

    # Each conversation is one session, distinct from the others.
    session_of: dict = {}
    for r in received:
        session_of.setdefault(r["conv"], set()).add(turns[r["id"]]["session_id"])
    assert all(len(s) == 1 for s in session_of.values()), session_of
    all_sessions = [next(iter(s)) for s in session_of.values()]
    assert len(set(all_sessions)) == len(all_sessions)
    anchor_sid = turns[a0.id]["session_id"]
    assert turns[a1.id]["session_id"] == anchor_sid and anchor_sid not in all_sessions

    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        # 2. The restarted server serves a new conversation (a new session).
        fresh = await chat(http, srv2.url, [{"role": "user", "content": "a new conversation after the restart"}],
                           stream=True, max_tokens=8)
        assert fresh.done and fresh.finish_reason in ("stop", "length")

        # 3. Conversations continued after the restart resume their pre-crash sessions.
        anchor_next = "anchor: third question, after the restart"
        cont_anchor = await chat(http, srv2.url, anchor_msgs + [{"role": "user", "content": anchor_next}],
                                 stream=False, max_tokens=8)
        last_reply = {}
        for r in received:
            if r["turn"] >= last_reply.get(r["conv"], {"turn": -1})["turn"]:
                last_reply[r["conv"]] = r
        assert last_reply
        conts = await asyncio.gather(*[
            chat(http, srv2.url, r["messages"] + [{"role": "assistant", "content": r["text"]},
                                                  {"role": "user", "content": f"conversation {c}: after the restart"}],
                 stream=c % 2 == 0, max_tokens=8)
            for c, r in last_reply.items()
        ])
    assert all(c.done for c in conts) and cont_anchor.done

    after = srv2.records()
    turns2 = turns_by_request_id(after)
    sessions2 = {s["id"]: s for s in after["sessions"]}

    t_fresh = turns2[fresh.id]
    assert t_fresh["response_text"] == fresh.text
    assert t_fresh["session_id"] not in set(all_sessions) | {anchor_sid}
    assert t_fresh["index"] == 0

    t_anchor = turns2[cont_anchor.id]
    assert t_anchor["session_id"] == anchor_sid, "the anchor conversation did not resume its session after the restart"
    assert t_anchor["index"] == 2 and t_anchor["main_line"] is True
    anchor_turn1 = next(t for t in sessions2[anchor_sid]["turns"] if t["index"] == 1)
    assert anchor_turn1["request_id"] == a1.id
    assert anchor_turn1["next_state"] == anchor_next and anchor_turn1["next_state_role"] == "user"

    for (c, r), cont in zip(last_reply.items(), conts):
        sid = turns[r["id"]]["session_id"]
        t = turns2[cont.id]
        assert t["session_id"] == sid, f"conversation {c} did not resume its session {sid} after the restart"
        # Numbered after everything the session stored before the crash (including a turn that was
        # committed but whose reply never reached the client).
        before = [x["index"] for x in turns.values() if x["session_id"] == sid]
        assert t["index"] == max(before) + 1
        assert t["response_text"] == cont.text
