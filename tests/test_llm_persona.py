"""The LLM-driven simulator: rating parsing, prompts, and the persona over a real HTTP endpoint
(``_persona_server``: plays the persona by the scripted rules, so results are checked exactly)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _persona_server import start_sim_server

from slime_ext.simulate import ChatClient, LLMPersona, get_persona, grading_tasks, math_tasks, parse_rating
from slime_ext.simulate.llm_persona import THANKS_TOKEN, rating_messages, reply_messages


@pytest.mark.parametrize("text,expected", [
    ("0.7", 0.7), ("Score: 0.25", 0.25), ("1", 1.0), ("0", 0.0), (".5", 0.5), ("7/10", 0.7), ("3 / 4", 0.75),
    ("80%", 0.8), ("8", 0.8), ("rating: 10", 1.0),
])
def test_parse_rating_reads_common_forms(text, expected):
    assert parse_rating(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "great answer", "150", "11/10", "-", "120%", "5/0"])
def test_parse_rating_refuses_what_is_not_a_rating_in_0_1(text):
    assert parse_rating(text) is None


def test_prompts_carry_the_hidden_preference_the_answer_and_the_response_but_the_first_message_does_not():
    sim = LLMPersona("teacher", ChatClient("http://127.0.0.1:9"))
    task = grading_tasks("heldout", 1, 0)[0]
    first = sim.first_message(task)
    assert first == get_persona("teacher").first_message(task)
    assert "encouraging" not in first and "three sentences" not in first
    for build in (reply_messages, rating_messages):
        msgs = build(sim.spec, task, first, "RESPONSE-TEXT")
        text = "\n".join(m["content"] for m in msgs)
        assert sim.spec.preference in text and str(task.answer) in text
        assert "RESPONSE-TEXT" in text and first in text
    assert THANKS_TOKEN in reply_messages(sim.spec, task, first, "x")[1]["content"]


def test_unknown_persona_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="unknown persona 'pirate'.*student"):
        LLMPersona("pirate", ChatClient("http://127.0.0.1:9"))


@pytest.fixture
def sim_server():
    srv = start_sim_server()
    yield srv
    srv.shutdown()
    srv.server_close()


def _persona(srv, name, tasks, **kw):
    srv.persona = name
    sim = LLMPersona(name, ChatClient(f"http://127.0.0.1:{srv.server_port}/v1", model="sim-model", api_key="sk-secret",
                                      retries=kw.pop("retries", 3)), **kw)
    srv.tasks = {sim.first_message(t): t for t in tasks}
    return sim


def test_llm_persona_replies_and_scores_through_the_endpoint(sim_server):
    task = math_tasks("train", 1, 3)[0]
    sim = _persona(sim_server, "student", [task])
    good = f"it is {task.answer}"
    bad = f"Certainly! The answer is **{task.answer + 1}**."
    assert sim.score(task, good) == pytest.approx(1.0)
    assert sim.score(task, bad) == pytest.approx(get_persona("student").score(task, bad))
    assert sim.reply(task, good) == get_persona("student").thanks  # THANKS maps to the persona's natural thanks
    assert sim.reply(task, bad) == get_persona("student").reply(task, bad)  # a correction is sent as written
    headers, body = sim_server.requests[0]
    assert headers["Authorization"] == "Bearer sk-secret" and body["model"] == "sim-model"
    assert body["temperature"] == 0.0
    assert "sk-secret" not in repr(sim.client)


def test_llm_persona_retries_failures_and_unparseable_ratings_then_gives_none(sim_server):
    task = grading_tasks("train", 1, 0)[0]
    sim = _persona(sim_server, "teacher", [task], attempts=2, retries=1)
    sim_server.fail = 1  # one 503, then served
    assert sim.score(task, f"Well done {task.student}, the answer is {task.answer}.") == pytest.approx(1.0)
    assert sim.client.failed == 1
    sim_server.garbage = 1  # first rating unparseable, the second attempt parses
    assert sim.score(task, "Bad.") is not None
    sim_server.garbage = 5  # never parseable: None, not an exception
    assert sim.score(task, "Bad.") is None
    sim_server.fail = 10  # the endpoint is down: None for replies too, failures counted
    before = sim.client.failed
    assert sim.reply(task, "Bad.") is None
    assert sim.client.failed == before + 2  # one try plus one retry


def test_client_refuses_a_4xx_with_a_clear_error():
    class Refuse(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "bad key"}')

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RuntimeError, match="HTTP 401"):
            ChatClient(f"http://127.0.0.1:{srv.server_port}/v1").chat([{"role": "user", "content": "hi"}])
    finally:
        srv.shutdown()
        srv.server_close()
