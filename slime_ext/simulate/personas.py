"""Scripted user simulators: deterministic personas with a hidden preference (CPU only).

A ``Persona`` checks a response against its hidden preference, a tuple of ``Check`` s.
``score(task, response)`` is the fraction of checks passed (partial credit in ``[0, 1]``).
``reply(task, response)`` is the persona's next message: when every check passes, the persona's
thanks (the heuristic judge scores it +1 and extracts no hint); otherwise one correction sentence
per failed check, in check order, joined with a space. Each correction is what a real user
writes; ``heuristic_vote(sentence, "user") == -1`` and ``heuristic_hint(sentence, "user")`` names
what to fix (tested in ``tests/test_simulate.py``).

Helpers: the *final number* of a response is its last number (commas inside numbers ignored,
decimals allowed); *words* are whitespace-separated tokens; *sentences* are the non-empty pieces
between ``. ! ?`` followed by a space or the end.

``student`` (math tasks; wants homework that does not look AI-written), 5 checks, 0.2 each:
  1. ``correct``: the final number equals the answer.
     "That's wrong, make sure you check the arithmetic and end with the right number."
  2. ``lowercase``: no uppercase letter.
     "Don't use capital letters, write it all in lowercase."
  3. ``no_markdown``: no ``*``, ``_``, ``#``, backtick, ``\\(``, ``\\[``, ``\\boxed``, and no
     bullet or numbered-list lines.
     "Don't use markdown or bullet points, just write plain sentences."
  4. ``no_ai_tells``: none of "as an ai", "language model", "i hope this helps", "great question",
     "certainly", "happy to help", "let's break", "step-by-step".
     "Don't sound like an AI, never say things like as an AI or I hope this helps."
  5. ``short``: at most ``STUDENT_MAX_WORDS`` (40) words.
     "Keep it short, under 40 words."
  Thanks: "thanks, that works!"

``ta`` (grading tasks, upstream's TA: the correct answer given; wants specific grading), 4 checks, 0.25 each:
  1. ``verdict``: says the student's answer is right when it is (one of ``RIGHT_WORDS``, none of
     ``WRONG_WORDS``), wrong when it is not (one of ``WRONG_WORDS``).
     "You should say clearly whether <name>'s answer is correct or wrong."
  2. ``states_answer``: the correct answer appears as a number.
     "You should state the correct answer, <answer>, in the comment."
  3. ``quotes_student``: the student's own answer appears as a number.
     "You should mention <name>'s answer, <given>, so they know what was graded."
  4. ``specific``: at least ``TA_MIN_SENTENCES`` (2) sentences.
     "Don't be so brief, you should explain it in at least 2 sentences."
  Thanks: "Great, thank you!"

``teacher`` (grading tasks; wants friendly, specific comments), 5 checks, 0.2 each:
  1. ``names_student``: the student's name appears as a word (any case).
     "You should use the student's name, <name>, in the comment."
  2. ``states_answer``: the correct answer appears as a number.
     "You should state the correct answer, <answer>, in the comment."
  3. ``encouraging``: one of ``ENCOURAGING`` ("well done", "great", "good job", "nice",
     "excellent", "keep it up", "keep going", "keep practicing", "proud", "good try",
     "good effort", "nice try", "you can do it").
     "Don't forget to encourage them, add something like well done or keep it up."
  4. ``brief``: at most ``TEACHER_MAX_SENTENCES`` (3) sentences.
     "Keep it short, three sentences at most."
  5. ``friendly``: none of ``HARSH`` ("careless", "lazy", "sloppy", "stupid", "terrible",
     "awful", "bad", "poor", "disappointing", "useless").
     "Don't be harsh, avoid words like careless or lazy."
  Thanks: "Perfect, thank you!"

``terse`` (math tasks; wants one line with a sign-off), 4 checks, 0.25 each:
  1. ``correct``: the final number (ignoring the sign-off) equals the answer.
     "That's wrong, make sure the final number is right."
  2. ``one_line``: no line break (after stripping).
     "Don't use line breaks, answer in one line."
  3. ``short``: at most ``TERSE_MAX_WORDS`` (15) words, sign-off included.
     "Keep it short, 15 words at most."
  4. ``sign_off``: ends with ``SIGN_OFF`` ("— done", an em dash), trailing whitespace ignored.
     "You should always end with — done."
  Thanks: "ok thanks."


``joint`` (``JointPersona``): upstream's joint mode, the ``student``, ``ta`` and ``teacher`` roles in turn, one
session each, against one server; each session is asked, corrected and scored by its role.

One-preference personas (``PREFERENCE_PERSONAS``, the experiment v2) ask general questions
(``questions.py``) and hold one standing preference each: ``one_sentence`` (one sentence of at
most 20 words), ``under_ten`` (at most 10 words), ``sure`` (starts with "Sure!"), ``great``
(starts with "Great question!"), ``so`` (starts with "So,"), ``the_answer`` (starts with "The answer
is"), ``asks_back`` (ends with a question). An answer must also
answer the question (hold one of its keys); the correction names what is missing ("You didn't
answer my question." and / or the preference, in one of three phrasings a user would use), and
the score is 1 only when both hold.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime_ext.simulate.tasks import Task
from slime_ext.trainers.canary_data import holds_key

STUDENT_MAX_WORDS = 40
TEACHER_MAX_SENTENCES = 3
TERSE_MAX_WORDS = 15
TA_MIN_SENTENCES = 2
SIGN_OFF = "\u2014 done"

AI_TELLS = (
    "as an ai", "language model", "i hope this helps", "great question", "certainly", "happy to help",
    "let's break", "step-by-step",
)
ENCOURAGING = (
    "well done", "great", "good job", "nice", "excellent", "keep it up", "keep going", "keep practicing",
    "proud", "good try", "good effort", "nice try", "you can do it",
)
HARSH = ("careless", "lazy", "sloppy", "stupid", "terrible", "awful", "bad", "poor", "disappointing", "useless")

RIGHT_WORDS = ("correct", "right", "well done", "exactly")
WRONG_WORDS = ("incorrect", "wrong", "not correct", "not right", "isn't correct", "is not correct", "mistake",
               "error", "not quite", "off by")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_MARKDOWN = re.compile(r"[*_#`]|\\[(\[]|\\boxed|^\s*(?:[-+\u2022]|\d+[.)])\s", re.M)
_SENTENCE_END = re.compile(r"[.!?]+(?:\s+|$)")


def numbers(text: str) -> list[float]:
    """The numbers in ``text``, in order (``1,200`` is one number)."""
    return [float(x) for x in _NUMBER.findall(_THOUSANDS.sub("", text))]


def final_number(text: str) -> float | None:
    """The last number in ``text``, or ``None``."""
    found = numbers(text)
    return found[-1] if found else None


def sentence_count(text: str) -> int:
    return sum(1 for s in _SENTENCE_END.split(text) if re.search(r"\w", s))


def _has_phrase(text: str, phrases: tuple[str, ...]) -> bool:
    low = text.lower().replace("\u2019", "'")
    return any(re.search(rf"\b{re.escape(p)}\b", low) for p in phrases)


@dataclass(frozen=True)
class Check:
    """One part of a hidden preference: ``test(task, response)`` and the user's correction."""

    name: str
    test: Callable[[Task, str], bool]
    correction: Callable[[Task], str]


