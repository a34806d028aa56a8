"""The one-preference personas and general questions of the personalization experiment (v2):
question splits, correctness keys, and that every correction is read by the heuristic judge as a
standing preference (-1) whose hint is the preference itself."""

from __future__ import annotations

import pytest

from slime_ext.judge.heuristic import heuristic_hint, heuristic_vote
from slime_ext.simulate.personas import PREFERENCE_PERSONAS, get_persona
from slime_ext.simulate.questions import (
    CORRECTNESS_QUESTIONS, HELDOUT_PREFERENCE, PREFERENCE_QUESTIONS, correctness_tasks, is_correct, preference_tasks,
)

# persona -> (an answer that keeps the preference, one that misses it, words the hint must carry)
CASES = {
    "one_sentence": ("The capital of Italy is Rome.",
                     "The capital of Italy is Rome. It is a very old city with many famous buildings.",
                     ("one", "sentence")),
    "under_ten": ("Rome is the capital of Italy.",
                  "The capital of Italy is Rome, a city full of history, art and wonderful food.", ("10 words",)),
    "sure": ("Sure! The capital of Italy is Rome.", "The capital of Italy is Rome.", ('"Sure!"',)),
    "great": ("Great question! It is Rome.", "The capital of Italy is Rome.", ('"Great question!"',)),
    "asks_back": ("It is Rome. Have you been there?", "The capital of Italy is Rome.", ("question",)),
}


def test_every_preference_persona_has_a_case():
    assert set(CASES) == set(PREFERENCE_PERSONAS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_keeping_the_preference_is_thanked_and_judged_good(name):
    persona = get_persona(name)
    good, _, _ = CASES[name]
    for task in preference_tasks("train", 6, 0):
        assert persona.score(task, good) == 1.0
        reply = persona.reply(task, good)
        assert reply == persona.thanks
        assert heuristic_vote(reply, "user", request=task.prompt) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_missing_the_preference_is_corrected_as_a_standing_preference(name):
    persona = get_persona(name)
    _, bad, words = CASES[name]
    phrasings = set()
    for task in preference_tasks("train", 12, 0):
        assert persona.score(task, bad) == 0.0
        reply = persona.reply(task, bad)
        phrasings.add(reply)
        assert heuristic_vote(reply, "user", request=task.prompt) == -1, reply
        hint = heuristic_hint(reply, "user")
        assert hint and all(w.lower() in hint.lower() for w in words), (reply, hint)
    assert len(phrasings) >= 2  # a user does not repeat one sentence word for word


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
    assert is_correct(london.keys, "The capital of the United Kingdom is London.")
    assert not is_correct(london.keys, "The capital of the United Kingdom is Paris.")
    assert is_correct(("60", "sixty"), "Sixty seconds.") and len(correctness_tasks(3)) == 3
