"""Session assignment, main-line / side classification and next-state pairing.

Rules, in order (each decision is stored with its reason; see docs/sessions.md):

Session (a session belongs to the user who started it: the ``user`` the server names for the
request; requests never reach another user's session)
  1. ``X-Session-Id`` header: that session, when it is free or this user's; when another user owns
     that id, this user's own session under an id derived from (user, header id), transparently.
  2. Otherwise the request's latest assistant message is looked up by fingerprint among the replies
     this server produced in this user's sessions (in memory, then in the store, so sessions survive
     a restart). It continues that session when the messages before it, ignoring ephemeral ones, appear in the
     same order in the history of the turn that produced it: a client may drop messages (OpenClaw
     drops its previous internal-context message) but not invent or reorder them.
  3. Otherwise a new session.

Turn type
  1. ``X-Turn-Type: main|side`` header.
  2. Side when the last (non-ephemeral) message is not a user or tool message (a continuation).
  3. Side when the request continues an earlier turn than the session's latest main-line turn
     (a regenerate or an edit branches the conversation; the latest line stays the main one).
  4. Main-line otherwise.

Next state
  When a main-line request continues a session, the session's previous main-line turn gets the
  non-ephemeral messages after its reply as next state; the role is that of the first of them.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

DEFAULT_EPHEMERAL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>",)
_MAX_SCOPED_IDS = 8  # derived ids tried for a header id another user owns, before a fresh random one


def message_text(msg: dict[str, Any]) -> str:
    """The text of a message whose content is a string, None, or a list of text parts."""
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))


def message_key(msg: dict[str, Any]) -> str:
    """A fingerprint of a message that survives what clients do to echoed history.

    Whitespace at the ends of the text and tool-call ids are ignored; tool-call arguments are
    compared as parsed JSON. Never raises on client input: arguments that are not JSON, or nest
    too deeply to parse, are compared as the opaque string they are.
    """
    calls = []
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") if isinstance(tc, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        calls.append([name if isinstance(name, str) else None, _arguments_key(fn.get("arguments"))])
    role = msg.get("role")
    payload = json.dumps([role if isinstance(role, str) else None, message_text(msg).strip(), calls], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _arguments_key(args: Any) -> Any:
    """Tool-call arguments as canonical JSON text; the string itself when it is not parsable JSON."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            return args
    try:
        return json.dumps(args, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return "<arguments that cannot be written as JSON>"


def is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(x == y for y in it) for x in needle)


@dataclass
class Assignment:
    """Where one request belongs; produced before generation, completed after it."""

    session_id: str
    turn_index: int
    main_line: bool
    reason: str
    session_reason: str
    history_keys: list[str]
    new_session: bool
    client_session_id: str = ""  # the id the client knows: its X-Session-Id, else session_id
    close_after: bool = False
    prev_main_idx: int | None = None  # the session's latest main-line turn before this one
    next_state_for: int | None = None  # turn index of the previous main-line turn, if paired
    next_state: str | None = None
    next_state_role: str | None = None


@dataclass
class _SessionState:
    user: str | None
    n_turns: int
    last_main_idx: int | None
    last_activity: float
    replies: list[str] = field(default_factory=list)


