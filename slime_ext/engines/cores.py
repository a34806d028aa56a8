"""The CPU cores the engine shares with the trainer beside it, and a bound on how long the trainer waits for them.

The trainer computes at the lowest scheduling priority (``trainers/process.py``): a core the engine decodes on is
the engine's, and the trainer runs on the cores the engine leaves between requests. Under continuous load the engine
leaves none, and the trainer's start and its steps would wait for as long as the load lasts: a server that is busy
all day would never learn. ``CoreShare`` bounds that wait. The trainer marks the work it wants cores for
(``working``: loading, a step); once that work has waited ``grace_s``, the engine rests after each of its steps so
that the trainer gets about ``share`` of the time (a step of ``d`` seconds, then ``d * share / (1 - share)`` of
rest), until the work is done. Serving slows by that share only while a starved step runs.

The mark is one double in shared memory (a monotonic start time; 0 when the trainer is idle), written by the
trainer process and read by the engine thread; it crosses to the spawned trainer as a process argument.
"""

from __future__ import annotations

import multiprocessing
import time
from contextlib import contextmanager
from typing import Iterator

GRACE_S = 10.0  # how long the trainer's work waits for cores the engine leaves before the engine lends some


class CoreShare:
    """Shared between the engine (``rest_after``) and the trainer process (``working``)."""

    def __init__(self, share: float, grace_s: float = GRACE_S) -> None:
        if not 0.0 <= share < 1.0:
            raise ValueError(f"the trainer's share of the cores must be in [0, 1), not {share}")
        self.share, self.grace_s = share, grace_s
        self._since = multiprocessing.get_context("spawn").RawValue("d", 0.0)

    @contextmanager
    def working(self) -> Iterator[None]:
        """The trainer's work that wants cores (loading the model, a training step)."""
        self._since.value = time.monotonic()
        try:
            yield
        finally:
            self._since.value = 0.0

    def starved(self, now: float | None = None) -> bool:
        """Whether the trainer's current work has waited past the grace period."""
        since = self._since.value
        return since > 0.0 and (time.monotonic() if now is None else now) - since >= self.grace_s

    def rest_after(self, step_s: float, now: float | None = None) -> float:
        """Seconds the engine rests after a step that took ``step_s``: 0 unless the trainer is starved."""
        if self.share == 0.0 or not self.starved(now):
            return 0.0
        return step_s * self.share / (1.0 - self.share)
