"""Hostile and malformed requests against a real server: every one gets a 4xx OpenAI-style error.

Each case is sent to a running ``openclaw-rl serve --model tiny`` and must come back with the
expected 4xx status and a JSON body ``{"error": {"message", "type", "param", "code"}}`` whose message
names what is wrong, and never a traceback. At the end the same server must still answer a valid
request, and its log must show that no request reached the catch-all 500 handler.

Two servers are used: the shared ``tiny_server`` for almost everything, and one "restricted"
server started with ``--api-key secret --context-length 64`` for the auth and context-length
cases (one extra process instead of two keeps the module fast on a small CPU).

HTTP framing errors (a bad Content-Length, a bad chunk size, a non-HTTP request line) are answered
by aiohttp's protocol layer before any application code runs, as text/plain; for those the test
asserts a 400 without a traceback and that the server survives, not a JSON body.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import zlib
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from slime_ext.launch import ServerProcess

API_KEY = "secret"
CTX = 64
MAX_BODY = 8 * 1024 * 1024  # the server's default --max-body-mb 8
ANY = object()  # "don't check this field"

USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
ASSISTANT_CALL = {"role": "assistant", "content": None, "tool_calls": [CALL]}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
SURROGATE = "\ud800"  # a lone UTF-16 surrogate: json.dumps writes it as the escape \ud800


# ---------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    id: str
    body: bytes | None = None
    status: int = 400
    param: Any = ANY  # the expected error.param (None, a string) or ANY
    code: Any = ANY  # the expected error.code or ANY
    type: str = "invalid_request_error"
    mentions: tuple[str, ...] = ()  # substrings the message must contain (case-insensitive)
    method: str = "POST"
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    raw_headers: tuple[bytes, ...] = ()  # sent over a raw socket (bytes aiohttp would not send)
    chunked_mib: int = 0  # send this many MiB as a chunked body instead of `body`


def req(**fields: Any) -> bytes:
    """A valid request body (short generation) with ``fields`` replaced; a field set to ... is removed."""
    body: dict[str, Any] = {"model": "tiny", "messages": [USER], "max_tokens": 2}
    for k, v in fields.items():
        if v is ...:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body).encode()


def raw_field(name: str, literal: str) -> bytes:
    """A valid body plus ``"name": literal`` written verbatim (for 1e999, NaN, Infinity...)."""
    return b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "%s": %s}' % (
        name.encode(), literal.encode())


def msgs(*messages: Any) -> bytes:
    return req(messages=list(messages))


VALID = req()


def json_cases() -> list[Case]:
    def bad(name: str, body: bytes) -> Case:
        return Case(f"json-{name}", body, param=None, code="invalid_json", mentions=("JSON",))

    content_with = lambda raw: b'{"messages": [{"role": "user", "content": "' + raw + b'"}]}'  # noqa: E731
    cases = [
        bad("empty_body", b""),
        bad("whitespace_only", b" \n\t "),
        bad("bare_word", b"hello"),
        bad("truncated_object", b'{"messages": [{"role": "user", "content": "hi"}'),
        bad("truncated_in_string", b'{"messages": [{"role": "user", "content": "hi'),
        bad("truncated_after_key", b'{"messages":'),
        bad("just_open_brace", b"{"),
        bad("trailing_garbage", VALID + b"xyz"),
        bad("trailing_brace", VALID + b"}"),
        bad("two_objects", VALID + VALID),
        bad("trailing_nul_byte", VALID + b"\x00"),
        bad("trailing_comma", b'{"messages": [{"role": "user", "content": "hi"},]}'),
        bad("single_quotes", b"{'messages': [{'role': 'user', 'content': 'hi'}]}"),
        bad("unquoted_keys", b'{messages: [{role: "user", content: "hi"}]}'),
        bad("js_comment", b'{"messages": [] /* comment */}'),
        bad("raw_newline_in_string", content_with(b"a\nb")),
        bad("invalid_escape", content_with(b"\\x41")),
        bad("short_unicode_escape", content_with(b"\\u12")),
        bad("invalid_utf8_ff_fe", content_with(b"\xff\xfe")),
        bad("invalid_utf8_lone_continuation", content_with(b"a\x80b")),
        bad("invalid_utf8_overlong", content_with(b"\xc0\xaf")),
        bad("invalid_utf8_truncated_multibyte", content_with(b"\xe2\x82")),
        bad("latin1_encoded_body", '{"messages": [{"role": "user", "content": "caf\u00e9"}]}'.encode("latin-1")),
        bad("integer_5000_digits", raw_field("max_tokens", "9" * 5000)),
        bad("nested_arrays_100000", b"[" * 100_000 + b"]" * 100_000),
        bad("unclosed_arrays_100000", b"[" * 100_000),
        bad("nested_objects_100000", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        bad("nested_arrays_in_messages", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ]
    for name, literal in [("null", b"null"), ("empty_array", b"[]"), ("array_of_messages", b'[{"role": "user", "content": "hi"}]'),
                          ("number", b"42"), ("float", b"1.5"), ("negative", b"-1"), ("string", b'"hello"'),
                          ("true", b"true"), ("false", b"false")]:
        cases.append(Case(f"json-body_is_{name}", literal, param=None, mentions=("JSON object",)))
    return cases


def message_cases() -> list[Case]:
    def c(name: str, body: bytes, param: str, *mentions: str) -> Case:
        return Case(f"messages-{name}", body, param=param, mentions=mentions or (param,))

    m0, c0 = "messages[0]", "messages[0].content"
    cases = [
        c("missing", req(messages=...), "messages", "'messages'", "required"),
        c("missing_only_model", b'{"model": "tiny"}', "messages", "'messages'", "required"),
        c("null", req(messages=None), "messages", "'messages'", "required"),
        c("empty_list", req(messages=[]), "messages", "'messages'", "empty"),
        c("string", req(messages="hi"), "messages", "'messages'", "list"),
        c("object", req(messages=USER), "messages", "'messages'", "list"),
        c("number", req(messages=5), "messages", "'messages'", "list"),
        c("true", req(messages=True), "messages", "'messages'", "list"),
        c("item_string", msgs("hi"), m0, m0, "object"),
        c("item_number", msgs(1), m0, m0, "object"),
        c("item_null", msgs(None), m0, m0, "object"),
        c("item_list", msgs([USER]), m0, m0, "object"),
        c("second_item_string", msgs(USER, "oops"), "messages[1]", "messages[1]", "object"),
    ]
    for name, role in [("missing", ...), ("null", None), ("number", 1), ("bool", True), ("list", ["user"]),
                       ("object", {"name": "user"})]:
        m = {"content": "hi"} if role is ... else {"role": role, "content": "hi"}
        cases.append(c(f"role_{name}", msgs(m), f"{m0}.role", f"{m0}.role", "string"))
    for role in ["bot", "", "USER", "model", "System ", "tool_result"]:
        cases.append(c(f"role_unknown_{role.strip() or 'empty'}{'_space' if role.endswith(' ') else ''}",
                       msgs({"role": role, "content": "hi"}), f"{m0}.role", f"{m0}.role", repr(role)))
    for name, content in [("number", 42), ("float", 1.5), ("bool", True), ("object", {"text": "hi"})]:
        cases.append(c(f"content_{name}", msgs({"role": "user", "content": content}), c0, c0, "string"))
    for name, part in [("string", "hi"), ("number", 1), ("null", None), ("list", ["hi"])]:
        cases.append(c(f"content_part_{name}", msgs({"role": "user", "content": [part]}), f"{c0}[0]", f"{c0}[0]", "object"))
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    cases += [
        c("content_image_url_part", msgs({"role": "user", "content": [image]}), f"{c0}[0]", "image_url", "text"),
        c("content_text_then_image_url", msgs({"role": "user", "content": [{"type": "text", "text": "what is this"}, image]}),
          f"{c0}[1]", f"{c0}[1]", "image_url"),
        c("content_input_audio_part", msgs({"role": "user", "content": [audio]}), f"{c0}[0]", "input_audio"),
        c("content_part_without_type", msgs({"role": "user", "content": [{"text": "hi"}]}), f"{c0}[0]", f"{c0}[0].type"),
    ]
    for name, text in [("number", 5), ("null", None), ("list", ["hi"]), ("object", {"value": "hi"})]:
        cases.append(c(f"content_part_text_{name}", msgs({"role": "user", "content": [{"type": "text", "text": text}]}),
                       f"{c0}[0]", f"{c0}[0].text", "string"))
    cases += [
        c("user_content_missing", msgs({"role": "user"}), c0, c0, "required"),
        c("user_content_null", msgs({"role": "user", "content": None}), c0, c0, "required"),
        c("system_content_missing", msgs({"role": "system"}, USER), c0, c0, "required"),
        c("developer_content_null", msgs({"role": "developer", "content": None}, USER), c0, c0, "required"),
        c("assistant_neither_content_nor_tool_calls", msgs(USER, {"role": "assistant"}), "messages[1]",
          "messages[1]", "neither content nor tool_calls"),
        c("assistant_null_content_empty_tool_calls", msgs(USER, {"role": "assistant", "content": None, "tool_calls": []}),
          "messages[1]", "neither content nor tool_calls"),
        c("assistant_null_content_null_tool_calls", msgs(USER, {"role": "assistant", "content": None, "tool_calls": None}),
          "messages[1]", "neither content nor tool_calls"),
        c("tool_message_without_content", msgs(USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": "call_1"}),
          "messages[2].content", "messages[2].content", "required"),
        c("tool_message_null_content", msgs(USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": "call_1", "content": None}),
          "messages[2].content", "messages[2].content", "required"),
        c("function_message_without_content", msgs(USER, ASSISTANT_CALL, {"role": "function", "name": "get_weather"}),
          "messages[2].content", "messages[2].content", "required"),
        c("tool_message_content_number", msgs(USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": "call_1", "content": 3}),
          "messages[2].content", "messages[2].content", "string"),
    ]
    return cases


def param_cases() -> list[Case]:
    bad_values: dict[str, list[tuple[str, Any]]] = {
        "temperature": [("minus_1", -1), ("3", 3), ("just_above_2", 2.0001), ("string", "hot"), ("true", True),
                        ("false", False), ("list", [1]), ("object", {"value": 1})],
        "top_p": [("2", 2), ("minus_0.1", -0.1), ("just_above_1", 1.0001), ("string", "0.9"), ("true", True)],
        "max_tokens": [("0", 0), ("minus_5", -5), ("1.5", 1.5), ("string", "10"), ("true", True), ("list", [10])],
        "max_completion_tokens": [("0", 0), ("minus_5", -5), ("1.5", 1.5), ("string", "10"), ("true", True)],
        "n": [("2", 2), ("0", 0), ("minus_1", -1), ("string", "1"), ("1.5", 1.5), ("true", True)],
        "stream": [("string_yes", "yes"), ("1", 1), ("0", 0), ("string_true", "true"), ("list", [])],
        "stream_options": [("list", [{"include_usage": True}]), ("string", "include_usage"), ("number", 1), ("true", True)],
        "stop": [("5_strings", ["a", "b", "c", "d", "e"]), ("number", 5), ("list_with_empty_string", ["", "x"]),
                 ("empty_string", ""), ("list_of_numbers", [1]), ("list_with_null", [None]), ("object", {"a": 1}),
                 ("true", True), ("nested_list", [["x"]])],
        "seed": [("string", "x"), ("1.5", 1.5), ("true", True), ("numeric_string", "42"), ("2_pow_64", 2**64),
                 ("below_int64", -(2**63) - 1)],
        "user": [("number", 123), ("list", ["u"]), ("object", {"id": "u"}), ("true", True)],
        "model": [("number", 123), ("list", ["tiny"]), ("object", {"id": "tiny"}), ("true", True), ("float", 1.5)],
    }
    cases = []
    for name, values in bad_values.items():
        for vid, value in values:
            cases.append(Case(f"params-{name}-{vid}", req(**{name: value}), param=name, mentions=(f"'{name}'",)))
    # values json.loads accepts but that are not finite numbers (1e999 parses as inf)
    for name, lits in {"temperature": ["1e999", "-1e999", "NaN", "Infinity"], "top_p": ["1e999", "NaN"],
                       "max_tokens": ["1e999"], "seed": ["1e999"]}.items():
        for lit in lits:
            cases.append(Case(f"params-{name}-literal_{lit}", raw_field(name, lit), param=name, mentions=(f"'{name}'",)))
    return cases


def tool_cases() -> list[Case]:
    def t(name: str, body: bytes, param: str, *mentions: str) -> Case:
        return Case(f"tools-{name}", body, param=param, mentions=mentions or (param,))

    fn = TOOL["function"]
    cases = [
        t("tools_object", req(tools=TOOL), "tools", "'tools'", "list"),
        t("tools_string", req(tools="get_weather"), "tools", "'tools'", "list"),
        t("tools_number", req(tools=5), "tools", "'tools'", "list"),
        t("tools_true", req(tools=True), "tools", "'tools'", "list"),
    ]
    for name, item in [("string", "get_weather"), ("null", None), ("number", 5), ("list", [TOOL])]:
        cases.append(t(f"item_{name}", req(tools=[item]), "tools[0]", "tools[0]", "function"))
    for name, typ in [("retrieval", "retrieval"), ("code_interpreter", "code_interpreter"), ("null", None), ("number", 5)]:
        cases.append(t(f"type_{name}", req(tools=[{"type": typ, "function": fn}]), "tools[0]", "tools[0]", "'function'"))
    nm = "tools[0].function.name"
    for name, function in [("missing", ...), ("string", "get_weather"), ("list", [fn]), ("null", None)]:
        tool = {"type": "function"} if function is ... else {"type": "function", "function": function}
        cases.append(t(f"function_{name}", req(tools=[tool]), nm, nm))
    for name, fname in [("missing", ...), ("empty", ""), ("number", 5), ("null", None), ("list", ["f"])]:
        f = {k: v for k, v in fn.items() if k != "name"} if fname is ... else {**fn, "name": fname}
        cases.append(t(f"name_{name}", req(tools=[{"type": "function", "function": f}]), nm, nm, "non-empty string"))
    pm = "tools[0].function.parameters"
    for name, params in [("string", "object"), ("list", ["city"]), ("number", 5), ("true", True)]:
        cases.append(t(f"parameters_{name}", req(tools=[{"type": "function", "function": {**fn, "parameters": params}}]),
                       pm, pm, "object"))
    cases.append(t("second_tool_missing_name", req(tools=[TOOL, {"type": "function", "function": {"parameters": {}}}]),
                   "tools[1].function.name", "tools[1].function.name"))
    # tool_choice
    for name, choice in [("any", "any"), ("empty", ""), ("AUTO", "AUTO"), ("function", "function"), ("number", 1),
                         ("true", True), ("list", ["auto"]), ("type_only", {"type": "function"}),
                         ("function_string", {"type": "function", "function": "get_weather"}),
                         ("function_null", {"type": "function", "function": None}),
                         ("function_name_number", {"type": "function", "function": {"name": 5}}),
                         ("function_empty", {"type": "function", "function": {}})]:
        cases.append(t(f"tool_choice_{name}", req(tools=[TOOL], tool_choice=choice), "tool_choice", "'tool_choice'"))
    unknown = {"type": "function", "function": {"name": "missing_fn"}}
    cases += [
        t("tool_choice_names_unknown_tool", req(tools=[TOOL], tool_choice=unknown), "tool_choice", "'missing_fn'", "not in 'tools'"),
        t("tool_choice_names_tool_without_tools", req(tool_choice=unknown), "tool_choice", "'missing_fn'", "not in 'tools'"),
    ]
    # malformed assistant tool_calls in the history
    tc = "messages[1].tool_calls"

    def history(calls: Any) -> bytes:
        return msgs(USER, {"role": "assistant", "content": None, "tool_calls": calls},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"})

    for name, calls in [("string", "get_weather"), ("object", CALL), ("number", 1)]:
        cases.append(t(f"tool_calls_{name}", history(calls), tc, f"'{tc}'", "list"))
    for name, call in [("item_string", "get_weather"), ("item_null", None), ("item_number", 7),
                       ("missing_function", {"id": "call_1", "type": "function"}),
                       ("function_string", {**CALL, "function": "get_weather"}),
                       ("function_name_number", {**CALL, "function": {"name": 5, "arguments": "{}"}}),
                       ("function_name_missing", {**CALL, "function": {"arguments": "{}"}})]:
        cases.append(t(f"tool_calls_{name}", history([call]), f"{tc}[0]", f"{tc}[0].function.name"))
    for name, args in [("number", 5), ("list", ["Paris"]), ("true", True)]:
        call = {**CALL, "function": {"name": "get_weather", "arguments": args}}
        cases.append(t(f"tool_calls_arguments_{name}", history([call]), f"{tc}[0]", f"{tc}[0].function.arguments"))
    cases.append(t("tool_calls_second_call_bad", history([CALL, {"id": "call_2"}]), f"{tc}[1]", f"{tc}[1].function.name"))
    return cases


def hostile_cases() -> list[Case]:
    """Text that JSON allows but that is not Unicode (lone surrogates), and headers that are not UTF-8."""

    def s(name: str, body: bytes, param: str) -> Case:
        return Case(f"hostile-{name}", body, param=param, mentions=(param, "surrogate"))

    tool_with = lambda **kw: {"type": "function", "function": {**TOOL["function"], **kw}}  # noqa: E731
    cases = [
        s("surrogate_in_content", msgs({"role": "user", "content": f"hi {SURROGATE}"}), "messages[0].content"),
        s("surrogate_in_text_part", msgs({"role": "user", "content": [{"type": "text", "text": SURROGATE}]}),
          "messages[0].content[0].text"),
        s("surrogate_in_user", req(user=SURROGATE), "user"),
        s("surrogate_in_model", req(model=SURROGATE), "model"),
        s("surrogate_in_name", msgs({"role": "user", "content": "hi", "name": SURROGATE}), "messages[0].name"),
        s("surrogate_in_stop", req(stop=["ok", SURROGATE]), "stop[1]"),
        s("surrogate_in_tool_name", req(tools=[tool_with(name=SURROGATE)]), "tools[0].function.name"),
        s("surrogate_in_tool_description", req(tools=[tool_with(description=SURROGATE)]), "tools[0].function.description"),
        s("surrogate_in_schema_key", req(tools=[tool_with(parameters={"type": "object", "properties": {SURROGATE: {}}})]),
          "tools[0].function.parameters.properties"),
        s("surrogate_in_tool_call_arguments",
          msgs(USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": SURROGATE}}]}),
          "messages[1].tool_calls[0].function.arguments"),
        s("surrogate_in_tool_call_id", msgs(USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": SURROGATE, "content": "x"}),
          "messages[2].tool_call_id"),
        # UTF-8 bytes of a surrogate (CESU-8): Python's json decodes bytes with 'surrogatepass'
        s("utf8_encoded_surrogate_bytes", b'{"messages": [{"role": "user", "content": "a\xed\xa0\x80b"}]}',
          "messages[0].content"),
        Case("hostile-x_session_id_not_utf8", VALID, param="x-session-id", mentions=("x-session-id", "UTF-8"),
             raw_headers=(b"X-Session-Id: \xff\xfe\xfd",)),
        Case("hostile-x_session_id_latin1", VALID, param="x-session-id", mentions=("x-session-id", "UTF-8"),
             raw_headers=(b"X-Session-Id: caf\xe9",)),
    ]
    return cases


def size_cases() -> list[Case]:
    big = lambda n: req(messages=[{"role": "user", "content": "a" * n}])  # noqa: E731
    return [
        Case("size-body_one_byte_over_8MiB", big(MAX_BODY + 1 - len(big(0))), status=413, param=None, code="request_too_large", mentions=("larger than", str(MAX_BODY))),
        Case("size-body_12MiB", big(12 * 1024 * 1024), status=413, param=None, code="request_too_large",
             mentions=("larger than",)),
        Case("size-chunked_body_9MiB", chunked_mib=9, status=413, param=None, code="request_too_large",
             mentions=("larger than",)),
    ]


def http_cases() -> list[Case]:
    cases = []
    for method, path in [("GET", "/v1/chat/completions"), ("PUT", "/v1/chat/completions"),
                         ("DELETE", "/v1/chat/completions"), ("PATCH", "/v1/chat/completions"),
                         ("OPTIONS", "/v1/chat/completions"), ("POST", "/v1/models"), ("DELETE", "/v1/models"),
                         ("POST", "/healthz"), ("PUT", "/metrics")]:
        cases.append(Case(f"http-{method}_{path.strip('/').replace('/', '_')}_405", VALID if method != "GET" else None,
                          status=405, method=method, path=path, param=None, code="405",
                          mentions=("Method Not Allowed", f"{method} {path}")))
    for method, path in [("POST", "/v1/completions"), ("POST", "/v1/chat"), ("POST", "/v1/chat/completions/"),
                         ("POST", "/v2/chat/completions"), ("POST", "/chat/completions"), ("POST", "/V1/chat/completions"),
                         ("POST", "/v1/embeddings"), ("GET", "/"), ("GET", "/v1"), ("GET", "/v1/models/tiny"),
                         ("GET", "/v1/../../etc/passwd")]:
        name = path.strip("/").replace("/", "_").replace("..", "dotdot") or "root"
        cases.append(Case(f"http-{method}_{name}_404", VALID if method == "POST" else None, status=404, method=method,
                          path=path, param=None, code="404", mentions=("Not Found",)))
    return cases


def encoding_cases() -> list[Case]:
    """Content-Encoding: a body that does not inflate is a 400 naming it, a bomb a 413 (never a 500)."""
    def e(name: str, enc: str, body: bytes, status: int = 400, **kw: Any) -> Case:
        return Case(f"encoding-{name}", body, status=status,
                    headers={"Content-Type": "application/json", "Content-Encoding": enc}, **kw)

    bad = dict(param="content-encoding", code="invalid_content_encoding")
    return [
        e("gzip_not_gzip", "gzip", b"{}", mentions=("gzip",), **bad),
        e("deflate_not_deflate", "deflate", b"{}", mentions=("deflate",), **bad),
        e("x_gzip_not_gzip", "x-gzip", VALID, mentions=("x-gzip",), **bad),
        e("gzip_truncated", "gzip", gzip.compress(VALID)[:-8], mentions=("truncated",), **bad),
        e("gzip_trailing_bytes", "gzip", gzip.compress(VALID) + b"xyz", mentions=("after the end",), **bad),
        e("gzip_empty_body", "gzip", b"", mentions=("truncated",), **bad),
        e("deflate_truncated", "deflate", zlib.compress(VALID)[:5], mentions=("deflate",), **bad),
        e("gzip_bomb_100MB", "gzip", gzip.compress(b" " * 100_000_000, 9), status=413, param=None,
          code="request_too_large", mentions=("larger than", "decompressed")),
        e("brotli_unsupported", "br", VALID, status=415, param="content-encoding", code="unsupported_content_encoding"),
        e("stacked_encodings", "gzip, gzip", gzip.compress(gzip.compress(VALID)), status=415,
          param="content-encoding", code="unsupported_content_encoding"),
    ]


def media_cases() -> list[Case]:
    """Bodies that are not declared JSON (what a web page can send cross-site, curl -d's default): 415."""
    def m(name: str, ctype: str | None) -> Case:
        return Case(f"media-{name}", VALID, status=415, param="content-type", code="unsupported_media_type",
                    mentions=("application/json",), headers={"Content-Type": ctype} if ctype else {})

    return [m("text_plain", "text/plain"), m("text_plain_charset", "text/plain;charset=UTF-8"),
            m("form_urlencoded", "application/x-www-form-urlencoded"), m("multipart", "multipart/form-data; boundary=x"),
            m("octet_stream", "application/octet-stream"), m("jsonp", "application/jsonp"), m("none", None)]


def site_cases() -> list[Case]:
    """A foreign Origin (a web page) or a non-loopback Host (DNS rebinding): 403, on every endpoint."""
    def x(name: str, param: str, method: str = "POST", path: str = "/v1/chat/completions", **headers: str) -> Case:
        return Case(f"site-{name}", VALID if method == "POST" else None, status=403, method=method, path=path,
                    param=param, code=f"{param}_not_allowed", headers={"Content-Type": "application/json", **headers})

    return [
        x("foreign_origin", "origin", Origin="http://evil.example"),
        x("foreign_origin_text_plain", "origin", Origin="http://evil.example", **{"Content-Type": "text/plain"}),
        x("null_origin", "origin", Origin="null"),
        x("loopback_origin_not_allowed", "origin", Origin="http://127.0.0.1:3000"),
        x("foreign_origin_healthz", "origin", "GET", "/healthz", Origin="http://evil.example"),
        x("foreign_origin_preflight", "origin", "OPTIONS", Origin="http://evil.example",
          **{"Access-Control-Request-Method": "POST"}),
        x("rebinding_host", "host", Host="evil.example"),
        x("rebinding_host_with_port", "host", Host="evil.example:30000"),
        x("rebinding_host_healthz", "host", "GET", "/healthz", Host="attacker.example"),
        x("rebinding_host_models", "host", "GET", "/v1/models", Host="127.0.0.1.attacker.example"),
        x("lan_address_host", "host", Host="192.168.1.10:30000"),
    ]


MAIN_CASES = (json_cases() + message_cases() + param_cases() + tool_cases() + hostile_cases() + size_cases() + http_cases()
              + encoding_cases() + media_cases() + site_cases())


def context_cases() -> list[Case]:
    def c(name: str, body: bytes) -> Case:
        return Case(f"context-{name}", body, param="messages", code="context_length_exceeded",
                    mentions=(f"context is {CTX} tokens", "prompt is"), headers=_auth_json())

    return [
        c("long_user_message", msgs({"role": "user", "content": "hello " * 100})),
        c("long_system_prompt", msgs({"role": "system", "content": "You are helpful. " * 40}, USER)),
        c("many_short_messages", msgs(*([USER, {"role": "assistant", "content": "ok"}] * 15), USER)),
        c("long_text_parts", msgs({"role": "user", "content": [{"type": "text", "text": "word " * 40}] * 3})),
        c("tool_definitions_overflow", req(tools=[TOOL, {"type": "function", "function": {"name": "search"}}])),
        c("long_tool_result", msgs(USER, ASSISTANT_CALL, {"role": "tool", "tool_call_id": "call_1", "content": "rain " * 80})),
    ]


def _auth_json(auth: str | None = f"Bearer {API_KEY}", **extra: str) -> dict[str, str]:
    h = {"Content-Type": "application/json", **extra}
    if auth is not None:
        h["Authorization"] = auth
    return h


def auth_cases() -> list[Case]:
    def a(name: str, headers: dict[str, str], method: str = "POST", path: str = "/v1/chat/completions",
          raw_headers: tuple[bytes, ...] = ()) -> Case:
        return Case(f"auth-{name}", VALID if method == "POST" else None, status=401, method=method, path=path,
                    type="authentication_error", code="invalid_api_key", param=None, mentions=("API key",),
                    headers=headers, raw_headers=raw_headers)

    return [
        a("no_authorization_header", _auth_json(None)),
        a("wrong_key", _auth_json("Bearer wrong")),
        a("bearer_with_empty_key", _auth_json("Bearer ")),
        a("bearer_without_key", _auth_json("Bearer")),
        a("basic_scheme", _auth_json("Basic c2VjcmV0")),  # base64("secret")
        a("token_scheme", _auth_json(f"Token {API_KEY}")),
        a("bare_key_without_scheme", _auth_json(API_KEY)),
        a("key_with_suffix", _auth_json(f"Bearer {API_KEY}x")),
        a("key_prefix_only", _auth_json(f"Bearer {API_KEY[:-1]}")),
        a("key_wrong_case", _auth_json(f"Bearer {API_KEY.upper()}")),
        a("key_twice", _auth_json(f"Bearer {API_KEY} {API_KEY}")),
        a("x_api_key_wrong", _auth_json(None, **{"x-api-key": "wrong"})),
        a("x_api_key_empty", _auth_json(None, **{"x-api-key": ""})),
        a("models_without_key", {}, method="GET", path="/v1/models"),
        a("metrics_without_key", {}, method="GET", path="/metrics"),
        a("bearer_key_not_utf8", {}, raw_headers=(b"Authorization: Bearer \xff\xfe" + API_KEY.encode(),)),
    ]


# ---------------------------------------------------------------------------------------------- plumbing
class Http:
    """One aiohttp session on its own event loop, shared by the module; plus raw-socket requests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.session: aiohttp.ClientSession = self.loop.run_until_complete(self._open())

    @staticmethod
    async def _open() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))

    def request(self, method: str, url: str, data: Any = None, headers: dict | None = None) -> tuple[int, str, bytes]:
        async def go():
            async with self.session.request(method, url, data=data, headers=headers) as r:
                return r.status, r.headers.get("Content-Type", ""), await r.read()

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        self.loop.run_until_complete(self.session.close())
        self.loop.close()


def raw_request(port: int, request: bytes, timeout: float = 30) -> tuple[int, str, bytes]:
    """Send bytes verbatim on a fresh connection and read the response until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, headers.get("content-type", ""), body


def send(http: Http, srv: ServerProcess, case: Case) -> tuple[int, str, bytes]:
    if case.raw_headers:
        body = case.body or b""
        head = [f"{case.method} {case.path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
                f"Content-Length: {len(body)}", "Connection: close"]
        request = "\r\n".join(head).encode() + b"\r\n" + b"".join(h + b"\r\n" for h in case.raw_headers) + b"\r\n" + body
        return raw_request(srv.port, request)
    data: Any = case.body
    if case.chunked_mib:
        async def chunks():
            for _ in range(case.chunked_mib):
                yield b"a" * (1024 * 1024)
        data = chunks()
    return http.request(case.method, srv.base + case.path, data=data, headers=case.headers)


def check_error(case: Case, status: int, content_type: str, raw: bytes) -> dict:
    text = raw.decode("utf-8", "replace")
    assert status == case.status, f"{case.id}: expected {case.status}, got {status}: {text[:500]}"
    assert 400 <= status < 500
    assert "Traceback" not in text and 'File "' not in text, f"{case.id}: traceback in the body: {text[:500]}"
    assert content_type.startswith("application/json"), f"{case.id}: Content-Type {content_type!r}: {text[:300]}"
    body = json.loads(text)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"].strip(), err
    assert isinstance(err["type"], str) and err["type"] == case.type, err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], str), err
    if case.param is not ANY:
        assert err["param"] == case.param, f"{case.id}: param {err['param']!r}, expected {case.param!r}: {err['message']}"
    if case.code is not ANY:
        assert err["code"] == case.code, f"{case.id}: code {err['code']!r}, expected {case.code!r}: {err['message']}"
    for m in case.mentions:
        assert m.lower() in err["message"].lower(), f"{case.id}: message does not mention {m!r}: {err['message']!r}"
    return err


