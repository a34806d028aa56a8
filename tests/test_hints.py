"""The hint judge: hint parsing and selection, the heuristic's hints, the prompt, and the runner."""

from __future__ import annotations

import asyncio
import logging

import pytest
from test_judge import CALL, CharTokenizer, FakeEngine, ScriptedBackend

from slime_ext.judge import (
    HINT_END,
    HINT_START,
    MAX_HINT_CHARS,
    EngineJudgeBackend,
    HeuristicBackend,
    HeuristicHintBackend,
    HintJudge,
    HintVerdict,
    Judge,
    JudgeError,
    JudgeInput,
    build_hint_messages,
    build_judge_messages,
    heuristic_hint,
    heuristic_vote,
    parse_hint,
    select_hint,
)


def hinted(hint: str, box: str = "1") -> str:
    return f"The user wants brevity.\n{HINT_START}{hint}{HINT_END}\n\\boxed{{{box}}}"


# ---------------------------------------------------------------- parse_hint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (hinted("Answer with a single word."), "Answer with a single word."),
        (hinted("  \n Use metric units. \n"), "Use metric units."),  # whitespace stripped
        ("\\boxed{1}\n[HINT_START]Use metric units.[HINT_END]", "Use metric units."),  # hint after the box
        ("[hint_start]Use metric units.[Hint_End] \\boxed{+1}", "Use metric units."),  # markers in any case
        # the last marker pair wins
        ("[HINT_START]Be brief.[HINT_END] better: [HINT_START]Answer in French.[HINT_END] \\boxed{1}", "Answer in French."),
        # a stray start marker inside: the last start before the last end
        ("[HINT_START]draft [HINT_START]Answer in French.[HINT_END] \\boxed{1}", "Answer in French."),
        # the last boxed value decides
        (hinted("Use metric units.", "-1"), None),  # a hint with \boxed{-1}: rejected
        ("\\boxed{1} no wait [HINT_START]Use metric units.[HINT_END] \\boxed{-1}", None),
        ("\\boxed{-1} on reflection [HINT_START]Use metric units.[HINT_END] \\boxed{1}", "Use metric units."),
        (hinted("Use metric units.", "0"), None),
        (hinted("Use metric units.", "yes"), None),
        ("[HINT_START]Use metric units.[HINT_END]", None),  # no box at all
        # missing or broken markers
        ("Use metric units. \\boxed{1}", None),
        ("[HINT_START]Use metric units. \\boxed{1}", None),  # no end marker
        ("Use metric units.[HINT_END] \\boxed{1}", None),  # no start marker
        ("[HINT_END]Use metric units.[HINT_START] \\boxed{1}", None),  # reversed
        (hinted(""), None),
        (hinted("   "), None),
        # truncated answers
        ("[HINT_START]Use metric units.[HINT_END] \\boxed{", None),  # unclosed box
        ("reasoning... \\boxed{1} [HINT_START]Use metric", None),
        # too short, no content, placeholders
        (hinted("Ok."), None),
        (hinted("....."), None),
        (hinted("None."), None),
        (hinted("N/A"), None),
        (hinted("no hint"), None),
        (hinted("Shorter."), "Shorter."),
        # too long: rejected, not cut
        (hinted("x" * MAX_HINT_CHARS), "x" * MAX_HINT_CHARS),
        (hinted("x" * (MAX_HINT_CHARS + 1)), None),
        ("", None),
        (None, None),
    ],
)
def test_parse_hint(text, expected):
    assert parse_hint(text) == expected


# ---------------------------------------------------------------- select_hint

A = "Answer with a single word."
A2 = "Answer with one single word only."
B = "Use metric units."


@pytest.mark.parametrize(
    ("hints", "votes", "expected"),
    [
        ([A], 1, A),  # m = 1 (the heuristic): its hint
        ([None], 1, None),
        ([], 1, None),
        ([A, None, None], 3, None),  # one positive vote in three is not enough (the original took it)
        ([A, A2, None], 3, A),  # two of three: accepted
        ([None, A, A], 3, A),
        ([A, A], 2, A),
        ([A, None], 2, None),  # 1 of 2 is no strict majority
        ([A], 3, None),  # votes missing from the list count against
        ([A, A2], 3, A),
        ([A, A2, None, None], 4, None),  # 2 of 4 is no strict majority
        ([A, A2, B, None], 4, A),
        (["  ", A, None], 3, None),  # a blank hint is no hint
    ],
)
def test_select_hint_majority(hints, votes, expected):
    assert select_hint(hints, votes) == expected


