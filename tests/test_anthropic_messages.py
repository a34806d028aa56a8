"""Anthropic's Messages API (``POST /v1/messages``) through the real ``anthropic`` SDK.

A turn served over Messages is recorded exactly as the same conversation over Chat Completions: the same
prompt and response token ids, the same sessions (a ``tool_result`` is the next state), the same judging.
Tool calls use the scripted engine of test_tool_calls_http.py (the random ``tiny`` model never writes
one); the rest runs a real ``openclaw-rl serve`` of the tiny model.
"""

from __future__ import annotations

import json

import aiohttp
import anthropic
import pytest
from openai import AsyncOpenAI
from test_judging import wait_for_verdicts
from test_tool_calls_http import TOOLS, start_scripted
from transformers import AutoTokenizer

from slime_ext.models import resolve_model
from slime_ext.store import export_records

A_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
USER = "weather?"
GREEDY = {"temperature": 0}  # the SDK (2.x) has no sampling arguments: sent as extra fields, as a client would


@pytest.fixture
async def scripted_pair(tmp_path):
    """Two servers on the scripted engine, each with its own store: one spoken to over Messages (or Responses),
    one over Chat Completions."""
    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    started = [await start_scripted(tmp_path / name, tok) for name in ("messages", "chat")]
    yield [(url, store) for url, store, _ in started]
    for _, store, runner in started:
        await runner.cleanup()
        store.close()


