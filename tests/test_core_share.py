"""The engine lends a share of the cores to a trainer that continuous serving starves (``engines/cores.py``).

Without it the trainer, at idle priority, waits for as long as requests keep the engine busy: under back-to-back
traffic a step never ran (``test_learning_length.py`` timed out waiting for version 1).
"""

import multiprocessing
import time

import pytest

from slime_ext.config import ServeConfig
from slime_ext.engines import SamplingParams
from slime_ext.engines.cores import CoreShare
from slime_ext.engines.local import LocalEngine
from slime_ext.models import resolve_model


def test_the_engine_rests_only_once_the_trainers_work_has_waited_past_the_grace():
    cores = CoreShare(0.25, grace_s=10.0)
    assert cores.rest_after(0.03) == 0.0  # the trainer is idle
    with cores.working():
        start = time.monotonic()
        assert cores.rest_after(0.03, now=start + 5) == 0.0  # it may still find a free core
        assert cores.rest_after(0.03, now=start + 11) == pytest.approx(0.01)  # 0.01 / (0.03 + 0.01) = 0.25
    assert cores.rest_after(0.03, now=time.monotonic() + 60) == 0.0  # its work is done
    off = CoreShare(0.0, grace_s=0.0)
    with off.working():
        assert off.rest_after(0.03, now=time.monotonic() + 60) == 0.0


def test_a_share_of_one_or_more_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        CoreShare(1.0)
    with pytest.raises(ValueError, match="trainer_share must be at least 0 and below 1"):
        ServeConfig(trainer_share=1.0).validated()
    with pytest.raises(ValueError, match="trainer_share"):
        ServeConfig(trainer_share=-0.1).validated()


def mark_working(cores: CoreShare, started, done) -> None:  # in a spawned process, as the trainer does
    with cores.working():
        started.set()
        done.wait(30)


def test_the_mark_crosses_to_a_spawned_process():
    ctx = multiprocessing.get_context("spawn")
    cores, started, done = CoreShare(0.5, grace_s=0.0), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=mark_working, args=(cores, started, done))
    proc.start()
    try:
        assert started.wait(60)
        assert cores.starved() and cores.rest_after(0.02) == pytest.approx(0.02)
    finally:
        done.set()
        proc.join(30)
    assert proc.exitcode == 0 and not cores.starved()


async def test_the_engine_rests_while_a_starved_trainer_works():
    cores = CoreShare(0.5, grace_s=0.0)
    engine = LocalEngine(resolve_model("tiny"), dtype="float32", threads=1, prefix_cache_tokens=0, cores=cores)
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, seed=0)
    try:
        alone = [t.token_id async for t in engine.generate(list(range(100, 120)), sampling)]
        assert engine.stats["rested_s"] == 0.0
        with cores.working():
            started = time.monotonic()
            lent = [t.token_id async for t in engine.generate(list(range(100, 120)), sampling)]
            took = time.monotonic() - started
        assert lent == alone  # resting changes when tokens come, not which
        # at a share of 0.5 the engine rests as long as it computes: about half of the time
        assert 0.3 * took <= engine.stats["rested_s"] <= 0.7 * took
    finally:
        await engine.close()