def test_select_hint_chooses_the_consensus_not_the_longest():
    embellished = "Answer with a single word, and also add a short history of the country and its capital."
    hints = [embellished, "Answer with a single word.", "Reply with a single word only."]
    assert select_hint(hints, 3) == "Answer with a single word."  # it shares the most with the others
    # the outlier loses even when it is the longest and comes first
    assert select_hint(["Use metric units and cite a source for every figure in the answer.", B, "Use metric units!"], 3) == B


def test_select_hint_ties_go_to_the_shortest_then_the_earliest():
    # two accepted hints agree equally with each other: the shorter one
    assert select_hint(["Use metric units in the answer.", B, None], 3) == B
    # no overlap at all: the shortest
    assert select_hint(["Answer in French.", "Use metric units always.", "Be brief."], 3) == "Be brief."
    # equal agreement and length: the earliest vote
    assert select_hint(["Use units X.", "Use units Y.", None], 3) == "Use units X."


def test_select_hint_is_pure_and_strips():
    hints = ["  Use metric units.\n", "Use metric units.", None]
    assert select_hint(hints, 3) == "Use metric units."
    assert hints == ["  Use metric units.\n", "Use metric units.", None]


def test_select_hint_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        select_hint([], 0)
    with pytest.raises(ValueError, match="3 hints for 2 votes"):
        select_hint([A, A, A], 2)


# ---------------------------------------------------------------- heuristic_hint


