"""The Slime rollout hook driven on CPU: users talk to the API server it starts (backed by the
SGLang engine client and an SGLang-protocol test server), and each call returns a batch of
consistent samples (with teacher log-probs for hinted turns under OPD/Combine)."""

from __future__ import annotations

import json
import threading
import urllib.request
from types import SimpleNamespace

import pytest

from slime_ext.config import ServeConfig
from slime_ext.hooks.reward import post_process_rewards
from slime_ext.hooks.rollout import LiveSource, live_rollout
from slime_ext.types import Sample

FEEDBACK = ["Thanks, perfect!", "No. Answer with a single word.", "No, that's wrong.", "Great, thank you!"]


def chat(port, messages, seed):
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": 6, "seed": seed}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def converse(port, n, offset=0):
    for i in range(offset, offset + n):
        u = {"role": "user", "content": f"Question {i}?"}
        reply = chat(port, [u], seed=i)
        chat(port, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": FEEDBACK[i % 4]}], seed=50 + i)


@pytest.fixture
def sglang_source(tmp_path):
    """A LiveSource as Slime runs it: the SGLang engine client, here talking to the SGLang-protocol
    test server (tests/_sglang_server.py, backed by the embedded engine on tiny) in its own thread."""
    from _sglang_server import serving_in_thread
    from transformers import AutoTokenizer

    from slime_ext.engines.sglang import SGLangEngine
    from slime_ext.models import resolve_model

    model_dir = resolve_model("tiny")
    with serving_in_thread(model_dir) as fake:
        sources = []

        def make(method, **settings):
            cfg = ServeConfig(model="tiny", port=0, run_dir=str(tmp_path / method), method=method, judge="heuristic",
                              **settings)
            src = LiveSource(cfg, lambda: SGLangEngine.connect(fake.url), AutoTokenizer.from_pretrained(str(model_dir)),
                             poll_s=0.1).start()
            sources.append(src)
            return src

        yield make
        for s in sources:
            s.stop()


@pytest.mark.parametrize("method", ["combine", "binary"])
def test_rollout_returns_consistent_samples_with_the_pipelines_advantages(sglang_source, method, monkeypatch):
    src = sglang_source(method, teacher_check=False)
    args = SimpleNamespace(openclaw_rl={"method": method}, rollout_batch_size=3, n_samples_per_prompt=1)
    monkeypatch.setattr("slime_ext.hooks.rollout.live_source", lambda a: src)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", live_rollout(args, 0, None)))
    t.start()  # blocks until 3 judged turns with a signal exist
    converse(src.port, 4)
    t.join(120)
    out = result["out"]
    groups = out.samples
    assert len(groups) == 3 and all(len(g) == 1 for g in groups)
    samples = [g[0] for g in groups]
    for s in samples:
        assert isinstance(s, Sample) and s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
        assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length > 0
        assert len(s.tokens) > s.response_length and all(isinstance(x, int) for x in s.tokens)
        assert s.reward in (1.0, -1.0) and isinstance(s.response, str)
    raw, rewards = post_process_rewards(args, samples)
    assert raw == rewards == [s.reward for s in samples]
    # each token's advantage rides in teacher_log_probs (hooks/rollout.py): the verdict on every token, and on
    # the hinted turn (combine) its teacher term besides, clip(teacher - rollout, 5), scored through SGLang
    hinted = [ex for ex in src.taken if ex.teaching is not None]
    assert len(hinted) == (1 if method == "combine" else 0)
    for s, ex in zip(samples, src.taken):
        advantage = [t - r for t, r in zip(s.teacher_log_probs, s.rollout_log_probs)]
        teacher = [max(-5.0, min(5.0, t - r)) for t, r in zip(ex.teaching.logprobs, ex.rollout_logprobs)] \
            if ex.teaching else [0.0] * s.response_length
        assert advantage == pytest.approx([s.reward + g for g in teacher], abs=1e-5)
    if hinted:
        assert hinted[0].teaching.logprobs != hinted[0].rollout_logprobs  # the hint changed the teacher's view
    # handed-out turns are marked, so the next call waits for new ones instead of repeating them
    import time

    from slime_ext.store import export_records

    deadline = time.time() + 60
    while src.store.counts()["judged_turns"] < 4:  # the fourth feedback is judged after the batch was taken
        assert time.time() < deadline
        time.sleep(0.1)
    judged = [t for s in export_records(src.store.run_dir)["sessions"] for t in s["turns"] if t["verdict"] is not None]
    assert sorted(t["trained_in_version"] is not None for t in judged) == [False, True, True, True]
    assert all(t["trained_in_version"] in (None, 1) for t in judged)  # rollout 0 produces version 1
    with pytest.raises(TimeoutError):
        src.take(3, 1, timeout_s=1.0)
    assert out.metrics["openclaw/judged_turns"] >= 3 and out.metrics["openclaw/reward_mean"] == sum(raw) / 3


def test_rollout_without_our_settings_uses_the_data_source():
    class Source:
        def get_samples(self, n):
            return [[Sample(index=i, tokens=[1, 2], response_length=1, reward=0.0, status=Sample.Status.COMPLETED)]
                    for i in range(n)]

    out = live_rollout(SimpleNamespace(rollout_batch_size=2), 0, Source())
    assert [g[0].index for g in out.samples] == [0, 1]
    ev = live_rollout(None, 0, Source(), evaluation=True)
    assert list(ev.data) == ["openclaw_live"] and ev.data["openclaw_live"]["rewards"] == [0.0]


def test_evaluation_reports_recent_judged_turns_without_taking_them(sglang_source):
    src = sglang_source("binary")
    converse(src.port, 2)
    import time

    deadline = time.time() + 60
    while src.store.counts()["judged_turns"] < 2:
        assert time.time() < deadline
        time.sleep(0.1)
    args = SimpleNamespace(openclaw_rl={"method": "binary"}, n_eval_samples=8)
    from slime_ext.hooks import rollout

    original = rollout.live_source
    rollout.live_source = lambda a: src
    try:
        ev = live_rollout(args, 0, None, evaluation=True)
    finally:
        rollout.live_source = original
    data = ev.data["openclaw_live"]
    assert len(data["samples"]) == 2 and sorted(data["rewards"]) == [-1.0, 1.0]
    # tiny never samples its end token, so both 6-token answers hit max_tokens: truncated
    assert data["truncated"] == [True, True]
    assert all(s.status == Sample.Status.TRUNCATED for s in data["samples"])
    assert src.store.counts()["trained_turns"] == 0  # evaluation hands nothing out


def test_a_backlog_older_than_the_cap_is_handed_to_slime_not_dropped(tmp_path):
    """Slime's rollout takes the embedded trainer's rule: 12 judged turns sampled by version 0 and
    handed out at version 10 (max_staleness 4) are samples, not drops; their age is in the metrics."""
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model
    from slime_ext.types import Turn

    cfg = ServeConfig(model="tiny", port=0, run_dir=str(tmp_path / "run"), method="binary", judge="heuristic",
                      max_staleness=4)
    src = LiveSource(cfg, SimpleNamespace(policy_version=10), AutoTokenizer.from_pretrained(str(resolve_model("tiny"))))
    for i in range(12):
        sid = f"s{i}"
        src.store.create_session(sid, None, "inferred")
        src.store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r{i}",
                                   prompt_token_ids=[5, 6 + i], response_token_ids=[7, 8], response_logprobs=[-1.0, -2.0],
                                   response_text="x", policy_version=0, policy_version_end=0, finish_reason="stop",
                                   messages=[], reply_key=sid))
        src.store.set_next_state(sid, 0, "thanks", "user")
        src.store.record_verdict(sid, 0, [1, -1, 0][i % 3], [(1, "t")])
    try:
        first = src.take(4, 10, timeout_s=1.0)
        m = src.metrics(first)
        second = src.take(4, 11, timeout_s=1.0)
        assert [len(t) for t in (first, second)] == [4, 4]
        counts = src.store.counts()
        assert counts["dropped_by_reason"] == {"verdict 0 (ambiguous)": 4} and counts["trained_turns"] == 8
        assert m["openclaw/staleness_max"] == 10 and m["openclaw/over_cap_turns"] == 4
    finally:
        src.store.close()


