"""The canary's built-in general questions with short reference answers.

Held out: never trained on. The trainer measures how likely each new version finds these answers
(teacher-forced, with the end-of-turn token), which answers it still *recalls* (the key word is
its top choice where the reference answer reaches it), and generates greedily for the first few
(those a healthy model answers in a few tokens, so generation usually ends early); a version that
forgets plain knowledge or how to stop is refused (``slime_ext.trainers.canary``).
The answers are short, plain and factual, in the register of a small instruct model, so the
figure moves with general ability, not with style. Each entry is ``(question, reference answer,
keys)``: a generated answer *answers* the question when it contains one of the lowercase keys.
The 64 after the first 12 were added for recall (issue #15): many facts of the same few shapes
(capitals, opposites, languages), so that forgetting a kind of fact shows as many lost at once.
"""

from __future__ import annotations

from typing import Sequence


def holds_key(keys: Sequence[str], text: str) -> bool:
    """Does ``text`` answer the question: does it contain one of the lowercase ``keys``
    (case-insensitive)? The one rule for reading an answer (the canary, the experiment)."""
    low = text.lower()
    return any(k in low for k in keys)

NLL_REFERENCES = 12  # the first entries: their answers' NLL is the canary's ``nll`` (its limit was set on them)

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
    # scored teacher-forced only (the NLL and the facts recalled)
    ("What is the capital of Spain?", "The capital of Spain is Madrid.", ("madrid",)),
    ("What is the capital of Italy?", "The capital of Italy is Rome.", ("rome",)),
    ("What is the capital of Portugal?", "The capital of Portugal is Lisbon.", ("lisbon",)),
    ("What is the capital of Turkey?", "The capital of Turkey is Ankara.", ("ankara",)),
    ("What is the capital of Argentina?", "The capital of Argentina is Buenos Aires.", ("buenos",)),
    ("What is the capital of Denmark?", "The capital of Denmark is Copenhagen.", ("copenhagen",)),
    ("What is the capital of Finland?", "The capital of Finland is Helsinki.", ("helsinki",)),
    ("What is the capital of Belgium?", "The capital of Belgium is Brussels.", ("brussels",)),
    ("What is the capital of the Czech Republic?", "The capital of the Czech Republic is Prague.", ("prague",)),
    ("What is the capital of Vietnam?", "The capital of Vietnam is Hanoi.", ("hanoi",)),
    ("What is the capital of Colombia?", "The capital of Colombia is Bogotá.", ("bogot",)),
    ("What is the capital of Iran?", "The capital of Iran is Tehran.", ("tehran",)),
    ("What is the capital of Iraq?", "The capital of Iraq is Baghdad.", ("baghdad",)),
    ("What is the capital of Saudi Arabia?", "The capital of Saudi Arabia is Riyadh.", ("riyadh",)),
    ("What is the capital of Romania?", "The capital of Romania is Bucharest.", ("bucharest",)),
    ("What is the capital of Pakistan?", "The capital of Pakistan is Islamabad.", ("islamabad",)),
    ("What is the capital of New Zealand?", "The capital of New Zealand is Wellington.", ("wellington",)),
    ("What is the capital of Scotland?", "The capital of Scotland is Edinburgh.", ("edinburgh",)),
    ("What is the capital of Malaysia?", "The capital of Malaysia is Kuala Lumpur.", ("kuala",)),
    ("What is the capital of Bangladesh?", "The capital of Bangladesh is Dhaka.", ("dhaka",)),
    ("What is the capital of Venezuela?", "The capital of Venezuela is Caracas.", ("caracas",)),
    ("What is the capital of Ethiopia?", "The capital of Ethiopia is Addis Ababa.", ("addis",)),
    ("What is the opposite of cold?", "The opposite of cold is hot.", ("hot",)),
    ("What is the opposite of light?", "The opposite of light is dark.", ("dark",)),
    ("What is the opposite of high?", "The opposite of high is low.", ("low",)),
    ("What is the opposite of good?", "The opposite of good is bad.", ("bad",)),
    ("What is the opposite of rich?", "The opposite of rich is poor.", ("poor",)),
    ("What is the opposite of clean?", "The opposite of clean is dirty.", ("dirty",)),
    ("What is the opposite of love?", "The opposite of love is hate.", ("hate",)),
    ("What is the opposite of black?", "The opposite of black is white.", ("white",)),
    ("What is the opposite of first?", "The opposite of first is last.", ("last",)),
    ("What is the opposite of push?", "The opposite of push is pull.", ("pull",)),
    ("What is the opposite of thick?", "The opposite of thick is thin.", ("thin",)),
    ("What is the opposite of inside?", "The opposite of inside is outside.", ("outside",)),
    ("What is the opposite of true?", "The opposite of true is false.", ("false",)),
    ("What is the opposite of buy?", "The opposite of buy is sell.", ("sell",)),
    ("What is the opposite of win?", "The opposite of win is lose.", ("lose",)),
    ("What is the opposite of long?", "The opposite of long is short.", ("short",)),
    ("What language is spoken in Portugal?", "The language spoken in Portugal is Portuguese.", ("portuguese",)),
    ("What language is spoken in Greece?", "The language spoken in Greece is Greek.", ("greek",)),
    ("What language is spoken in the Netherlands?", "The language spoken in the Netherlands is Dutch.", ("dutch",)),
    ("What language is spoken in Turkey?", "The language spoken in Turkey is Turkish.", ("turkish",)),
    ("What language is spoken in Poland?", "The language spoken in Poland is Polish.", ("polish",)),
    ("What language is spoken in China?", "The main language spoken in China is Mandarin Chinese.", ("mandarin", "chinese")),
    ("How many hours are in a day?", "There are 24 hours in a day.", ("24",)),
    ("How many months are in a year?", "There are 12 months in a year.", ("12", "twelve")),
    ("How many minutes are in an hour?", "There are 60 minutes in an hour.", ("60", "sixty")),
    ("How many continents are there?", "There are seven continents.", ("seven", "7")),
    ("What is the largest planet in our solar system?", "The largest planet in our solar system is Jupiter.", ("jupiter",)),
    ("What is the largest continent?", "The largest continent is Asia.", ("asia",)),
    ("What is the longest river in the world?", "The longest river in the world is the Nile.", ("nile",)),
    ("What is the currency of Japan?", "The currency of Japan is the yen.", ("yen",)),
    ("Who wrote the Harry Potter books?", "The Harry Potter books were written by J.K. Rowling.", ("rowling",)),
    ("Who was the first president of the United States?", "The first president of the United States was George Washington.", ("washington",)),
    ("Which animal is known as the king of the jungle?", "The lion is known as the king of the jungle.", ("lion",)),
    ("What do cows produce?", "Cows produce milk.", ("milk",)),
    ("What is a baby dog called?", "A baby dog is called a puppy.", ("pupp",)),
    ("What is a baby cat called?", "A baby cat is called a kitten.", ("kitten",)),
    ("What color is grass?", "Grass is green.", ("green",)),
    ("What gas do plants absorb from the air?", "Plants absorb carbon dioxide from the air.", ("carbon",)),
    ("What is frozen water called?", "Frozen water is called ice.", ("ice",)),
    ("What is the freezing point of water in Celsius?", "Water freezes at 0 degrees Celsius.", ("0",)),
    ("Which star is closest to Earth?", "The star closest to Earth is the Sun.", ("sun",)),
    ("What is the hardest natural substance?", "The hardest natural substance is diamond.", ("diamond",)),
)
