"""``openclaw-rl chat`` driven through a pseudo-terminal against a real ``--model tiny`` server, as a person uses it:
four messages with ``/bad shorter please`` after the first reply and ``/good`` after the second, the last one a
correction the judge reads. The recorded
verdicts and hint must be the ones typed, in one session, and what the terminal showed must be what was served."""

from __future__ import annotations

import re
import sys
import time

from slime_ext.launch import Terminal


def test_a_person_chats_and_rates_replies_in_the_terminal(make_server):
    srv = make_server(extra=["--method", "binary", "--batch-size", "64", "--judge", "heuristic"])
    term = Terminal([sys.executable, "-m", "slime_ext.cli", "chat", "--url", srv.url, "--max-tokens", "8"])
    term.expect("serving version 0; it learns from your feedback")
    term.expect("you> ")
    shown = []
    for message, rating, said in (("Hello there!", "/bad shorter please", "recorded -1 with the hint 'shorter please'"),
                                  ("Tell me about cats.", "/good", "recorded +1"),
                                  ("And dogs?", None, None),
                                  ("No, that's wrong. Try again.", None, None)):
        term.type(message)
        shown.append(term.expect(re.compile(r"assistant> (.*?)\r?\n  \[version 0[^\]]*\]", re.S)).group(1))
        term.expect("you> ")
        if rating:
            term.type(rating)
            term.expect(said + " for the reply served by version 0")
            term.expect("/64 turns wait for the next training step")
            term.expect("you> ")
    # the last message was not a rating, but the judge read it as one, and the chat says so
    assert "(your message was read as -1 on the reply before" in term.transcript
    assert term.transcript.count("your message was read as") == 1  # the rated replies are not read again
    term.type("/memory")
    term.expect("'shorter please'")
    term.type("/quit")
    assert term.exit_code() == 0

    sessions = [s for s in srv.records()["sessions"] if s["turns"]]
    assert len(sessions) == 1  # one conversation: each message carried the ones before it
    turns = sessions[0]["turns"]
    assert [t["verdict"] for t in turns] == [-1, 1, -1, None]
    assert [t["hint"] for t in turns[:2]] == ["shorter please", None]
    assert [t["feedback"] and t["feedback"]["verdict"] for t in turns] == [-1, 1, None, None]
    assert [t["next_state"] for t in turns] == ["Tell me about cats.", "And dogs?", "No, that's wrong. Try again.", None]
    # what streamed to the terminal is what was served (the terminal turns \n into \r\n)
    assert [s.replace("\r\n", "\n") for s in shown] == [t["response_text"] for t in turns]


def test_chat_says_in_one_line_when_no_server_is_there(tmp_path):
    term = Terminal([sys.executable, "-m", "slime_ext.cli", "chat", "--url", "http://127.0.0.1:9/v1"])
    assert term.exit_code() == 1
    assert "cannot reach the server at http://127.0.0.1:9/v1" in term.seen and "Traceback" not in term.seen


def test_the_chat_says_when_a_version_trained_on_the_feedback_is_served(make_server):
    srv = make_server(extra=["--method", "binary", "--batch-size", "1", "--lora-rank", "4", "--no-canary",
                             "--judge", "heuristic"])
    term = Terminal([sys.executable, "-m", "slime_ext.cli", "chat", "--url", srv.url, "--max-tokens", "6"])
    term.expect("you> ")
    term.type("Hello there!")
    term.expect("you> ")
    term.type("/bad answer in one short sentence")
    term.expect("recorded -1 with the hint 'answer in one short sentence'")
    term.expect("you> ")
    deadline = time.time() + 120
    while "now serving version 1" not in term.transcript:  # a reply after the step says what the new version learned
        assert time.time() < deadline, term.transcript
        term.type("/new")
        term.type("What is the capital of France?")
        term.expect("you> ")
        term.expect("you> ")
    assert "* now serving version 1: it learned from 1 turn (1 corrected)" in term.transcript
    term.type("/quit")
    assert term.exit_code() == 0
