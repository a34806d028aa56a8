"""The judge loop of a running server: find turns that got a next state, judge them, store it.

With a ``HintJudge`` (methods ``opd`` and ``combine``) each turn also gets its hint votes and the
accepted hint (or none) in the same transaction as its verdict: "no hint" is a result too. An
accepted hint becomes a preference of the turn's user (``Store.preferences``), marked standing when
the user's message states it as one (the heuristic's ``preference`` rule: "from now on ...",
"always ...", "next time ..."), whichever judge voted: standing preferences are the ones the trainer
replays (``trainers/replay.py``) and the memory serves; of a message that also corrects this answer alone, only
the sentences that state the standing preference are kept as it (``standing_part``).

It runs as a task on the server's event loop and never blocks serving: store reads and writes
go through the store's writer thread, and the ``Judge`` bounds concurrency and times out votes.
A restart picks up where it stopped, because "not judged yet" is a property of the store
(``verdict IS NULL``), not of memory.

Each turn is judged on its own: if judging one raises (a user's judge plugin, a hint parser, a
record that cannot be stored), the others of the round are still judged and recorded, and the
failing turn is retried in later rounds. After ``MAX_ATTEMPTS`` failures it is set aside: marked
dropped with the reason (``"judge failed 3 times: ValueError: ..."``), so it is no longer pending
and never trained on. Attempts are counted in memory, so a restart gives a failing turn fresh
tries. A round where every turn failed backs off (the wait doubles, up to ``MAX_BACKOFF_S``) until
a round judges something. ``status()`` says what failed, for /healthz.
"""

from __future__ import annotations

import asyncio
import logging
import time

from slime_ext.chat.memory import retraction
from slime_ext.judge.backends import Judge, JudgeInput, error_text
from slime_ext.judge.heuristic import heuristic_hint, heuristic_rule, sentences
from slime_ext.judge.hints import HintJudge

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # failed judgings of one turn before it is set aside
MAX_BACKOFF_S = 30.0  # the longest wait after rounds where every turn failed


def is_standing_preference(next_state: str, role: str) -> bool:
    """Does the user's message state a standing preference (the heuristic judge's ``preference`` rule)?"""
    return role == "user" and heuristic_rule(next_state, role) == "preference"


def standing_part(next_state: str, hint: str) -> str:
    """What of a standing preference the memory keeps: the accepted ``hint``, or, when the user's message also says
    things about this answer alone ("The answer is 42, not 40. From now on, show your working."; "Use the
    student's name, Lena. Please always encourage them."), only its sentences that state a standing preference,
    each as a hint (``heuristic_hint``): the rest would be wrong for every later request."""
    said = sentences(next_state)
    standing = [x for x in said if is_standing_preference(x, "user")]
    if not standing or len(standing) == len(said):
        return hint
    return " ".join(heuristic_hint(x, "user") or x for x in standing)


