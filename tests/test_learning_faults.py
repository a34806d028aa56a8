"""Faults an audit of the learning code found (issue 26), each driven the way it happens: a backlog after a
restart, a turn whose training raises, a trainer process that dies, a canary that refuses a catch-up step.
Each test uses only what the trainer and the server offered before the fix (``ServeConfig``, ``OnlineTrainer``,
the store, HTTP), so each fails on the code before it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import urllib.request

import pytest
import torch

from slime_ext.config import ServeConfig
from slime_ext.store import Store, export_records
from slime_ext.trainers.loop import OnlineTrainer, wrap_lora
from slime_ext.trainers.process import TrainerStatus, TrainerSupervisor
from slime_ext.types import Turn
from tests.test_learning_e2e import wait
from tests.test_trainer_loop import record, record_hinted, tiny_model_and_renderer


def turns(store) -> dict[str, dict]:
    return {s["id"]: s["turns"][0] for s in export_records(store.run_dir)["sessions"]}


def step_until_done(trainer, limit: int = 40) -> list[dict]:
    """Step as the trainer process does, while anything trains."""
    steps = []
    for _ in range(limit):
        m = trainer.step()
        if m is None:
            break
        steps.append(m)
    return steps


# ---------------------------------------------------------------- 1. a backlog never trains a hint without its teacher
@pytest.mark.parametrize("method", ["opd", "combine"])
def test_a_catch_up_step_never_trains_a_hinted_turn_without_its_teacher(tmp_path, method):
    """A restart finds 40 judged turns sampled by version 0, one in five hinted, the others a verdict 0 (no
    signal): the trainer, at version 4 with max_staleness 4, takes them in one catch-up step larger than its
    batch, from rows among which the no-signal ones are dropped, so fewer usable turns than the step's size
    remain. Every hinted turn it trains must have been scored by the teacher and checked."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")
    for i in range(40):
        if i % 5 == 0:
            record_hinted(store, base, renderer, f"h{i:02d}", f"question {i}", [500 + i, 600 + i, 2], -1,
                          "Answer in one short sentence.")
        else:
            record(store, base, f"z{i:02d}", [11, 12 + i], [700 + i], 0)
    cfg = ServeConfig(method=method, batch_size=2, lr=1e-3, lora_rank=4, max_staleness=4, canary=False,
                      unfollowed_hints="train").trainer_config()
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, version=4, renderer=renderer)
    steps = step_until_done(trainer)
    assert [m["turns"] for m in steps] == [7]  # one catch-up step (of 8) over the first 32 rows: 7 of the hints
    trained = [t for t in turns(store).values() if t["trained_in_version"] is not None]
    assert len(trained) == 7 and all(t["hint"] is not None for t in trained)
    assert all(t["teacher_logprobs"] is not None and len(t["teacher_logprobs"]) == 3 for t in trained)
    assert all(t["teacher_check"] is not None for t in trained)
    assert steps[0]["hinted_turns"] == 7 and steps[0]["teacher_gap_mean"] != 0
    last = turns(store)["h35"]  # the eighth waits for a batch, neither trained nor dropped
    assert last["trained_in_version"] is None and last["dropped"] is None


# ---------------------------------------------------------------- 4. a refused catch-up step loses nothing
class RefusesOnce:
    """A canary whose first check refuses (as after a step on a bad backlog), then accepts."""

    def __init__(self) -> None:
        self.checks = 0

    def prepare(self, model) -> None:
        pass

    def check(self, model, version):
        from slime_ext.trainers.canary import CanaryFigures, CanaryResult

        self.checks += 1
        figures = CanaryFigures(1.0, 0.9, 0.9, 10.0)
        return CanaryResult(figures, figures, ["EOS rate fell 0.83 -> 0.50"] if self.checks == 1 else [])


def test_a_refused_catch_up_step_keeps_its_turns_and_retries_them_in_regular_steps(tmp_path):
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    store = Store(tmp_path / "run")
    for i in range(12):
        record(store, base, f"s{i:02d}", [100 + i, 7], [300 + i], 1 if i % 2 else -1)
    cfg = ServeConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4, max_staleness=4).trainer_config()
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, version=4, canary=RefusesOnce())
    refused = trainer.step()
    assert refused["refused"].startswith("canary refused: version 5") and refused["turns"] == 12
    assert store.counts()["dropped_turns"] == 0  # not one of the twelve is lost
    setbacks = [t["setbacks"] for t in turns(store).values()]
    assert all(sb["refusals"] == 1 and sb["last"].startswith("canary refused: version 5") for sb in setbacks)
    steps = step_until_done(trainer)
    assert [m["turns"] for m in steps] == [4, 4, 4]  # retried in regular steps, each gated on its own
    assert store.counts()["trained_turns"] == 12 and store.counts()["dropped_turns"] == 0


def test_a_refused_regular_step_drops_only_its_own_turns(tmp_path):
    """A step of at most a batch the canary refuses is dropped with the refusal as the reason (as before):
    at most a batch is lost to one refusal."""
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    store = Store(tmp_path / "run")
    for i in range(8):
        record(store, base, f"s{i:02d}", [100 + i, 7], [300 + i], 1 if i % 2 else -1)
    cfg = ServeConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4).trainer_config()
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, canary=RefusesOnce())
    assert trainer.step()["refused"]
    assert store.counts()["dropped_by_reason"] == {"canary refused": 4}
    assert trainer.step()["version"] == 1 and store.counts()["trained_turns"] == 4


