"""Validate a chat-completions request body into a ``ChatRequest``, or raise ``ApiError``.

Every check names the offending field (``param``) the way OpenAI does, e.g. ``messages[2].role``.
Fields we do not use (``frequency_penalty``, ``logit_bias``, ``response_format``, ...) are
accepted and ignored, as OpenAI-compatible servers commonly do; ``n > 1`` is refused because a
recorded turn is one sampled response. An omitted (or null) ``temperature`` / ``top_p`` stays
``None`` here: the server fills in the served model's defaults (slime_ext/models/generation.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from slime_ext.api.errors import ApiError

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_STOP = 4
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None  # None: omitted, the server's defaults apply (the model's own)
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    user: str | None = None
    # extra chat-template variables: ``chat_template_kwargs`` and ``enable_thinking`` (Qwen3's switch)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    ignore_eos: bool = False  # generate max_tokens tokens whatever the model says (vLLM / SGLang / llama.cpp's)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(body: dict, name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ApiError(f"'{name}' must be a number", param=name)
    if not lo <= v <= hi:
        raise ApiError(f"'{name}' must be between {lo:g} and {hi:g}, got {v}", param=name)
    return float(v)


def _content(value: Any, where: str, role: str) -> str | list | None:
    if value is None:
        if role in ("assistant", "tool", "function"):
            return None
        raise ApiError(f"'{where}' is required for a {role} message", param=where)
    return text_content(value, where)


def text_content(value: Any, where: str, part_types: tuple[str, ...] = ("text",)) -> str | list[dict[str, str]]:
    """A string, or a list of text parts (of ``part_types``: each API names its own) as Chat Completions text
    parts; an ``ApiError`` naming the part that is not one (an image: the served model reads text only)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ApiError(f"'{where}' must be a string or a list of text parts", param=where)
    parts = []
    for j, part in enumerate(value):
        pw = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise ApiError(f"'{pw}' must be an object with 'type' and 'text'", param=pw)
        if part.get("type") not in part_types:
            raise ApiError(f"'{pw}.type' is {part.get('type')!r}; this server accepts only "
                           f"{' / '.join(repr(t) for t in part_types)} content parts (its model reads text only)", param=pw)
        if not isinstance(part.get("text"), str):
            raise ApiError(f"'{pw}.text' must be a string", param=pw)
        parts.append({"type": "text", "text": part["text"]})
    return parts


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ApiError(f"'{where}' must be a list", param=where)
    calls = []
    for j, tc in enumerate(value):
        w = f"{where}[{j}]"
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(f"'{w}.function.name' must be a string", param=w)
        args = fn.get("arguments", "{}")
        if not isinstance(args, (str, dict)):
            raise ApiError(f"'{w}.function.arguments' must be a JSON string", param=w)
        calls.append(
            {"id": str(tc.get("id", "")), "type": "function", "function": {"name": fn["name"], "arguments": args}}
        )
    return calls


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise ApiError("'messages' is required", param="messages")
    if not isinstance(value, list):
        raise ApiError("'messages' must be a list of message objects", param="messages")
    if not value:
        raise ApiError("'messages' must not be empty", param="messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(f"'{where}' must be an object", param=where)
        role = m.get("role")
        if not isinstance(role, str):
            raise ApiError(f"'{where}.role' is required and must be a string", param=f"{where}.role")
        if role not in ROLES:
            raise ApiError(f"'{where}.role' is {role!r}; expected one of {', '.join(ROLES)}", param=f"{where}.role")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role}
        msg["content"] = _content(m.get("content"), f"{where}.content", role)
        if role == "assistant" and m.get("tool_calls") is not None:
            msg["tool_calls"] = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
        if role == "assistant" and msg["content"] is None and not msg.get("tool_calls"):
            raise ApiError(f"'{where}' is an assistant message with neither content nor tool_calls", param=where)
        if role in ("tool", "function"):
            if msg["content"] is None:
                raise ApiError(f"'{where}.content' is required for a {role} message", param=f"{where}.content")
            msg["role"] = "tool"
            if m.get("tool_call_id") is not None:
                msg["tool_call_id"] = str(m["tool_call_id"])
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError("'tools' must be a list", param="tools")
    tools = []
    for i, t in enumerate(value):
        w = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            raise ApiError(f"'{w}' must be an object with type 'function'", param=w)
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(f"'{w}.function.name' must be a non-empty string", param=f"{w}.function.name")
        params = fn.get("parameters", {})
        if not isinstance(params, dict):
            raise ApiError(f"'{w}.function.parameters' must be a JSON-schema object", param=f"{w}.function.parameters")
        tools.append({"type": "function", "function": fn})
    return tools


