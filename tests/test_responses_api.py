"""OpenAI's Responses API (``POST /v1/responses``) through the real ``openai`` SDK's ``client.responses``.

A turn served over Responses is recorded exactly as the same conversation over Chat Completions (token ids,
sessions, next states, judging). ``previous_response_id`` continues a kept conversation, per user; ``store:
false`` keeps none. Function calls use the scripted engine of test_tool_calls_http.py; the rest runs a real
``openclaw-rl serve`` of the tiny model.
"""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from test_anthropic_messages import GREEDY, USER, scripted_pair  # noqa: F401  (the fixture)
from test_judging import wait_for_verdicts
from test_tool_calls_http import TOOLS

from slime_ext.store import export_records

R_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in TOOLS]


def _turns(store):
    (session,) = export_records(store.run_dir)["sessions"]
    return session["turns"]


KEYS = ("index", "main_line", "prompt_token_ids", "response_token_ids", "response_text", "next_state",
        "next_state_role", "finish_reason")


async def test_function_call_round_trip_by_previous_response_id_is_recorded_as_over_chat(scripted_pair):  # noqa: F811
    (r_url, r_store), (c_url, c_store) = scripted_pair
    client = AsyncOpenAI(base_url=r_url + "/v1", api_key="k", max_retries=0)
    first = await client.responses.create(model="tiny", input=USER, tools=R_TOOLS, instructions="Be brief.")
    assert first.id.startswith("resp_") and first.status == "completed"
    kinds = [item.type for item in first.output]
    assert kinds == ["message", "function_call", "function_call"] and first.output_text == "I will look that up."
    calls = first.output[1:]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"}),
                                                                   ("search", {"q": "Paris events"})]
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    # only the new items: the server continues the conversation it kept under the id
    await client.responses.create(model="tiny", previous_response_id=first.id, tools=R_TOOLS, instructions="Be brief.",
                                  input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C"},
                                         {"type": "function_call_output", "call_id": calls[1].call_id,
                                          "output": "a concert"}])

    chat = AsyncOpenAI(base_url=c_url + "/v1", api_key="k", max_retries=0)
    system, user = {"role": "system", "content": "Be brief."}, {"role": "user", "content": USER}
    r = await chat.chat.completions.create(model="tiny", messages=[system, user], tools=TOOLS)
    m = r.choices[0].message
    echoed = {"role": "assistant", "content": m.content, "tool_calls": [
        {"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
        for t in m.tool_calls]}
    await chat.chat.completions.create(model="tiny", tools=TOOLS, messages=[
        system, user, echoed, {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "18C"},
        {"role": "tool", "tool_call_id": m.tool_calls[1].id, "content": "a concert"}])
    await r_store.run(lambda: None)  # let queued writes land
    await c_store.run(lambda: None)
    got, want = _turns(r_store), _turns(c_store)
    assert [{k: t[k] for k in KEYS} for t in got] == [{k: t[k] for k in KEYS} for t in want]
    assert got[0]["request_id"] == first.id and got[0]["next_state"] == "18C\n\na concert"

    # the same, sending the whole history back (first.output as input items) instead of the id
    again = await client.responses.create(model="tiny", tools=R_TOOLS, instructions="Be brief.", input=[
        {"role": "user", "content": USER}, *[item.model_dump() for item in first.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C"},
        {"type": "function_call_output", "call_id": calls[1].call_id, "output": "a concert"}])
    await r_store.run(lambda: None)
    sessions = export_records(r_store.run_dir)["sessions"]
    turn = {t["request_id"]: t for s in sessions for t in s["turns"]}[again.id]
    assert turn["prompt_token_ids"] == want[1]["prompt_token_ids"]


async def test_streamed_events_add_up_to_the_response(scripted_pair):  # noqa: F811
    (r_url, _), _ = scripted_pair
    client = AsyncOpenAI(base_url=r_url + "/v1", api_key="k", max_retries=0)
    whole = await client.responses.create(model="tiny", input=USER, tools=R_TOOLS)
    events = [e async for e in await client.responses.create(model="tiny", input=USER, tools=R_TOOLS, stream=True)]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    done = events[-1].response
    assert text == whole.output_text == done.output_text
    assert args == [item.arguments for item in whole.output if item.type == "function_call"]
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [e.item.id for e in events if e.type == "response.output_item.done"] == [i.id for i in done.output]

    async with client.responses.stream(model="tiny", input=USER, tools=R_TOOLS) as stream:  # the SDK's helper
        final = await stream.get_final_response()
    assert final.output_text == whole.output_text and len(final.output) == len(whole.output)


async def test_unknown_unstored_and_refused_requests_get_openai_errors(scripted_pair):  # noqa: F811
    (r_url, _), _ = scripted_pair
    client = AsyncOpenAI(base_url=r_url + "/v1", api_key="k", max_retries=0)
    unstored = await client.responses.create(model="tiny", input=USER, store=False)
    for missing in (unstored.id, "resp_nope"):
        with pytest.raises(openai.BadRequestError) as e:
            await client.responses.create(model="tiny", input="and?", previous_response_id=missing)
        assert e.value.body["param"] == "previous_response_id" and missing in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        await client.responses.create(model="tiny", input=USER, tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0]" and "function tools only" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        await client.responses.create(model="tiny", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    assert e.value.body["param"] == "input[0].content[0]"
    async with aiohttp.ClientSession() as http:  # a 400 is OpenAI's error object, never a traceback
        async with http.post(r_url + "/v1/responses", json={"model": "tiny", "input": []}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["param"] == "input"


def test_real_server_continues_by_id_per_user_and_judges(make_server):
    """A tiny-model server with two users' keys: greedy Responses turns record the token ids of the same Chat
    Completions turns; a follow-up by ``previous_response_id`` is judged; another user's id is not found."""
    keys = ["--user-key", "ann=sk-ann", "--user-key", "bob=sk-bob"]
    r_srv, c_srv = make_server(extra=keys), make_server(extra=keys)
    ann = OpenAI(base_url=r_srv.url, api_key="sk-ann", max_retries=0)
    first = ann.responses.create(model="tiny", input="What is 2+2?", max_output_tokens=8, extra_body=GREEDY)
    assert first.status in ("completed", "incomplete")
    events = list(ann.responses.create(model="tiny", input="What is 2+2?", max_output_tokens=8, extra_body=GREEDY,
                                       stream=True))
    assert events[-1].response.output_text == first.output_text
    bob = OpenAI(base_url=r_srv.url, api_key="sk-bob", max_retries=0)
    with pytest.raises(openai.BadRequestError):  # ann's response is not bob's to continue
        bob.responses.create(model="tiny", input="Thanks!", previous_response_id=first.id, extra_body=GREEDY)
    ann.responses.create(model="tiny", input="Thanks, that's perfect!", previous_response_id=first.id,
                         max_output_tokens=8, extra_body=GREEDY)
    (judged,) = wait_for_verdicts(r_srv, 1)  # the latest turn with that reply (the streamed one) gets the follow-up
    assert judged["verdict"] == 1 and judged["response_text"] == first.output_text
    assert {s["user"] for s in r_srv.records()["sessions"]} == {"ann"}

    chat = OpenAI(base_url=c_srv.url, api_key="sk-ann", max_retries=0)
    chat.chat.completions.create(model="tiny", max_tokens=8, extra_body=GREEDY,
                                 messages=[{"role": "user", "content": "What is 2+2?"}])
    turn = {t["request_id"]: t for s in r_srv.records()["sessions"] for t in s["turns"]}[first.id]
    (want,) = [t for s in c_srv.records()["sessions"] for t in s["turns"]]
    for key in ("prompt_token_ids", "response_token_ids", "response_logprobs", "response_text"):
        assert json.dumps(turn[key]) == json.dumps(want[key]), key


def test_kept_conversations_survive_a_restart_and_stay_with_their_user(tmp_path):
    from slime_ext.store import Store

    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    store = Store(tmp_path)
    store.save_response("resp_1", "ann", conversation)
    store.close()
    store = Store(tmp_path)  # a new server process on the same run directory
    try:
        assert store.response_conversation("resp_1", "ann") == conversation
        assert store.response_conversation("resp_1", "bob") is None and store.response_conversation("resp_2", "ann") is None
    finally:
        store.close()
