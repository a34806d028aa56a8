"""The judge prompts: one rendering of the judged turn (``render_turn``), two questions about it.

- ``build_judge_messages``: the process-reward prompt: did the assistant's response help, judging
  by what came next? Unlike the original judge, which saw only the response and the next message,
  it shows the user's request too, so "No, shorter" can be read against what was asked.
- ``build_hint_messages``: the hindsight-hint prompt (On-Policy Distillation): does the next state
  carry an instruction or fact that would have made the response better, and if so, what is it,
  as a short hint between ``HINT_START`` and ``HINT_END``?

Both show exactly the same fields of the turn, rendered by ``render_turn``.
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

HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"
MIN_HINT_CHARS = 5  # shorter hints ("", "...", "N/A") say nothing
MAX_HINT_CHARS = 500  # the prompt asks for 1-3 sentences; a longer block is not a short hint

HINT_SYSTEM_PROMPT = f"""\
You extract hindsight hints. You are shown one assistant turn in a conversation and what happened \
right after it: the next message from the user, or the result of the tool the assistant called.

Decide whether the next state carries hindsight: a concrete instruction, preference or fact that \
would have made the assistant's response better had the assistant known it before answering \
(for example "answer with a single word", "use metric units", "the config file is in src/, not \
lib/"). Thanks or approval, a new unrelated request, a successful tool result that reveals nothing \
new, or a complaint that does not say what to do differently carry no hindsight.

- If it does, write a hint: one to three short sentences (at most {MAX_HINT_CHARS} characters), \
addressed to the assistant as an instruction it could follow when answering the same request \
again. It must be concrete and actionable, and make sense without the next state. Put it between \
{HINT_START} and {HINT_END}, then end with \\boxed{{1}}.
- If it does not, write no hint and end with \\boxed{{-1}}.

Think briefly about the request, the response and the next state, then end your answer with \
exactly one final decision: \\boxed{{1}} or \\boxed{{-1}}."""

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
            except (ValueError, RecursionError):  # shown as the string the client sent
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


def render_turn(
    request_messages: list[dict[str, Any]],
    response_text: str,
    response_tool_calls: list[dict[str, Any]] | None,
    next_state: str,
    next_state_role: str,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
    *,
    max_context_messages: int = DEFAULT_MAX_CONTEXT_MESSAGES,
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
) -> str:
    """The judged turn as the body of a judge's user message (markdown sections, no question).

    Invariant: the judge always sees (1) the user's request, which is the LAST user message of
    ``request_messages``, (2) the assistant's response text and every one of its tool calls, and
    (3) the next state with its role ("user" or "tool"); each of these is cut in the middle only
    when it exceeds ``max_field_chars``. Every other message is optional context, never more than
    ``max_context_messages`` messages nor ``max_context_chars`` characters in all, the most recent
    first; system messages are left out (they are long and say nothing about the outcome).
    Messages after the request (earlier tool calls and results of the same task) are shown after
    it, in order. The function is pure: same inputs, same text.
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
    return "\n\n".join(parts)


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
    """The reward judge's chat messages (one system, one user) for one assistant turn.

    The user message is ``render_turn`` of the turn (see its invariant for what is always shown and
    how the limits apply) followed by the scoring question. Pure: same inputs, same messages.
    """
    body = render_turn(request_messages, response_text, response_tool_calls, next_state, next_state_role,
                       max_context_chars, max_context_messages=max_context_messages, max_field_chars=max_field_chars)
    question = ("Did the assistant's response help, judging by the next state? "
                "End with \\boxed{1}, \\boxed{-1} or \\boxed{0}.")
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": body + "\n\n" + question},
    ]


def build_hint_messages(
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
    """The hint judge's chat messages (one system, one user) for one assistant turn.

    The same fields as ``build_judge_messages`` (``render_turn`` of the turn), followed by the hint
    question, which repeats the answer format: a hint between ``HINT_START`` and ``HINT_END`` and
    ``\\boxed{1}``, or ``\\boxed{-1}`` and no hint. Pure: same inputs, same messages.
    """
    body = render_turn(request_messages, response_text, response_tool_calls, next_state, next_state_role,
                       max_context_chars, max_context_messages=max_context_messages, max_field_chars=max_field_chars)
    question = (
        "Does the next state carry hindsight that would have made the assistant's response better? "
        f"If it does, give the hint between {HINT_START} and {HINT_END} and end with \\boxed{{1}}; "
        "if not, end with \\boxed{-1}."
    )
    return [
        {"role": "system", "content": HINT_SYSTEM_PROMPT},
        {"role": "user", "content": body + "\n\n" + question},
    ]