@pytest.mark.parametrize(
    ("next_state", "expected"),
    [
        # corrections with something to do
        ("No, that's not what I asked. You should answer with a single word.", "Answer with a single word."),
        ("You should use a list instead", "Use a list instead."),
        ("I think you should use a table", "Use a table."),
        ("You shouldn't use emojis", "Do not use emojis."),
        ("You should have used a table", "You should have used a table."),  # kept as written
        ("I want you to answer in French", "Answer in French."),
        ("Please answer with a single word.", "Answer with a single word."),
        ("No, please write it in French", "Write it in French."),  # weak cue, but a correction
        ("Please be more concise", "Be more concise."),
        ("Don't use markdown", "Don't use markdown."),
        ("Do not apologize.", "Do not apologize."),
        ("Don't use anything but Python", "Don't use anything but Python."),
        ("Thanks, but next time use bullet points", "Use bullet points."),
        ("Next time, answer in French", "Answer in French."),
        ("In the future, always cite a source.", "Always cite a source."),
        ("No, use a table instead", "Use a table instead."),
        ("Instead, use a table.", "Use a table."),
        ("Instead of a list, use a table", "Instead of a list, use a table."),
        ("Use Celsius, not Fahrenheit", "Use Celsius, not Fahrenheit."),
        ("Use a table next time, thanks", "Use a table."),  # the framing is dropped too
        ("Just give me the number", "Just give me the number."),
        ("Only the names, please", "Only the names."),
        ("Always use metric units.", "Always use metric units."),
        ("Never round the result!", "Never round the result."),
        ("Make sure to cite sources.", "Make sure to cite sources."),
        ("Stop using emojis!", "Stop using emojis."),
        ("Can you make it shorter?", "Make it shorter."),
        ("shorter", "Shorter."),
        ("Too long. Make it shorter please", "Too long. Make it shorter."),
        ("no. wrong. you need to include the units. also never round the result",
         "Include the units. Never round the result."),
        ("Don\u2019t repeat the question.", "Don't repeat the question."),  # curly apostrophe
        # standing preferences: the hint is the preference itself, without the user's framing
        ("From now on, start every answer with 'Sure!'", "Start every answer with 'Sure!'."),
        # the other verbs of an opening or an ending
        ("Prefix every answer with 'A:'", "Prefix every answer with 'A:'."),
        ("Please preface your replies with \"Note:\"", "Preface your replies with \"Note:\"."),
        ("Wrap up every answer with 'Hope this helps!'", "Wrap up every answer with 'Hope this helps!'."),
        # a standing preference said of the answers themselves, or by "make ..."
        ("Every answer should start with 'Well,'", "Every answer should start with 'Well,'."),
        ("Your replies must be in French.", "Your replies must be in French."),
        ("Make your replies start with 'OK:' please", "Make your replies start with 'OK:'."),  # not an "OK"
        ("Please keep all future answers short.", "Keep all future answers short."),
        ("Be succinct going forward.", "Be succinct."),
        # the framing taken off whole: "for future questions", "from here on out"
        ("For future questions, skip the follow-up offers at the end.", "Skip the follow-up offers at the end."),
        ("From here on out, round everything to whole numbers.", "Round everything to whole numbers."),
        ("I wanted just the number.", "Give just the number."),
        ("can you keep answers to one sentence going forward", "Keep answers to one sentence."),
        ("I'd prefer if you gave temperatures in Fahrenheit.", "Give temperatures in Fahrenheit."),
        ("it would be better if you didn't use emojis", "Don't use emojis."),
        ("remember that I like short lists", "Prefer short lists."),
        ("I'd rather have it as a table.", "Prefer it as a table."),
        ("Call me Alex from now on.", "Call me Alex."),
        ("Thanks! Though please always add the pronunciation.", "Always add the pronunciation."),
        ("ok but without the emojis", "Without the emojis."),
        ("No, it ended in 1945.", "It ended in 1945."),  # a correction's concrete value
        ("Wrong Anna, I meant Anna Schmidt from work.", "The user meant Anna Schmidt from work."),
        ("Start your answer with Sure!", "Start your answer with Sure!"),  # the word as the user wrote it
        ("Nice. But please start with Sure! from now on.", "Start with Sure!"),
        ("Stop using emojis next time!", "Stop using emojis."),
        ("Use a table.\nUse a table.", "Use a table."),  # duplicates dropped
        # nothing actionable
        ("No, that's wrong.", None),
        ("That's not what I asked.", None),
        ("That's wrong, the capital is Canberra", None),  # a fact, not an imperative: a model judge's job
        ("Thanks!", None),
        ("Perfect, got it.", None),
        ("ok", None),
        ("thanks, please continue", None),  # a weak cue without a correction
        ("Can you tell me more?", None),
        ("Please", None),
        ("you should", None),  # a cue with nothing to do
        ("hmm", None),
        ("What about Germany?", None),
        ("Why did you use a list instead of a table?", None),  # a question, not an instruction
        ("Never mind, what's the capital of Peru?", None),
        ("Don't worry about it, thanks", None),
        ("I just wanted to say thanks", None),
        ("I don't like it", None),
        ("Write a poem about cats", None),  # a new request
        ("Next time I'm in Rome, what should I eat?", None),
        ("I'm fine, thanks", None),  # a fact about the user, but no correction
        ("", None),
    ],
)
def test_heuristic_hint(next_state, expected):
    assert heuristic_hint(next_state, "user") == expected


def test_heuristic_hint_reads_only_user_messages():
    assert heuristic_hint("Error: use --force to overwrite", "tool") is None
    assert heuristic_hint("Traceback ... never call this twice", "tool") is None
    assert heuristic_hint("Use a table.", "system") is None


def test_heuristic_hint_keeps_whole_sentences_within_max_chars():
    message = "Use a table. Never round the result. Always cite a source."
    assert heuristic_hint(message, "user") == message
    assert heuristic_hint(message, "user", max_chars=40) == "Use a table. Never round the result."
    assert heuristic_hint(message, "user", max_chars=5) is None


def test_heuristic_hints_come_with_a_correction_or_a_strong_cue():
    # a hint is never extracted from a message the heuristic reads as approval, unless it holds an
    # explicit instruction (the instruction is hindsight whatever the score)
    assert heuristic_vote("thanks, please continue", "user") == 1 and heuristic_hint("thanks, please continue", "user") is None
    assert heuristic_hint("Perfect, always do it like this", "user") == "Always do it like this."


# ---------------------------------------------------------------- the prompt


