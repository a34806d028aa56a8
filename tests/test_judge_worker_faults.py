"""A turn whose judging raises does not stall the judge loop: the other turns are judged, and the
failing one is retried, then set aside (dropped, with the reason) after ``MAX_ATTEMPTS`` failures."""

import sqlite3

import pytest

from slime_ext.judge.backends import HeuristicBackend, Judge
from slime_ext.judge.worker import JudgeWorker
from slime_ext.store import Store
from slime_ext.types import Turn

BAD = "<<poison>>"
MAX_ATTEMPTS = 3  # the worker's, written out so this test runs (and fails) on a worker without it


def add_turn(store, sid, next_state):
    store.create_session(sid, "alice", "header")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           user="alice", prompt_token_ids=[1, 2, 3], response_token_ids=[4, 5],
                           response_logprobs=[-1.0, -1.0], response_text="x", policy_version=0,
                           policy_version_end=0, finish_reason="stop",
                           messages=[{"role": "user", "content": "question"}], reply_key=f"{sid}-0"))
    store.set_next_state(sid, 0, next_state, "user")


def turn_rows(store):
    with sqlite3.connect(store.path) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT session_id, verdict, dropped FROM turns").fetchall()
    return {r["session_id"]: dict(r) for r in rows}


class PoisonedJudge(Judge):
    """The heuristic judge, raising on every turn whose next state carries the marker."""

    async def judge(self, inputs):
        if BAD in inputs.next_state:
            raise ValueError("boom")
        return await super().judge(inputs)


class FlakyJudge(Judge):
    """The heuristic judge, raising on its first call only."""

    calls = 0

    async def judge(self, inputs):
        self.calls += 1
        if self.calls == 1:
            raise ValueError("flaky")
        return await super().judge(inputs)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "run")
    yield s
    s.close()


async def test_a_failing_turn_is_set_aside_and_the_others_are_judged(store):
    add_turn(store, "a", "Thanks, that's perfect!")
    add_turn(store, "bad", f"No, that's wrong. {BAD}")
    add_turn(store, "c", "No, that's wrong. Try again.")
    worker = JudgeWorker(PoisonedJudge(HeuristicBackend()), store, poll_s=0.5)

    assert await worker.run_once() == 2  # the bad turn does not stop the others
    rows = turn_rows(store)
    assert rows["a"]["verdict"] == 1 and rows["c"]["verdict"] == -1
    assert rows["bad"]["verdict"] is None and rows["bad"]["dropped"] is None  # one failure: retried later

    for _ in range(MAX_ATTEMPTS - 1):
        assert await worker.run_once() == 0
    assert worker.delay_s == 0.5 * 2 ** (MAX_ATTEMPTS - 1)  # rounds where everything failed back off
    rows = turn_rows(store)
    assert rows["bad"]["verdict"] is None
    assert rows["bad"]["dropped"].startswith("judge failed") and "ValueError: boom" in rows["bad"]["dropped"]
    assert store.pending_judgement() == []
    assert await worker.run_once() == 0 and worker.delay_s == 0.5  # nothing left to fail: back to polling

    status = worker.status()
    assert status["judged"] == 2 and status["failures"] == MAX_ATTEMPTS and status["set_aside"] == 1
    assert "boom" in status["last_error"] and status["last_error_at"] is not None


async def test_a_turn_that_fails_once_is_judged_on_the_next_round(store):
    add_turn(store, "a", "Thanks, that's perfect!")
    worker = JudgeWorker(FlakyJudge(HeuristicBackend()), store)

    assert await worker.run_once() == 0
    assert await worker.run_once() == 1
    rows = turn_rows(store)
    assert rows["a"]["verdict"] == 1 and rows["a"]["dropped"] is None
    status = worker.status()
    assert status["judged"] == 1 and status["failures"] == 1 and status["set_aside"] == 0
    assert status["last_error"] == "ValueError: flaky"
