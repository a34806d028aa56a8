"""The repetition stop (``chat/repetition.py``, ``--repetition-stop``): a reply that has fallen into a loop is ended,
for every API, streamed or not; the client sees ``length``, the recorded turn says ``repetition``; text that repeats
itself as text does (lists, code, a refrain) is not cut."""

import json
import random
import urllib.request

import pytest

from slime_ext.chat.repetition import MIN_TOKENS, RepetitionStop, loop_period
from slime_ext.store import export_records


def first_stop(ids, **rule):
    stop = RepetitionStop(**rule)
    return next((i + 1 for i, t in enumerate(ids) if stop.feed(t)), None)


# ----------------------------------------------------------------------------- the rule
def test_a_passage_said_twice_in_a_row_is_a_loop_once_128_tokens_repeat():
    passage = list(range(100, 170))  # 70 tokens: twice is 140 >= 128
    ids = list(range(1000, 1040)) + passage + passage
    assert loop_period(ids) == 70 and loop_period(ids[:-1]) == 0
    assert first_stop(ids) == len(ids)
    short = list(range(10, 40))  # 30 tokens: a loop only once 128 tokens of it repeat (the passage 4.3 times)
    ids = [7] * 3 + short * 5
    assert first_stop(ids) == 3 + 128 and loop_period(ids[:3 + 128]) == 30
    assert first_stop([5] * 127) is None and first_stop([5] * 128) == 128  # one token over and over
    longest = list(range(2000, 2256))  # the longest passage looked for: 256 tokens, said twice
    assert first_stop(longest * 2) == 512 and first_stop(list(range(3000, 3257)) * 2) is None


def test_the_incremental_stop_is_the_rule_on_every_prefix():
    rng = random.Random(0)
    for _ in range(300):
        rule = {"max_period": rng.choice([1, 3, 8, 20]), "repeats": rng.choice([2, 3]),
                "min_tokens": rng.choice([1, 5, 12, 30])}
        alphabet = rng.choice([2, 3, 5])
        ids = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 120))]
        if rng.random() < 0.5:
            ids += [rng.randrange(alphabet) for _ in range(rng.randrange(1, 10))] * rng.randrange(1, 6)
        expected = next((n for n in range(1, len(ids) + 1) if loop_period(ids[:n], **rule)), None)
        stop = RepetitionStop(**rule)
        assert next((i + 1 for i, t in enumerate(ids) if stop.feed(t)), None) == expected
        assert stop.period == (loop_period(ids[:expected], **rule) if expected else 0)


def test_bad_rules_are_refused():
    for rule in ({"max_period": 0}, {"repeats": 1}, {"min_tokens": 0}):
        with pytest.raises(ValueError):
            RepetitionStop(**rule)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model("tiny")))  # smollm2's tokenizer


LEGITIMATE = {
    "a numbered list": "".join(f"{i}. Add one cup of water to the pot and stir it well.\n" for i in range(1, 30)),
    "code": "def reset(state):\n" + "".join(f"    state.slot_{i} = None\n    state.count_{i} = 0\n"
                                            for i in range(40)) + "    return state\n",
    "a refrain": "".join(f"The {thing} is wide, the {thing} is deep,\nIt sings the {who} off to sleep.\n\n"
                         "Row on, row on, the night is long,\nRow on, row on, and sing the song.\n\n"
                         for thing, who in (("sea", "sailors"), ("sky", "children"), ("night", "dreamers"))),
    "a table": "| name | age |\n|---|---|\n" + "".join(f"| person {i} | {20 + i} |\n" for i in range(40)),
    "laughter": "Ha" + " ha" * 60 + "! That is a good one.",
}


@pytest.mark.parametrize("name", LEGITIMATE)
def test_text_that_repeats_itself_as_text_does_is_not_cut(tokenizer, name):
    ids = tokenizer.encode(LEGITIMATE[name], add_special_tokens=False)
    assert len(ids) > 128 or name == "laughter"
    assert first_stop(ids) is None