def check_valid_reply(status: int, raw: bytes) -> None:
    assert status == 200, raw[:500]
    body = json.loads(raw)
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str), body
    assert body["usage"]["completion_tokens"] >= 1, body


def assert_no_server_errors(srv: ServerProcess) -> None:
    """No request reached the catch-all 500 handler, and no store write failed silently."""
    log = srv.log_path.read_text(errors="replace")
    for marker in ("unhandled error", "store write failed", "engine step failed"):
        assert marker not in log, f"{marker!r} in the server log:\n{log[-3000:]}"


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def http():
    h = Http()
    yield h
    h.close()


@pytest.fixture(scope="module")
def restricted_server(tmp_path_factory):
    """`--api-key secret --context-length 64`: for the auth and context-length cases."""
    srv = ServerProcess(tmp_path_factory.mktemp("restricted") / "run",
                        extra=["--method", "none", "--api-key", API_KEY, "--context-length", str(CTX)]).start()
    yield srv
    srv.stop()


# ---------------------------------------------------------------------------------------------- tests
def test_enough_distinct_cases():
    ids = [c.id for c in MAIN_CASES + context_cases() + auth_cases()]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert len(MAIN_CASES) >= 100, len(MAIN_CASES)


@pytest.mark.parametrize("case", MAIN_CASES, ids=[c.id for c in MAIN_CASES])
def test_malformed_request_gets_openai_error(tiny_server, http, case):
    check_error(case, *send(http, tiny_server, case))


