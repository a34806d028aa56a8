"""The one-preference personas and general questions of the personalization experiment (v2):
question splits, correctness keys, and that every correction is read by the heuristic judge as a
standing preference (-1) whose hint is the preference itself."""

from __future__ import annotations

import pytest

from slime_ext.judge.heuristic import heuristic_hint, heuristic_vote
from slime_ext.simulate.personas import NOT_ANSWERED, PREFERENCE_PERSONAS, get_persona
from slime_ext.simulate.questions import (
    CORRECTNESS_QUESTIONS,
    HELDOUT_PREFERENCE,
    PREFERENCE_QUESTIONS,
    correctness_tasks,
    preference_tasks,
)
from slime_ext.trainers.canary_data import holds_key

# persona -> (an answer that keeps the preference, one that misses it, words the hint must carry); {a} is the answer
CASES = {
    "one_sentence": ("The answer is {a}.", "The answer is {a}. It is a well known fact that many people know.",
                     ("one", "sentence")),
    "under_ten": ("It is {a}.", "The answer to your question is {a}, which many people know very well.",
                  ("10 words",)),
    "sure": ("Sure! The answer is {a}.", "The answer is {a}.", ('"Sure!"',)),
    "great": ("Great question! It is {a}.", "The answer is {a}.", ('"Great question!"',)),
    "so": ("So, it is {a}.", "It is {a}.", ('"So,"',)),
    "the_answer": ("The answer is {a}.", "It is {a}.", ('"The answer is"',)),
    "asks_back": ("It is {a}. Did you know that?", "The answer is {a}.", ("question",)),
}


def test_every_preference_persona_has_a_case():
    assert set(CASES) == set(PREFERENCE_PERSONAS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_keeping_the_preference_is_thanked_and_judged_good(name):
    persona = get_persona(name)
    good = CASES[name][0]
    for task in preference_tasks("train", 6, 0):
        answer = good.format(a=task.keys[0])
        assert persona.score(task, answer) == 1.0
        reply = persona.reply(task, answer)
        assert reply == persona.thanks
        assert heuristic_vote(reply, "user", request=task.prompt) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_missing_the_preference_is_corrected_as_a_standing_preference(name):
    persona = get_persona(name)
    _, bad, words = CASES[name]
    phrasings = set()
    for task in preference_tasks("train", 12, 0):
        answer = bad.format(a=task.keys[0])
        assert persona.score(task, answer) == 0.0
        reply = persona.reply(task, answer)
        phrasings.add(reply)
        assert heuristic_vote(reply, "user", request=task.prompt) == -1, reply
        hint = heuristic_hint(reply, "user")
        assert hint and all(w.lower() in hint.lower() for w in words), (reply, hint)
    assert len(phrasings) >= 2  # a user does not repeat one sentence word for word


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_answer_that_does_not_answer_is_never_compliant(name):
    """Complying by no longer answering (a collapse seen in the experiment: "SmolLM") scores 0 and
    draws a complaint the judge reads as -1."""
    persona = get_persona(name)
    task = preference_tasks("train", 1, 0)[0]
    answer = CASES[name][0].format(a="something else")
    assert persona.score(task, answer) == 0.0
    reply = persona.reply(task, answer)
    assert reply == NOT_ANSWERED and heuristic_vote(reply, "user", request=task.prompt) == -1


def test_questions_splits_are_fixed_disjoint_and_cover_the_train_set():
    held = preference_tasks("heldout", HELDOUT_PREFERENCE)
    assert [t.prompt for t in held] == [q for q, _ in PREFERENCE_QUESTIONS[:HELDOUT_PREFERENCE]]
    train = preference_tasks("train", len(PREFERENCE_QUESTIONS) - HELDOUT_PREFERENCE, seed=3)
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert len({t.prompt for t in train}) == len(train)  # one pass before any repeats
    assert [t.prompt for t in train] != [t.prompt for t in preference_tasks("train", len(train), seed=4)]
    assert [t.prompt for t in train] == [t.prompt for t in preference_tasks("train", len(train), seed=3)]
    longer = preference_tasks("train", 2 * len(train), seed=3)
    assert len(longer) == 2 * len(train) and set(t.prompt for t in longer) == set(t.prompt for t in train)
    general = {q for q, _ in CORRECTNESS_QUESTIONS}
    assert not general & {q for q, _ in PREFERENCE_QUESTIONS}
    with pytest.raises(ValueError, match="held-out"):
        preference_tasks("heldout", HELDOUT_PREFERENCE + 1)
    with pytest.raises(ValueError, match="unknown split"):
        preference_tasks("test", 1)


def test_correctness_keys():
    london = correctness_tasks()[0]
    assert holds_key(london.keys, "The capital of the United Kingdom is London.")
    assert not holds_key(london.keys, "The capital of the United Kingdom is Paris.")
    assert holds_key(("60", "sixty"), "Sixty seconds.") and len(correctness_tasks(3)) == 3
