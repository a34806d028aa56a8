"""Turn the growing decoded text of a response into what the client sees: content and tool calls.

One incremental parser serves both streaming and non-streaming responses, so the two always
agree: a non-streaming reply is the parser fed the final text once. Invariants:
- emitted content is only ever appended to (what was sent is never taken back);
- text that might still become a stop string, a ``<tool_call>`` marker or a multi-byte character
  is held back until it is decided;
- a ``<tool_call>`` block becomes a tool call when it holds valid JSON naming an offered tool,
  otherwise its raw text is content;
- whitespace before a tool call is dropped (it is formatting, not an answer); trailing
  whitespace is held until the next text or the end shows whether it belongs to the content;
- a reply that opens with ``<think>`` (Qwen3, DeepSeek-R1), or that starts inside one because the
  prompt ended with it (``thinking=True``), is reasoning up to ``</think>``: emitted as
  ``("reasoning", str)`` events, never as content.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def find_stop(text: str, stops: list[str]) -> int:
    """Index of the earliest stop string in ``text``, or -1."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else -1


def partial_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def parse_tool_call(block: str, tool_names: set[str]) -> dict[str, Any] | None:
    """``{"name": ..., "arguments": {...}}`` -> an OpenAI tool call, or None if it is not one."""
    try:
        obj = json.loads(block.strip())
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to be a tool call
        return None
    if not isinstance(obj, dict) or obj.get("name") not in tool_names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except (ValueError, RecursionError):
            return None
    else:
        args = json.dumps(args, ensure_ascii=False)
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": {"name": obj["name"], "arguments": args}}


@dataclass
class ReplyParser:
    """Feed it the full decoded text so far; it returns the new events for the client."""

    stops: list[str] = field(default_factory=list)
    tool_names: set[str] = field(default_factory=set)
    pos: int = 0  # characters of the visible text consumed
    content: str = ""  # content emitted so far
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False  # a stop string was found; ``visible`` ends before it
    stop_found: str | None = None  # which one (the earliest in the text)
    visible: str = ""
    thinking: bool | None = None  # inside <think>: True; past it or none: False; not decided yet: None
    reasoning: str = ""  # reasoning emitted so far
    _pending_ws: str = ""
    _after_think: bool = False

    def feed(self, text: str, final: bool = False) -> list[tuple[str, Any]]:
        """Return ``[("content", str) | ("tool_call", dict) | ("reasoning", str)]`` for the newly decided text."""
        cut = find_stop(text, self.stops) if self.stops else -1
        if cut >= 0:
            self.stop_found = next(s for s in self.stops if text.startswith(s, cut))
            text, final, self.stopped = text[:cut], True, True
        elif not final:
            hold = partial_suffix(text, self.stops) if self.stops else 0
            if text.endswith("\ufffd"):  # an incomplete multi-byte character
                hold = max(hold, 1)
            text = text[: len(text) - hold]
        self.visible = text
        events: list[tuple[str, Any]] = []
        if self.thinking is not False and not self._think(text, final, events):
            return events  # still reasoning (or not yet known whether the reply reasons)
        while self.pos < len(text):
            rest = text[self.pos :]
            i = rest.find(OPEN) if self.tool_names else -1
            if i < 0:
                keep = 0 if final or not self.tool_names else partial_suffix(rest, [OPEN])
                self._content(rest[: len(rest) - keep], events)
                self.pos += len(rest) - keep
                break
            if i > 0:
                self._content(rest[:i], events)
                self.pos += i
                continue
            j = rest.find(CLOSE, len(OPEN))
            if j < 0:
                if final:
                    self._content(rest, events)
                    self.pos += len(rest)
                break
            call = parse_tool_call(rest[len(OPEN) : j], self.tool_names)
            if call is None:
                self._content(rest[: j + len(CLOSE)], events)
            else:
                self._pending_ws = ""
                self.tool_calls.append(call)
                events.append(("tool_call", call))
            self.pos += j + len(CLOSE)
        if final and self._pending_ws and not self.tool_calls:
            events.append(("content", self._pending_ws))
            self.content += self._pending_ws
            self._pending_ws = ""
        return events

    def _think(self, text: str, final: bool, events: list) -> bool:
        """Consume the reasoning at the start of ``text``; True once it is over (or there is none)."""
        if self.thinking is None:
            head = text.lstrip()
            if head.startswith(THINK_OPEN):
                self.thinking, self.pos = True, len(text) - len(head) + len(THINK_OPEN)
            elif THINK_OPEN.startswith(head) and not final:
                return False  # "<thi...": wait and see
            else:
                self.thinking = False
                return True
        rest = text[self.pos:]
        end = rest.find(THINK_CLOSE)
        upto = end if end >= 0 else len(rest) - (0 if final else partial_suffix(rest, [THINK_CLOSE]))
        chunk = rest[:upto].lstrip("\n") if not self.reasoning else rest[:upto]
        if chunk:
            self.reasoning += chunk
            events.append(("reasoning", chunk))
        self.pos += upto
        if end < 0:
            return final  # the reply ended inside its reasoning: no content
        self.pos += len(THINK_CLOSE)
        self.thinking, self._after_think = False, True  # the blank line after </think> is not content
        return True

    def _content(self, s: str, events: list) -> None:
        """Emit text up to its trailing whitespace; hold that until we know what follows it."""
        if self._after_think:  # whitespace between </think> and the answer is formatting
            s = s.lstrip()
            self._after_think = not s
        s = self._pending_ws + s
        body = s.rstrip()
        self._pending_ws = s[len(body) :]
        if body:
            self.content += body
            events.append(("content", body))
