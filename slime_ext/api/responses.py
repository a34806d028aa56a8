"""OpenAI's Responses API (``POST /v1/responses``) on top of the chat-completions path.

As for Anthropic's Messages (api/anthropic.py), a request is translated into the Chat Completions body it
stands for (``to_chat_body``) and served, recorded, judged and learned from by the code that serves
``/v1/chat/completions``; only the reply (``response_object``, the event stream of ``Frames``) takes the
Responses shape. Errors keep OpenAI's shape.

The translation:
  ``instructions``                        -> a first ``system`` message (not carried to a later response,
                                             as OpenAI does)
  ``input`` as a string                    -> one ``user`` message
  a message item (``role``, ``content`` as a string or ``input_text`` / ``output_text`` parts)
                                          -> that message (``developer`` is ``system``)
  ``function_call`` items                  -> ``tool_calls`` of the assistant message they follow (or of a new
                                             one): the reply they came from, as it was recorded
  ``function_call_output``                 -> a ``tool`` message (``tool_call_id`` = ``call_id``)
  ``reasoning`` items                      -> dropped (chat templates drop earlier reasoning too)
  ``tools`` (``{"type": "function", "name", "description", "parameters"}``), ``tool_choice``,
  ``max_output_tokens``, ``temperature``, ``top_p``, ``user`` map to their Chat Completions fields; other
  fields (``metadata``, ``reasoning``, ``text``, ``truncation``) are accepted and ignored. Built-in tools
  (web search, file search, ...) and images are refused.

``previous_response_id``: the server keeps, per response it gave with ``store`` (the default), the
conversation it answered (without the instructions) and its reply, in the run's store, per user
(``Store.save_response``); a later request's input continues that conversation.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from slime_ext.api.errors import ApiError
from slime_ext.api.schemas import flat_tool, text_content
from slime_ext.api.sse import sse

TEXT_PARTS = ("input_text", "output_text", "text")


def to_chat_body(body: dict[str, Any], previous: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(the Chat Completions body, the conversation it answers without the instructions)`` of a Responses
    request continuing ``previous`` (the stored conversation of ``previous_response_id``, or [])."""
    raw = body.get("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise ApiError("'input' must be a string or a non-empty list of input items", param="input")
    conversation = previous + _items(raw)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError("'instructions' must be a string", param="instructions")
    out: dict[str, Any] = {"messages": ([{"role": "system", "content": instructions}] if instructions else [])
                           + conversation, "stream": body.get("stream", False)}
    for name in ("model", "temperature", "top_p", "user"):
        if name in body:
            out[name] = body[name]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    return out, conversation


def previous_id(body: Any) -> str | None:
    """The request's ``previous_response_id`` (None without one), after checking the body is an object."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    prev = body.get("previous_response_id")
    if prev is not None and not isinstance(prev, str):
        raise ApiError("'previous_response_id' must be a string", param="previous_response_id")
    return prev


def keeps(body: dict[str, Any]) -> bool:
    """Whether the response is kept for a later ``previous_response_id`` (``store``, default true)."""
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise ApiError("'store' must be a boolean", param="store")
    return store


def _items(items: list) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(f"'{where}' must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ApiError(f"'{where}.role' must be user, assistant, system or developer", param=f"{where}.role")
            out.append({"role": "system" if role == "developer" else role,
                        "content": text_content(item.get("content"), f"{where}.content", TEXT_PARTS)})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments", ""), str):
                raise ApiError(f"'{where}' must have a string 'name' and string 'arguments'", param=where)
            call = {"id": str(item.get("call_id", "")), "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            if out and out[-1]["role"] == "assistant":  # the reply it is part of
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ApiError(f"'{where}.call_id' must be a string", param=f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": text_content(item.get("output", ""), f"{where}.output", TEXT_PARTS)})
        elif kind != "reasoning":
            raise ApiError(f"'{where}' is a {kind!r} item; this server takes messages, function_call, "
                           "function_call_output and reasoning items", param=where)
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ApiError("'tools' must be a list of tool objects", param="tools")
    for i, t in enumerate(value):
        if t.get("type") != "function":
            raise ApiError(f"'tools[{i}]' is a {t.get('type')!r} tool; this server offers the model function tools "
                           "only ({'type': 'function', 'name', 'parameters'})", param=f"tools[{i}]")
    return [flat_tool(t, f"tools[{i}]", "parameters") for i, t in enumerate(value)]


def _tool_choice(value: Any) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise ApiError("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
                   param="tool_choice")


# ------------------------------------------------------------------------------------------------ replies
def output_items(parser) -> list[dict[str, Any]]:
    """A reply as Responses output items: its reasoning, its message, then its function calls."""
    items: list[dict[str, Any]] = []
    if parser.reasoning:
        items.append(reasoning_item(parser.reasoning))
    if parser.content or not parser.tool_calls:
        items.append(message_item(parser.content))
    return items + [function_call_item(call) for call in parser.tool_calls]


def message_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"type": "message", "id": item_id or "msg_" + uuid.uuid4().hex, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def reasoning_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id or "rs_" + uuid.uuid4().hex, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def function_call_item(call: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + call["id"].removeprefix("call_"), "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": "completed"}


def response_object(resp_id: str, model: str, created: int, output: list[dict[str, Any]], finish_reason: str | None,
                    input_tokens: int, output_tokens: int, body: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``response`` object; ``finish_reason`` None: still in progress."""
    status = "in_progress" if finish_reason is None else "incomplete" if finish_reason == "length" else "completed"
    return {
        "id": resp_id, "object": "response", "created_at": created, "status": status, "model": model,
        "output": output, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"), "previous_response_id": body.get("previous_response_id"),
        "max_output_tokens": body.get("max_output_tokens"), "parallel_tool_calls": True,
        "temperature": body.get("temperature"), "top_p": body.get("top_p"), "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice", "auto"), "store": body.get("store", True),
        "metadata": body.get("metadata") or {}, "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": None if finish_reason is None else {
            "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens},
    }


class Frames:
    """A reply's parser events as the Responses event stream: ``response.created``, ``response.in_progress``;
    each run of text one message item (``output_item.added``, ``content_part.added``, ``output_text.delta``s,
    then the ``.done`` events), reasoning one reasoning item, each tool call one function-call item (its
    arguments as one ``function_call_arguments.delta``); then ``response.completed`` (or ``.incomplete``)
    with the whole response. Every event carries its ``sequence_number``."""

    def __init__(self, resp_id: str, model: str, created: int, body: dict[str, Any],
                 final: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> None:
        """``final(output items)``: the finished response object with these items (the streamed ones, ids and all)."""
        self.resp_id, self.model, self.created, self.body, self.final = resp_id, model, created, body, final
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # items done so far
        self.open: dict[str, Any] | None = None  # the message or reasoning item being written
        self.text = ""

    def start(self) -> bytes:
        response = response_object(self.resp_id, self.model, self.created, [], None, 0, 0, self.body)
        return self._sse("response.created", response=response) + self._sse("response.in_progress", response=response)

    def event(self, kind: str, value: Any) -> bytes:
        out = b""
        if kind == "tool_call":
            item = function_call_item(value)
            out += self._close()
            out += self._sse("response.output_item.added", output_index=len(self.output),
                             item={**item, "arguments": "", "status": "in_progress"})
            out += self._sse("response.function_call_arguments.delta", item_id=item["id"],
                             output_index=len(self.output), delta=item["arguments"])
            out += self._sse("response.function_call_arguments.done", item_id=item["id"],
                             output_index=len(self.output), arguments=item["arguments"])
            out += self._sse("response.output_item.done", output_index=len(self.output), item=item)
            self.output.append(item)
            return out
        want = "message" if kind == "content" else "reasoning"
        if self.open is None or self.open["type"] != want:
            out += self._close()
            new = message_item("") if want == "message" else reasoning_item("")
            self.open, self.text = {**new, "status": "in_progress", "content": []}, ""
            out += self._sse("response.output_item.added", output_index=len(self.output), item=self.open)
            if want == "message":
                out += self._sse("response.content_part.added", item_id=self.open["id"], output_index=len(self.output),
                                 content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        self.text += value
        delta = "response.output_text.delta" if want == "message" else "response.reasoning_text.delta"
        return out + self._sse(delta, item_id=self.open["id"], output_index=len(self.output), content_index=0,
                               delta=value, **({"logprobs": []} if want == "message" else {}))

    def end(self, finish_reason: str, stop_sequence: str | None, output_tokens: int) -> bytes:
        out = self._close()
        response = self.final(self.output)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + self._sse(kind, response=response)

    def error(self, err: ApiError) -> bytes:
        return self._sse("error", code=err.code, message=err.message, param=err.param)

    def _close(self) -> bytes:
        item, self.open = self.open, None
        if item is None:
            return b""
        i = len(self.output)
        if item["type"] == "message":
            done = message_item(self.text, item_id=item["id"])
            part = done["content"][0]
            out = (self._sse("response.output_text.done", item_id=item["id"], output_index=i, content_index=0,
                             text=self.text, logprobs=[])
                   + self._sse("response.content_part.done", item_id=item["id"], output_index=i, content_index=0,
                               part=part))
        else:
            done = reasoning_item(self.text, item_id=item["id"])
            out = self._sse("response.reasoning_text.done", item_id=item["id"], output_index=i, content_index=0,
                            text=self.text)
        self.output.append(done)
        return out + self._sse("response.output_item.done", output_index=i, item=done)

    def _sse(self, kind: str, **fields: Any) -> bytes:
        self.seq += 1
        return sse(kind, {"type": kind, "sequence_number": self.seq - 1, **fields})
