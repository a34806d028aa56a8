"""A prompt longer than the model's context: cut the middle of the longest system message, keep the conversation.

OpenClaw's system prompt alone (~10,300 SmolLM2 tokens of instructions, skills and workspace files, plus
~2,700 of tool schemas) is larger than SmolLM2-135M's 8,192-token context. What the user said, what the
assistant answered and what the tools returned is what the agent learns from, so ``fit_messages`` leaves
those whole and cuts the middle of the longest system (or developer) message instead: its head and tail are
kept, and a marker says how many tokens were cut. The result is what the model sees and what is recorded
(the turn's prompt ids and messages), so capture stays token-faithful. The kept length is a multiple of
``QUANTUM`` tokens, so the next turn of the same conversation (a few hundred tokens longer) gets the very same
cut system message and the engine's prefix cache reuses all of it. When even a system message cut to
``MIN_KEPT`` tokens does not make it fit, ``ValueError`` says so (the server answers 400 as before).

Pure: rendering and tokenizing are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MIN_KEPT = 256  # tokens of a cut system message kept at least (head and tail together)
QUANTUM = 512  # the kept length is rounded down to a multiple of this (a cut that stays the same turn to turn)
MARKER = "\n\n[... {n} tokens of this message were cut here to fit the model's {ctx}-token context ...]\n\n"
ROLES = ("system", "developer")


def _text(message: dict[str, Any]) -> str | None:
    """A message's text when it is all text (a string, or a list of text parts), else None."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(p.get("text") or "" for p in content)
    return None


def _longest_system(messages: Sequence[dict[str, Any]]) -> int | None:
    """Index of the longest system / developer message that is all text, or None."""
    found = [(len(_text(m)), i) for i, m in enumerate(messages) if m.get("role") in ROLES and _text(m)]
    return max(found)[1] if found else None


def cuttable_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text ``fit_messages`` may cut to make a prompt fit: the longest all-text system message's ('' when none)."""
    index = _longest_system(messages)
    return _text(messages[index]) if index is not None else ""


def fit_messages(messages: list[dict[str, Any]], ids: list[int], render: Callable[[list[dict[str, Any]]], list[int]],
                 encode: Callable[[str], list[int]], decode: Callable[[list[int]], str], budget: int,
                 context: int) -> tuple[list[dict[str, Any]], list[int], int]:
    """``(messages, their prompt ids, tokens cut)`` with ``len(ids) <= budget``, given ``messages`` and ``ids``,
    their rendering: unchanged when they fit, else with the middle of the longest system message cut (see the
    module docstring)."""
    sent = len(ids)
    index = _longest_system(messages)
    tokens = encode(_text(messages[index])) if index is not None else []
    keep, cut = len(tokens), 0
    for _ in range(4):  # token boundaries shift a little when the cut text is re-rendered: re-measure
        over = len(ids) - budget
        if over <= 0:
            return messages, ids, cut
        if index is None:
            break
        keep -= over + (len(encode(MARKER.format(n=len(tokens), ctx=context))) if not cut else 0)
        keep = keep // QUANTUM * QUANTUM if keep >= QUANTUM + MIN_KEPT else keep
        if keep < MIN_KEPT:
            break
        head, tail = tokens[: keep - keep // 2], tokens[len(tokens) - keep // 2:]
        cut = len(tokens) - keep
        text = decode(head) + MARKER.format(n=cut, ctx=context) + decode(tail)
        messages = [*messages[:index], {**messages[index], "content": text}, *messages[index + 1:]]
        ids = render(messages)
    raise ValueError(f"the prompt is {sent} tokens, but this model's context is {context} tokens, and cutting the "
                     f"system prompt cannot make it fit in {budget}: shorten the conversation or serve a model with a "
                     "longer context")
