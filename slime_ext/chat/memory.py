"""The preference memory: a user's standing preferences, applied to that user's later requests.

A standing preference is an accepted hint the user stated as one ("from now on ...": the judge's
``preference`` rule on a message the *user* wrote; a tool result, a page or a file never makes one),
kept per user in the store's ``preferences`` table. With ``serve --memory on``, each request of that
user is served with them in a block at the end of its system message (a system message is added
first when the request has none); the request header ``X-OpenClaw-RL-Memory: off`` serves one request
without it. The turn records the messages and prompt ids the model saw, and the preferences applied
(``Turn.memory``), so a trainer can rebuild the prompt without them.

Pure: the store lookup and the rendering happen in the server.
"""

from __future__ import annotations

from typing import Any

HEADER = "X-OpenClaw-RL-Memory"  # "off": serve this request without the memory
BLOCK = "The user has asked you to follow these preferences in every answer:\n{items}"


def memory_block(hints: list[str]) -> str:
    """The text the memory adds: one line per preference, in the order they were first stated."""
    return BLOCK.format(items="\n".join(f"- {h.strip()}" for h in hints))


def with_memory(messages: list[dict[str, Any]], hints: list[str]) -> list[dict[str, Any]]:
    """``messages`` with the memory block at the end of the first system message (or in a new system message
    first); unchanged when there are no hints. A system message whose content is a list of parts gets a text
    part."""
    if not hints:
        return messages
    block = memory_block(hints)
    if messages and messages[0].get("role") in ("system", "developer"):
        first = dict(messages[0])
        content = first.get("content")
        if isinstance(content, list):
            first["content"] = [*content, {"type": "text", "text": "\n\n" + block}]
        else:
            first["content"] = f"{content}\n\n{block}" if content else block
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]