def test_the_loops_smollm2_falls_into_are_cut(tokenizer):
    """Loops of the default model's replies (bench/reply_length.py): a paragraph over and over, a sentence, a line."""
    loops = [
        "Remember, the key to a successful vegetable garden is variety. You can choose a variety of plants that fit "
        "your climate and your own personal preferences.\n\n",
        "That's the way to do it.\n\n",
        "- Branzos con Béis Gracias Buables with arugula is a classic Italian dish with a twist.\n",
    ]
    for text in loops:
        ids = tokenizer.encode("Here is my answer.\n\n" + text * 20, add_special_tokens=False)
        at = first_stop(ids)
        assert at is not None and at < len(ids)
        assert tokenizer.decode(ids[:at]).count(text.strip()[:20]) >= 2  # never before the passage was said twice


# ----------------------------------------------------------------------------- through the server
def post(srv, path, body):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def sse(text):
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line.strip() != "data: [DONE]"]


HI = [{"role": "user", "content": "hi"}]
ASK = 200  # max_tokens: the tiny model, greedy, says one token over and over (its output layer is its embeddings)


def test_a_looping_reply_is_ended_for_every_api_and_recorded_as_repetition(make_server):
    srv = make_server()
    chat = json.loads(post(srv, "/v1/chat/completions", {"messages": HI, "temperature": 0, "max_tokens": ASK}))
    assert chat["choices"][0]["finish_reason"] == "length" and chat["usage"]["completion_tokens"] == MIN_TOKENS
    chunks = sse(post(srv, "/v1/chat/completions", {"messages": HI, "temperature": 0, "max_tokens": ASK,
                                                    "stream": True, "stream_options": {"include_usage": True}}))
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == MIN_TOKENS
    msg = json.loads(post(srv, "/v1/messages", {"model": "tiny", "messages": HI, "temperature": 0, "max_tokens": ASK}))
    assert msg["stop_reason"] == "max_tokens" and msg["usage"]["output_tokens"] == MIN_TOKENS
    events = sse(post(srv, "/v1/messages", {"model": "tiny", "messages": HI, "temperature": 0, "max_tokens": ASK,
                                            "stream": True}))
    assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == ["max_tokens"]
    resp = json.loads(post(srv, "/v1/responses", {"model": "tiny", "input": "hi", "temperature": 0,
                                                  "max_output_tokens": ASK}))
    assert resp["status"] == "incomplete" and resp["usage"]["output_tokens"] == MIN_TOKENS
    done = sse(post(srv, "/v1/responses", {"model": "tiny", "input": "hi", "temperature": 0, "max_output_tokens": ASK,
                                           "stream": True}))[-1]
    assert done["response"]["status"] == "incomplete" and done["response"]["usage"]["output_tokens"] == MIN_TOKENS
    # a request for max_tokens whatever the model says is never cut
    whole = json.loads(post(srv, "/v1/chat/completions", {"messages": HI, "temperature": 0, "max_tokens": ASK,
                                                          "ignore_eos": True}))
    assert whole["usage"]["completion_tokens"] == ASK
    turns = [t for s in export_records(srv.run_dir)["sessions"] for t in s["turns"]]
    assert sorted(t["finish_reason"] for t in turns) == ["length"] + ["repetition"] * 6
    assert all(len(t["response_token_ids"]) == (ASK if t["finish_reason"] == "length" else MIN_TOKENS) for t in turns)


def test_repetition_stop_off_lets_the_loop_run_to_max_tokens(make_server):
    srv = make_server(extra=["--repetition-stop", "off"])
    chat = json.loads(post(srv, "/v1/chat/completions", {"messages": HI, "temperature": 0, "max_tokens": ASK}))
    assert chat["choices"][0]["finish_reason"] == "length" and chat["usage"]["completion_tokens"] == ASK
    (turn,) = [t for s in export_records(srv.run_dir)["sessions"] for t in s["turns"]]
    assert turn["finish_reason"] == "length"


def test_a_turn_the_stop_cut_trains_as_truncated_like_a_length_turn():
    from slime_ext.learning.example import Example
    from slime_ext.types import Sample

    row = {"session_id": "s", "idx": 0, "prompt_token_ids": [1, 2], "response_token_ids": [3, 4],
           "response_logprobs": [-0.1, -0.2], "verdict": -1, "policy_version": 0, "policy_version_end": 0}
    status = {reason: Example.from_row({**row, "finish_reason": reason}).sample().status
              for reason in ("stop", "length", "repetition")}
    assert status == {"stop": Sample.Status.COMPLETED, "length": Sample.Status.TRUNCATED,
                      "repetition": Sample.Status.TRUNCATED}
