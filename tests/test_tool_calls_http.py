"""Tool calls end to end through HTTP and the `openai` SDK.

The random `tiny` model never writes a tool call, so the engine here is a scripted one that emits
the token ids of a fixed reply (a test double for the Engine contract); everything else — the
chat template, tokenizer, parser, SSE and the store — is the real thing.
"""

import json

import pytest
from aiohttp import web
from openai import AsyncOpenAI
from transformers import AutoTokenizer

from slime_ext.api.server import ChatServer, ServerSettings
from slime_ext.engines.base import TokenOut
from slime_ext.models import resolve_model
from slime_ext.sessions import SessionTracker
from slime_ext.store import Store, export_records

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
REPLY = ('I will look that up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "search", "arguments": {"q": "Paris events"}}\n</tool_call><|im_end|>')


class ScriptedEngine:
    """Emits the tokens of a fixed text, one per decode step."""

    policy_version = 0
    context_length = 4096

    def __init__(self, token_ids):
        self.token_ids = token_ids

    async def generate(self, prompt_ids, sampling):
        for t in self.token_ids[: sampling.max_new_tokens]:
            yield TokenOut(t, -0.25, self.policy_version)


async def start_scripted(run_dir, tok) -> tuple[str, Store, web.AppRunner]:
    """A real ChatServer over the scripted engine on a free port: ``(base URL, its store, its runner)``."""
    store = Store(run_dir)
    server = ChatServer(ScriptedEngine(tok.encode(REPLY, add_special_tokens=False)), tok, store,
                        SessionTracker(store, submit=store.submit), ServerSettings(model_name="tiny"))
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", store, runner


@pytest.fixture
async def scripted(tmp_path):
    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    url, store, runner = await start_scripted(tmp_path / "run", tok)
    yield AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0), store, tok
    await runner.cleanup()
    store.close()


async def test_tool_calls_non_streaming(scripted):
    c, store, _ = scripted
    r = await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will look that up."
    calls = choice.message.tool_calls
    assert [t.function.name for t in calls] == ["get_weather", "search"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert len({t.id for t in calls}) == 2


async def test_tool_calls_streamed_as_indexed_deltas(scripted):
    c, store, _ = scripted
    stream = await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "weather?"}],
                                             tools=TOOLS, stream=True, stream_options={"include_usage": True})
    content, calls, finish, usage = "", {}, None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                entry["id"] = d.id or entry["id"]
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
            finish = ch.finish_reason or finish
    assert finish == "tool_calls" and content == "I will look that up."
    assert sorted(calls) == [0, 1]
    assert calls[0]["name"] == "get_weather" and json.loads(calls[1]["arguments"]) == {"q": "Paris events"}
    assert usage.completion_tokens > 0


async def test_tool_choice_none_returns_the_text(scripted):
    c, _, _ = scripted
    r = await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "weather?"}],
                                        tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content


async def test_tool_turn_recorded_and_tool_result_becomes_next_state(scripted):
    c, store, tok = scripted
    user = {"role": "user", "content": "weather?"}
    r = await c.chat.completions.create(model="tiny", messages=[user], tools=TOOLS)
    m = r.choices[0].message
    echoed = {"role": "assistant", "content": m.content,
              "tool_calls": [{"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
                             for t in m.tool_calls]}
    tool_results = [{"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "18C"},
                    {"role": "tool", "tool_call_id": m.tool_calls[1].id, "content": "a concert"}]
    await c.chat.completions.create(model="tiny", messages=[user, echoed, *tool_results], tools=TOOLS)
    await store.run(lambda: None)  # let queued writes land
    (session,) = export_records(store.run_dir)["sessions"]
    t0, t1 = session["turns"]
    assert t0["next_state_role"] == "tool" and t0["next_state"] == "18C\n\na concert"
    assert [c["function"]["name"] for c in t0["tool_calls"]] == ["get_weather", "search"]
    assert tok.decode(t0["response_token_ids"], skip_special_tokens=True) == t0["response_text"]
    assert t1["main_line"]
