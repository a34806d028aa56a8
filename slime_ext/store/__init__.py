"""The durable record of every conversation: SQLite in WAL mode inside a run directory.

Invariants:
- every write is its own committed transaction; with WAL and ``synchronous=NORMAL`` a committed
  write survives a killed process (only a power loss can drop the last ones);
- the server awaits ``insert_turn`` before it sends the last byte of a response, so a client that
  fully received a reply can find it here after any crash;
- one writer thread owns the write connection; readers open their own connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slime_ext.chat.memory import matches as memory_matches
from slime_ext.chat.memory import preference_aspect
from slime_ext.types import JudgedTurn, Turn

log = logging.getLogger(__name__)

DB_NAME = "records.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    user TEXT,
    source TEXT NOT NULL,          -- 'header' or 'inferred'
    created_at REAL NOT NULL,
    last_activity REAL NOT NULL,
    closed_at REAL,
    close_reason TEXT
);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    idx INTEGER NOT NULL,
    main_line INTEGER NOT NULL,
    reason TEXT NOT NULL,
    request_id TEXT NOT NULL UNIQUE,
    user TEXT,
    policy_version INTEGER NOT NULL,
    policy_version_end INTEGER NOT NULL,
    finish_reason TEXT NOT NULL,
    prompt_token_ids TEXT NOT NULL,
    response_token_ids TEXT NOT NULL,
    response_logprobs TEXT NOT NULL,
    response_text TEXT NOT NULL,
    tool_calls TEXT,
    messages TEXT NOT NULL,
    sampling TEXT NOT NULL,
    timings TEXT NOT NULL,
    reply_key TEXT NOT NULL,
    history_keys TEXT NOT NULL,
    created_at REAL NOT NULL,
    next_state TEXT,
    next_state_role TEXT,
    next_state_at REAL,
    UNIQUE (session_id, idx)
);
CREATE INDEX IF NOT EXISTS turns_reply_key ON turns(reply_key);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn_idx INTEGER,
    kind TEXT NOT NULL,            -- 'session', 'turn_type', 'next_state', 'close'
    value TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_session ON decisions(session_id, turn_idx);
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn_idx INTEGER NOT NULL,
    vote_idx INTEGER NOT NULL,
    value INTEGER,                 -- -1, 0, 1, or NULL for an abstention
    text TEXT NOT NULL,            -- the judge's raw answer, or why the vote abstained
    at REAL NOT NULL,
    kind TEXT NOT NULL DEFAULT 'reward'  -- 'reward' (the verdict's votes) or 'hint'
);
CREATE INDEX IF NOT EXISTS votes_turn ON votes(session_id, turn_idx);
CREATE TABLE IF NOT EXISTS teacher_checks (  -- does the hinted teacher follow the turn's hint (trainers/teachability.py)
    session_id TEXT NOT NULL,
    turn_idx INTEGER NOT NULL,
    hint TEXT NOT NULL,
    gap REAL NOT NULL,             -- mean nats/token the hint adds to the teacher's own greedy answer
    same_answer INTEGER,           -- 1: its greedy answer is the same without the hint (NULL: not measured here)
    hint_gap REAL NOT NULL,        -- the hint's median gap over the prompts measured so far (decides)
    hint_checks INTEGER NOT NULL,  -- how many
    follows INTEGER NOT NULL,      -- the decision: 1 follows, 0 does not
    reason TEXT NOT NULL,
    sample TEXT NOT NULL,          -- the teacher's answer, truncated
    tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,         -- what measuring it cost (0: from the trainer's cache)
    at REAL NOT NULL,
    PRIMARY KEY (session_id, turn_idx)
);
CREATE TABLE IF NOT EXISTS preferences (  -- each user's accepted hints (docs/store.md, "Preferences")
    user TEXT NOT NULL,            -- the turn's user ('' when the server has no --user-key)
    key TEXT NOT NULL,             -- the normalized hint: duplicates are one preference
    hint TEXT NOT NULL,            -- the hint as first stated
    session_id TEXT NOT NULL,      -- the turn it came from (the latest time it was stated)
    turn_idx INTEGER NOT NULL,
    standing INTEGER NOT NULL,     -- 1: stated as a standing preference ("from now on ..."): replayed
    created_at REAL NOT NULL,      -- first stated (the order preferences are given to the teacher in)
    last_at REAL NOT NULL,         -- last stated (the oldest is dropped past PREFERENCES_PER_USER)
    times INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (user, key)
);
CREATE TABLE IF NOT EXISTS responses (  -- what /v1/responses answered, for previous_response_id (docs/store.md)
    id TEXT PRIMARY KEY,           -- the response id (resp_...), also its turn's request_id
    user TEXT NOT NULL,            -- its user ('' without one): another user's id is not found
    conversation TEXT NOT NULL,    -- the messages it answered and its reply, without the instructions (JSON)
    created_at REAL NOT NULL
);
"""

PREFERENCES_PER_USER = 32  # a user's preferences kept; past it the least recently stated one is dropped

