"""Learning a length preference end to end: users who correct long answers get shorter ones.

A server runs ``--method binary --judge heuristic`` on ``tiny-eos``, a variant of the built-in
``tiny`` model with a real end-of-turn prior (see ``tests/_eos_model.py``: the random ``tiny``
almost never samples ``<|im_end|>``, so all its answers run to ``max_tokens``). With
``max_tokens`` 24, its answers are 1 to 24 tokens long (``usage.completion_tokens`` counts the
EOS token), about 13 on average.

Scripted users, through the HTTP API only, ask a question and then judge each answer with their
next message: an answer longer than ``THRESHOLD`` (10 tokens, about the median length of the
untrained model, so both verdicts are common) gets "No, that's too long. Try again, shorter."
(the heuristic judge's ``correction`` rule: -1), the others "Thanks, perfect!" (``approval``: +1).
Each such message is itself answered, and that answer is judged by the following message. The
users send exactly ``BATCH * VERSIONS`` judgements, so the trainer makes exactly ``VERSIONS``
steps; after each ``BATCH`` of them they wait for the new version to be served (online: later
answers come from the improved policy). Meanwhile another user keeps sending unrelated one-turn
requests, so requests are in flight while checkpoints are swapped in; none may fail.

Held-out questions (never part of a judged conversation) are asked with the same 32 seeds before
and after training. For this model the length of an answer depends mostly on the seed, so the two
measurements are paired and the difference is the policy's. The control case, users who correct
*short* answers, must make answers longer: the change follows the feedback, not the training.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from _eos_model import build_eos_model

from slime_ext.judge.heuristic import heuristic_vote

MAX_TOKENS = 24
THRESHOLD = 10  # completion tokens; longer answers are corrected (when shorter ones are preferred)
BATCH = 8  # judged turns per training step
VERSIONS = 6  # training steps
ROUNDS = 3  # feedback messages per conversation
TRAINING = ["--method", "binary", "--judge", "heuristic", "--batch-size", str(BATCH), "--lora-rank", "16",
            "--lr", "2e-4", "--max-staleness", "4"]
HELD_OUT = [f"Held-out question {i}: what do you know about subject {i * 13}?" for i in range(4)]
HELD_OUT_SEEDS = range(1000, 1032)
TRAIN_SEED = 0  # the conversations' seeds; verified with 0-4
THANKS = "Thanks, perfect!"
CORRECTION = {"shorter": "No, that's too long. Try again, shorter.",
              "longer": "No, that's too short. Try again, with more detail."}


@pytest.fixture(scope="module")
def eos_model(tmp_path_factory):
    return build_eos_model(tmp_path_factory.mktemp("eos-model") / "tiny-eos")


class Client:
    """Chat requests over HTTP; every response's status (or failure) is kept."""

    def __init__(self, srv):
        self.srv = srv
        self.statuses: list[int] = []
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def chat(self, messages, seed, session=None):
        """``(content, completion_tokens, request id)`` of one non-streamed completion."""
        body = json.dumps({"model": "m", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 1.0,
                           "seed": seed}).encode()
        headers = {"Content-Type": "application/json", **({"X-Session-Id": session} if session else {})}
        req = urllib.request.Request(self.srv.url + "/chat/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, data = r.status, json.loads(r.read())
        except Exception as e:  # recorded, then raised: the background user only records it
            with self.lock:
                self.statuses.append(e.code if isinstance(e, urllib.error.HTTPError) else -1)
                self.failures.append(repr(e))
            raise
        with self.lock:
            self.statuses.append(status)
        return data["choices"][0]["message"]["content"], data["usage"]["completion_tokens"], data["id"]

    def held_out(self):
        """Mean completion tokens over the held-out questions and seeds, and the request ids."""
        def ask(i):
            return self.chat([{"role": "user", "content": HELD_OUT[i % len(HELD_OUT)]}], HELD_OUT_SEEDS[i])

        with ThreadPoolExecutor(8) as pool:  # the engine decodes them together
            answers = list(pool.map(ask, range(len(HELD_OUT_SEEDS))))
        return sum(n for _, n, _ in answers) / len(answers), [rid for _, _, rid in answers]


def wait_for_version(srv, version, timeout=120):
    deadline = time.time() + timeout
    while srv.health()["policy_version"] < version:
        assert time.time() < deadline, f"policy version {version} not served after {timeout} s"
        time.sleep(0.2)


def converse(client, srv, prefer):
    """The scripted users: exactly BATCH * VERSIONS judged turns, waiting for each new version."""
    judged, conversation, corrected = 0, 0, 0
    while judged < BATCH * VERSIONS:
        conversation += 1
        session = f"user-{TRAIN_SEED}-{conversation}"
        messages = [{"role": "user", "content": f"Question {conversation}: tell me about topic {conversation * 7}."}]
        seed = TRAIN_SEED * 100_000 + conversation * 10
        reply, n, _ = client.chat(messages, seed, session)
        for r in range(1, ROUNDS + 1):
            correct = n > THRESHOLD if prefer == "shorter" else n <= THRESHOLD
            corrected += correct
            feedback = CORRECTION[prefer] if correct else THANKS
            messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": feedback}]
            reply, n, _ = client.chat(messages, seed + r, session)
            judged += 1
            if judged % BATCH == 0:
                wait_for_version(srv, judged // BATCH)
            if judged == BATCH * VERSIONS:
                break
    return corrected


@pytest.mark.parametrize("prefer", ["shorter", "longer"])
def test_length_feedback_trains_the_length_users_ask_for(make_server, eos_model, prefer):
    assert all(heuristic_vote(c, "user") == -1 for c in CORRECTION.values()) and heuristic_vote(THANKS, "user") == 1
    started = time.time()
    srv = make_server(model=str(eos_model), extra=TRAINING)
    client = Client(srv)
    before, before_ids = client.held_out()

    stop, other_ids = threading.Event(), []

    def other_user():  # unrelated one-turn requests, never judged, in flight across the swaps
        while not stop.is_set():
            i = len(other_ids)
            try:
                other_ids.append(client.chat([{"role": "user", "content": f"Unrelated request {i}"}], 50_000 + i)[2])
            except Exception:
                other_ids.append(None)  # the failure is in client.failures

    traffic = threading.Thread(target=other_user, daemon=True)
    traffic.start()
    try:
        corrected = converse(client, srv, prefer)
    finally:
        stop.set()
        traffic.join(60)
    wait_for_version(srv, VERSIONS)
    after, after_ids = client.held_out()
    print(f"\n{prefer}: held-out mean completion tokens {before:.2f} -> {after:.2f}; corrected {corrected} of "
          f"{BATCH * VERSIONS}; {len(client.statuses)} requests; {time.time() - started:.1f} s")

    # the untrained model has a real length distribution (not every answer at max_tokens)
    assert 8 <= before <= 18
    # the feedback moved the length the way the users asked, by a real margin
    if prefer == "shorter":
        assert after <= 0.8 * before
    else:
        assert after >= 1.2 * before
    # no request failed, during the swaps or otherwise
    assert client.failures == [] and set(client.statuses) == {200}

    health = srv.health()
    assert health["policy_version"] == VERSIONS
    assert health["trained_turns"] == BATCH * VERSIONS and health["dropped_turns"] == 0
    turns = {t["request_id"]: t for s in srv.records()["sessions"] for t in s["turns"]}
    trained = [t for t in turns.values() if t["trained_in_version"] is not None]
    assert len(trained) == BATCH * VERSIONS
    assert {t["verdict"] for t in trained} == {-1, 1}
    assert sum(t["verdict"] == -1 for t in trained) == corrected
    assert {t["next_state"] for t in trained} <= {THANKS, CORRECTION[prefer]}
    assert sorted({t["trained_in_version"] for t in trained}) == list(range(1, VERSIONS + 1))
    # the held-out answers came from the base policy, then from the last version
    assert {turns[i]["policy_version"] for i in before_ids} == {0}
    assert {turns[i]["policy_version"] for i in after_ids} == {VERSIONS}
    # the other user's requests were served while versions changed, some while a swap landed
    assert len({turns[i]["policy_version"] for i in other_ids}) >= 3
    assert any(t["policy_version_end"] != t["policy_version"] for t in turns.values())