@dataclass(frozen=True)
class Persona:
    name: str
    preference: str  # hidden from the model; for logs and reports
    task_kind: str  # "math", "grading" or "question" (questions.py)
    checks: tuple[Check, ...]
    opener: Callable[[Task], str]
    thanks: str
    all_or_nothing: bool = False  # score 1 only when every check passes (the one-preference personas)

    def first_message(self, task: Task) -> str:
        return self.opener(task)

    def failed(self, task: Task, response: str) -> list[Check]:
        return [c for c in self.checks if not c.test(task, response)]

    def score(self, task: Task, response: str) -> float:
        """The fraction of checks passed, in ``[0, 1]`` (``all_or_nothing``: 1 or 0)."""
        failed = len(self.failed(task, response))
        if self.all_or_nothing:
            return float(failed == 0)
        return 1.0 - failed / len(self.checks)

    def reply(self, task: Task, response: str) -> str:
        """Thanks when every check passes, else one correction sentence per failed check."""
        failed = self.failed(task, response)
        return " ".join(c.correction(task) for c in failed) if failed else self.thanks


def _correct(task: Task, response: str) -> bool:
    return final_number(response) == task.answer


def _correct_before_sign_off(task: Task, response: str) -> bool:
    body = response.rstrip()
    if body.endswith(SIGN_OFF):
        body = body[: -len(SIGN_OFF)]
    return _correct(task, body)


