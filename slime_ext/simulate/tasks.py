"""Procedural tasks for simulated users: grade-school math word problems and grading requests.

``math_tasks(split, n, seed)`` draws ``n`` distinct word problems with exact integer answers from
four templates (``kind``):

- ``shopping``: ``a`` items at ``p`` dollars each and ``b`` items at ``q`` dollars each; answer
  ``a*p + b*q``.
- ``sharing``: ``k*m + r`` things, ``r`` kept, the rest shared equally among ``k`` friends;
  answer ``m`` (``r == 0``: nothing kept).
- ``rate``: a machine makes ``r`` things per hour for ``h`` hours, or a vehicle travels ``r`` km
  per hour for ``h`` hours; answer ``r*h``.
- ``multistep``: start with ``a``, get ``b`` more, give away ``c``, then make the collection ``k``
  times as big; answer ``(a + b - c) * k``.

**Split.** A problem's *key* is its kind and numbers (names, nouns and wording are decoration).
A key is held out when ``sha256(key) % 100 < HELDOUT_PERCENT``; otherwise it is train. So the
split is fixed (independent of ``seed`` and ``n``), and no held-out problem has the numbers of a
train problem of the same kind. Within one call, problems are distinct by key.

``grading_tasks(split, n, seed)`` wraps the math problems of the same split as requests to a
teacher: "grade this answer by your student <name>". Half of the student answers (by the seed)
are wrong. ``Task.answer`` is the correct answer; ``Task.facts`` are what a good comment must
mention (the student's name and the correct answer).

Everything is deterministic from ``(split, n, seed)``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

SPLITS = ("train", "heldout")
HELDOUT_PERCENT = 20
KINDS = ("shopping", "sharing", "rate", "multistep")

NAMES = (
    "Maya", "Liam", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Chloe", "Mateo", "Priya", "Ben",
    "Sofia", "Kenji", "Amara", "Lucas",
)
_ITEMS = ("notebooks", "pens", "apples", "stickers", "marbles", "books", "candles", "mugs", "toy cars")
_SHARED = ("cookies", "cards", "stickers", "marbles", "grapes", "pencils", "beads")
_MACHINES = (("machine", "bottles"), ("printer", "pages"), ("bakery oven", "loaves"), ("robot", "boxes"))
_VEHICLES = ("train", "bus", "truck", "boat")
_COLLECTIONS = ("stickers", "stamps", "coins", "shells", "baseball cards")


@dataclass(frozen=True)
class Task:
    """One task. ``answer`` is the exact correct integer; grading tasks also carry the student."""

    id: str
    prompt: str
    answer: int
    kind: str
    student: str = ""
    student_answer: int | None = None
    problem: str = ""

    @property
    def facts(self) -> tuple[str, ...]:
        """What a good response must mention: the correct answer (and, grading, the student)."""
        return (self.student, str(self.answer)) if self.student else (str(self.answer),)


def split_of(key: tuple) -> str:
    """``"heldout"`` or ``"train"`` for a problem key (fixed; see the module docstring)."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()
    return "heldout" if int(digest, 16) % 100 < HELDOUT_PERCENT else "train"


def _task_id(prefix: str, key: tuple) -> str:
    return f"{prefix}-{hashlib.sha256(repr(key).encode()).hexdigest()[:12]}"


def _shopping(rng: random.Random) -> tuple[tuple, str, int]:
    a, p, b, q = rng.randint(2, 9), rng.randint(2, 15), rng.randint(2, 9), rng.randint(2, 15)
    name = rng.choice(NAMES)
    i1, i2 = rng.sample(_ITEMS, 2)
    prompt = (
        f"{name} buys {a} {i1} at {p} dollars each and {b} {i2} at {q} dollars each. "
        f"How many dollars does {name} spend in total?"
    )
    return ("shopping", a, p, b, q), prompt, a * p + b * q


def _sharing(rng: random.Random) -> tuple[tuple, str, int]:
    k, m, r = rng.randint(2, 9), rng.randint(2, 20), rng.randint(0, 9)
    name, thing = rng.choice(NAMES), rng.choice(_SHARED)
    if r:
        prompt = (
            f"{name} has {k * m + r} {thing}, keeps {r}, and shares the rest equally among {k} friends. "
            f"How many {thing} does each friend get?"
        )
    else:
        prompt = f"{name} has {k * m} {thing} and shares them equally among {k} friends. How many {thing} does each friend get?"
    return ("sharing", k, m, r), prompt, m


def _rate(rng: random.Random) -> tuple[tuple, str, int]:
    variant = rng.choice(("make", "travel"))
    if variant == "make":
        r, h = rng.randint(2, 40), rng.randint(2, 12)
        machine, things = rng.choice(_MACHINES)
        prompt = f"A {machine} makes {r} {things} every hour. How many {things} does it make in {h} hours?"
    else:
        r, h = rng.randint(20, 120), rng.randint(2, 9)
        prompt = f"A {rng.choice(_VEHICLES)} travels at {r} km per hour for {h} hours. How many kilometers does it travel?"
    return ("rate", r, h), prompt, r * h


def _multistep(rng: random.Random) -> tuple[tuple, str, int]:
    a, b, k = rng.randint(10, 60), rng.randint(2, 30), rng.randint(2, 4)
    c = rng.randint(1, a + b - 1)
    name, things = rng.choice(NAMES), rng.choice(_COLLECTIONS)
    prompt = (
        f"{name} has {a} {things}, gets {b} more from a friend, then gives away {c}. "
        f"Then {name} collects more until the collection is {k} times as big. How many {things} does {name} have now?"
    )
    return ("multistep", a, b, c, k), prompt, (a + b - c) * k


_TEMPLATES = {"shopping": _shopping, "sharing": _sharing, "rate": _rate, "multistep": _multistep}


def _check(split: str, n: int) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")


def math_tasks(split: str = "train", n: int = 100, seed: int = 0, kinds: tuple[str, ...] = KINDS) -> list[Task]:
    """``n`` distinct math word problems of ``split``, kinds in turn (see the module docstring)."""
    _check(split, n)
    unknown = set(kinds) - set(_TEMPLATES)
    if not kinds or unknown:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    rng = random.Random(f"math:{split}:{seed}")
    seen: set[tuple] = set()
    out: list[Task] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 2000 * (n + 1):
            raise ValueError(f"cannot draw {n} distinct {split} problems of kinds {kinds}")
        kind = kinds[len(out) % len(kinds)]
        key, prompt, answer = _TEMPLATES[kind](rng)
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        out.append(Task(id=_task_id(kind, key), prompt=prompt, answer=answer, kind=kind))
    return out


def grading_tasks(split: str = "train", n: int = 100, seed: int = 0) -> list[Task]:
    """``n`` requests to grade a student's answer to a ``split`` math problem (half wrong)."""
    _check(split, n)
    rng = random.Random(f"grading:{split}:{seed}")
    out: list[Task] = []
    for problem in math_tasks(split, n, seed):
        student = rng.choice(NAMES)
        given = problem.answer
        if rng.random() < 0.5:
            delta = rng.choice([d for d in range(-10, 11) if d and problem.answer + d >= 0])
            given = problem.answer + delta
        prompt = (
            f"Grade this answer from your student {student}.\n"
            f"Problem: {problem.prompt}\n"
            f"{student}'s answer: {given}\n"
            f"Write a short comment for {student}."
        )
        out.append(Task(
            id=_task_id("grading", (problem.id, student, given)), prompt=prompt, answer=problem.answer,
            kind="grading", student=student, student_answer=given, problem=problem.prompt,
        ))
    return out