class JudgeWorker:
    def __init__(self, judge: Judge, store, *, hints: HintJudge | None = None, poll_s: float = 0.5,
                 batch: int = 16) -> None:
        self.judge = judge
        self.hints = hints
        self.store = store
        self.poll_s = poll_s
        self.batch = batch
        self.judged = 0
        self.last_judge_s = 0.0  # the last turn's judging time (verdict and hint votes together)
        self.failures = 0  # failed judgings, all turns together
        self.set_aside = 0  # turns dropped after MAX_ATTEMPTS failures
        self.last_error: str | None = None  # "ErrorType: message" of the last failure
        self.last_error_at: float | None = None
        self.delay_s = poll_s  # the wait before the next round: poll_s, or more while backing off
        self._attempts: dict[tuple[str, int], int] = {}  # failed judgings per turn not yet set aside
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """A next state was recorded: look now instead of at the next poll."""
        self._wake.set()

    def status(self) -> dict:
        """What the loop did and what last went wrong (for /healthz)."""
        return {"judged": self.judged, "failures": self.failures, "set_aside": self.set_aside,
                "last_error": self.last_error, "last_error_at": self.last_error_at}

    async def run_once(self) -> int:
        """Judge every pending turn once; returns how many were judged (a failing turn is not one)."""
        pending = await self.store.run(self.store.pending_judgement, self.batch)
        judged = sum(await asyncio.gather(*(self._judge_or_count_failure(t) for t in pending)))
        self.judged += judged
        backing_off = bool(pending) and judged == 0
        self.delay_s = min(2 * self.delay_s, MAX_BACKOFF_S) if backing_off else self.poll_s
        return judged

    async def _judge_or_count_failure(self, t) -> bool:
        """Judge and record one turn; True if it was, False if it raised (counted, maybe set aside)."""
        try:
            await self._judge_turn(t)
            return True
        except Exception as e:
            await self._failed(t, e)
            return False

    async def _judge_turn(self, t) -> None:
        inputs = JudgeInput(t["messages"], t["response_text"], t["tool_calls"], t["next_state"], t["next_state_role"])
        started = time.perf_counter()
        if self.hints is None:
            verdict, hint = await self.judge.judge(inputs), None
        else:
            verdict, hint = await asyncio.gather(self.judge.judge(inputs), self.hints.hint(inputs))
        self.last_judge_s = time.perf_counter() - started
        votes = list(zip(verdict.votes, verdict.texts))
        hint_votes = list(zip(hint.votes, hint.texts)) if hint else None
        accepted = hint.hint if hint else None
        standing = bool(accepted) and is_standing_preference(t["next_state"], t["next_state_role"])  # only if kept
        preference = standing_part(t["next_state"], accepted) if standing else accepted
        taken_back = retraction(t["next_state"]) if t["next_state_role"] == "user" else None
        if taken_back:  # "forget that", "stop starting with 'So,'": before any preference this message states
            gone = await self.store.run(self.store.retract_preferences, t["session_id"], t["idx"], *taken_back)
            log.info("turn %d of %s: the user took back %d preference(s)", t["idx"], t["session_id"], len(gone))
        await self.store.run(self.store.record_verdict, t["session_id"], t["idx"], verdict.score, votes,
                             accepted, hint_votes, standing, preference)
        self._attempts.pop((t["session_id"], t["idx"]), None)
        log.info("judged turn %d of %s: %+d (votes %s)%s", t["idx"], t["session_id"], verdict.score, verdict.votes,
                 f", hint {accepted!r}" if accepted else "")

    async def _failed(self, t, error: Exception) -> None:
        """Count a failed judging of turn ``t``; at ``MAX_ATTEMPTS`` set the turn aside (mark it dropped)."""
        key = (t["session_id"], t["idx"])
        attempts = self._attempts[key] = self._attempts.get(key, 0) + 1
        self.failures += 1
        self.last_error, self.last_error_at = error_text(error), time.time()
        log.warning("judging turn %d of %s failed (attempt %d of %d): %s", t["idx"], t["session_id"],
                    attempts, MAX_ATTEMPTS, self.last_error, exc_info=error if attempts == 1 else None)
        if attempts < MAX_ATTEMPTS:
            return
        reason = f"judge failed {attempts} times: {self.last_error}"
        try:
            await self.store.run(self.store.mark_dropped, t["session_id"], t["idx"], reason)
        except Exception:  # the store is failing too: try again after the next failure
            log.exception("could not set aside turn %d of %s", t["idx"], t["session_id"])
            return
        del self._attempts[key]
        self.set_aside += 1
        log.error("set aside turn %d of %s: %s", t["idx"], t["session_id"], reason)

    async def run(self) -> None:
        while True:
            try:
                if await self.run_once() == self.batch:
                    continue  # more may be waiting
            except Exception as e:  # never let judging take the server down
                log.exception("judge loop step failed")
                self.last_error, self.last_error_at = error_text(e), time.time()
                self.delay_s = min(2 * self.delay_s, MAX_BACKOFF_S)
            await self._wait()

    async def _wait(self) -> None:
        """Until the next poll or a ``notify``; while backing off, the whole back-off (new turns wait too)."""
        if self.delay_s > self.poll_s:
            await asyncio.sleep(self.delay_s)
        else:
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            except asyncio.TimeoutError:
                pass
        self._wake.clear()
