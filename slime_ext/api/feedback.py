"""``POST /v1/feedback``: a user's explicit verdict on one of their replies, for apps with a thumbs up / down.

The body names the reply by the id its response carried (``chatcmpl-...``, ``msg_...``, ``resp_...``), a verdict
and, optionally, what would have been better::

    {"response_id": "chatcmpl-...", "verdict": "bad", "hint": "answer in one short sentence"}

``verdict`` is ``good`` / ``bad`` (or ``1`` / ``-1``, ``up`` / ``down``). The feedback goes where an inferred one
goes: the turn's verdict and hint in the store (``Store.record_feedback``), which the trainer takes like the
judge's (a ``-1`` with a hint is a hinted turn for ``opd`` and ``combine``), and a hint becomes one of the user's
preferences (standing when stated as one: "from now on ..."). It overrides what the judge inferred from the next
message, and the judge never overrides it. A reply is found only among the caller's own (``user IS ?``): another
user's id is a 404, like an unknown one. A reply already trained on, or set aside, is a 409 saying so.
"""

from __future__ import annotations

from typing import Any

from slime_ext.api.errors import ApiError

VERDICTS = {"good": 1, "up": 1, "bad": -1, "down": -1}
MAX_HINT_CHARS = 2000


def parse_feedback(body: Any) -> tuple[str, int, str | None, str | None]:
    """``(response_id, verdict, hint, user)`` of a feedback body, or an ``ApiError`` naming the field that is wrong
    (``user``: the user it names, as a chat's ``user`` field does)."""
    if not isinstance(body, dict):
        raise ApiError("the body must be a JSON object: {\"response_id\": ..., \"verdict\": \"good\" or \"bad\"}")
    unknown = sorted(set(body) - {"response_id", "verdict", "hint", "user"})
    if unknown:
        raise ApiError(f"unknown field {unknown[0]!r} (feedback takes response_id, verdict, hint, user)",
                       param=unknown[0])
    response_id = body.get("response_id")
    if not isinstance(response_id, str) or not response_id.strip():
        raise ApiError("response_id must be the id of one of your replies (the response's \"id\")",
                       param="response_id")
    verdict = parse_verdict(body.get("verdict"))
    hint = body.get("hint")
    if hint is not None and not isinstance(hint, str):
        raise ApiError("hint must be a string: what would have been better", param="hint")
    hint = (hint or "").strip() or None
    if hint is not None and len(hint) > MAX_HINT_CHARS:
        raise ApiError(f"hint is {len(hint)} characters; at most {MAX_HINT_CHARS}", param="hint")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise ApiError("user must be a string", param="user")
    return response_id.strip(), verdict, hint, user


def parse_verdict(value: Any) -> int:
    """+1 or -1 from ``good`` / ``bad`` / ``up`` / ``down`` / ``1`` / ``-1``."""
    if isinstance(value, str) and value.strip().lower() in VERDICTS:
        return VERDICTS[value.strip().lower()]
    if isinstance(value, int) and not isinstance(value, bool) and value in (1, -1):
        return value
    raise ApiError(f"verdict must be \"good\" or \"bad\" (or 1 / -1), not {str(value)[:40]!r}", param="verdict")


def record(store, response_id: str, user: str | None, verdict: int, hint: str | None,
           standing: bool) -> dict[str, Any]:
    """Store the feedback (on the store's thread); the ``ApiError`` a client gets when it cannot be."""
    try:
        return store.record_feedback(response_id, user, verdict, hint, standing)
    except LookupError:
        raise ApiError(f"you have no reply {response_id[:80]!r} (send the \"id\" of a response you received)",
                       status=404, param="response_id", code="response_not_found") from None
    except ValueError as e:
        raise ApiError(f"feedback on {response_id[:80]!r} can no longer train: {e}", status=409,
                       param="response_id", code="turn_closed") from None