# Columns added after the first schema; added to older run directories when they are opened.
TURN_COLUMNS = {
    "verdict": "INTEGER",            # majority of the votes: -1, 0, 1
    "judged_at": "REAL",
    "trained_in_version": "INTEGER",  # the policy version whose training step used this turn
    "dropped": "TEXT",               # why this turn will not be trained on
    "tools": "TEXT",                 # the request's tools (JSON), to re-render its prompt
    "tool_choice": "TEXT",           # the request's tool_choice (JSON)
    "hint": "TEXT",                  # the accepted hindsight hint (OPD), or NULL
    "hint_judged_at": "REAL",        # when hints were judged (NULL: not judged for hints)
    "teacher_logprobs": "TEXT",      # the OPD teacher's log-probs of the response tokens (JSON)
    "failures": "INTEGER",           # training steps that raised with this turn in them (2: set aside, dropped)
    "refusals": "INTEGER",           # catch-up steps the canary refused with this turn in them (then smaller steps)
    "setback": "TEXT",               # the last of these, with its reason (records)
    "memory": "TEXT",                # the standing preferences the preference memory added to its prompt (JSON)
    "feedback": "TEXT",              # the user's explicit feedback (POST /v1/feedback, JSON): it decides the verdict
}


def preference_key(hint: str) -> str:
    """A hint's identity among a user's preferences: lower-cased, spaces collapsed, end punctuation off."""
    return " ".join(hint.lower().split()).strip(" .!;:")


