"""The three learning methods end to end over HTTP on tiny, selected with --method.

Each user's next message either thanks (+1, no hint), corrects with an instruction (-1, hint
"Answer with a single word."), or corrects without one (-1, no hint). What gets trained, dropped
and recorded (hint, teacher log-probs) follows the method:
  binary  — verdicts only: no hint judging, every non-zero verdict is trained;
  opd     — hints only: hinted turns are trained with teacher log-probs, the others dropped;
  combine — both: every non-zero verdict is trained, hinted ones also with teacher log-probs
            (with --distill topk, the teacher term is the top-k reverse KL instead).
"""

from __future__ import annotations

import json
import time

import pytest

FEEDBACK = ["Thanks, perfect!", "No. Answer with a single word.", "No, that's wrong.", "Great, thank you!"]
HINT = "Answer with a single word."


def chat(srv, messages, seed):
    return srv.chat(messages, seed=seed)["choices"][0]["message"]["content"]


GROUPS = ["--distill", "forward_kl", "--topk", "20", "--group-size", "3", "--group-max-new-tokens", "4"]


@pytest.mark.parametrize("method, extra", [("binary", []), ("opd", []), ("combine", []),
                                           ("combine", ["--distill", "topk", "--topk", "4"]), ("combine", GROUPS)],
                         ids=["binary", "opd", "combine", "combine-topk", "combine-groups-forward-kl"])
def test_method_selects_what_is_judged_trained_and_recorded(make_server, method, extra):
    # --unfollowed-hints train: the random tiny teacher follows no hint (serve's default would skip it)
    srv = make_server(extra=["--method", method, "--batch-size", "1", "--lora-rank", "4", "--lr", "1e-3",
                             "--unfollowed-hints", "train", *extra])
    for i, feedback in enumerate(FEEDBACK):
        u = {"role": "user", "content": f"What is the capital of country {i}?"}
        reply = chat(srv, [u], seed=i)
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)
    trainable = {"binary": 4, "opd": 1, "combine": 4}[method]
    deadline = time.time() + 180
    while srv.health()["trained_turns"] + srv.health()["dropped_turns"] < 4:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.3)
    while srv.health()["policy_version"] < 1:  # a turn is marked trained before its version is swapped in
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.1)
    turns = {t["next_state"]: t for s in srv.records()["sessions"] for t in s["turns"] if t["next_state"]}
    assert sorted(turns) == sorted(FEEDBACK)
    trained = {k for k, t in turns.items() if t["trained_in_version"] is not None}
    assert len(trained) == trainable and srv.health()["policy_version"] >= 1
    hinted = turns[FEEDBACK[1]]
    if method == "binary":  # no teacher; the hint is still judged, for the preference memory (on by default)
        assert all(t["teacher_logprobs"] is None for t in turns.values()) and hinted["hint"] == HINT
        return
    assert hinted["hint"] == HINT and hinted["hint_votes"] == [1]
    assert len(hinted["teacher_logprobs"]) == len(hinted["response_token_ids"])
    # the teacher saw the hint: its log-probs of the same tokens differ from the recorded ones
    assert max(abs(a - b) for a, b in zip(hinted["teacher_logprobs"], hinted["response_logprobs"])) > 1e-4
    others = [t for k, t in turns.items() if k != FEEDBACK[1]]
    assert all(t["hint"] is None and len(t["hint_votes"]) == 1 and t["teacher_logprobs"] is None for t in others)
    if extra == GROUPS:  # the hinted turn trained in a group of 3 (2 fresh samples); the others alone
        states = [json.loads(p.read_text()) for p in srv.run_dir.glob("checkpoints/v*/trainer_state.json")]
        records = [g for st in states for g in st["metrics"].get("group_records", [])]
        assert len(records) == 1 and len(records[0]["rewards"]) == 3 and records[0]["rewards"][0] == -1.0
        assert sum(st["metrics"].get("fresh_samples", 0) for st in states) == 2
    if method == "opd":
        assert trained == {FEEDBACK[1]}
        assert all(t["dropped"] == "no hint: nothing to distill" for t in others)
    else:
        assert trained == set(FEEDBACK) and all(t["dropped"] is None for t in turns.values())


def test_combine_on_serve_defaults_checks_the_teacher_and_gates_the_version(make_server):
    """``make serve``'s learning defaults on tiny (combine, batch 4, canary on, teacher check on, unfollowed hints
    dropped): the hinted turn is checked, and dropped because tiny's random teacher does not follow the hint;
    the verdicts train a version the canary probed before it was served."""
    srv = make_server(extra=["--method", "combine"])  # the rest as `make serve` has it
    for i in range(8):
        u = {"role": "user", "content": f"What is the capital of country {i}?"}
        reply = chat(srv, [u], seed=i)
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": FEEDBACK[i % 4]}],
             seed=100 + i)
    deadline = time.time() + 240
    while srv.health()["policy_version"] < 1:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.3)
    health = srv.health()
    assert health["training"]["canary"]["checks"] >= 1 and health["training"]["canary"]["refused"] == 0
    checked = health["hints_teacher_cannot_follow"]
    assert checked >= 1 and health["dropped_by_reason"]["teacher does not follow the hint"] == checked
    turns = [t for s in srv.records()["sessions"] for t in s["turns"] if t["next_state"]]
    hinted = [t for t in turns if t["teacher_check"]]
    assert len(hinted) == checked and all(t["hint"] and t["teacher_check"]["follows"] is False
                                          and t["trained_in_version"] is None for t in hinted)
    trained = [t for t in turns if t["trained_in_version"] is not None]
    assert len(trained) >= 4 and all(t["hint"] is None for t in trained)
