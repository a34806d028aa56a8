"""The judge loop of a running server: find turns that got a next state, judge them, store it.

With a ``HintJudge`` (methods ``opd`` and ``combine``) each turn also gets its hint votes and the
accepted hint (or none) in the same transaction as its verdict: "no hint" is a result too. An
accepted hint becomes a preference of the turn's user (``Store.preferences``), marked standing when
the user's message states it as one (the heuristic's ``preference`` rule: "from now on ...",
"always ...", "next time ..."), whichever judge voted: standing preferences are the ones the trainer
replays (``trainers/replay.py``).

It runs as a task on the server's event loop and never blocks serving: store reads and writes
go through the store's writer thread, and the ``Judge`` bounds concurrency and times out votes.
A restart picks up where it stopped, because "not judged yet" is a property of the store
(``verdict IS NULL``), not of memory.
"""

from __future__ import annotations

import asyncio
import logging
import time

from slime_ext.judge.backends import Judge, JudgeInput
from slime_ext.judge.heuristic import heuristic_rule
from slime_ext.judge.hints import HintJudge

log = logging.getLogger(__name__)


def is_standing_preference(next_state: str, role: str) -> bool:
    """Does the user's message state a standing preference (the heuristic judge's ``preference`` rule)?"""
    return role == "user" and heuristic_rule(next_state, role) == "preference"


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
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """A next state was recorded: look now instead of at the next poll."""
        self._wake.set()

    async def run_once(self) -> int:
        """Judge every pending turn once; returns how many were judged."""
        pending = await self.store.run(self.store.pending_judgement, self.batch)
        if not pending:
            return 0

        async def one(t):
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
            await self.store.run(self.store.record_verdict, t["session_id"], t["idx"], verdict.score, votes,
                                 accepted, hint_votes, standing)
            log.info("judged turn %d of %s: %+d (votes %s)%s", t["idx"], t["session_id"], verdict.score, verdict.votes,
                     f", hint {accepted!r}" if accepted else "")

        await asyncio.gather(*(one(t) for t in pending))
        self.judged += len(pending)
        return len(pending)

    async def run(self) -> None:
        while True:
            try:
                if await self.run_once() == self.batch:
                    continue  # more may be waiting
            except Exception:  # never let judging take the server down
                log.exception("judge loop step failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