def _bool_int(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _int_bool(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def _log_failure(fut) -> None:
    if fut.exception() is not None:
        log.error("store write failed: %s", fut.exception())


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.row_factory = sqlite3.Row
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Create missing tables and add columns that older run directories lack."""
    conn.executescript(SCHEMA)
    have = {r[1] for r in conn.execute("PRAGMA table_info(turns)")}
    for name, kind in TURN_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE turns ADD COLUMN {name} {kind}")
    if "kind" not in {r[1] for r in conn.execute("PRAGMA table_info(votes)")}:
        conn.execute("ALTER TABLE votes ADD COLUMN kind TEXT NOT NULL DEFAULT 'reward'")


# What training needs of a judged turn (the trainer, the Slime rollout hook).
_TRAINING_COLUMNS = ", ".join(JudgedTurn.__annotations__)  # what a judged turn is read back as
# the order a training step takes waiting turns: one a step raised with first (it is retried alone), then as judged
_STEP_ORDER = "COALESCE(failures, 0) > 0 DESC, judged_at, id"


class Store:
    """Sessions, turns, next states and decisions of one run directory."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / DB_NAME
        self._conn = connect(self.path)
        migrate(self._conn)
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    # --------------------------------------------------------------- async API (server)
    async def run(self, fn, *args) -> Any:
        """Run a store method on the writer thread without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    def submit(self, fn, *args) -> None:
        """Queue a write behind the ones already queued (FIFO), without waiting for it."""
        self._writer.submit(fn, *args).add_done_callback(_log_failure)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        with self._lock:
            self._conn.close()

    # --------------------------------------------------------------- writes
    @contextlib.contextmanager
    def _transaction(self):
        """Several statements committed together, or not at all."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _exec(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, params)

    def create_session(self, session_id: str, user: str | None, source: str, now: float | None = None) -> None:
        now = now or time.time()
        self._exec(
            "INSERT OR IGNORE INTO sessions (id, user, source, created_at, last_activity) VALUES (?,?,?,?,?)",
            (session_id, user, source, now, now),
        )

    def insert_turn(self, turn: Turn) -> None:
        """Commit a turn and bump its session's activity time, in one transaction."""
        with self._transaction():
            self._conn.execute(
                """INSERT INTO turns (session_id, idx, main_line, reason, request_id, user, policy_version,
                   policy_version_end, finish_reason, prompt_token_ids, response_token_ids, response_logprobs,
                   response_text, tool_calls, messages, sampling, timings, reply_key, history_keys, created_at,
                   tools, tool_choice, memory)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                (
                    turn.session_id, turn.index, int(turn.main_line), turn.reason, turn.request_id, turn.user,
                    turn.policy_version, turn.policy_version_end, turn.finish_reason,
                    json.dumps(turn.prompt_token_ids), json.dumps(turn.response_token_ids),
                    json.dumps(turn.response_logprobs), turn.response_text,
                    json.dumps(turn.tool_calls) if turn.tool_calls else None,
                    json.dumps(turn.messages), json.dumps(turn.sampling), json.dumps(turn.timings),
                    turn.reply_key, json.dumps(turn.history_keys), turn.created_at or time.time(),
                    json.dumps(turn.tools) if turn.tools else None,
                    json.dumps(turn.tool_choice) if turn.tool_choice is not None else None,
                    json.dumps(turn.memory) if turn.memory else None,
                ),
            )
            self._conn.execute(
                "UPDATE sessions SET last_activity=? WHERE id=?", (turn.created_at or time.time(), turn.session_id)
            )

    def set_next_state(self, session_id: str, idx: int, text: str, role: str, now: float | None = None) -> None:
        self._exec(
            "UPDATE turns SET next_state=?, next_state_role=?, next_state_at=? WHERE session_id=? AND idx=?",
            (text, role, now or time.time(), session_id, idx),
        )

    def add_decision(self, session_id: str, turn_idx: int | None, kind: str, value: str, reason: str) -> None:
        self._exec(
            "INSERT INTO decisions (session_id, turn_idx, kind, value, reason, at) VALUES (?,?,?,?,?,?)",
            (session_id, turn_idx, kind, value, reason, time.time()),
        )

    def close_session(self, session_id: str, reason: str, now: float | None = None) -> None:
        self._exec(
            "UPDATE sessions SET closed_at=?, close_reason=? WHERE id=? AND closed_at IS NULL",
            (now or time.time(), reason, session_id),
        )

    def record_verdict(self, session_id: str, idx: int, verdict: int, votes: list[tuple[int | None, str]],
                       hint: str | None = None, hint_votes: list[tuple[int | None, str]] | None = None,
                       standing: bool = False, preference: str | None = None) -> None:
        """Store every vote and the verdict of one turn, in one transaction; with ``hint_votes``
        (hints were judged), also the hint votes and the accepted hint (or none). An accepted hint
        becomes (or refreshes) a preference of the turn's user (``preference``: its text, when it is not the
        whole hint); ``standing``: stated as a standing one."""
        now = time.time()
        rows = [(session_id, idx, i, v, text, now, "reward") for i, (v, text) in enumerate(votes)]
        rows += [(session_id, idx, i, v, text, now, "hint") for i, (v, text) in enumerate(hint_votes or [])]
        with self._transaction():
            if self._conn.execute("SELECT feedback IS NOT NULL FROM turns WHERE session_id=? AND idx=?",
                                  (session_id, idx)).fetchone()[0]:
                return  # the user said it themselves (record_feedback) while the judge was inferring it
            self._conn.executemany(
                "INSERT INTO votes (session_id, turn_idx, vote_idx, value, text, at, kind) VALUES (?,?,?,?,?,?,?)", rows)
            self._conn.execute("UPDATE turns SET verdict=?, judged_at=?, hint=?, hint_judged_at=? WHERE session_id=? AND idx=?",
                               (verdict, now, hint, now if hint_votes is not None else None, session_id, idx))
            kept = (preference or hint).strip() if hint else ""  # only an accepted hint makes a preference
            if kept and preference_key(kept):
                self._add_preference(session_id, idx, kept, standing, now)

    def record_feedback(self, request_id: str, user: str | None, verdict: int, hint: str | None,
                        standing: bool = False) -> dict[str, Any]:
        """The user's explicit verdict on one of their own turns (``POST /v1/feedback``), and its hint: stored as
        the judge stores an inferred one (the turn's verdict, a vote, the hint as judged, a preference of the
        user's), so the trainer takes it the same way; the judge never overrides it. Raises ``LookupError``
        when ``user`` has no turn ``request_id`` (another user's included) and ``ValueError`` when the turn can no
        longer learn from it (trained already, or set aside). Returns the turn's key, version and the verdict it
        replaced."""
        now = time.time()
        with self._transaction():
            row = self._conn.execute("SELECT session_id, idx, verdict, trained_in_version, dropped, policy_version "
                                     "FROM turns WHERE request_id=? AND user IS ?", (request_id, user)).fetchone()
            if row is None:
                raise LookupError(request_id)
            if row["trained_in_version"] is not None:
                raise ValueError(f"it was trained on in version {row['trained_in_version']} already")
            if row["dropped"] is not None:
                raise ValueError(f"it was set aside: {row['dropped']}")
            key = (row["session_id"], row["idx"])
            explicit = {"verdict": verdict, "hint": hint, "at": now}
            self._conn.execute(
                "INSERT INTO votes (session_id, turn_idx, vote_idx, value, text, at, kind) VALUES "
                "(?, ?, (SELECT COUNT(*) FROM votes WHERE session_id=? AND turn_idx=? AND kind='reward'), ?, ?, ?, "
                "'reward')", (*key, *key, verdict, "explicit feedback (POST /v1/feedback)", now))
            self._conn.execute("UPDATE turns SET verdict=?, judged_at=?, hint=?, hint_judged_at=?, feedback=? "
                               "WHERE session_id=? AND idx=?", (verdict, now, hint, now, json.dumps(explicit), *key))
            if hint and preference_key(hint):
                self._add_preference(*key, hint.strip(), standing, now, by_user=True)
        return {"session_id": key[0], "turn": key[1], "policy_version": row["policy_version"],
                "replaced_verdict": row["verdict"]}

    def turn_feedback(self, request_id: str, user: str | None) -> dict[str, Any] | None:
        """What became of ``user``'s turn ``request_id`` (None when they have none): its verdict and hint, whether
        the user gave them (``source``: user) or the judge inferred them (judge; null: not judged yet), and whether
        it was trained on or set aside."""
        with self._lock:
            row = self._conn.execute("SELECT verdict, hint, feedback, trained_in_version, dropped, policy_version "
                                     "FROM turns WHERE request_id=? AND user IS ?", (request_id, user)).fetchone()
        if row is None:
            return None
        source = None if row["verdict"] is None else "user" if row["feedback"] else "judge"
        return {"verdict": row["verdict"], "hint": row["hint"], "source": source, "served_by_version":
                row["policy_version"], "trained_in_version": row["trained_in_version"], "dropped": row["dropped"]}

    def _add_preference(self, session_id: str, idx: int, hint: str, standing: bool, now: float,
                        by_user: bool = False) -> None:
        """Within a transaction: the turn's user's preference ``hint`` (a known one is refreshed, and
        stays standing once it was), then the user's least recently stated ones past the cap dropped. Only
        what the user wrote (the next state, or ``by_user``: their explicit feedback) makes a preference: a hint
        drawn from a tool result (a page, a file that says "from now on ...") teaches its turn and is kept
        nowhere else."""
        row = self._conn.execute("SELECT user, next_state_role FROM turns WHERE session_id=? AND idx=?",
                                 (session_id, idx)).fetchone()
        if row is None or not (by_user or row["next_state_role"] == "user"):
            return
        user = row["user"] or ""
        if standing:  # a standing preference replaces the user's older ones about the same thing (chat/memory.py)
            aspect = preference_aspect(hint)
            older = self._conn.execute("SELECT key, hint FROM preferences WHERE user=? AND key != ?",
                                       (user, preference_key(hint))).fetchall()
            gone = [r["key"] for r in older if aspect is not None and preference_aspect(r["hint"]) == aspect]
            self._conn.executemany("DELETE FROM preferences WHERE user=? AND key=?", [(user, k) for k in gone])
        self._conn.execute(
            """INSERT INTO preferences (user, key, hint, session_id, turn_idx, standing, created_at, last_at)
               VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (user, key) DO UPDATE SET session_id=excluded.session_id,
               turn_idx=excluded.turn_idx, standing=MAX(standing, excluded.standing), last_at=excluded.last_at,
               times=times + 1""",
            (user, preference_key(hint), hint, session_id, idx, int(standing), now, now))
        self._conn.execute(
            """DELETE FROM preferences WHERE user=? AND key NOT IN
               (SELECT key FROM preferences WHERE user=? ORDER BY last_at DESC, rowid DESC LIMIT ?)""",
            (user, user, PREFERENCES_PER_USER))

    def set_teacher_logprobs(self, session_id: str, idx: int, logprobs: list[float]) -> None:
        self._exec("UPDATE turns SET teacher_logprobs=? WHERE session_id=? AND idx=?",
                   (json.dumps(logprobs), session_id, idx))

    def record_teacher_check(self, session_id: str, idx: int, hint: str, check: dict[str, Any]) -> None:
        """Store (or replace) the teachability check of one hinted turn (``TeacherCheck.record()``)."""
        self._exec("""INSERT OR REPLACE INTO teacher_checks (session_id, turn_idx, hint, gap, same_answer, hint_gap,
                      hint_checks, follows, reason, sample, tokens, seconds, at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                   (session_id, idx, hint, check["gap"], _bool_int(check["same_answer"]), check["hint_gap"],
                    check["hint_checks"], int(check["follows"]), check["reason"], check["sample"], check["tokens"],
                    check["seconds"], time.time()))

    def teacher_check_summary(self, recent: int = 5, only_user: str | None = None) -> dict[str, Any]:
        """For ``/healthz`` and ``/metrics``: hinted turns whose teacher follows the hint, those whose
        teacher does not, and the latest ``recent`` of the latter (newest first; ``only_user``'s alone
        when given: a hint is what its user said)."""
        with self._lock:
            follows, cannot = self._conn.execute(
                "SELECT COALESCE(SUM(follows), 0), COALESCE(SUM(1 - follows), 0) FROM teacher_checks").fetchone()
            rows = self._conn.execute(
                f"""SELECT c.session_id, c.turn_idx, c.hint, c.gap, c.hint_gap, c.same_answer, c.sample
                    FROM teacher_checks c {'JOIN turns t ON t.session_id=c.session_id AND t.idx=c.turn_idx'
                                           if only_user is not None else ''}
                    WHERE c.follows=0 {'AND t.user=?' if only_user is not None else ''}
                    ORDER BY c.at DESC LIMIT ?""",
                ((only_user,) if only_user is not None else ()) + (recent,)).fetchall()
        return {"hints_teacher_follows": follows, "hints_teacher_cannot_follow": cannot,
                "hints_unfollowed_recent": [{"session_id": r["session_id"], "turn": r["turn_idx"], "hint": r["hint"],
                                             "gap": r["gap"], "hint_gap": r["hint_gap"],
                                             "same_answer": _int_bool(r["same_answer"]),
                                             "teacher_sample": r["sample"]} for r in rows]}

    def preferences(self, user: str | None, standing_only: bool = False, follows: bool = True) -> list[dict[str, Any]]:
        """``user``'s preferences in the order first stated (``standing_only``: the replayed ones), each with
        ``teacher_follows``: whether the hinted teacher followed it when last checked (None: never checked, or not
        looked up: ``follows`` False, as on every chat request the memory serves)."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT rowid, * FROM preferences WHERE user=? {'AND standing=1' if standing_only else ''}
                    ORDER BY created_at, rowid""", (user or "",)).fetchall()
            follows = _teacher_follows(self._conn, user) if follows else {}
        return [_preference(r, follows) for r in rows]

    def retract_preferences(self, session_id: str, idx: int, kind: str, what: str = "") -> list[str]:
        """The user of this turn took preferences back (``chat/memory.py: retraction``): ``last`` ("forget that")
        removes the standing one they stated just before, in this session's previous turn (said later, or
        elsewhere, "forget that" is about something else); ``matching`` every one that ``what`` names.
        Returns the removed hints."""
        with self._transaction():
            row = self._conn.execute("SELECT user FROM turns WHERE session_id=? AND idx=?", (session_id, idx)).fetchone()
            if row is None:
                return []
            user = row["user"] or ""
            rows = self._conn.execute("SELECT rowid, hint, standing, session_id, turn_idx FROM preferences WHERE user=? "
                                      "ORDER BY last_at DESC, rowid DESC", (user,)).fetchall()
            if kind == "last":
                gone = [r for r in rows if r["standing"] and (r["session_id"], r["turn_idx"]) == (session_id, idx - 1)]
            else:
                gone = [r for r in rows if memory_matches(r["hint"], what)]
            self._conn.executemany("DELETE FROM preferences WHERE rowid=?", [(r["rowid"],) for r in gone])
        return [r["hint"] for r in gone]

    def forget_preference(self, user: str | None, preference_id: int) -> str | None:
        """Delete one of ``user``'s preferences by its id (``preferences()``'s ``id``); its hint, or None when
        ``user`` has no such preference (another user's id is not theirs to delete)."""
        with self._transaction():
            row = self._conn.execute("SELECT hint FROM preferences WHERE rowid=? AND user=?",
                                     (preference_id, user or "")).fetchone()
            if row is not None:
                self._conn.execute("DELETE FROM preferences WHERE rowid=?", (preference_id,))
        return row["hint"] if row else None

    def save_response(self, response_id: str, user: str | None, conversation: list[dict[str, Any]]) -> None:
        """Keep what a Responses request answered, for a later ``previous_response_id`` of the same user."""
        self._exec("INSERT OR REPLACE INTO responses (id, user, conversation, created_at) VALUES (?, ?, ?, ?)",
                   (response_id, user or "", json.dumps(conversation, ensure_ascii=False), time.time()))

    def response_conversation(self, response_id: str, user: str | None) -> list[dict[str, Any]] | None:
        """The conversation ``save_response`` kept under ``response_id`` for ``user``; None when ``user`` has none
        (another user's id included)."""
        with self._lock:
            row = self._conn.execute("SELECT conversation FROM responses WHERE id=? AND user=?",
                                     (response_id, user or "")).fetchone()
        return json.loads(row["conversation"]) if row else None

    def verdicts_over_time(self, only_user: str | None, limit: int = 2000) -> list[dict[str, Any]]:
        """The latest ``limit`` verdicts (``only_user``'s alone when given) with their user and time, in the order
        they were judged: the page's reward curve."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT user, judged_at AS at, verdict FROM turns WHERE verdict IS NOT NULL
                    {'AND user=?' if only_user is not None else ''} ORDER BY judged_at DESC LIMIT ?""",
                ((only_user,) if only_user is not None else ()) + (limit,)).fetchall()
        return [{"user": r["user"] or "-", "at": r["at"], "verdict": r["verdict"]} for r in reversed(rows)]

    def recent_turns(self, only_user: str | None, limit: int = 500) -> list[dict[str, Any]]:
        """The newest ``limit`` turns (``only_user``'s alone when given), oldest first, with what became of them:
        for the page and ``report`` (``slime_ext/dashboard.py``)."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT session_id, idx, user, main_line, created_at, judged_at, verdict, hint, dropped,
                           trained_in_version, policy_version, substr(response_text, 1, 240) AS reply
                    FROM turns {'WHERE user=?' if only_user is not None else ''} ORDER BY created_at DESC LIMIT ?""",
                ((only_user,) if only_user is not None else ()) + (limit,)).fetchall()
        return [{**dict(r), "main_line": bool(r["main_line"]), "user": r["user"] or "-"} for r in reversed(rows)]

    def clear_preferences(self, user: str | None) -> int:
        """Delete every preference of ``user``; how many there were."""
        with self._transaction():
            return self._conn.execute("DELETE FROM preferences WHERE user=?", (user or "",)).rowcount

    def preference_users(self) -> list[str]:
        """The users with preferences (``-`` is the user without a name)."""
        with self._lock:
            return [r[0] or "-" for r in self._conn.execute("SELECT DISTINCT user FROM preferences ORDER BY user")]

    def preference_counts(self, only_user: str | None = None) -> dict[str, dict[str, int]]:
        """For ``/healthz``: per user (``-`` without one), preferences stored and how many are standing
        (``only_user``'s alone when given)."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT user, COUNT(*), SUM(standing) FROM preferences {'WHERE user=?' if only_user is not None else ''}
                    GROUP BY user ORDER BY user""", (only_user,) if only_user is not None else ()).fetchall()
        return {r[0] or "-": {"preferences": r[1], "standing": r[2]} for r in rows}

    def replay_turns(self, user: str | None, exclude: set[tuple[str, int]], limit: int) -> list[JudgedTurn]:
        """Up to ``limit`` of ``user``'s main-line turns with a response, newest first, none of ``exclude``
        (the turns a replay re-teaches under the user's accumulated preferences: ``trainers/replay.py``)."""
        if limit <= 0:
            return []
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRAINING_COLUMNS} FROM turns WHERE main_line=1 AND user IS ? AND response_token_ids != '[]'
                    ORDER BY created_at DESC, id DESC LIMIT ?""", (user, limit + len(exclude))).fetchall()
        return [r for r in self._decode_turns(rows) if (r["session_id"], r["idx"]) not in exclude][:limit]

    def mark_trained(self, keys: list[tuple[str, int]], version: int) -> None:
        """Record that these turns were trained on in the step that produced ``version``."""
        with self._lock:
            self._conn.executemany("UPDATE turns SET trained_in_version=? WHERE session_id=? AND idx=?",
                                   [(version, sid, idx) for sid, idx in keys])

    def mark_dropped(self, session_id: str, idx: int, reason: str) -> None:
        self._exec("UPDATE turns SET dropped=? WHERE session_id=? AND idx=?", (reason, session_id, idx))

    def record_setback(self, keys: list[tuple[str, int]], kind: str, reason: str) -> None:
        """Count a setback of these turns: ``kind`` "failures" (a step that raised with them) or "refusals" (a
        catch-up step the canary refused); ``reason`` is kept as the last one (``learning/select.py``)."""
        if kind not in ("failures", "refusals"):
            raise ValueError(f"setback kind {kind!r}: expected failures or refusals")
        with self._lock:
            self._conn.executemany(
                f"UPDATE turns SET {kind}=COALESCE({kind}, 0) + 1, setback=? WHERE session_id=? AND idx=?",
                [(reason, sid, idx) for sid, idx in keys])

    # --------------------------------------------------------------- reads
    def trainable_turns(self, limit: int) -> list[JudgedTurn]:
        """Judged turns not yet trained on nor dropped, in the order they were judged."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRAINING_COLUMNS} FROM turns
                   WHERE verdict IS NOT NULL AND trained_in_version IS NULL AND dropped IS NULL
                   ORDER BY {_STEP_ORDER} LIMIT ?""",
                (limit,),
            ).fetchall()
        return self._decode_turns(rows)

    def waiting_turn_versions(self) -> list[dict[str, Any]]:
        """Every turn ``trainable_turns`` would return, in its order, without the token columns (cheap):
        the key, ``policy_version``, what decides its signal (``verdict``, ``hint``, ``hint_judged_at``, whether it was
        served with the preference memory: ``memory``) and its setbacks (``failures``, ``refusals``)."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT session_id, idx, policy_version, verdict, hint, hint_judged_at, memory IS NOT NULL AS memory,
                          failures, refusals FROM turns
                   WHERE verdict IS NOT NULL AND trained_in_version IS NULL AND dropped IS NULL
                   ORDER BY {_STEP_ORDER}""").fetchall()
        return [dict(r) for r in rows]

    def recent_judged(self, limit: int) -> list[JudgedTurn]:
        """The latest judged turns, newest first, whatever became of them (for evaluation)."""
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRAINING_COLUMNS} FROM turns
                   WHERE verdict IS NOT NULL ORDER BY judged_at DESC, id DESC LIMIT ?""",
                (limit,),
            ).fetchall()
        return self._decode_turns(rows)

    @staticmethod
    def _decode_turns(rows) -> list[JudgedTurn]:
        decode = ("prompt_token_ids", "response_token_ids", "response_logprobs", "teacher_logprobs", "messages",
                  "tools", "tool_choice", "sampling", "memory")  # JSON columns
        return [dict(r) | {k: json.loads(r[k]) if r[k] is not None else None for k in decode} for r in rows]

    def hint_vote_texts(self, session_id: str, idx: int) -> list[str]:
        """The raw texts of one turn's hint votes, in vote order (the candidates of ``--hint-m``)."""
        with self._lock:
            rows = self._conn.execute("SELECT text FROM votes WHERE session_id=? AND turn_idx=? AND kind='hint' "
                                      "ORDER BY vote_idx", (session_id, idx)).fetchall()
        return [r["text"] for r in rows]

    def pending_judgement(self, limit: int = 16) -> list[dict[str, Any]]:
        """Main-line turns that have a next state but no verdict yet, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                """SELECT session_id, idx, messages, response_text, tool_calls, next_state, next_state_role FROM turns
                   WHERE main_line=1 AND next_state IS NOT NULL AND verdict IS NULL AND dropped IS NULL
                   ORDER BY next_state_at, id LIMIT ?""",
                (limit,),
            ).fetchall()
        return [dict(r) | {"messages": json.loads(r["messages"]),
                           "tool_calls": json.loads(r["tool_calls"]) if r["tool_calls"] else None} for r in rows]

    def find_reply(self, reply_key: str, user: str | None) -> list[dict[str, Any]]:
        """Turns of ``user``'s sessions whose reply has this fingerprint, newest first (to resume
        sessions after a restart); a session belongs to the user who started it (``sessions.user``)."""
        with self._lock:
            rows = self._conn.execute(
                """SELECT t.session_id, t.idx, t.main_line, t.history_keys FROM turns t JOIN sessions s ON s.id = t.session_id
                   WHERE t.reply_key=? AND s.user IS ? ORDER BY t.id DESC LIMIT 8""",
                (reply_key, user),
            ).fetchall()
        return [dict(r) | {"history_keys": json.loads(r["history_keys"])} for r in rows]

    def session_state(self, session_id: str) -> dict[str, Any] | None:
        """What the session tracker needs to resume a session: its user, turn count and last main turn."""
        with self._lock:
            s = self._conn.execute("SELECT * FROM sessions WHERE id=?", (session_id,)).fetchone()
            if s is None:
                return None
            n = self._conn.execute("SELECT COALESCE(MAX(idx)+1, 0) FROM turns WHERE session_id=?", (session_id,)).fetchone()[0]
            last = self._conn.execute(
                "SELECT idx, reply_key, next_state FROM turns WHERE session_id=? AND main_line=1 ORDER BY idx DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        return {"user": s["user"], "n_turns": n, "last_main": dict(last) if last else None, "closed": s["closed_at"] is not None}

    def verdicts_by_user(self) -> list[tuple[str | None, int, float]]:
        """``(user, judged turns, mean verdict)`` per user: one policy learns from everyone."""
        with self._lock:
            return [tuple(r) for r in self._conn.execute(
                "SELECT user, COUNT(*), AVG(verdict) FROM turns WHERE verdict IS NOT NULL GROUP BY user ORDER BY user")]

    def counts(self, only_user: str | None = None) -> dict[str, Any]:
        """Turn counts for ``/healthz`` (and the page: ``only_user``'s alone when given); drop reasons are grouped
        by the text before their first colon."""
        mine, args = ("AND user=?", (only_user,)) if only_user is not None else ("", ())
        with self._lock:
            row = self._conn.execute(
                f"""SELECT (SELECT COUNT(*) FROM sessions WHERE 1 {mine}), (SELECT COUNT(*) FROM turns WHERE 1 {mine}),
                          (SELECT COUNT(*) FROM turns WHERE main_line=1 {mine}),
                          (SELECT COUNT(*) FROM turns WHERE next_state IS NOT NULL {mine}),
                          (SELECT COUNT(*) FROM turns WHERE verdict IS NOT NULL {mine}),
                          (SELECT AVG(verdict) FROM turns WHERE verdict IS NOT NULL {mine}),
                          (SELECT COUNT(*) FROM turns WHERE trained_in_version IS NOT NULL {mine}),
                          (SELECT COUNT(*) FROM turns WHERE dropped IS NOT NULL {mine})""", args * 8
            ).fetchone()
            reasons = self._conn.execute(
                f"""SELECT CASE WHEN instr(dropped, ':') > 0 THEN substr(dropped, 1, instr(dropped, ':') - 1)
                               ELSE dropped END, COUNT(*) FROM turns WHERE dropped IS NOT NULL {mine} GROUP BY 1""",
                args).fetchall()
        return {"sessions": row[0], "turns": row[1], "main_line_turns": row[2], "turns_with_next_state": row[3],
                "judged_turns": row[4], "mean_verdict": row[5], "trained_turns": row[6], "dropped_turns": row[7],
                "waiting_to_train": row[4] - row[6] - row[7], "dropped_by_reason": {r: n for r, n in reasons}}


def _teacher_follows(conn: sqlite3.Connection, user: str | None) -> dict[str, bool]:
    """``user``'s checked hints (by ``preference_key``): did the hinted teacher follow each when last checked
    (``learning/teachability.py``)? A preference it does not follow is stored and served by the memory, but
    the weights cannot learn it from the teacher yet."""
    rows = conn.execute("""SELECT c.hint, c.follows FROM teacher_checks c JOIN turns t
                           ON t.session_id=c.session_id AND t.idx=c.turn_idx WHERE COALESCE(t.user, '')=?
                           ORDER BY c.at""", (user or "",)).fetchall()
    return {preference_key(r["hint"]): bool(r["follows"]) for r in rows}


def _preference(r: sqlite3.Row, follows: dict[str, bool]) -> dict[str, Any]:
    return {"id": r["rowid"], "user": r["user"] or None, "teacher_follows": follows.get(r["key"]), "hint": r["hint"], "session_id": r["session_id"], "turn": r["turn_idx"],
            "standing": bool(r["standing"]), "times": r["times"], "created_at": r["created_at"], "last_at": r["last_at"]}


def newest_run_with_turns(root: str | Path) -> Path | None:
    """The run directory under ``root`` (its folders holding a ``records.sqlite``) whose latest turn is the most
    recent, or None when none has a turn: where ``records`` (and ``chat``) look without ``--run-dir``. Read only; a
    database that cannot be read (being made, not a run's) is passed over."""
    newest: tuple[float, Path] | None = None
    try:
        runs = [d for d in Path(root).iterdir() if (d / DB_NAME).is_file()]
    except OSError:  # no such folder
        return None
    for run in runs:
        try:
            conn = sqlite3.connect(f"{(run / DB_NAME).resolve().as_uri()}?mode=ro", uri=True, timeout=5)
            try:
                (last,) = conn.execute("SELECT MAX(created_at) FROM turns").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        if last is not None and (newest is None or last > newest[0]):
            newest = (last, run)
    return newest[1] if newest else None


def export_records(run_dir: str | Path) -> dict[str, Any]:
    """The ``records --json`` object. Later issues add keys; existing keys never change meaning."""
    path = Path(run_dir) / DB_NAME
    if not path.exists():
        raise FileNotFoundError(f"no {DB_NAME} in {run_dir}: not a run directory")
    conn = connect(path)
    try:
        migrate(conn)
        sessions = []
        decisions: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
        votes: dict[tuple[str, str, int], list[int | None]] = {}
        for v in conn.execute("SELECT session_id, turn_idx, value, kind FROM votes ORDER BY session_id, turn_idx, vote_idx"):
            votes.setdefault((v["kind"], v["session_id"], v["turn_idx"]), []).append(v["value"])
        checks = {(c["session_id"], c["turn_idx"]): {"gap": c["gap"], "same_answer": _int_bool(c["same_answer"]),
                                                     "hint_gap": c["hint_gap"], "hint_checks": c["hint_checks"],
                                                     "follows": bool(c["follows"]), "reason": c["reason"],
                                                     "sample": c["sample"], "tokens": c["tokens"], "seconds": c["seconds"]}
                  for c in conn.execute("SELECT * FROM teacher_checks")}
        for d in conn.execute("SELECT * FROM decisions ORDER BY id"):
            decisions.setdefault((d["session_id"], d["turn_idx"]), []).append(
                {"kind": d["kind"], "value": d["value"], "reason": d["reason"]}
            )
        for s in conn.execute("SELECT * FROM sessions ORDER BY created_at, id"):
            turns = []
            for t in conn.execute("SELECT * FROM turns WHERE session_id=? ORDER BY idx", (s["id"],)):
                turns.append(
                    {
                        "index": t["idx"],
                        "main_line": bool(t["main_line"]),
                        "reason": t["reason"],
                        "policy_version": t["policy_version"],
                        "policy_version_end": t["policy_version_end"],
                        "request_id": t["request_id"],
                        "finish_reason": t["finish_reason"],
                        "prompt_token_ids": json.loads(t["prompt_token_ids"]),
                        "response_token_ids": json.loads(t["response_token_ids"]),
                        "response_logprobs": json.loads(t["response_logprobs"]),
                        "response_text": t["response_text"],
                        "tool_calls": json.loads(t["tool_calls"]) if t["tool_calls"] else None,
                        "next_state": t["next_state"],
                        "next_state_role": t["next_state_role"],
                        "sampling": json.loads(t["sampling"]),
                        "timings": json.loads(t["timings"]),
                        "decisions": decisions.get((s["id"], t["idx"]), []),
                        "votes": votes.get(("reward", s["id"], t["idx"]), []),
                        "verdict": t["verdict"],
                        "hint_votes": votes.get(("hint", s["id"], t["idx"]), []),
                        "hint": t["hint"],
                        "feedback": json.loads(t["feedback"]) if t["feedback"] else None,  # POST /v1/feedback
                        "memory": json.loads(t["memory"]) if t["memory"] else None,
                        "teacher_logprobs": json.loads(t["teacher_logprobs"]) if t["teacher_logprobs"] else None,
                        "teacher_check": checks.get((s["id"], t["idx"])),
                        "trained_in_version": t["trained_in_version"],
                        "dropped": t["dropped"],
                        # steps that raised with it, catch-up steps refused with it, and the last such setback
                        "setbacks": {"failures": t["failures"] or 0, "refusals": t["refusals"] or 0,
                                     "last": t["setback"]},
                    }
                )
            sessions.append(
                {
                    "id": s["id"],
                    "user": s["user"],
                    "source": s["source"],
                    "closed": s["closed_at"] is not None,
                    "close_reason": s["close_reason"],
                    "decisions": decisions.get((s["id"], None), []),
                    "turns": turns,
                }
            )
        preferences: dict[str, list[dict[str, Any]]] = {}
        follows: dict[str, dict[str, bool]] = {}
        for r in conn.execute("SELECT rowid, * FROM preferences ORDER BY user, created_at, rowid"):
            if r["user"] not in follows:
                follows[r["user"]] = _teacher_follows(conn, r["user"])
            preferences.setdefault(r["user"] or "-", []).append(_preference(r, follows[r["user"]]))
        return {"sessions": sessions, **({"preferences": preferences} if preferences else {})}  # per user, once any
    finally:
        conn.close()
