"""General questions with a checkable answer: the tasks of the preference personas and the
held-out correctness set of the personalization experiment.

Each question has one or more *keys*: lowercase strings of which at least one must appear in a
correct answer (``trainers.canary_data.holds_key``, the canary's rule). The questions are short and factual, and every one of them is
answered correctly (a key within 40 tokens) by the base SmolLM2-135M at temperature 0, so what
the experiment measures is the user's preference and any forgetting, not the 135M model's gaps
(it calls the lion a jaguar); none is among the canary's questions (``trainers/canary_data.py``).

**Splits** (fixed, independent of seed): ``PREFERENCE_QUESTIONS`` are what a persona asks;
``preference_tasks("heldout", n)`` are the first ``HELDOUT_PREFERENCE`` of them (never trained
on; the compliance probe), ``"train"`` the rest, shuffled by the seed. ``CORRECTNESS_QUESTIONS``
are only ever probed, never asked in training; they are questions the base SmolLM2-135M answers
correctly at temperature 0, so a drop is forgetting, not noise around a wrong answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    """One question: ``id`` (unique across both sets), ``prompt`` and its answer ``keys``."""

    id: str
    prompt: str
    keys: tuple[str, ...]

PREFERENCE_QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # held out (the compliance probe): the first HELDOUT_PREFERENCE
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("What is the chemical symbol for gold?", ("au",)),
    ("What is the main language spoken in Brazil?", ("portuguese",)),
    ("What is the capital of Canada?", ("ottawa",)),
    ("What is the opposite of early?", ("late",)),
    ("What is the capital of Peru?", ("lima",)),
    ("Which animal says meow?", ("cat",)),
    ("What do chickens lay?", ("egg",)),
    ("What is the opposite of full?", ("empty",)),
    ("What language is spoken in Italy?", ("italian",)),
    ("What is the capital of Indonesia?", ("jakarta",)),
    # train
    ("What is the chemical symbol for water?", ("h2o",)),
    ("How many sides does a triangle have?", ("three", "3")),
    ("What is the main language spoken in Mexico?", ("spanish",)),
    ("What is the capital of Germany?", ("berlin",)),
    ("Which planet is known as the Red Planet?", ("mars",)),
    ("How many legs does a dog have?", ("four", "4")),
    ("What is the largest mammal?", ("whale",)),
    ("What is the opposite of up?", ("down",)),
    ("What is the capital of Egypt?", ("cairo",)),
    ("Which organ pumps blood through the body?", ("heart",)),
    ("What is the currency of the United States?", ("dollar",)),
    ("What is the capital of Australia?", ("canberra",)),
    ("What is the capital of Ireland?", ("dublin",)),
    ("What is the capital of Norway?", ("oslo",)),
    ("What is the capital of Poland?", ("warsaw",)),
    ("What is the capital of India?", ("delhi",)),
    ("What is the capital of Thailand?", ("bangkok",)),
    ("What is the capital of Austria?", ("vienna",)),
    ("What language is spoken in Germany?", ("german",)),
    ("What is the capital of the Netherlands?", ("amsterdam",)),
    ("What is the opposite of old?", ("young", "new")),
    ("What is the opposite of wet?", ("dry",)),
    ("What is the opposite of hard?", ("soft", "easy")),
    ("What is the opposite of open?", ("close",)),
    ("What is the opposite of strong?", ("weak",)),
    ("What is the capital of Hungary?", ("budapest",)),
    ("What is the capital of Chile?", ("santiago",)),
    ("What is the capital of Cuba?", ("havana",)),
    ("What is the capital of the Philippines?", ("manila",)),
    ("What is the capital of Nigeria?", ("abuja",)),
    ("What language is spoken in Japan?", ("japanese",)),
    ("What language is spoken in Spain?", ("spanish",)),
    ("What language is spoken in Russia?", ("russian",)),
    ("What is the opposite of left?", ("right",)),
    ("What is the opposite of north?", ("south",)),
    ("What is the boiling point of water in Celsius?", ("100",)),
)
HELDOUT_PREFERENCE = 12

CORRECTNESS_QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of the United Kingdom?", ("london",)),
    ("How many seconds are in a minute?", ("60", "sixty")),
    ("What is the capital of Russia?", ("moscow",)),
    ("What is the largest desert in Africa?", ("sahara",)),
    ("Who painted the Mona Lisa?", ("leonardo", "da vinci")),
    ("What is the opposite of day?", ("night",)),
    ("What is the capital of China?", ("beijing",)),
    ("What is the tallest mountain in the world?", ("everest",)),
    ("What is the capital of Greece?", ("athens",)),
    ("What is the capital of Kenya?", ("nairobi",)),
    ("What is the capital of Sweden?", ("stockholm",)),
    ("What is the opposite of big?", ("small", "little")),
    ("What is the opposite of fast?", ("slow",)),
    ("What is the opposite of happy?", ("sad", "unhappy")),
    ("What language is spoken in France?", ("french",)),
    ("What is the capital of South Korea?", ("seoul",)),
)


def _task(i: int, kind: str, question: str, keys: tuple[str, ...]) -> Question:
    return Question(id=f"{kind}-{i}", prompt=question, keys=keys)


def preference_tasks(split: str, n: int, seed: int = 0) -> list[Question]:
    """``n`` questions of ``split`` ("heldout": in a fixed order; "train": shuffled by ``seed``,
    repeated in a new order when ``n`` is more than there are)."""
    if split == "heldout":
        pool = PREFERENCE_QUESTIONS[:HELDOUT_PREFERENCE]
        if n > len(pool):
            raise ValueError(f"only {len(pool)} held-out preference questions, asked for {n}")
        return [_task(i, "question", q, k) for i, (q, k) in enumerate(pool[:n])]
    if split != "train":
        raise ValueError(f"unknown split {split!r}; use 'train' or 'heldout'")
    pool = list(enumerate(PREFERENCE_QUESTIONS))[HELDOUT_PREFERENCE:]
    rng = random.Random(seed)
    out: list[Question] = []
    while len(out) < n:
        order = pool[:]
        rng.shuffle(order)
        out += [_task(i, "question", q, k) for i, (q, k) in order]
    return out[:n]


def correctness_tasks(n: int | None = None) -> list[Question]:
    """The held-out correctness questions (all, or the first ``n``)."""
    pool = CORRECTNESS_QUESTIONS if n is None else CORRECTNESS_QUESTIONS[:n]
    return [_task(i, "correctness", q, k) for i, (q, k) in enumerate(pool)]
