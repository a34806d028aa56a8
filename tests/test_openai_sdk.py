"""The official `openai` SDK against a real server: streaming and not, with and without tools."""


import pytest
from openai import OpenAI
from transformers import AutoTokenizer

from slime_ext.models import resolve_model

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]


def client(srv):
    return OpenAI(base_url=srv.url, api_key="test-key", max_retries=0)


def collect_stream(stream):
    text, finish, usage, roles = "", None, None, []
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                text += ch.delta.content
            if ch.finish_reason:
                finish = ch.finish_reason
    return text, finish, usage, roles


def check_sdk_roundtrip(srv, prompt, max_tokens):
    c = client(srv)
    msgs = [{"role": "user", "content": prompt}]
    r = c.chat.completions.create(model="policy", messages=msgs, max_tokens=max_tokens, seed=1234, temperature=0.9)
    msg = r.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str) and msg.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    s = c.chat.completions.create(model="policy", messages=msgs, max_tokens=max_tokens, seed=1234, temperature=0.9,
                                  stream=True, stream_options={"include_usage": True})
    text, finish, usage, roles = collect_stream(s)
    assert roles[:1] == ["assistant"]
    assert text == msg.content, "streamed text differs from the non-streamed text for the same seed"
    assert finish == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
    # with tools offered, the answer is still a valid completion
    rt = c.chat.completions.create(model="policy", messages=msgs, max_completion_tokens=max_tokens, tools=TOOLS,
                                   tool_choice="auto", seed=5)
    m = rt.choices[0].message
    assert rt.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert m.content or m.tool_calls
    st = c.chat.completions.create(model="policy", messages=msgs, max_completion_tokens=max_tokens, tools=TOOLS,
                                   seed=5, stream=True)
    stext, sfinish, _, _ = collect_stream(st)
    assert sfinish == rt.choices[0].finish_reason and stext == (m.content or "")
    return r, text


def check_tokens_decode_to_client_text(srv, texts):
    tok = AutoTokenizer.from_pretrained(resolve_model(srv.model))
    recorded = {t["response_text"]: t for s in srv.records()["sessions"] for t in s["turns"]}
    for text in texts:
        t = recorded[text]
        assert tok.decode(t["response_token_ids"], skip_special_tokens=True) == text
        assert len(t["response_logprobs"]) == len(t["response_token_ids"])
        assert all(lp <= 0 for lp in t["response_logprobs"])


def test_tiny_sdk_stream_and_not_with_and_without_tools(tiny_server):
    r, text = check_sdk_roundtrip(tiny_server, "Say something.", 12)
    models = client(tiny_server).models.list()
    assert [m.id for m in models.data] == ["tiny", "policy"]  # the served name first, then the alias the docs send
    check_tokens_decode_to_client_text(tiny_server, [text])


def test_tiny_content_as_list_of_parts_and_developer_role(tiny_server):
    c = client(tiny_server)
    r = c.chat.completions.create(model="x", max_tokens=4, seed=3, messages=[
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]}])
    r2 = c.chat.completions.create(model="x", max_tokens=4, seed=3, messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "part one part two"}])
    assert r.choices[0].message.content == r2.choices[0].message.content  # same prompt tokens, same seed
    assert r.usage.prompt_tokens == r2.usage.prompt_tokens


@pytest.mark.slow
def test_smollm2_sdk_stream_and_not_with_and_without_tools(make_server):
    srv = make_server("smollm2-135m")
    r, text = check_sdk_roundtrip(srv, "What is the capital of France?", 24)
    greedy = client(srv).chat.completions.create(
        model="p", messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=24, temperature=0)
    assert "Paris" in greedy.choices[0].message.content and greedy.choices[0].finish_reason == "stop"
    check_tokens_decode_to_client_text(srv, [text, greedy.choices[0].message.content])