STUDENT = Persona(
    name="student",
    preference="homework that does not look AI-written: the right answer, plain lowercase, no markdown, "
    f"no AI phrases, at most {STUDENT_MAX_WORDS} words",
    task_kind="math",
    checks=(
        Check("correct", _correct,
              lambda t: "That's wrong, make sure you check the arithmetic and end with the right number."),
        Check("lowercase", lambda t, r: r == r.lower(),
              lambda t: "Don't use capital letters, write it all in lowercase."),
        Check("no_markdown", lambda t, r: not _MARKDOWN.search(r),
              lambda t: "Don't use markdown or bullet points, just write plain sentences."),
        Check("no_ai_tells", lambda t, r: not _has_phrase(r, AI_TELLS),
              lambda t: "Don't sound like an AI, never say things like as an AI or I hope this helps."),
        Check("short", lambda t, r: len(r.split()) <= STUDENT_MAX_WORDS,
              lambda t: f"Keep it short, under {STUDENT_MAX_WORDS} words."),
    ),
    opener=lambda t: f"can you do this one for my homework? {t.prompt}",
    thanks="thanks, that works!",
)

TEACHER = Persona(
    name="teacher",
    preference="friendly, specific grading comments: the student's name, the correct answer, an "
    f"encouraging word, no harsh words, at most {TEACHER_MAX_SENTENCES} sentences",
    task_kind="grading",
    checks=(
        Check("names_student", lambda t, r: bool(re.search(rf"\b{re.escape(t.student)}\b", r, re.I)),
              lambda t: f"You should use the student's name, {t.student}, in the comment."),
        Check("states_answer", lambda t, r: t.answer in numbers(r),
              lambda t: f"You should state the correct answer, {t.answer}, in the comment."),
        Check("encouraging", lambda t, r: _has_phrase(r, ENCOURAGING),
              lambda t: "Don't forget to encourage them, add something like well done or keep it up."),
        Check("brief", lambda t, r: sentence_count(r) <= TEACHER_MAX_SENTENCES,
              lambda t: "Keep it short, three sentences at most."),
        Check("friendly", lambda t, r: not _has_phrase(r, HARSH),
              lambda t: "Don't be harsh, avoid words like careless or lazy."),
    ),
    opener=lambda t: t.prompt,
    thanks="Perfect, thank you!",
)


def _says_right(t: Task, r: str) -> bool:
    """The comment's verdict on the student's answer is the true one: right when it is, wrong when it is not."""
    wrong = _has_phrase(r, WRONG_WORDS)
    return (not wrong and _has_phrase(r, RIGHT_WORDS)) if t.student_answer == t.answer else wrong


