"""Simulated users: task generators (determinism, split, exact answers) and persona rules."""

from __future__ import annotations

import dataclasses
import re

import pytest

from slime_ext.judge.heuristic import heuristic_hint, heuristic_vote
from slime_ext.simulate import KINDS, PERSONAS, Task, get_persona, grading_tasks, math_tasks
from slime_ext.simulate.personas import SIGN_OFF, final_number, sentence_count
from slime_ext.simulate.tasks import split_of

# ---------------------------------------------------------------- tasks


def test_math_tasks_deterministic_and_seeded():
    a, b = math_tasks("train", 40, seed=3), math_tasks("train", 40, seed=3)
    assert a == b
    assert math_tasks("train", 40, seed=4) != a
    assert math_tasks("train", 10, seed=3) == a[:10]
    assert {t.kind for t in a} == set(KINDS)
    assert len({t.id for t in a}) == len({t.prompt for t in a}) == 40


def test_splits_are_disjoint():
    train = [t for s in range(3) for t in math_tasks("train", 300, seed=s)]
    held = [t for s in range(3) for t in math_tasks("heldout", 150, seed=s)]
    assert not {t.id for t in train} & {t.id for t in held}
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    # even up to names and nouns: the numbers of a held-out problem never occur in train
    def numbers_of(t: Task) -> tuple:
        return (t.kind, tuple(re.findall(r"\d+", t.prompt)))
    assert not {numbers_of(t) for t in train} & {numbers_of(t) for t in held}
    g_train, g_held = grading_tasks("train", 50), grading_tasks("heldout", 50)
    assert not {t.problem for t in g_train} & {t.problem for t in g_held}


def test_split_is_fixed_by_key():
    assert split_of(("shopping", 2, 3, 4, 5)) == split_of(("shopping", 2, 3, 4, 5))
    keys = [("rate", r, h) for r in range(2, 41) for h in range(2, 13)]
    held = sum(split_of(k) == "heldout" for k in keys) / len(keys)
    assert 0.1 < held < 0.3


def _recompute(t: Task) -> int:
    """An independent solver from the prompt text."""
    n = [int(x) for x in re.findall(r"\d+", t.prompt)]
    if t.kind == "shopping":
        a, p, b, q = n
        return a * p + b * q
    if t.kind == "sharing":
        if "keeps" in t.prompt:
            total, kept, k = n
            return (total - kept) // k
        total, k = n
        return total // k
    if t.kind == "rate":
        r, h = n
        return r * h
    if t.kind == "multistep":
        a, b, c, k = n
        return (a + b - c) * k
    raise AssertionError(t.kind)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_answers_are_exact(split):
    for t in math_tasks(split, 200, seed=1):
        assert isinstance(t.answer, int) and t.answer >= 0
        assert t.answer == _recompute(t), t.prompt
        if t.kind == "sharing":
            total = int(re.findall(r"\d+", t.prompt)[0])
            kept = int(re.findall(r"\d+", t.prompt)[1]) if "keeps" in t.prompt else 0
            k = int(re.findall(r"\d+", t.prompt)[-1])
            assert (total - kept) % k == 0


def test_grading_tasks():
    tasks = grading_tasks("heldout", 60, seed=2)
    assert tasks == grading_tasks("heldout", 60, seed=2)
    assert [t.problem for t in tasks] == [m.prompt for m in math_tasks("heldout", 60, seed=2)]
    wrong = 0
    for t in tasks:
        assert t.kind == "grading" and t.student in t.prompt and t.problem in t.prompt
        assert f"{t.student}'s answer: {t.student_answer}" in t.prompt
        assert t.facts == (t.student, str(t.answer))
        assert t.student_answer >= 0
        wrong += t.student_answer != t.answer
    assert 15 < wrong < 45


def test_bad_arguments():
    with pytest.raises(ValueError):
        math_tasks("test", 3)
    with pytest.raises(ValueError):
        math_tasks("train", 3, kinds=("algebra",))
    with pytest.raises(ValueError):
        get_persona("nobody")


# ---------------------------------------------------------------- personas

MATH = Task(id="m", prompt="Maya buys 3 pens at 4 dollars each and 2 mugs at 5 dollars each. "
            "How many dollars does Maya spend in total?", answer=22, kind="shopping")
GRADE = Task(id="g", prompt="Grade this answer from your student Omar. ...", answer=22, kind="grading",
             student="Omar", student_answer=20, problem=MATH.prompt)