def test_hint_prompt_shows_the_turn_and_explains_the_markers():
    history = [
        {"role": "system", "content": "SYSTEM-SECRET-INSTRUCTIONS"},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Summarize notes.txt in one line"},
    ]
    msgs = build_hint_messages(history, "Let me read it.", [CALL], "Use the file in docs/, not the root.", "user")
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, body = msgs[0]["content"], msgs[1]["content"]
    for text in (system, body):  # the answer format is explained, and repeated after the turn
        assert HINT_START in text and HINT_END in text and "\\boxed{1}" in text and "\\boxed{-1}" in text
    assert "hindsight" in system and "\\boxed{0}" not in system
    assert "What is the capital of France?" in body
    assert "Summarize notes.txt in one line" in body and "Let me read it." in body
    assert 'read_file({"path": "notes.txt"})' in body
    assert "role: user" in body and "Use the file in docs/, not the root." in body
    assert body.index("Summarize notes.txt") < body.index("Let me read it.") < body.index("Use the file in docs/")
    assert "SYSTEM-SECRET-INSTRUCTIONS" not in body
    assert msgs == build_hint_messages(history, "Let me read it.", [CALL], "Use the file in docs/, not the root.", "user")


def test_hint_prompt_shows_the_same_fields_as_the_reward_prompt():
    history = [{"role": "user", "content": f"question {i} " + "x" * 300} for i in range(10)]
    args = (history, "resp " + "y" * 5000, [CALL], "Too long. " + "z" * 5000, "user", 500)
    judge_body = build_judge_messages(*args, max_field_chars=1000)[1]["content"]
    hint_body = build_hint_messages(*args, max_field_chars=1000)[1]["content"]
    turn = judge_body.rsplit("\n\n", 1)[0]  # everything but the question
    assert hint_body.startswith(turn + "\n\n") and hint_body != judge_body
    assert len(turn) < 500 + 3 * 1000 + 400  # the same bounds apply


# ---------------------------------------------------------------- the runner


def _turn(next_state: str = "No, just one word", role: str = "user") -> JudgeInput:
    return JudgeInput(
        request_messages=[{"role": "user", "content": "What is the capital of France?"}],
        response_text="The capital of France is Paris, a city of about two million people.",
        response_tool_calls=None,
        next_state=next_state,
        next_state_role=role,
    )


async def test_hint_judge_votes_parses_and_selects():
    backend = ScriptedBackend({
        0: hinted("Answer with a single word, and add some history of Paris for context."),
        1: hinted("Answer with a single word."),
        2: hinted("Reply with a single word."),
    })
    verdict = await HintJudge(backend).hint(_turn())
    assert isinstance(verdict, HintVerdict)
    assert verdict.hint == "Answer with a single word."
    assert verdict.votes == [1, 1, 1]
    assert verdict.hints[2] == "Reply with a single word." and verdict.texts[1] == hinted("Answer with a single word.")
    assert sorted(seed for seed, _ in backend.calls) == [0, 1, 2]
    system, body = backend.calls[0][1][0]["content"], backend.calls[0][1][1]["content"]
    assert HINT_START in system and "What is the capital of France?" in body and "No, just one word" in body


async def test_a_single_positive_vote_is_not_enough():
    backend = ScriptedBackend({0: hinted("Answer with a single word."), 1: "\\boxed{-1}", 2: "thanks is approval \\boxed{-1}"})
    verdict = await HintJudge(backend).hint(_turn("thanks"))
    assert verdict.hint is None
    assert verdict.votes == [1, -1, -1] and verdict.hints == ["Answer with a single word.", None, None]


async def test_timed_out_and_failed_votes_abstain_and_count_against(caplog):
    backend = ScriptedBackend({0: hinted("Answer with a single word."), 1: "sleep", 2: RuntimeError("boom")})
    with caplog.at_level(logging.WARNING):
        verdict = await HintJudge(backend, timeout_s=0.05).hint(_turn())
    assert verdict.hint is None  # 1 of 3: the abstentions count against
    assert verdict.votes == [1, None, None] and verdict.hints == ["Answer with a single word.", None, None]
    assert verdict.texts[1].startswith("abstained: timed out") and verdict.texts[2] == "abstained: RuntimeError: boom"
    assert "Traceback" not in caplog.text and "hint vote (fake)" in caplog.text

    backend = ScriptedBackend({0: hinted("Answer with a single word."), 1: "sleep", 2: hinted("Answer with one word.")})
    verdict = await HintJudge(backend, timeout_s=0.05).hint(_turn())
    assert verdict.hint == "Answer with one word." and verdict.votes == [1, None, 1]