TA = Persona(
    name="ta",
    preference="specific grading: says whether the student's answer is right, gives the correct answer and the "
    f"student's own, in at least {TA_MIN_SENTENCES} sentences",
    task_kind="grading",
    checks=(
        Check("verdict", _says_right,
              lambda t: f"You should say clearly whether {t.student}'s answer is correct or wrong."),
        Check("states_answer", lambda t, r: t.answer in numbers(r),
              lambda t: f"You should state the correct answer, {t.answer}, in the comment."),
        Check("quotes_student", lambda t, r: t.student_answer in numbers(r),
              lambda t: f"You should mention {t.student}'s answer, {t.student_answer}, so they know what was graded."),
        Check("specific", lambda t, r: sentence_count(r) >= TA_MIN_SENTENCES,
              lambda t: f"Don't be so brief, you should explain it in at least {TA_MIN_SENTENCES} sentences."),
    ),
    opener=lambda t: (f"I'm the TA for this class and need your help grading. {t.prompt}\n"
                      f"The correct answer is {t.answer}."),
    thanks="Great, thank you!",
)

TERSE = Persona(
    name="terse",
    preference=f"one line, at most {TERSE_MAX_WORDS} words, the right answer, ending with '{SIGN_OFF}'",
    task_kind="math",
    checks=(
        Check("correct", _correct_before_sign_off,
              lambda t: "That's wrong, make sure the final number is right."),
        Check("one_line", lambda t, r: "\n" not in r.strip(),
              lambda t: "Don't use line breaks, answer in one line."),
        Check("short", lambda t, r: len(r.split()) <= TERSE_MAX_WORDS,
              lambda t: f"Keep it short, {TERSE_MAX_WORDS} words at most."),
        Check("sign_off", lambda t, r: r.rstrip().endswith(SIGN_OFF),
              lambda t: f"You should always end with {SIGN_OFF}."),
    ),
    opener=lambda t: t.prompt,
    thanks="ok thanks.",
)

# ------------------------------------------------------------------ one-preference personas (experiment v2)

def _phrasing(phrasings: tuple[str, ...]) -> Callable[[Any], str]:
    """A correction that states the preference in one of ``phrasings``, picked by the task's id (so a
    user does not repeat one sentence word for word, and a run is deterministic)."""
    def correction(task: Any) -> str:
        return phrasings[int(hashlib.sha256(str(task.id).encode()).hexdigest(), 16) % len(phrasings)]
    return correction


NOT_ANSWERED = "You didn't answer my question."


def preference_persona(name: str, preference: str, test: Callable[[str], bool], phrasings: tuple[str, ...]) -> Persona:
    """A persona with one standing preference over general questions (``questions.py``), stated in one of
    ``phrasings`` (picked per task) whenever ``test`` fails on an answer. An answer
    must answer the question (hold one of its keys: else "You didn't answer my question.") and
    keep the preference (else the preference, stated as a standing one); it scores 1 only when
    both hold, so a policy cannot comply by no longer answering."""
    return Persona(name=name, preference=f"answers the question, {preference}", task_kind="question",
                   checks=(Check("answers", lambda t, r: holds_key(t.keys, r), lambda t: NOT_ANSWERED),
                           Check(name, lambda t, r: test(r), _phrasing(phrasings))),
                   opener=lambda t: t.prompt, thanks="Thanks!", all_or_nothing=True)


def opener_persona(name: str, opener: str, phrasings: tuple[str, ...] | None = None) -> Persona:
    """A persona whose preference is a fixed opening, asked for in ``phrasings`` (default: three of its own)."""
    return preference_persona(name, f"starts with '{opener}'", lambda r: r.lstrip().startswith(opener),
                              phrasings or (f'Please always start your answer with "{opener}".',
                                            f'From now on, start every answer with "{opener}".',
                                            f'Next time, begin your answer with "{opener}".'))


ONE_SENTENCE_MAX_WORDS = 20
UNDER_TEN_MAX_WORDS = 10
OPENER = "Sure!"
GREAT_OPENER = "Great question!"