PERFECT = {
    "student": (MATH, "3 pens cost 12 and 2 mugs cost 10, so she spends 22 dollars."),
    "teacher": (GRADE, "Nice try, Omar! The correct answer is 22, so check the mugs again. Keep it up!"),
    "ta": (GRADE, "Omar's answer, 20, is wrong. The correct answer is 22 because the mugs cost 10 dollars."),
    "terse": (MATH, f"22 dollars {SIGN_OFF}"),
}

# persona -> (failed check, response violating exactly that check, expected hint words)
SINGLE_VIOLATIONS = [
    ("student", "correct", "3 pens cost 12 and 2 mugs cost 10, so she spends 24 dollars.", "number"),
    ("student", "lowercase", "3 pens cost 12 and 2 mugs cost 10, so Maya spends 22 dollars.", "lowercase"),
    ("student", "no_markdown", "3 pens cost 12 and 2 mugs cost 10, so she spends **22** dollars.", "markdown"),
    ("student", "no_markdown", "- pens: 12\n- mugs: 10\nso she spends 22 dollars.", "markdown"),
    ("student", "no_ai_tells", "as an ai, i can say the pens cost 12 and mugs 10, so 22 dollars.", "ai"),
    ("student", "no_ai_tells", "she spends 22 dollars. i hope this helps.", "ai"),
    ("student", "short", "first we work out the pens. " * 8 + "so she spends 22 dollars.", "short"),
    ("teacher", "names_student", "Nice try! The correct answer is 22, so check the mugs again.", "Omar"),
    ("teacher", "states_answer", "Nice try, Omar! Check the cost of the mugs again.", "22"),
    ("teacher", "encouraging", "Omar, the correct answer is 22, so check the mugs again.", "encourage"),
    ("teacher", "brief", "Nice try, Omar! The answer is 22. Pens cost 12. Mugs cost 10.", "three sentences"),
    ("teacher", "friendly", "Nice try, Omar, but careless: the answer is 22. Keep it up!", "harsh"),
    ("ta", "verdict", "Omar's answer is 20. The correct answer is 22 because the mugs cost 10 dollars.", "wrong"),
    ("ta", "states_answer", "Omar's answer, 20, is wrong. Check the cost of the mugs again.", "22"),
    ("ta", "quotes_student", "Omar's answer is wrong. The correct answer is 22 because the mugs cost 10 dollars.",
     "20"),
    ("ta", "specific", "Omar's answer, 20, is wrong: the correct answer is 22.", "2 sentences"),
    ("terse", "correct", f"21 dollars {SIGN_OFF}", "number"),
    ("terse", "one_line", f"12 + 10\n22 dollars {SIGN_OFF}", "one line"),
    ("terse", "short", f"the pens cost 12 dollars and the mugs cost 10 dollars so the total is 22 {SIGN_OFF}",
     "15 words"),
    ("terse", "sign_off", "22 dollars", "done"),
]


@pytest.mark.parametrize("name", sorted(PERFECT))
def test_perfect_response(name):
    persona = get_persona(name)
    task, response = PERFECT[name]
    assert persona.score(task, response) == 1.0
    assert persona.failed(task, response) == []
    reply = persona.reply(task, response)
    assert reply == persona.thanks
    assert heuristic_vote(reply, "user") == 1
    assert heuristic_vote(reply, "user", request=persona.first_message(task)) == 1
    assert heuristic_hint(reply, "user") is None


@pytest.mark.parametrize(("name", "check", "response", "hint_word"), SINGLE_VIOLATIONS)
def test_single_violation(name, check, response, hint_word):
    persona = get_persona(name)
    task = PERFECT[name][0]
    assert [c.name for c in persona.failed(task, response)] == [check]
    assert persona.score(task, response) == pytest.approx(1 - 1 / len(persona.checks))
    reply = persona.reply(task, response)
    assert reply != persona.thanks
    assert heuristic_vote(reply, "user") == -1
    assert heuristic_vote(reply, "user", request=persona.first_message(task)) == -1
    hint = heuristic_hint(reply, "user")
    assert hint and hint_word.lower() in hint.lower()


def test_every_correction_is_a_usable_hint():
    for persona in PERSONAS.values():
        if persona.task_kind == "question":
            continue  # one-preference personas: tests/test_preference_personas.py
        task = GRADE if persona.task_kind == "grading" else MATH
        assert len({c.name for c in persona.checks}) == len(persona.checks) >= 4
        for c in persona.checks:
            sentence = c.correction(task)
            assert heuristic_vote(sentence, "user") == -1, sentence
            hint = heuristic_hint(sentence, "user")
            assert hint and len(hint) >= 15, sentence


