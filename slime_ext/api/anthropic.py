"""Anthropic's Messages API (``POST /v1/messages``) on top of the chat-completions path.

A Messages request is translated into the Chat Completions body it stands for (``to_chat_body``) and
then validated, rendered, generated, parsed and recorded by exactly the code that serves
``/v1/chat/completions`` (api/server.py): the same prompt ids, sessions, judging, learning and per-user
scoping. Only the two ends differ: the translation in, and the reply out as Anthropic content blocks
(``message``), as Anthropic's event stream (``stream_events``), or as Anthropic's error shape
(``error_body``).

The translation, block by block:
  ``system`` (a string or text blocks)        -> the first message, role ``system``
  a user ``text`` block                       -> a text part of a ``user`` message
  a user ``tool_result`` block                -> a ``tool`` message (``tool_call_id`` = ``tool_use_id``);
                                                 its text is the result (``is_error`` is not kept: Chat
                                                 Completions has no such flag)
  an assistant ``text`` / ``tool_use`` block  -> the assistant message's content / ``tool_calls``
                                                 (``input`` as JSON arguments)
  an assistant ``thinking`` block             -> dropped (chat templates drop earlier reasoning too)
  ``tools`` (``name``, ``description``, ``input_schema``), ``tool_choice`` (auto / any / tool / none),
  ``max_tokens``, ``stop_sequences``, ``temperature``, ``top_p``, ``metadata.user_id``, ``thinking``
  (enabled / disabled: the template's ``enable_thinking``) map to their Chat Completions fields;
  ``top_k`` and other fields are accepted and ignored. Images and documents are refused: the
  embedded engine is text-only.
"""

from __future__ import annotations

import json
from typing import Any

from slime_ext.api.errors import ApiError
from slime_ext.api.schemas import MAX_STOP, flat_tool, text_content
from slime_ext.api.sse import sse

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
               413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}  # "stop": end_turn or stop_sequence


def error_body(e: ApiError) -> dict[str, Any]:
    """Anthropic's error shape for ``e``: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = ERROR_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def to_chat_body(body: Any) -> dict[str, Any]:
    """The Chat Completions body a Messages request stands for; ``ApiError`` naming the Anthropic field
    that is wrong. What both APIs share (numbers' ranges, the message sequence) is checked afterwards by
    ``parse_chat_request``, once."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    if body.get("max_tokens") is None:
        raise ApiError("'max_tokens' is required", param="max_tokens")
    messages = [] if body.get("system") is None else [{"role": "system", "content": text_content(body["system"], "system")}]
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError("'messages' must be a non-empty list of messages", param="messages")
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise ApiError(f"'{where}.role' must be 'user' or 'assistant'", param=f"{where}.role")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise ApiError(f"'{where}.content' must be a string or a list of content blocks", param=f"{where}.content")
        messages += _user(blocks, where) if role == "user" else [_assistant(blocks, where)]
    out: dict[str, Any] = {"messages": messages, "max_tokens": body["max_tokens"], "stream": body.get("stream", False)}
    for name in ("model", "temperature", "top_p"):
        if name in body:
            out[name] = body[name]
    if body.get("stop_sequences") is not None:
        out["stop"] = _stop_sequences(body["stop_sequences"])
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ApiError("'metadata' must be an object", param="metadata")
    if (metadata or {}).get("user_id") is not None:
        out["user"] = metadata["user_id"]
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("thinking") is not None:
        out["enable_thinking"] = _thinking(body["thinking"])
    return out


def _block_type(block: Any, where: str) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise ApiError(f"'{where}' must be a content block with a 'type'", param=where)
    if kind in ("image", "document"):
        raise ApiError(f"'{where}' is an {kind} block; this server's model reads text only", param=where)
    return kind


def _text_part(block: dict[str, Any], where: str) -> dict[str, str]:
    if not isinstance(block.get("text"), str):
        raise ApiError(f"'{where}.text' must be a string", param=f"{where}.text")
    return {"type": "text", "text": block["text"]}


def _user(blocks: list, where: str) -> list[dict[str, Any]]:
    """A user message's blocks: each run of text blocks one ``user`` message, each tool result a ``tool`` one."""
    out: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        w = f"{where}.content[{j}]"
        kind = _block_type(block, w)
        if kind == "text":
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(_text_part(block, w))
            else:
                out.append({"role": "user", "content": [_text_part(block, w)]})
        elif kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise ApiError(f"'{w}.tool_use_id' must be a string", param=f"{w}.tool_use_id")
            content = block.get("content", "")
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                        "content": text_content(content, f"{w}.content") if content is not None else ""})
        else:
            raise ApiError(f"'{w}' is a {kind!r} block; a user message holds text and tool_result blocks", param=w)
    if not out:
        raise ApiError(f"'{where}.content' must not be empty", param=f"{where}.content")
    return out