ONE_SENTENCE = preference_persona(
    "one_sentence", f"one sentence of at most {ONE_SENTENCE_MAX_WORDS} words",
    lambda r: sentence_count(r) == 1 and len(r.split()) <= ONE_SENTENCE_MAX_WORDS,
    ("From now on, answer in one short sentence.", "Please always keep your answer to one short sentence.",
     "Next time, just one short sentence please."))
UNDER_TEN = preference_persona(
    "under_ten", f"at most {UNDER_TEN_MAX_WORDS} words", lambda r: 0 < len(r.split()) <= UNDER_TEN_MAX_WORDS,
    (f"Next time, keep it under {UNDER_TEN_MAX_WORDS} words.",
     f"From now on, please answer in under {UNDER_TEN_MAX_WORDS} words.",
     f"Please always keep your answers under {UNDER_TEN_MAX_WORDS} words."))
SURE = opener_persona("sure", OPENER)
GREAT = opener_persona("great", GREAT_OPENER)
SO = opener_persona("so", "So,")
THE_ANSWER = opener_persona("the_answer", "The answer is")
ASKS_BACK = preference_persona(
    "asks_back", "ends with a question to the user", lambda r: r.rstrip().endswith("?"),
    ("Please always end your answer with a follow-up question for me.",
     "From now on, finish every answer with a question for me.",
     "Next time, end with a question back to me."))

PERSONAS: dict[str, Persona] = {p.name: p for p in (STUDENT, TA, TEACHER, TERSE, ONE_SENTENCE, UNDER_TEN, SURE, GREAT,
                                                    SO, THE_ANSWER, ASKS_BACK)}
PREFERENCE_PERSONAS = ("one_sentence", "under_ten", "sure", "great", "so", "the_answer", "asks_back")

# ------------------------------------------------------------------ joint mode (upstream's roles together)


@dataclass(frozen=True)
class RoleTask:
    """A task of one role of a ``JointPersona``: asked, answered, corrected and scored by that role."""

    role: Persona
    task: Any

    @property
    def id(self) -> str:
        return f"{self.role.name}:{self.task.id}"


@dataclass(frozen=True)
class JointPersona:
    """Upstream's joint mode (``openclaw-test``: the student, TA and teacher phases against one agent): one user
    who plays several roles, one session each in turn, so that one server (one memory, one policy) learns all of
    their preferences at once. Its tasks are ``RoleTask``s (``role_tasks``); everything else is its roles'."""

    name: str
    roles: tuple[Persona, ...]

    def first_message(self, t: RoleTask) -> str:
        return t.role.first_message(t.task)

    def failed(self, t: RoleTask, response: str) -> list[Check]:
        return t.role.failed(t.task, response)

    def score(self, t: RoleTask, response: str) -> float:
        return t.role.score(t.task, response)

    def reply(self, t: RoleTask, response: str) -> str:
        return t.role.reply(t.task, response)


def role_tasks(roles: tuple[Persona, ...], tasks_of: Callable[[Persona, int], list], n: int) -> list[RoleTask]:
    """``n`` tasks taking the roles in turn (role 0's first task, role 1's first, ..., role 0's second, ...);
    ``tasks_of(role, k)``: ``k`` of the role's own tasks."""
    per_role = [tasks_of(role, -(-n // len(roles))) for role in roles]
    return [RoleTask(roles[i % len(roles)], per_role[i % len(roles)][i // len(roles)]) for i in range(n)]


JOINT = JointPersona("joint", (STUDENT, TA, TEACHER))  # upstream's three roles, in its order
JOINT_PERSONAS: dict[str, JointPersona] = {JOINT.name: JOINT}


def get_persona(name: str) -> Persona | JointPersona:
    """The persona ``name`` names: one of ``PERSONAS``, or a joint one (``JOINT_PERSONAS``)."""
    found = PERSONAS.get(name) or JOINT_PERSONAS.get(name)
    if found is None:
        raise ValueError(f"unknown persona {name!r}; known: {sorted([*PERSONAS, *JOINT_PERSONAS])}")
    return found