def test_several_violations_partial_credit_and_all_corrections():
    student = get_persona("student")
    response = "As an AI, I can tell you: **24** dollars."  # wrong, capitals, markdown, AI tell
    assert student.score(MATH, response) == pytest.approx(0.2)
    reply = student.reply(MATH, response)
    assert heuristic_vote(reply, "user") == -1
    hint = heuristic_hint(reply, "user")
    for word in ("number", "lowercase", "markdown", "ai"):
        assert word in hint.lower()
    assert get_persona("terse").score(MATH, "") == 0.5  # "one line" and "short" hold
    assert get_persona("teacher").score(GRADE, "") == pytest.approx(0.4)  # brief and friendly


def test_wrong_math_answer_detected():
    student, terse = get_persona("student"), get_persona("terse")
    assert student.score(MATH, "she spends 22 dollars.") == 1.0
    assert student.score(MATH, "she spends 2,2 dollars.") < 1.0
    assert student.score(MATH, "22 dollars? no wait, 23.") < 1.0  # the final number counts
    assert student.score(MATH, "she spends 22.5 dollars.") < 1.0
    assert student.score(MATH, "she spends 22.0 dollars.") == 1.0
    assert terse.score(MATH, f"22 {SIGN_OFF}") == 1.0
    assert terse.score(MATH, f"23 {SIGN_OFF}") == 0.75
    # the student's wrong answer in a grading comment does not count as stating the right one
    teacher = get_persona("teacher")
    assert teacher.score(GRADE, "Nice try, Omar! You wrote 20, check the mugs.") == 0.8


def test_helpers():
    assert final_number("a 1,200 b 7") == 7 and final_number("total: 1,200") == 1200
    assert final_number("none") is None
    assert sentence_count("One. Two! Three? Four") == 4
    assert sentence_count("It costs 2.5 dollars.") == 1


def test_first_messages():
    for persona in PERSONAS.values():
        if persona.task_kind == "question":
            continue  # asks the question as it is: tests/test_preference_personas.py
        task = GRADE if persona.task_kind == "grading" else MATH
        first = persona.first_message(task)
        assert task.prompt in first
        assert heuristic_hint(first, "user") is None


def test_ta_verdict_must_be_the_true_one():
    """upstream's TA grades against the correct answer it gives: calling a right answer wrong, or a wrong one right,
    fails the verdict; the student's answer being right, quoting it is stating the answer."""
    ta = get_persona("ta")
    right = dataclasses.replace(GRADE, student_answer=22)
    assert "The correct answer is 22." in ta.first_message(GRADE) and GRADE.prompt in ta.first_message(GRADE)
    assert ta.score(right, "Omar's answer, 22, is correct. He added 12 and 10 right, well done.") == 1.0
    assert [c.name for c in ta.failed(right, "Omar's answer, 22, is wrong. The answer is 22, check again.")] == ["verdict"]
    assert [c.name for c in ta.failed(GRADE, "Omar's answer, 20, is right. The answer is 22, well done.")] == ["verdict"]


def test_joint_persona_takes_the_roles_in_turn_and_each_role_scores_its_own_sessions():
    """upstream's joint mode: the student, TA and teacher roles against one server, one session each in turn."""
    from slime_ext.simulate.experiment import tasks_for
    from slime_ext.simulate.personas import RoleTask

    joint = get_persona("joint")
    tasks = tasks_for(joint, "train", 7, seed=1)
    assert [t.role.name for t in tasks] == ["student", "ta", "teacher", "student", "ta", "teacher", "student"]
    assert len({t.id for t in tasks}) == 7
    assert [t.task for t in tasks if t.role.name == "student"] == math_tasks("train", 3, 1)
    assert [t.task for t in tasks if t.role.name == "ta"] == grading_tasks("train", 2, 1)
    ta = RoleTask(get_persona("ta"), GRADE)
    teacher = RoleTask(get_persona("teacher"), GRADE)
    answer = PERFECT["ta"][1]
    assert joint.first_message(ta) == get_persona("ta").first_message(GRADE)
    assert joint.score(ta, answer) == 1.0 and joint.reply(ta, answer) == get_persona("ta").thanks
    assert joint.score(teacher, answer) == get_persona("teacher").score(GRADE, answer) < 1.0
    assert joint.reply(teacher, answer) == get_persona("teacher").reply(GRADE, answer)