async def test_tool_use_round_trip_is_recorded_as_over_chat_completions(scripted_pair):
    (a_url, a_store), (c_url, c_store) = scripted_pair
    client = anthropic.AsyncAnthropic(base_url=a_url, api_key="k", max_retries=0)
    first = await client.messages.create(model="tiny", max_tokens=200, tools=A_TOOLS,
                                         messages=[{"role": "user", "content": USER}])
    assert first.stop_reason == "tool_use" and first.id.startswith("msg_")
    text, *uses = first.content
    assert text.type == "text" and text.text == "I will look that up."
    assert [(u.type, u.name, u.input) for u in uses] == [("tool_use", "get_weather", {"city": "Paris"}),
                                                        ("tool_use", "search", {"q": "Paris events"})]
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    results = [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "18C"},
               {"type": "tool_result", "tool_use_id": uses[1].id, "content": [{"type": "text", "text": "a concert"}]}]
    await client.messages.create(model="tiny", max_tokens=200, tools=A_TOOLS, messages=[
        {"role": "user", "content": USER}, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": results}])

    chat = AsyncOpenAI(base_url=c_url + "/v1", api_key="k", max_retries=0)
    r = await chat.chat.completions.create(model="tiny", messages=[{"role": "user", "content": USER}], tools=TOOLS)
    m = r.choices[0].message
    echoed = {"role": "assistant", "content": m.content, "tool_calls": [
        {"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
        for t in m.tool_calls]}
    await chat.chat.completions.create(model="tiny", tools=TOOLS, messages=[
        {"role": "user", "content": USER}, echoed, {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "18C"},
        {"role": "tool", "tool_call_id": m.tool_calls[1].id, "content": "a concert"}])

    def turns(store):
        (session,) = export_records(store.run_dir)["sessions"]
        return session["turns"]

    await a_store.run(lambda: None)  # let queued writes land
    await c_store.run(lambda: None)
    got, want = turns(a_store), turns(c_store)
    keys = ("index", "main_line", "prompt_token_ids", "response_token_ids", "response_text", "next_state",
            "next_state_role", "finish_reason")
    assert [{k: t[k] for k in keys} for t in got] == [{k: t[k] for k in keys} for t in want]
    assert got[0]["next_state_role"] == "tool" and got[0]["next_state"] == "18C\n\na concert"
    assert got[0]["request_id"] == first.id


async def test_streamed_events_follow_anthropics_sequence_and_add_up_to_the_message(scripted_pair):
    (a_url, _), _ = scripted_pair
    client = anthropic.AsyncAnthropic(base_url=a_url, api_key="k", max_retries=0)
    whole = await client.messages.create(model="tiny", max_tokens=200, tools=A_TOOLS,
                                         messages=[{"role": "user", "content": USER}])
    events = [e async for e in await client.messages.create(
        model="tiny", max_tokens=200, tools=A_TOOLS, messages=[{"role": "user", "content": USER}], stream=True)]
    kinds = [e.type for e in events]  # the SDK hands out every event but the ping
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    async with aiohttp.ClientSession() as http:  # the wire itself: event names, the ping second
        body = {"model": "tiny", "max_tokens": 200, "stream": True, "messages": [{"role": "user", "content": USER}]}
        async with http.post(a_url + "/v1/messages", json=body) as resp:
            wire = [line[7:] for line in (await resp.text()).splitlines() if line.startswith("event: ")]
    assert wire[:2] == ["message_start", "ping"] and wire[-1] == "message_stop"
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == [0, 1, 2] == [e.index for e in events if e.type == "content_block_stop"]
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens == whole.usage.output_tokens

    async with client.messages.stream(model="tiny", max_tokens=200, tools=A_TOOLS,
                                      messages=[{"role": "user", "content": USER}]) as stream:
        final = await stream.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [b.model_dump(exclude={"id"}) for b in whole.content]
    assert final.stop_reason == whole.stop_reason


async def test_errors_come_in_anthropics_shape(scripted_pair):
    (a_url, _), _ = scripted_pair
    client = anthropic.AsyncAnthropic(base_url=a_url, api_key="k", max_retries=0)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.create(model="tiny", max_tokens=20, messages=[{"role": "user", "content": [image]}])
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message":
                            "'messages[0].content[0]' is an image block; this server's model reads text only"}}
    with pytest.raises(anthropic.BadRequestError) as e:  # a check shared with Chat Completions, same shape
        await client.messages.create(model="tiny", max_tokens=20, extra_body={"temperature": 5},
                                     messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and "temperature" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.create(model="tiny", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                                     tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert "client tools only" in e.value.body["error"]["message"]


def test_real_server_messages_stream_and_judge_like_chat_completions(make_server):
    """A tiny-model server: Messages and Chat Completions record the same token ids for one conversation
    (greedy), streaming or not, and a follow-up over Messages is judged."""
    a_srv, c_srv = make_server(extra=["--api-key", "sk-test"]), make_server(extra=["--api-key", "sk-test"])
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=a_srv.base, api_key="wrong", max_retries=0).messages.create(
            model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    client = anthropic.Anthropic(base_url=a_srv.base, api_key="sk-test", max_retries=0)  # sends x-api-key
    ask = [{"role": "user", "content": "What is 2+2?"}]
    first = client.messages.create(model="tiny", max_tokens=8, extra_body=GREEDY, system="Be brief.", messages=ask)
    with client.messages.stream(model="tiny", max_tokens=8, extra_body=GREEDY, system="Be brief.", messages=ask) as s:
        streamed = s.get_final_message()
    assert [(b.type, b.text) for b in streamed.content] == [(b.type, b.text) for b in first.content]
    assert first.stop_reason in ("end_turn", "max_tokens") and streamed.stop_reason == first.stop_reason
    reply = "".join(b.text for b in first.content if b.type == "text")
    client.messages.create(model="tiny", max_tokens=8, extra_body=GREEDY, system="Be brief.", messages=[
        *ask, {"role": "assistant", "content": reply}, {"role": "user", "content": "Thanks, that's perfect!"}])

    from openai import OpenAI

    chat = OpenAI(base_url=c_srv.url, api_key="sk-test", max_retries=0)
    sys_ask = [{"role": "system", "content": "Be brief."}, *ask]
    chat.chat.completions.create(model="tiny", max_tokens=8, extra_body=GREEDY, messages=sys_ask)
    judged = wait_for_verdicts(a_srv, 1)
    assert judged[0]["verdict"] == 1 and judged[0]["response_text"] == reply
    turn = {t["request_id"]: t for s in a_srv.records()["sessions"] for t in s["turns"]}[first.id]
    (want,) = [t for s in c_srv.records()["sessions"] for t in s["turns"]]
    for key in ("prompt_token_ids", "response_token_ids", "response_logprobs", "response_text", "finish_reason"):
        assert json.dumps(turn[key]) == json.dumps(want[key]), key


def test_translation_keeps_block_order_and_names_the_wrong_field():
    from slime_ext.api.anthropic import to_chat_body
    from slime_ext.api.errors import ApiError

    body = to_chat_body({"max_tokens": 5, "system": [{"type": "text", "text": "S"}], "metadata": {"user_id": "ann"},
                         "stop_sequences": ["END"], "tool_choice": {"type": "any"}, "thinking": {"type": "enabled"},
                         "messages": [
                             {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                             {"role": "assistant", "content": [
                                 {"type": "thinking", "thinking": "hm", "signature": ""}, {"type": "text", "text": "ok"},
                                 {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                                                          {"type": "text", "text": "and?"}]}]})
    assert body["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "S"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}],
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
        {"role": "user", "content": [{"type": "text", "text": "and?"}]}]
    assert (body["user"], body["stop"], body["tool_choice"], body["enable_thinking"]) == ("ann", ["END"], "required", True)
    for bad, param in [({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
                       ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
                        "messages[0].content[0]"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "x"}},
                        "tool_choice"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stop_sequences": [""]},
                        "stop_sequences")]:
        with pytest.raises(ApiError) as e:
            to_chat_body(bad)
        assert e.value.param == param and e.value.status == 400


def test_stream_frames_open_one_block_per_run_and_close_each():
    from slime_ext.api.anthropic import Frames

    frames = Frames("msg_1", "m", 7)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 2}'}}
    raw = frames.start() + b"".join(frames.event(k, v) for k, v in [
        ("reasoning", "hm"), ("reasoning", "m"), ("content", "Hi"), ("content", "!"), ("tool_call", call)])
    raw += frames.end("tool_calls", None, 9)
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    shape = [(e["type"], e.get("index"), (e.get("content_block") or e.get("delta") or {}).get("type")) for e in events]
    assert shape == [("message_start", None, None), ("ping", None, None),
                     ("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
                     ("content_block_delta", 0, "thinking_delta"), ("content_block_stop", 0, None),
                     ("content_block_start", 1, "text"), ("content_block_delta", 1, "text_delta"),
                     ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
                     ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
                     ("content_block_stop", 2, None), ("message_delta", None, None), ("message_stop", None, None)]
    assert json.loads(events[11]["delta"]["partial_json"]) == {"a": 2}
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"output_tokens": 9}


async def test_a_stop_sequence_is_named_in_the_reply(scripted_pair):
    (a_url, _), _ = scripted_pair
    client = anthropic.AsyncAnthropic(base_url=a_url, api_key="k", max_retries=0)
    r = await client.messages.create(model="tiny", max_tokens=200, stop_sequences=["up", "look"],
                                     messages=[{"role": "user", "content": USER}])
    assert (r.stop_reason, r.stop_sequence, r.content[0].text) == ("stop_sequence", "look", "I will ")
    r = await client.messages.create(model="tiny", max_tokens=3, messages=[{"role": "user", "content": USER}])
    assert (r.stop_reason, r.stop_sequence, r.usage.output_tokens) == ("max_tokens", None, 3)