def flat_tool(t: dict[str, Any], where: str, schema_field: str) -> dict[str, Any]:
    """A function tool given flat (``name``, ``description``, its JSON schema under ``schema_field``: Anthropic's
    ``input_schema``, the Responses API's ``parameters``) as a Chat Completions tool."""
    if not isinstance(t.get("name"), str) or not t["name"]:
        raise ApiError(f"'{where}.name' must be a non-empty string", param=f"{where}.name")
    schema = t.get(schema_field) or {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise ApiError(f"'{where}.{schema_field}' must be a JSON-schema object", param=f"{where}.{schema_field}")
    fn = {"name": t["name"], "parameters": schema}
    if isinstance(t.get("description"), str):
        fn["description"] = t["description"]
    return {"type": "function", "function": fn}


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> Any:
    if value is None:
        return "auto"
    if value in ("auto", "none", "required"):
        return value
    fn = value.get("function") if isinstance(value, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        name = value["function"]["name"]
        if name not in {t["function"]["name"] for t in tools}:
            raise ApiError(f"'tool_choice' names {name!r}, which is not in 'tools'", param="tool_choice")
        return value
    raise ApiError("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}", param="tool_choice")


RESERVED_TEMPLATE_NAMES = {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
                           "tokenize", "return_dict", "chat_template", "bos_token", "eos_token", "raise_exception"}


def _template_kwargs(body: dict) -> dict[str, Any]:
    """``chat_template_kwargs`` (names to strings, numbers or booleans) with ``enable_thinking`` (a boolean) on top,
    as vLLM and SGLang take them: variables the chat template reads (Qwen3's ``enable_thinking``)."""
    kw = body.get("chat_template_kwargs")
    kw = {} if kw is None else kw
    if not isinstance(kw, dict) or not all(isinstance(k, str) and k.isidentifier() and k not in RESERVED_TEMPLATE_NAMES
                                           and (v is None or isinstance(v, (bool, int, float, str)))
                                           for k, v in kw.items()):
        raise ApiError("'chat_template_kwargs' must map template variable names (not messages, tools, "
                       "add_generation_prompt, ...) to strings, numbers or booleans", param="chat_template_kwargs")
    think = _flag(body, "enable_thinking") if body.get("enable_thinking") is not None else None
    return {**kw, **({"enable_thinking": think} if think is not None else {})}


def _flag(body: dict, name: str) -> bool:
    """An optional boolean field (absent or null: false)."""
    v = body.get(name)
    if v is not None and not isinstance(v, bool):
        raise ApiError(f"'{name}' must be a boolean", param=name)
    return bool(v)


def _lone_surrogate(body: Any) -> str | None:
    """The path of a string (or key) holding a lone UTF-16 surrogate such as ``"\\ud800"``.

    JSON allows such escapes but they are not text: the tokenizer and the store cannot encode them.
    """
    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return path or "body"
        elif isinstance(v, dict):
            for k, x in v.items():
                stack.append((k, path or "body"))
                stack.append((x, f"{path}.{k}" if path else str(k)))
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in enumerate(v))
    return None


def parse_chat_request(body: Any) -> ChatRequest:
    """Check a decoded JSON body; raise ``ApiError`` naming the first problem found."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    bad = _lone_surrogate(body)
    if bad is not None:
        raise ApiError(f"'{bad}' contains a lone UTF-16 surrogate escape (e.g. \\ud800); strings must be valid Unicode",
                       param=bad)
    messages = _messages(body.get("messages"))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError("'model' must be a string", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError("'stream' must be a boolean", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise ApiError("'stream_options' must be an object", param="stream_options")
    include_usage = bool((opts or {}).get("include_usage", False))
    n = body.get("n", 1)
    if n is not None and (not _is_int(n) or n < 1):
        raise ApiError("'n' must be a positive integer", param="n")
    if n is not None and n > 1:
        raise ApiError("'n' > 1 is not supported: each recorded turn is one sampled response", param="n")
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if v is None:
            continue
        if not _is_int(v) or v < 1:
            raise ApiError(f"'{name}' must be a positive integer", param=name)
        max_tokens = v if max_tokens is None else min(max_tokens, v)
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > MAX_STOP:
        raise ApiError(f"'stop' must be a non-empty string or a list of at most {MAX_STOP} non-empty strings", param="stop")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise ApiError("'seed' must be an integer", param="seed")
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX:  # what a torch.Generator can be seeded with
        raise ApiError(f"'seed' must be between {SEED_MIN} and {SEED_MAX}, got {seed}", param="seed")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise ApiError("'user' must be a string", param="user")
    tools = _tools(body.get("tools"))
    return ChatRequest(
        messages=messages,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        stop=stop,
        seed=seed,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        user=user,
        template_kwargs=_template_kwargs(body),
        ignore_eos=_flag(body, "ignore_eos"),
    )
