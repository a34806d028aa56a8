"""The canary's built-in general questions with short reference answers.

Held out: never trained on. The trainer measures how likely each new version finds these answers
(teacher-forced, with the end-of-turn token) and generates greedily for the first few (those a
healthy model answers in a few tokens, so generation usually ends early);
a version that forgets plain knowledge or how to stop is refused (``slime_ext.trainers.canary``).
The answers are short, plain and factual, in the register of a small instruct model, so the
figure moves with general ability, not with style. Each entry is ``(question, reference answer,
keys)``: a generated answer *answers* the question when it contains one of the lowercase keys.
"""

from __future__ import annotations

from typing import Sequence


def holds_key(keys: Sequence[str], text: str) -> bool:
    """Does ``text`` answer the question: does it contain one of the lowercase ``keys``
    (case-insensitive)? The one rule for reading an answer (the canary, the experiment)."""
    low = text.lower()
    return any(k in low for k in keys)

CANARY_QA: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", "The capital of France is Paris.", ("paris",)),
    ("How many days are in a week?", "There are seven days in a week.", ("seven", "7")),
    ("What is 2 + 3?", "2 + 3 = 5.", ("5", "five")),
    ("What is the opposite of hot?", "The opposite of hot is cold.", ("cold",)),
    ("What color is the sky on a clear day?", "On a clear day, the sky is blue.", ("blue",)),
    ("What do bees make?", "Bees make honey.", ("honey",)),
    ("Which planet do we live on?", "We live on Earth.", ("earth",)),
    ("What is water made of?", "Water is made of hydrogen and oxygen (H2O).", ("hydrogen", "h2o")),
    ("How many legs does a spider have?", "A spider has eight legs.", ("eight", "8")),
    ("Name a fruit that is yellow.", "A banana is a yellow fruit.", ("banana", "lemon", "pineapple", "mango")),
    ("What do plants need to grow?", "Plants need sunlight, water, air and nutrients from the soil to grow.", ("sunlight", "light", "water")),
    ("Who wrote Romeo and Juliet?", "Romeo and Juliet was written by William Shakespeare.", ("shakespeare",)),
)
