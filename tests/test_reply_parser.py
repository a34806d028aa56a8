"""The incremental reply parser: streaming and one-shot parsing must agree, whatever the chunking."""

import json
import random

import pytest

from slime_ext.chat.reply import ReplyParser, find_stop, parse_tool_call, partial_suffix

TOOLS = {"get_weather", "search"}


def one_shot(text, stops=(), tools=TOOLS):
    p = ReplyParser(stops=list(stops), tool_names=set(tools))
    events = p.feed(text, final=True)
    return p, events


def streamed(text, cuts, stops=(), tools=TOOLS):
    """Feed growing prefixes of text (as tokens arrive), then the final text."""
    p = ReplyParser(stops=list(stops), tool_names=set(tools))
    events = []
    for c in cuts:
        events += p.feed(text[:c])
        if p.stopped:
            return p, events
    events += p.feed(text, final=True)
    return p, events


def content_of(events):
    return "".join(v for k, v in events if k == "content")


CASES = [
    "Plain answer with no tools.",
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
    "Broken <tool_call>{not json}</tool_call> stays text",
    "Unknown tool <tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
    "Unclosed <tool_call>{\"name\": \"search\"",
    "less-than signs < and <tool and <tool_cal are text",
    "unicode: naïve café 日本語 🎉",
    "trailing spaces   ",
]


@pytest.mark.parametrize("text", CASES)
def test_streaming_equals_one_shot_for_any_chunking(text):
    ref, ref_events = one_shot(text)
    rng = random.Random(0)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(text) + 1), k=min(len(text), rng.randint(1, 12))))
        p, events = streamed(text, cuts)
        assert content_of(events) == ref.content == content_of(ref_events)
        assert [c["function"] for c in p.tool_calls] == [c["function"] for c in ref.tool_calls]


def test_tool_calls_are_parsed_into_openai_shape():
    p, _ = one_shot(CASES[1])
    assert p.content == "Let me check."
    (call,) = p.tool_calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_whitespace_between_tool_calls_is_not_content():
    p, _ = one_shot(CASES[2])
    assert p.content == ""
    assert [c["function"]["name"] for c in p.tool_calls] == ["search", "get_weather"]


def test_invalid_or_unknown_tool_blocks_stay_as_text():
    for text in (CASES[3], CASES[4], CASES[5]):
        p, _ = one_shot(text)
        assert p.tool_calls == [] and p.content == text


def test_without_tools_markers_are_plain_text():
    p, _ = one_shot(CASES[1], tools=())
    assert p.content == CASES[1] and p.tool_calls == []


def test_stop_string_truncates_and_is_never_emitted_even_across_chunks():
    text = "Hello there. END and more"
    p, events = streamed(text, [3, 14, 15, 16, 17], stops=["END"])
    assert p.stopped and content_of(events) == "Hello there. "
    assert p.visible == "Hello there. "
    p2, _ = one_shot(text, stops=["END", "there"])
    assert p2.content == "Hello "


def test_partial_stop_or_marker_is_held_back_until_decided():
    p = ReplyParser(stops=["STOP"], tool_names=TOOLS)
    assert content_of(p.feed("abc ST")) == "abc"  # "ST" may start STOP; the space waits for what follows
    assert content_of(p.feed("abc STX <tool")) == " STX"
    assert content_of(p.feed("abc STX <tool", final=True)) == " <tool"


def test_incomplete_utf8_is_held_back():
    p = ReplyParser()
    assert content_of(p.feed("caf\ufffd")) == "caf"
    assert content_of(p.feed("café")) == "é"


def test_helpers():
    assert find_stop("abcabc", ["c", "b"]) == 1
    assert find_stop("abc", ["x"]) == -1
    assert partial_suffix("hello <tool_c", ["<tool_call>"]) == 7
    assert partial_suffix("hello", ["<tool_call>"]) == 0
    assert parse_tool_call('{"name": "search", "arguments": "{\\"q\\": 1}"}', {"search"})["function"]["arguments"] == '{"q": 1}'
    assert parse_tool_call('{"name": "search", "arguments": "not json"}', {"search"}) is None
    assert parse_tool_call('[1, 2]', {"search"}) is None