def test_the_rollout_server_drops_a_half_sent_request_as_serve_does(sglang_source):
    """Slime's API server is behind the same connection guard as ``serve``: a request head that stops
    arriving is dropped after the header timeout, and the server keeps answering."""
    import socket
    import time

    src = sglang_source("binary", header_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", src.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and then nothing
        started = time.monotonic()
        assert sock.recv(1024) == b""  # the server closed it (a timeout here raises instead)
        assert time.monotonic() - started < 20
    assert chat(src.port, [{"role": "user", "content": "still there?"}], seed=1) is not None


def test_the_teacher_check_runs_on_slime_through_sglang(sglang_source):
    """The same teacher check as the embedded trainer's (learning/teachability.py), its teacher the synced
    policy served by SGLang: each hinted turn's check is stored and shown, and decides what trains."""
    src = sglang_source("opd", unfollowed_hints="train", teacher_checks_per_hint=0)
    for i in range(2):
        u = {"role": "user", "content": f"Question {i}?"}
        reply = chat(src.port, [u], seed=i)
        chat(src.port, [u, {"role": "assistant", "content": reply},
                        {"role": "user", "content": "From now on, answer in one short sentence."}], seed=50 + i)
    groups = src.take(2, 0, timeout_s=120)
    assert len(groups) == 2 and all(ex.teaching is not None for ex in src.taken)
    summary = src.store.teacher_check_summary()
    assert summary["hints_teacher_follows"] + summary["hints_teacher_cannot_follow"] == 2
    checked = [t["teacher_check"] for s in __import__("slime_ext.store", fromlist=["x"]).export_records(
        src.store.run_dir)["sessions"] for t in s["turns"] if t["hint"]]
    assert len(checked) == 2 and all(c["tokens"] > 0 and c["same_answer"] is not None for c in checked)