class SessionTracker:
    """In-memory view of open sessions, backed by the store. Call from one event loop thread."""

    def __init__(
        self,
        store,
        *,
        idle_timeout_s: float = 1800.0,
        max_open_sessions: int = 10000,
        ephemeral_markers: Iterable[str] = DEFAULT_EPHEMERAL_MARKERS,
        submit: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.idle_timeout_s = idle_timeout_s
        self.max_open_sessions = max_open_sessions
        self.ephemeral_markers = tuple(ephemeral_markers)
        self._submit = submit or (lambda fn, *a: fn(*a))  # how writes reach the store, in order
        self._clock = clock
        self._sessions: dict[str, _SessionState] = {}
        self._replies: dict[str, list[tuple[str, int]]] = {}  # reply key -> [(session, turn idx)]
        self._history: dict[tuple[str, int], list[str]] = {}  # (session, idx) -> history keys

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def is_ephemeral(self, msg: dict[str, Any]) -> bool:
        text = message_text(msg).lstrip()
        return any(text.startswith(m) for m in self.ephemeral_markers)

    # ------------------------------------------------------------------ assign
    def assign(self, messages: list[dict[str, Any]], headers: dict[str, str], user: str | None) -> Assignment:
        now = self._clock()
        kept = [m for m in messages if not self.is_ephemeral(m)]
        history_keys = [message_key(m) for m in kept]
        last_assistant = max((i for i, m in enumerate(kept) if m.get("role") == "assistant"), default=None)
        tail = kept[last_assistant + 1 :] if last_assistant is not None else []

        header_sid = (headers.get("x-session-id") or "").strip()
        matched: tuple[str, int] | None = None
        if header_sid:
            sid, state, session_reason = self._header_session(header_sid, user)
        else:
            matched = self._match(kept, last_assistant, history_keys, user)
            if matched:
                sid = matched[0]
                session_reason = f"history contains this server's reply of turn {matched[1]} of session {sid}"
            else:
                sid = "s-" + uuid.uuid4().hex[:16]
                session_reason = (
                    "new conversation: no assistant reply in the history"
                    if last_assistant is None
                    else "new session: the history's assistant reply was not produced by this server for this "
                    "user (or its session expired)"
                )
            state = self._sessions.get(sid) or self._resume(sid)
        new_session = state is None
        if state is None:
            state = _SessionState(user=user, n_turns=0, last_main_idx=None, last_activity=now)
            self._sessions[sid] = state
            source = "header" if header_sid else "inferred"
            self._submit(self.store.create_session, sid, user, source, now)
        state.last_activity = now
        index = state.n_turns
        state.n_turns += 1

        main_line, reason = self._classify(kept, headers, matched, state)
        a = Assignment(
            session_id=sid,
            turn_index=index,
            main_line=main_line,
            reason=reason,
            session_reason=session_reason,
            history_keys=history_keys,
            new_session=new_session,
            client_session_id=header_sid or sid,
            close_after=(headers.get("x-session-done") or "").strip().lower() in ("1", "true", "yes"),
        )
        if main_line and state.last_main_idx is not None and (matched is None or matched[1] == state.last_main_idx):
            if not tail and last_assistant is None:  # header session, client sent no history
                tail = _trailing_inputs(kept)
            if tail:
                a.next_state_for = state.last_main_idx
                a.next_state = "\n\n".join(message_text(m) for m in tail)
                a.next_state_role = "tool" if tail[0].get("role") == "tool" else "user"
                self._submit(self.store.set_next_state, sid, a.next_state_for, a.next_state, a.next_state_role, now)
                self._submit(
                    self.store.add_decision, sid, a.next_state_for, "next_state", a.next_state_role,
                    f"paired with the {len(tail)} message(s) after its reply in turn {index}",
                )
        a.prev_main_idx = state.last_main_idx
        if main_line:
            state.last_main_idx = index
        self._submit(self.store.add_decision, sid, index, "session", sid, session_reason)
        self._submit(self.store.add_decision, sid, index, "turn_type", "main" if main_line else "side", reason)
        return a

    def _header_session(self, header_sid: str, user: str | None) -> tuple[str, _SessionState | None, str]:
        """The session an ``X-Session-Id`` names *for this user*: the id itself unless another user owns
        it, else this user's own session under an id derived from (user, header id)."""
        sid = header_sid
        for n in range(1, _MAX_SCOPED_IDS + 1):
            state = self._sessions.get(sid) or self._resume(sid)
            if state is None or state.user == user:
                break
            sid = scoped_session_id(header_sid, user, n)
        else:  # every derived id taken by someone else (crafted ids): a fresh one
            sid, state = "s-" + uuid.uuid4().hex[:16], None
        if sid == header_sid:
            return sid, state, "X-Session-Id header"
        return sid, state, "X-Session-Id header; another user's session has that id, so this user's session has its own id"

    def _match(self, kept, last_assistant, history_keys, user) -> tuple[str, int] | None:
        """The (session, turn) of this user whose reply is the request's latest assistant message."""
        if last_assistant is None:
            return None
        reply_key = history_keys[last_assistant]
        before = history_keys[:last_assistant]
        candidates = [(sid, idx, self._history.get((sid, idx))) for sid, idx in reversed(self._replies.get(reply_key, []))
                      if sid in self._sessions and self._sessions[sid].user == user]
        if not candidates and self.store is not None:
            candidates = [(r["session_id"], r["idx"], r["history_keys"]) for r in self.store.find_reply(reply_key, user)]
        for sid, idx, hist in candidates:
            if hist is not None and any(kept[i].get("role") == "user" for i in range(last_assistant)) and is_subsequence(before, hist):
                return sid, idx
        return None

    def _classify(self, kept, headers, matched, state) -> tuple[bool, str]:
        header = (headers.get("x-turn-type") or "").strip().lower()
        if header in ("main", "side"):
            return header == "main", f"X-Turn-Type: {header} header"
        last_role = kept[-1].get("role") if kept else None
        if last_role not in ("user", "tool"):
            return False, f"side: the last message is from {last_role!r}, not a user or tool (a continuation)"
        if matched and state.last_main_idx is not None and matched[1] != state.last_main_idx:
            return False, (
                f"side: continues turn {matched[1]}, not the session's latest main-line turn "
                f"{state.last_main_idx} (a regenerate or edit branches the conversation)"
            )
        if matched:
            return True, f"main: continues the session's latest main-line turn {matched[1]} with a {last_role} message"
        return True, f"main: a {last_role} message starts or continues the conversation"

    def _resume(self, sid: str) -> _SessionState | None:
        """Bring back a session the store knows (after a restart or an idle close)."""
        if self.store is None:
            return None
        st = self.store.session_state(sid)
        if st is None:
            return None
        last = st["last_main"]
        state = _SessionState(
            user=st["user"], n_turns=st["n_turns"], last_main_idx=last["idx"] if last else None,
            last_activity=self._clock(),
        )
        self._sessions[sid] = state
        return state

    # ------------------------------------------------------------------ after the turn is stored
    def record_reply(self, a: Assignment, reply_key: str) -> None:
        """Index a stored reply so a later request that echoes it continues the session."""
        state = self._sessions.get(a.session_id)
        if state is None:
            return
        self._replies.setdefault(reply_key, []).append((a.session_id, a.turn_index))
        self._history[(a.session_id, a.turn_index)] = a.history_keys
        state.replies.append(reply_key)
        if a.close_after:
            self.close(a.session_id, "client sent X-Session-Done")

    def demote(self, a: Assignment) -> None:
        """A main-line turn did not become one (its client left, or the engine failed): restore the line."""
        state = self._sessions.get(a.session_id)
        if state is not None and a.main_line and state.last_main_idx == a.turn_index:
            state.last_main_idx = a.prev_main_idx

    # ------------------------------------------------------------------ closing
    def close(self, sid: str, reason: str) -> None:
        state = self._sessions.pop(sid, None)
        if state is None:
            return
        for key in state.replies:
            entries = [e for e in self._replies.get(key, []) if e[0] != sid]
            if entries:
                self._replies[key] = entries
            else:
                self._replies.pop(key, None)
        for idx in range(state.n_turns):
            self._history.pop((sid, idx), None)
        self._submit(self.store.close_session, sid, reason, self._clock())
        self._submit(self.store.add_decision, sid, None, "close", "closed", reason)

    def close_idle(self) -> int:
        """Close sessions idle past the timeout, and the oldest beyond the open-session cap."""
        now = self._clock()
        idle = [sid for sid, s in self._sessions.items() if now - s.last_activity > self.idle_timeout_s]
        for sid in idle:
            self.close(sid, f"idle for more than {self.idle_timeout_s:g} s")
        excess = len(self._sessions) - self.max_open_sessions
        if excess > 0:
            oldest = sorted(self._sessions, key=lambda s: self._sessions[s].last_activity)[:excess]
            for sid in oldest:
                self.close(sid, f"more than {self.max_open_sessions} open sessions; closed the least recently active")
        return len(idle) + max(excess, 0)


def scoped_session_id(header_sid: str, user: str | None, n: int = 1) -> str:
    """The id of ``user``'s own session for an ``X-Session-Id`` another user owns (``n``: the n-th try).

    Deterministic, so the same user sending the same id reaches the same session, after a restart too."""
    digest = hashlib.sha256(json.dumps([n, user, header_sid]).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{header_sid[:64]}~{digest}"


def _trailing_inputs(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run of user/tool messages at the end of a history."""
    out: list[dict[str, Any]] = []
    for m in reversed(kept):
        if m.get("role") not in ("user", "tool"):
            break
        out.append(m)
    return out[::-1]
