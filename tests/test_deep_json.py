"""Client- or model-written JSON nested too deeply to parse (a RecursionError, not a ValueError) is
treated as text everywhere it is read: rendering a prompt, parsing a reply, rendering a judge prompt."""

from __future__ import annotations

import json

from slime_ext.chat.prompt import tool_call_text
from slime_ext.chat.reply import ReplyParser, parse_tool_call
from slime_ext.judge.prompts import render_tool_calls

DEEP = "[" * 100000


def _call(args: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": "search", "arguments": args}}


def test_a_prompt_shows_too_deep_arguments_as_the_string_sent():
    text = tool_call_text(_call(DEEP))
    body = json.loads(text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
    assert body == {"name": "search", "arguments": DEEP}


def test_a_judge_prompt_shows_too_deep_arguments_as_the_string_sent():
    assert render_tool_calls([_call(DEEP)]) == f"search({DEEP})"
    assert render_tool_calls([_call('{"q": 1}')]) == 'search({"q": 1})'


def test_a_reply_with_too_deep_json_is_not_a_tool_call_and_does_not_raise():
    assert parse_tool_call(DEEP, {"search"}) is None
    assert parse_tool_call(json.dumps({"name": "search", "arguments": DEEP}), {"search"}) is None
    parser = ReplyParser(tool_names={"search"})
    events = list(parser.feed("<tool_call>\n" + DEEP + "\n</tool_call>", final=True))
    assert parser.tool_calls == []
    assert all(kind == "content" for kind, _ in events)
