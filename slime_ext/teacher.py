"""The OPD teacher: the same conversation with the user's hindsight hint, scoring the recorded answer.

The teacher prompt is the turn's own request (its messages, tools and tool_choice, rendered with
the model's chat template exactly as the server rendered the student's prompt) with the hint
appended to the last user message in a marked block. Several hints (a user's accumulated standing
preferences, replayed by ``trainers/replay.py``) go in the same block, one a line, in order; one
hint renders exactly as before. The teacher log-probs are those of the
**exact recorded response tokens** after that prompt, teacher-forced; the response is never
re-tokenized. Which weights score them is the caller's choice: the frozen base model (the default
teacher) or the current policy (self-distillation).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

HINT_BLOCK = "\n\n[Hindsight hint: what a better answer to this message takes]\n{hint}\n[End of hint]"


def hint_text(hint: str | Sequence[str]) -> str:
    """The text of the hint block: one hint, or several (empty ones left out), one a line, in order."""
    hints = [hint] if isinstance(hint, str) else list(hint)
    lines = [h.strip() for h in hints if h and h.strip()]
    if not lines:
        raise ValueError("the hint is empty")
    return "\n".join(lines)


def teacher_messages(messages: list[dict[str, Any]], hint: str | Sequence[str]) -> list[dict[str, Any]]:
    """``messages`` with ``hint`` (one, or a list: ``hint_text``) appended, in a marked block, to the
    last user message (a copy)."""
    text = hint_text(hint)
    out = copy.deepcopy(messages)
    for m in reversed(out):
        if m.get("role") != "user":
            continue
        block = HINT_BLOCK.format(hint=text)
        content = m.get("content")
        if isinstance(content, list):  # content parts: add a text part
            m["content"] = [*content, {"type": "text", "text": block.lstrip("\n")}]
        else:
            m["content"] = (content or "") + block
        return out
    raise ValueError("the request has no user message to attach the hint to")


def teacher_prompt_ids(renderer, messages: list[dict[str, Any]], hint: str | Sequence[str], tools: list | None = None,
                       tool_choice: Any = None, template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The teacher's prompt token ids: the request plus the hint, rendered like the student's (with the
    request's ``template_kwargs``, e.g. ``enable_thinking``)."""
    return renderer.render(teacher_messages(messages, hint), tools or [], tool_choice if tool_choice is not None else "auto",
                           template_kwargs=template_kwargs)


def teacher_logprobs(score: Callable[[list[int], int], list[float]], prompt_ids: list[int],
                     response_ids: list[int]) -> list[float]:
    """Log-probs of ``response_ids`` after ``prompt_ids`` by ``score(ids, start)``: the teacher-forced
    log-probs of ``ids[start:]``, as ``Engine.score`` returns them (await that one first, or pass
    a synchronous scorer such as the trainer's)."""
    values = score(list(prompt_ids) + list(response_ids), len(prompt_ids))
    if len(values) != len(response_ids):
        raise ValueError(f"the scorer returned {len(values)} log-probs for {len(response_ids)} response tokens")
    return list(values)
