"""The judge: vote parsing, majority, the prompt, the heuristic, and the async runner with its backends."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from aiohttp import web

from slime_ext.engines.base import TokenOut
from slime_ext.judge import (
    EngineJudgeBackend,
    HeuristicBackend,
    Judge,
    JudgeError,
    JudgeInput,
    OpenAIJudgeBackend,
    Verdict,
    build_judge_messages,
    heuristic_explain,
    heuristic_vote,
    majority,
    parse_vote,
)

# ---------------------------------------------------------------- parse_vote


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user thanked the assistant. \\boxed{1}", 1),
        ("\\boxed{-1}", -1),
        ("\\boxed{0}", 0),
        ("\\boxed{+1}", 1),
        ("\\boxed{ -1 }", -1),
        ("\\boxed{- 1}", -1),
        ("first \\boxed{1}, on reflection \\boxed{-1}", -1),  # the last one wins
        ("\\boxed{-1} ... final: \\boxed{0}", 0),
        ("\\boxed{{1}}", 1),  # nested braces
        ("\\boxed{\\text{-1}}", -1),
        ("\\boxed{1} then \\boxed{\\text{{0}}}", 0),
        ("\\boxed{2}", None),
        ("\\boxed{yes}", None),
        ("\\boxed{1.5}", None),
        ("\\boxed{11}", None),
        ("\\boxed{1} but finally \\boxed{good}", None),  # the last boxed is not a score
        ("\\boxed{}", None),
        ("the score is 1", None),
        ("", None),
        (None, None),
        ("\\boxed{1} and a truncated \\boxed{-", 1),  # an unclosed box is not an expression
    ],
)
def test_parse_vote(text, expected):
    assert parse_vote(text) == expected


# ---------------------------------------------------------------- majority


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([1, 1, -1], 1),
        ([-1, -1, 1], -1),
        ([0, 0, 1], 0),
        ([1, -1], 0),  # tie
        ([1, 0], 0),  # tie
        ([1, 1, -1, -1, 0], 0),  # tie at the top
        ([1, None, None], 1),  # abstentions ignored
        ([-1, None, 1, -1], -1),
        ([None, 1, -1], 0),  # tie among the valid votes
        ([None, None, None], 0),  # all abstain
        ([], 0),
    ],
)
def test_majority(votes, expected):
    assert majority(votes) == expected


# ---------------------------------------------------------------- the prompt

CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}


def test_prompt_shows_request_response_tool_calls_and_next_state():
    history = [
        {"role": "system", "content": "SYSTEM-SECRET-INSTRUCTIONS"},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": [{"type": "text", "text": "Summarize notes.txt in one line"}]},
    ]
    msgs = build_judge_messages(history, "Let me read it.", [CALL], "No such file: notes.txt", "tool")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "\\boxed{1}" in msgs[0]["content"] and "\\boxed{-1}" in msgs[0]["content"]
    body = msgs[1]["content"]
    request_at = body.index("Summarize notes.txt in one line")
    assert body.index("What is the capital of France?") < request_at  # earlier context, before the request
    assert "Let me read it." in body
    assert 'read_file({"path": "notes.txt"})' in body  # tool call rendered readably
    assert "role: tool" in body and "No such file: notes.txt" in body
    assert body.index("Let me read it.") < body.index("No such file")
    assert "SYSTEM-SECRET-INSTRUCTIONS" not in body  # system messages are not context
    # pure: same inputs, same messages
    assert msgs == build_judge_messages(history, "Let me read it.", [CALL], "No such file: notes.txt", "tool")


def test_prompt_context_is_bounded_but_the_request_is_always_shown():
    history = []
    for i in range(30):
        history.append({"role": "user", "content": f"old question {i} " + "x" * 500})
        history.append({"role": "assistant", "content": f"old answer {i} " + "y" * 500})
    history.append({"role": "user", "content": "THE REAL REQUEST"})
    long_msgs = build_judge_messages(history, "resp", None, "thanks", "user", max_context_chars=300)
    body = long_msgs[1]["content"]
    assert "THE REAL REQUEST" in body and "resp" in body and "thanks" in body
    assert "old answer 29" in body  # the most recent context survives
    assert "old question 0 " not in body and "old answer 28" not in body
    assert "omitted" in body
    # the context section adds at most max_context_chars (plus fixed headers) over a history-free prompt
    bare = build_judge_messages([history[-1]], "resp", None, "thanks", "user")[1]["content"]
    assert len(body) - len(bare) <= 300 + 100
    # and at most max_context_messages messages
    few = build_judge_messages(history, "resp", None, "ok", "user", max_context_chars=10**6, max_context_messages=2)[1]["content"]
    assert "old answer 29" in few and "old question 29" in few and "old answer 28" not in few


def test_prompt_keeps_steps_after_the_request_in_order():
    history = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "a.txt b.txt", "tool_call_id": "c1"},
    ]
    body = build_judge_messages(history, "There are two files.", None, "great, thanks", "user")[1]["content"]
    assert body.index("list the files") < body.index("read_file(") < body.index("a.txt b.txt") < body.index("There are two files.")


# ---------------------------------------------------------------- the heuristic


@pytest.mark.parametrize(
    ("next_state", "role", "expected"),
    [
        ("Traceback (most recent call last):\n  File ...\nValueError: bad", "tool", -1),
        ("Error: file not found", "tool", -1),
        ("bash: foo: command not found", "tool", -1),
        ("Process exited with code 2", "tool", -1),
        ("cat: x: No such file or directory", "tool", -1),
        ("a.txt\nb.txt", "tool", 1),
        ("Build finished with 0 errors. Exit code 0", "tool", 1),
        ('{"temperature": 21}', "tool", 1),
        ("No, that's not what I asked for.", "user", -1),
        ("That's wrong, try again", "user", -1),
        ("Too long. Make it shorter please", "user", -1),
        ("You should use a list instead", "user", -1),
        ("Thanks, but that's wrong", "user", -1),  # negative cues win over thanks
        ("It doesn't work", "user", -1),
        ("Thanks!", "user", 1),
        ("Perfect, got it.", "user", 1),
        ("ok", "user", 1),
        ("Thank you so much", "user", 1),
        ("hmm", "user", 0),
        ("What about Germany?", "user", 0),
        # standing preferences are corrections, never +1, whatever thanks come with them
        ("From now on, start every answer with 'Sure!'", "user", -1),
        ("Make your replies start with 'OK:' please", "user", -1),  # the quoted "OK" is not an approval
        ("Thanks for all your answers!", "user", 1),  # thanks, not "all your answers ..." as a preference
        ("Use metric units in all your answers.", "user", -1),
        ("Use Latin American Spanish for all translations please.", "user", -1),
        ("gracias :)", "user", 1), ("Smokey it is!", "user", 1), ("Python it is then", "user", 1),
        ("Whatever it is", "user", 0), ("spot on", "user", 1),
        ("that's pretty shallow", "user", -1), ("lame", "user", -1),
        ("hmm ok", "user", 0),  # a shrug
        ("Your answers should begin with \"Sure thing!\"", "user", -1),
        ("please always end with a question", "user", -1),
        ("I wanted just the number.", "user", -1),
        ("next time, skip the intro", "user", -1),
        ("Thanks, but I'd prefer something shorter.", "user", -1),
        ("it would be better if you used bullet points", "user", -1),
        ("remember that I like short lists", "user", -1),
        ("Start your answer with Sure!", "user", -1),  # an instruction about the answer, not a new request
        ("Please end with Cheers!", "user", -1),
        ("Please answer in one sentence.", "user", -1),
        ("Perfect, always do it like this", "user", 1),  # a preference that approves the answer
        ("Exactly what I needed!", "user", 1),
        ("I just wanted to say thanks", "user", 1),
        ("Next time I'm in Rome, what should I eat?", "user", 1),  # a new question, not a preference
        ("What's the population of Japan?", "user", 1),  # a question: the user moved on
        ("Book me a table for two at 8.", "user", 1),
        ("let me think about it", "user", 0),
        ("TypeError: unsupported operand type(s)", "tool", -1),
        ("fatal: not a git repository", "tool", -1),
        ("5 passed, 0 failed", "tool", 1),
        ("KeyError: 'events'", "tool", -1),
        ("tests/test_parser.py::test_errors PASSED", "tool", 1),  # a name, not an error
    ],
)
def test_heuristic_vote(next_state, role, expected):
    assert heuristic_vote(next_state, role) == expected


def test_heuristic_uses_the_request_for_rephrasing_and_new_requests():
    request = "Write a haiku about autumn leaves falling"
    assert heuristic_vote("a haiku about autumn leaves falling please", "user", request) == -1
    assert heuristic_vote("Now convert 5 miles to kilometers", "user", request) == 1
    score, reason = heuristic_explain("Too long", "user", request)
    assert score == -1 and reason.startswith("directive")
    # the request again is a rephrasing even with a "please" or a "good" in it
    assert heuristic_vote("'good morning' in Spanish, please", "user", "Translate 'good morning' into Spanish.") == -1
    assert heuristic_explain("17 times 23 = ?", "user", "What is 17 times 23?")[1].startswith("same_request")
    # numbers in words repeat the request's digits, and "percent" its "%"
    assert heuristic_explain("what is fifteen percent of eighty", "user", "What's 15% of 80?")[1].startswith(
        "same_request")
    assert heuristic_vote("and twenty percent of ninety?", "user", "What's 15% of 80?") == 1  # a new question


# ---------------------------------------------------------------- the runner


def _turn(next_state: str = "thanks", role: str = "user") -> JudgeInput:
    return JudgeInput(
        request_messages=[{"role": "user", "content": "Explain recursion briefly"}],
        response_text="Recursion is when a function calls itself.",
        response_tool_calls=None,
        next_state=next_state,
        next_state_role=role,
    )


class ScriptedBackend:
    """Answers per seed: a string is returned, an exception raised, ``"sleep"`` never finishes in time."""

    name = "fake"
    default_votes = 3

    def __init__(self, script: dict[int, object], delay: float = 0.0) -> None:
        self.script = script
        self.delay = delay
        self.active = 0
        self.max_active = 0
        self.calls: list[tuple[int, list[dict]]] = []

    async def vote(self, messages, *, seed, inputs=None):
        self.calls.append((seed, messages))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self.delay)
            answer = self.script[seed]
            if answer == "sleep":
                await asyncio.sleep(3600)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        finally:
            self.active -= 1


async def test_runner_majority_of_votes_and_prompt_passed_to_backend():
    backend = ScriptedBackend({0: "\\boxed{-1}", 1: "reasoning \\boxed{1}", 2: "\\boxed{-1}"})
    verdict = await Judge(backend).judge(_turn("No, shorter"))
    assert isinstance(verdict, Verdict)
    assert verdict.votes == [-1, 1, -1] and verdict.score == -1
    assert verdict.texts[1] == "reasoning \\boxed{1}"
    assert sorted(seed for seed, _ in backend.calls) == [0, 1, 2]  # each vote gets its own seed
    assert "Explain recursion briefly" in backend.calls[0][1][1]["content"]


async def test_timed_out_vote_abstains_and_the_rest_decide():
    backend = ScriptedBackend({0: "\\boxed{1}", 1: "sleep", 2: "\\boxed{1}"})
    verdict = await Judge(backend, timeout_s=0.05).judge(_turn())
    assert verdict.votes == [1, None, 1]
    assert verdict.score == 1
    assert verdict.texts[1].startswith("abstained: timed out")


async def test_failed_vote_abstains_and_never_raises(caplog):
    backend = ScriptedBackend({0: RuntimeError("boom"), 1: "\\boxed{-1}", 2: "no score here"})
    with caplog.at_level(logging.WARNING):
        verdict = await Judge(backend).judge(_turn())
    assert verdict.votes == [None, -1, None]
    assert verdict.score == -1
    assert verdict.texts[0] == "abstained: RuntimeError: boom"
    assert verdict.texts[2] == "no score here"
    assert "Traceback" not in caplog.text


async def test_all_votes_abstain_scores_zero():
    backend = ScriptedBackend({0: "sleep", 1: ValueError("x"), 2: "\\boxed{maybe}"})
    verdict = await Judge(backend, timeout_s=0.05).judge(_turn())
    assert verdict.votes == [None, None, None] and verdict.score == 0


async def test_concurrency_bound_is_shared_across_turns():
    backend = ScriptedBackend({i: "\\boxed{1}" for i in range(5)}, delay=0.01)
    judge = Judge(backend, votes=5, max_concurrency=2)
    verdicts = await asyncio.gather(*(judge.judge(_turn()) for _ in range(4)))
    assert all(v.score == 1 and v.votes == [1] * 5 for v in verdicts)
    assert len(backend.calls) == 20
    assert backend.max_active == 2  # the bound was reached and never exceeded


async def test_heuristic_backend_through_the_runner():
    judge = Judge(HeuristicBackend())
    assert judge.votes == 1
    bad = await judge.judge(_turn("That's wrong, try again"))
    assert bad.score == -1 and bad.votes == [-1] and "correction" in bad.texts[0]
    good = await judge.judge(_turn("Thanks!"))
    assert good.score == 1
    tool = await judge.judge(_turn("Traceback (most recent call last): ...", role="tool"))
    assert tool.score == -1
    # without the turn (which the runner always passes), the heuristic backend refuses to guess
    with pytest.raises(JudgeError):
        await HeuristicBackend().vote([], seed=0)


# ---------------------------------------------------------------- OpenAI-compatible backend


@pytest.fixture
async def judge_server():
    """A local chat-completions endpoint: 200 with a canned answer, or 500 when the model is 'broken'."""
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("Authorization")})
        if body["model"] == "broken":
            return web.Response(status=500, text="internal error")
        answer = "The user moved on. \\boxed{1}" if body["seed"] % 2 == 0 else "A correction. \\boxed{-1}"
        return web.json_response(
            {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_openai_backend_posts_judge_messages_and_parses_answers(judge_server, caplog):
    url, seen = judge_server
    backend = OpenAIJudgeBackend(url, "judge-model", api_key="sk-SECRET", temperature=0.7)
    assert backend.url == url + "/v1/chat/completions"
    assert "sk-SECRET" not in repr(backend)
    try:
        with caplog.at_level(logging.DEBUG):
            verdict = await Judge(backend).judge(_turn("thanks"))
    finally:
        await backend.close()
    assert verdict.votes == [1, -1, 1] and verdict.score == 1  # seeds 0, 1, 2
    assert len(seen) == 3
    body = seen[0]["body"]
    assert body["model"] == "judge-model" and body["temperature"] == 0.7
    assert "Explain recursion briefly" in json.dumps(body["messages"])
    assert seen[0]["auth"] == "Bearer sk-SECRET"
    assert "sk-SECRET" not in caplog.text


async def test_openai_backend_http_500_abstains(judge_server, caplog):
    url, seen = judge_server
    backend = OpenAIJudgeBackend(url + "/v1", "broken", api_key="sk-SECRET")
    try:
        with caplog.at_level(logging.WARNING):
            verdict = await Judge(backend, votes=2).judge(_turn())
    finally:
        await backend.close()
    assert len(seen) == 2
    assert verdict.votes == [None, None] and verdict.score == 0
    assert all("HTTP 500" in t for t in verdict.texts)
    assert "sk-SECRET" not in caplog.text and "Traceback" not in caplog.text


async def test_openai_backend_unreachable_abstains():
    from slime_ext.launch import free_port

    backend = OpenAIJudgeBackend(f"http://127.0.0.1:{free_port()}", "m")
    try:
        verdict = await Judge(backend, votes=1, timeout_s=10).judge(_turn())
    finally:
        await backend.close()
    assert verdict.votes == [None] and verdict.texts[0].startswith("abstained: JudgeError: judge endpoint unreachable")


# ---------------------------------------------------------------- Engine (self) backend


class CharTokenizer:
    """A tokenizer whose ids are code points; id 0 is the end-of-turn token."""

    chat_template = ""  # no native tools: PromptRenderer uses its fallback
    eos_token_id = 0
    unk_token_id = None

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize, return_dict, **kw):
        text = "".join(f"<{m['role']}>{m['content']}" for m in msgs) + ("<assistant>" if add_generation_prompt else "")
        return [ord(c) for c in text]

    def convert_tokens_to_ids(self, tok):
        return None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


class FakeEngine:
    policy_version = 7
    context_length = 100_000

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests = []

    async def generate(self, prompt_ids, sampling):
        self.requests.append((list(prompt_ids), sampling))
        for ch in self.answer:
            yield TokenOut(ord(ch), -0.1, self.policy_version)
        yield TokenOut(0, -0.1, self.policy_version)
        yield TokenOut(ord("X"), -0.1, self.policy_version)  # past the stop token: must be ignored


async def test_engine_backend_renders_with_the_chat_template_and_samples():
    engine = FakeEngine("It was corrected. \\boxed{-1}")
    backend = EngineJudgeBackend(engine, CharTokenizer(), temperature=0.5, max_new_tokens=64)
    verdict = await Judge(backend, votes=2, seed=10).judge(_turn("No, shorter"))
    assert verdict.votes == [-1, -1] and verdict.score == -1
    assert verdict.texts[0] == "It was corrected. \\boxed{-1}"  # stopped at the end-of-turn token
    prompt = "".join(chr(i) for i in engine.requests[0][0])
    assert prompt.startswith("<system>You are a process reward model")
    assert "Explain recursion briefly" in prompt and "No, shorter" in prompt and prompt.endswith("<assistant>")
    samplings = [s for _, s in engine.requests]
    assert sorted(s.seed for s in samplings) == [10, 11]
    assert all(s.temperature == 0.5 and s.max_new_tokens == 64 and 0 in s.stop_token_ids for s in samplings)


def test_thanking_again_after_thanks_is_not_a_rephrasing():
    """A conversation where the user thanks twice: the second thanks repeats the request's words, but
    approval words are not a rephrasing (a real -1 here made Binary RL punish approved answers)."""
    from slime_ext.judge.heuristic import heuristic_vote

    assert heuristic_vote("Thanks, perfect!", "user", "Thanks, perfect!") == 1
    assert heuristic_vote("Great, thank you!", "user", "Thanks, great work!") == 1
    assert heuristic_vote("Please, write a good poem about cats", "user", "Write a good poem about cats") == -1


def test_heuristic_rule_names_the_rule_that_decided():
    from slime_ext.judge.heuristic import heuristic_rule

    assert heuristic_rule("From now on, answer in one short sentence.", "user") == "preference"
    assert heuristic_rule("Thanks, that works!", "user") == "approval"
    assert heuristic_rule("What is the capital of Peru?", "user") == "new_request"


@pytest.mark.parametrize("said, vote", [
    ("Great answer, keep it up!", 1), ("Keep it up!", 1), ("Thanks, keep them coming!", 1),
    ("Keep up the good work.", 1), ("Keep it short next time.", -1), ("Keep your answers short.", -1),
])
def test_keep_it_up_is_praise_not_a_standing_preference(said, vote):
    """"keep it ..." states a standing preference ("keep it short"), but "keep it up" praises: read as a preference it
    was a -1 on an answer the user liked, and stored in the memory as something to do in every answer."""
    from slime_ext.judge.heuristic import heuristic_rule, heuristic_vote

    assert heuristic_vote(said, "user") == vote
    assert (heuristic_rule(said, "user") == "preference") == (vote == -1)


@pytest.mark.parametrize("said, standing", [
    ("Make your replies start with 'OK:' please", True), ("Make every answer shorter.", True),
    ("Your answers should begin with \"Sure thing!\"", True), ("Please keep all future answers short.", True),
    ("Make your answer shorter.", False), ("Your answer should have mentioned Paris.", False),
])
def test_a_standing_preference_is_about_all_answers_not_this_one(said, standing):
    """What the memory keeps for every later answer ("make your replies ...", "every answer ...", "future answers")
    against a correction of the answer at hand ("make your answer shorter"), which must not be kept."""
    from slime_ext.judge.worker import is_standing_preference

    assert is_standing_preference(said, "user") == standing