@pytest.mark.parametrize("case", context_cases(), ids=lambda c: c.id)
def test_prompt_longer_than_context(restricted_server, http, case):
    check_error(case, *send(http, restricted_server, case))


@pytest.mark.parametrize("case", auth_cases(), ids=lambda c: c.id)
def test_auth_refused(restricted_server, http, case):
    check_error(case, *send(http, restricted_server, case))


def test_auth_accepted(restricted_server, http):
    # /healthz needs no key
    status, _, raw = http.request("GET", restricted_server.base + "/healthz")
    assert status == 200 and json.loads(raw)["status"] == "ok"
    # the right key, as a bearer token (any case of the scheme) or as x-api-key
    for headers in (_auth_json(), _auth_json(f"bearer {API_KEY}"), _auth_json(None, **{"x-api-key": API_KEY})):
        status, _, raw = http.request("POST", restricted_server.url + "/chat/completions", data=VALID, headers=headers)
        check_valid_reply(status, raw)
    status, _, raw = http.request("GET", restricted_server.url + "/models", headers=_auth_json())
    assert status == 200 and json.loads(raw)["data"][0]["id"] == "tiny"
    assert_no_server_errors(restricted_server)


FRAMING = {
    "bad_content_length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n" + VALID,
    "bad_chunk_size": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "not_http": b"HELLO\r\n\r\n",
    "bad_http_version": b"POST /v1/chat/completions HTTP/9.9\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    "header_line_too_long": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", list(FRAMING.values()), ids=list(FRAMING))
def test_broken_http_framing_is_refused(tiny_server, request_bytes):
    """aiohttp's parser answers these before the app (text/plain): a 400 without a traceback."""
    status, _, body = raw_request(tiny_server.port, request_bytes)
    text = body.decode("utf-8", "replace")
    assert status == 400, (status, text[:300])
    assert text.strip() and "Traceback" not in text and 'File "' not in text, text[:300]
    assert tiny_server.health()["status"] == "ok"


def test_server_still_answers_a_valid_request(tiny_server, http):
    """Runs last: after every hostile request the server is alive, answers correctly, never hit a 500."""
    assert tiny_server.proc.poll() is None, "the server process died"
    status, ctype, raw = http.request("POST", tiny_server.url + "/chat/completions", data=VALID,
                                      headers={"Content-Type": "application/json"})
    assert ctype.startswith("application/json")
    check_valid_reply(status, raw)
    assert tiny_server.health()["status"] == "ok"
    assert_no_server_errors(tiny_server)