async def test_unparsable_and_hintless_votes_keep_their_text():
    backend = ScriptedBackend({0: "\\boxed{1} but I forgot the hint", 1: "[HINT_START]Be brief.[HINT_END]", 2: "\\boxed{maybe}"})
    verdict = await HintJudge(backend).hint(_turn())
    assert verdict.hint is None and verdict.hints == [None, None, None]
    assert verdict.votes == [1, None, None]
    assert verdict.texts == ["\\boxed{1} but I forgot the hint", "[HINT_START]Be brief.[HINT_END]", "\\boxed{maybe}"]


async def test_a_malformed_turn_abstains_and_never_raises():
    bad = JudgeInput(request_messages=[None], response_text="x", response_tool_calls=None, next_state="y", next_state_role="user")
    verdict = await HintJudge(ScriptedBackend({})).hint(bad)
    assert verdict.hint is None and verdict.votes == [None] * 3 and verdict.hints == [None] * 3
    assert all(t.startswith("abstained: could not build the hint prompt") for t in verdict.texts)


async def test_concurrency_bound_is_shared_across_turns_and_with_the_reward_judge():
    backend = ScriptedBackend({i: hinted("Answer with a single word.") for i in range(5)}, delay=0.01)
    hints = HintJudge(backend, votes=5, max_concurrency=2)
    verdicts = await asyncio.gather(*(hints.hint(_turn()) for _ in range(4)))
    assert all(v.hint == "Answer with a single word." and v.votes == [1] * 5 for v in verdicts)
    assert len(backend.calls) == 20 and backend.max_active == 2

    backend = ScriptedBackend({i: hinted("Answer with a single word.") for i in range(3)}, delay=0.01)
    judge = Judge(backend, max_concurrency=2, timeout_s=7, seed=5, max_context_chars=123)
    hints = HintJudge.from_judge(judge)
    assert hints.backend is backend and hints.semaphore is judge.semaphore
    assert (hints.votes, hints.timeout_s, hints.seed, hints.max_context_chars) == (3, 7, 5, 123)
    backend.script = {i: hinted("Answer with a single word.") for i in range(5, 8)}
    await asyncio.gather(*(r for _ in range(3) for r in (judge.judge(_turn()), hints.hint(_turn()))))
    assert len(backend.calls) == 18 and backend.max_active == 2  # one bound for both tasks


async def test_heuristic_through_the_hint_judge():
    hints = HintJudge.from_judge(Judge(HeuristicBackend()))
    assert isinstance(hints.backend, HeuristicHintBackend) and hints.votes == 1
    verdict = await hints.hint(_turn("No, that's too long. You should answer with a single word."))
    assert verdict.hint == "That's too long. Answer with a single word." and verdict.votes == [1]
    assert HINT_START in verdict.texts[0]
    assert (await hints.hint(_turn("Thanks!"))).hint is None
    none = await hints.hint(_turn("Error: use --force", role="tool"))
    assert none.hint is None and none.votes == [-1] and "role tool" in none.texts[0]
    with pytest.raises(JudgeError):  # like the reward heuristic, it needs the turn
        await HeuristicHintBackend().vote([], seed=0)


@pytest.mark.parametrize("message", [
    "You should answer with a single word.", "Too long. Make it shorter please", "shorter",
    "no. wrong. you need to include the units. also never round the result", "Use a table. " * 60,
])
async def test_every_heuristic_hint_parses(message):
    answer = HeuristicHintBackend().answer(_turn(message))
    assert parse_hint(answer) == heuristic_hint(message, "user", MAX_HINT_CHARS) is not None


def test_a_heuristic_backend_serves_only_its_own_task():
    with pytest.raises(ValueError, match="answers the 'judge' task"):
        HintJudge(HeuristicBackend())
    with pytest.raises(ValueError, match="answers the 'hint' task"):
        Judge(HeuristicHintBackend())


async def test_engine_backend_through_the_hint_judge():
    engine = FakeEngine(f"The user wants one word. {HINT_START}Answer with a single word.{HINT_END} \\boxed{{1}}")
    verdict = await HintJudge(EngineJudgeBackend(engine, CharTokenizer()), votes=2).hint(_turn())
    assert verdict.hint == "Answer with a single word." and verdict.votes == [1, 1]
    prompt = "".join(chr(i) for i in engine.requests[0][0])
    assert prompt.startswith("<system>You extract hindsight hints") and "No, just one word" in prompt
