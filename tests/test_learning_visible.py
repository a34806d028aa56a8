"""Learning made visible where a person looks: the status line says how many turns a step needs and what the
trainer is doing, ``/healthz`` shows a step while it runs, and each served version gets one plain sentence."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slime_ext.serve import status_text
from slime_ext.trainers.process import TrainerStatus, TrainerSupervisor, train_forever, version_sentence

COUNTS = {"mean_verdict": -0.5, "turns": 9, "judged_turns": 6, "trained_turns": 4, "waiting_to_train": 2,
          "dropped_turns": 0}


class Stop(Exception):
    pass


class OneStep:
    """A trainer whose first step takes 3 turns (and says so), whose second ends the loop."""

    version = 0

    def __init__(self, status_file: TrainerStatus) -> None:
        self.status, self.during = status_file, None

    def step(self, started):
        if self.during is not None:
            raise Stop
        started(3)
        self.during = dict(TrainerStatus(self.status.path.parent).fields)  # what the server reads mid-step
        self.version = 1
        return {"version": 1, "refused": 1}


def test_trainer_json_says_training_and_on_how_many_turns_while_a_step_runs(tmp_path):
    status = TrainerStatus(tmp_path)
    status.update(state="idle", version=0)
    trainer = OneStep(status)
    with pytest.raises(Stop):
        train_forever(trainer, SimpleNamespace(write=lambda *a: None), status, poll_s=0)
    assert trainer.during["state"] == "training" and trainer.during["step_turns"] == 3
    assert TrainerStatus(tmp_path).fields["state"] == "idle"  # and not after


def test_a_step_that_found_nothing_to_train_is_not_shown_as_training(tmp_path):
    status = TrainerStatus(tmp_path)

    class NothingUsable(OneStep):
        def step(self, started):
            if self.during is not None:
                raise Stop
            started(4)  # enough turns waited, but preparing them left none (e.g. every hint unfollowed)
            self.during = dict(TrainerStatus(self.status.path.parent).fields)
            return None

    trainer = NothingUsable(status)
    with pytest.raises(Stop):
        train_forever(trainer, SimpleNamespace(write=lambda *a: None), status, poll_s=0)
    assert trainer.during["state"] == "training" and TrainerStatus(tmp_path).fields["state"] == "idle"


def test_the_status_line_says_what_a_step_needs_and_what_the_trainer_does(tmp_path):
    supervisor = TrainerSupervisor(lambda: None, tmp_path)
    supervisor.process = SimpleNamespace(is_alive=lambda: True, pid=123)
    server = SimpleNamespace(engine=SimpleNamespace(policy_version=1), in_flight=0, checkpoints=None,
                             settings=SimpleNamespace(batch_size=4), trainer=supervisor)
    TrainerStatus(tmp_path).update(state="idle")
    line = status_text(server, COUNTS)
    assert "waiting 2/4" in line and "training" not in line.split("waiting")[1]
    TrainerStatus(tmp_path).update(state="training", step_turns=4, step_started_at=1000.0)
    assert supervisor.status()["step_turns"] == 4  # /healthz's training.trainer
    assert status_text(server, COUNTS, now=1012.0).endswith("| training on 4 turns (12 s)")
    TrainerStatus(tmp_path).update(state="starting")
    assert status_text(server, COUNTS).endswith("| trainer loading")
    server.settings.batch_size, server.trainer = 0, None  # a server that does not train
    assert "waiting 2 |" in status_text(server, COUNTS)


def test_a_served_version_in_one_plain_sentence():
    m = {"turns": 4, "corrected_turns": 3, "approved_turns": 1, "hinted_turns": 2, "canary_nll_rise": 0.0123}
    assert version_sentence(3, m) == ("now serving version 3: it learned from 4 turns (3 corrected, 1 approved, "
                                      "2 with a hint); the canary passed it (reference NLL +0.012)")
    assert version_sentence(1, {"turns": 1, "approved_turns": 1}) == \
        "now serving version 1: it learned from 1 turn (1 approved); no canary checked it"
    assert version_sentence(2, {}) == "now serving version 2"


def test_on_slime_the_server_says_it_learns_but_names_no_batch_of_its_own(tmp_path):
    """Inside Slime, build_server gets SGLang's engine and Slime's trainer takes the judged turns in Slime's
    batches: /healthz says the server learns, and neither /v1/feedback nor the status line names our
    --batch-size (it is not the batch that trains)."""
    from transformers import AutoTokenizer

    from slime_ext.config import ServeConfig
    from slime_ext.models import resolve_model
    from slime_ext.serve import build_server

    cfg = ServeConfig(model="ignored-on-slime", method="binary", batch_size=4, run_dir=str(tmp_path / "run"))
    server = build_server(cfg, engine=SimpleNamespace(policy_version=0),
                          tokenizer=AutoTokenizer.from_pretrained(str(resolve_model("tiny"))))
    try:
        assert server.settings.learns and server.settings.batch_size == 0 and server.trainer is None
        assert "waiting 2 |" in status_text(server, COUNTS)
    finally:
        server.store.close()
