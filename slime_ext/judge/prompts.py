"""The process-reward judge prompt: did the assistant's response help, judging by what came next?

Unlike the original judge, which saw only the response and the next message, this prompt shows
the user's request too, so "No, shorter" can be read against what was asked.
"""

from __future__ import annotations

import json
from typing import Any

from slime_ext.sessions import message_text

JUDGE_SYSTEM_PROMPT = """\
You are a process reward model. You judge one assistant turn in a conversation by looking at \
what happened right after it: the next message from the user, or the result of the tool the \
assistant called.

Score the assistant's response:
- \\boxed{1}: it helped. The user moved on to something else, thanked or approved it, or the \
tool call succeeded.
- \\boxed{-1}: it did not help. The user corrected it, asked for a redo, rephrased the same \
request, or complained, or the tool returned an error.
- \\boxed{0}: the next state does not tell (ambiguous or unrelated feedback).

Think briefly about the request, the response and the next state, then end your answer with \
exactly one final score in the form \\boxed{1}, \\boxed{-1} or \\boxed{0}."""

DEFAULT_MAX_CONTEXT_CHARS = 2000
DEFAULT_MAX_CONTEXT_MESSAGES = 4
DEFAULT_MAX_FIELD_CHARS = 4000
_MIN_USEFUL_CHARS = 40  # a context message that would get fewer characters than this is left out
_ELLIPSIS = " [...] "


def truncate_middle(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker (``<= limit``)."""
    if len(text) <= limit:
        return text
    if limit <= len(_ELLIPSIS):
        return text[:limit]
    keep = limit - len(_ELLIPSIS)
    head = (keep + 1) // 2
    return text[:head] + _ELLIPSIS + (text[len(text) - (keep - head):] if keep - head else "")


def render_tool_calls(tool_calls: list[dict[str, Any]] | None) -> str:
    """One readable line per call: ``name({"arg": ...})``; arguments are shown as compact JSON."""
    lines = []
    for tc in tool_calls or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments", "")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                pass
        shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
        lines.append(f"{fn.get('name', '?')}({shown})")
    return "\n".join(lines)


def _render_message(msg: dict[str, Any]) -> str:
    text = message_text(msg).strip()
    calls = render_tool_calls(msg.get("tool_calls"))
    if calls:
        text = (text + "\n" if text else "") + "tool calls: " + calls.replace("\n", "; ")
    return f"[{msg.get('role', '?')}] {text}"


def build_judge_messages(
    request_messages: list[dict[str, Any]],
    response_text: str,
    response_tool_calls: list[dict[str, Any]] | None,
    next_state: str,
    next_state_role: str,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
    *,
    max_context_messages: int = DEFAULT_MAX_CONTEXT_MESSAGES,
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
) -> list[dict[str, str]]:
    """The judge's chat messages (one system, one user) for one assistant turn.

    Invariant: the judge always sees (1) the user's request, which is the LAST user message of
    ``request_messages``, (2) the assistant's response text and every one of its tool calls, and
    (3) the next state with its role ("user" or "tool"); each of these is cut in the middle only
    when it exceeds ``max_field_chars``. Every other message is optional context, never more than
    ``max_context_messages`` messages nor ``max_context_chars`` characters in all, the most recent
    first; system messages are left out (they are long and say nothing about the outcome).
    Messages after the request (earlier tool calls and results of the same task) are shown after
    it, in order. The function is pure: same inputs, same messages.
    """
    last_user = max((i for i, m in enumerate(request_messages) if m.get("role") == "user"), default=None)
    request = message_text(request_messages[last_user]).strip() if last_user is not None else ""

    # Context, newest first, within the budget.
    picked: dict[int, str] = {}
    budget = max(0, max_context_chars)
    for i in range(len(request_messages) - 1, -1, -1):
        m = request_messages[i]
        if i == last_user or m.get("role") == "system":
            continue
        if len(picked) >= max_context_messages or budget < _MIN_USEFUL_CHARS:
            break
        shown = truncate_middle(_render_message(m), budget)
        picked[i] = shown
        budget -= len(shown)
    before = [picked[i] for i in sorted(picked) if last_user is None or i < last_user]
    after = [picked[i] for i in sorted(picked) if last_user is not None and i > last_user]
    omitted = sum(1 for i, m in enumerate(request_messages) if i != last_user and m.get("role") != "system") - len(picked)

    parts: list[str] = []
    if before or omitted:
        note = f" ({omitted} older message(s) omitted)" if omitted else ""
        parts.append("## Earlier conversation" + note + "\n" + ("\n".join(before) if before else "(omitted)"))
    parts.append("## The user's request (last user message)\n" + (truncate_middle(request, max_field_chars) or "(none)"))
    if after:
        parts.append("## Steps after the request (already seen by the assistant)\n" + "\n".join(after))
    response = truncate_middle((response_text or "").strip(), max_field_chars) or "(no text)"
    calls = render_tool_calls(response_tool_calls)
    if calls:
        response += "\nTool calls:\n" + truncate_middle(calls, max_field_chars)
    parts.append("## The assistant's response (the turn to judge)\n" + response)
    parts.append(
        f"## Next state (role: {next_state_role})\n"
        + (truncate_middle((next_state or "").strip(), max_field_chars) or "(empty)")
    )
    parts.append(
        "Did the assistant's response help, judging by the next state? "
        "End with \\boxed{1}, \\boxed{-1} or \\boxed{0}."
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