def _assistant(blocks: list, where: str) -> dict[str, Any]:
    text, calls = [], []
    for j, block in enumerate(blocks):
        w = f"{where}.content[{j}]"
        kind = _block_type(block, w)
        if kind == "text":
            text.append(_text_part(block, w))
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise ApiError(f"'{w}' must have a string 'name' and an object 'input'", param=w)
            calls.append({"id": str(block.get("id", "")), "type": "function",
                          "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}),
                                                                                      ensure_ascii=False)}})
        elif kind not in ("thinking", "redacted_thinking"):
            raise ApiError(f"'{w}' is a {kind!r} block; an assistant message holds text, tool_use and thinking "
                           "blocks", param=w)
    msg: dict[str, Any] = {"role": "assistant", "content": text or ("" if not calls else None)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _stop_sequences(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ApiError("'stop_sequences' must be a list of non-empty strings", param="stop_sequences")
    if len(value) > MAX_STOP:
        raise ApiError(f"'stop_sequences' may hold at most {MAX_STOP} strings here, got {len(value)}",
                       param="stop_sequences")
    return value


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ApiError("'tools' must be a list of tool objects", param="tools")
    for i, t in enumerate(value):
        if t.get("type") not in (None, "custom"):
            raise ApiError(f"'tools[{i}]' is a {t['type']!r} tool, which Anthropic runs on its servers; this server "
                           "offers the model client tools only (name, description, input_schema)", param=f"tools[{i}]")
    return [flat_tool(t, f"tools[{i}]", "input_schema") for i, t in enumerate(value)]


def _tool_choice(value: Any) -> Any:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise ApiError("'tool_choice' must be {'type': 'auto' | 'any' | 'none'} or {'type': 'tool', 'name': ...}",
                   param="tool_choice")


def _thinking(value: Any) -> bool:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("enabled", "disabled"):
        raise ApiError("'thinking' must be {'type': 'enabled', 'budget_tokens': N} or {'type': 'disabled'}",
                       param="thinking")
    return kind == "enabled"


# ------------------------------------------------------------------------------------------------ replies
def tool_input(call: dict[str, Any]) -> dict[str, Any]:
    """A parsed tool call's arguments as Anthropic's ``input`` object (arguments that are JSON but not an
    object are kept under ``"arguments"``)."""
    args = call["function"]["arguments"]
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        parsed = args
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": tool_input(call)}


def stop_reason(finish_reason: str, stop_sequence: str | None) -> str:
    if finish_reason == "stop":
        return "stop_sequence" if stop_sequence is not None else "end_turn"
    return STOP_REASONS.get(finish_reason, "end_turn")


def message(msg_id: str, model: str, parser, finish_reason: str, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A whole reply as a Messages response: its reasoning, text and tool calls as content blocks."""
    content: list[dict[str, Any]] = []
    if parser.reasoning:
        content.append({"type": "thinking", "thinking": parser.reasoning, "signature": ""})
    if parser.content:
        content.append({"type": "text", "text": parser.content})
    content += [tool_use_block(call) for call in parser.tool_calls]
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(finish_reason, parser.stop_found), "stop_sequence": parser.stop_found,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


class Frames:
    """A reply's parser events as Anthropic's event stream: ``message_start`` and a ``ping``; each run of
    text or reasoning one ``text`` / ``thinking`` block (``content_block_start``, its ``_delta``s,
    ``content_block_stop``); each tool call a ``tool_use`` block whose input comes as one ``input_json_delta``;
    then ``message_delta`` (stop reason, output tokens) and ``message_stop``."""

    KINDS = {"content": ("text", "text_delta", "text"), "reasoning": ("thinking", "thinking_delta", "thinking")}

    def __init__(self, msg_id: str, model: str, input_tokens: int) -> None:
        self.msg_id, self.model, self.input_tokens = msg_id, model, input_tokens
        self.index = -1  # the current block's index
        self.open: str | None = None  # the current block's type while it is open

    def start(self) -> bytes:
        started = {"id": self.msg_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}
        return sse("message_start", {"type": "message_start", "message": started}) + sse("ping", {"type": "ping"})

    def event(self, kind: str, value: Any) -> bytes:
        if kind == "tool_call":
            block = tool_use_block(value)
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
            return (self._close() + self._begin({**block, "input": {}})
                    + sse("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})
                    + self._close())
        block_type, delta_type, field = self.KINDS[kind]
        out = b""
        if self.open != block_type:
            out = self._close() + self._begin({"type": block_type, field: ""})
        return out + sse("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                 "delta": {"type": delta_type, field: value}})

    def end(self, finish_reason: str, stop_sequence: str | None, output_tokens: int) -> bytes:
        delta = {"stop_reason": stop_reason(finish_reason, stop_sequence), "stop_sequence": stop_sequence}
        return (self._close()
                + sse("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}})
                + sse("message_stop", {"type": "message_stop"}))

    @staticmethod
    def error(err: ApiError) -> bytes:
        return sse("error", error_body(err))

    def _begin(self, block: dict[str, Any]) -> bytes:
        self.index += 1
        self.open = block["type"]
        return sse("content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block})

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return sse("content_block_stop", {"type": "content_block_stop", "index": self.index})