# ---------------------------------------------------------------- 2. the trainer is supervised
def poison(store, sid: str, verdict: int = -1) -> None:
    """A judged turn whose record cannot be trained on: one log-prob short (a corrupt row)."""
    store.create_session(sid, None, "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           prompt_token_ids=[5, 6, 7], response_token_ids=[8, 9, 10], response_logprobs=[-1.0, -2.0],
                           response_text="x", policy_version=0, policy_version_end=0, finish_reason="stop",
                           messages=[], reply_key=sid))
    store.set_next_state(sid, 0, "No, that's wrong.", "user")
    store.record_verdict(sid, 0, verdict, [(verdict, "test")])


def test_a_turn_that_makes_the_step_raise_is_set_aside_and_learning_goes_on(make_server):
    """A corrupt turn in the store makes every step it is in raise. The trainer's crash is logged with its
    traceback and shown by /healthz and /metrics; the trainer restarts with back-off; the turn is retried
    alone, set aside with its reason at its second failure, and the good turns are trained."""
    srv = make_server(extra=["--method", "binary", "--batch-size", "2", "--lora-rank", "4", "--no-canary"])
    store = Store(srv.run_dir)
    poison(store, "poisoned")
    for i, feedback in enumerate(["Thanks, perfect!", "No, that's wrong.", "Great, thank you!"]):
        u = {"role": "user", "content": f"question {i}"}
        reply = srv.chat([u], seed=i)["choices"][0]["message"]["content"]
        srv.chat([u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)
    wait(lambda: (lambda h: h["trained_turns"] == 3 and h["policy_version"] >= 1)(srv.health()), 240)
    health = srv.health()
    trainer = health["training"]["trainer"]
    assert trainer["restarts"] >= 2 and trainer["failed_steps"] >= 2 and trainer["state"] != "failed"
    assert "rollout_log_probs must have one value per response token" in trainer["last_error"]["error"]
    assert trainer["last_error"]["set_aside"] == [["poisoned", 0]] and "traceback" not in trainer["last_error"]
    (bad,) = [t for s in srv.records()["sessions"] for t in s["turns"] if s["id"] == "poisoned"]
    assert bad["dropped"].startswith("set aside: training failed 2 times with this turn: ValueError: sample 0:")
    assert health["dropped_by_reason"] == {"set aside": 1} and health["policy_version"] >= 1
    with urllib.request.urlopen(srv.base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert "openclaw_trainer_up 1" in text and f"openclaw_trainer_restarts {trainer['restarts']}" in text
    log = srv.log_path.read_text()
    assert "Traceback" in log and "the trainer exited (code 1" in log


def test_a_killed_trainer_is_started_again_and_reported(make_server):
    srv = make_server(extra=["--method", "binary", "--batch-size", "2", "--lora-rank", "4", "--no-canary"])
    first = wait(lambda: srv.health()["training"]["trainer"]["pid"], 60)
    wait(lambda: srv.health()["training"]["trainer"]["state"] == "idle", 120)
    assert os.sched_getscheduler(first) == os.SCHED_IDLE  # serving has the cores whenever it computes
    os.kill(first, signal.SIGKILL)  # an out-of-memory kill, say
    wait(lambda: srv.health()["training"]["trainer"]["restarts"] == 1, 60)
    again = wait(lambda: srv.health()["training"]["trainer"]["pid"], 60)
    assert again != first and "the trainer exited (code -9" in srv.log_path.read_text()
    wait(lambda: "computing on" in srv.log_path.read_text().split("the trainer exited")[-1], 60)
    assert os.sched_getscheduler(again) == os.SCHED_IDLE  # the restarted one too
    for i, feedback in enumerate(["Thanks, perfect!", "No, that's wrong."]):  # and it still learns
        u = {"role": "user", "content": f"question {i}"}
        reply = srv.chat([u], seed=i)["choices"][0]["message"]["content"]
        srv.chat([u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)
    wait(lambda: srv.health()["policy_version"] >= 1, 240)


class _Exited:
    """A trainer process that has already exited with ``exitcode`` (as ``multiprocessing.Process`` shows it)."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode, self.pid = exitcode, 4242

    def is_alive(self) -> bool:
        return False


@pytest.mark.parametrize("killed", [True, False])
def test_the_supervisor_logs_only_the_error_of_the_process_that_exited(tmp_path, caplog, killed):
    """A trainer killed from outside (SIGKILL: it records nothing) is logged without the last error an
    earlier trainer left in trainer.json; a trainer that recorded its error is logged with it."""
    TrainerStatus(tmp_path).failed(ValueError("an earlier trainer's error"))
    time.sleep(0.01)

    def start():
        if not killed:
            TrainerStatus(tmp_path).failed(ValueError("this trainer's error"))
        return _Exited(-9 if killed else 1)

    supervisor = TrainerSupervisor(start, tmp_path, backoff_s=0.01)
    supervisor.start()

    async def until_restarted():
        task = asyncio.create_task(supervisor.run())
        while supervisor.restarts < 1:
            await asyncio.sleep(0.05)
        task.cancel()

    with caplog.at_level(logging.ERROR, logger="slime_ext.trainers.process"):
        asyncio.run(asyncio.wait_for(until_restarted(), 10))
    line = next(r.getMessage() for r in caplog.records if "the trainer exited" in r.getMessage())
    assert "an earlier trainer's error" not in line
    assert ("this trainer's error" in line) != killed
