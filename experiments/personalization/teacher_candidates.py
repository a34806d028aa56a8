"""What the hinted teacher can teach: candidate preferences, measured before choosing personas.

    .venv/bin/python experiments/personalization/teacher_candidates.py [NAME ...] [--model DIR]

For each candidate preference (below: the user's correction and a test of an answer), the base
model's greedy answers to 20 general questions (the 12 held-out ones and 8 training ones) are
checked without the hint and with it, the hint exactly as the heuristic judge extracts it from the
correction and placed exactly where the trainer's teacher gets it (``slime_ext.learning.teacher``). Prints,
per candidate, the fraction of answers that keep the preference, and the fraction that keep it
**and** still answer the question (hold the answer's key: the experiment's all-or-nothing rule).
The README's "What the teacher can teach" tables come from this. One thread; about 50 s per
candidate on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import re

import torch

from slime_ext.judge.heuristic import heuristic_hint
from slime_ext.models import resolve_model
from slime_ext.simulate.questions import preference_tasks
from slime_ext.learning.teacher import teacher_messages
from slime_ext.trainers.canary_data import holds_key


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def opener(prefix: str):
    return lambda t: t.strip().startswith(prefix)


def ending(suffix: str):
    return lambda t: t.strip().endswith(suffix)


def lines_starting(pattern: str):
    return lambda t: sum(bool(re.match(pattern, line.strip())) for line in t.splitlines()) >= 2


def words_of(language: str):
    common = {"french": r"\b(le|la|les|est|de|des|une|et|du|en)\b", "spanish": r"\b(el|la|los|las|es|de|una|y|del|en)\b"}
    return lambda t: len(set(re.findall(common[language], t.lower()))) >= 3


CANDIDATES = {  # name: (the user's correction, does an answer keep it)
    "one_sentence": ("From now on, answer in one short sentence.", lambda t: len(sentences(t)) == 1 and len(t.split()) <= 20),
    "under_ten": ("Next time, keep it under 10 words.", lambda t: 0 < len(t.split()) <= 10),
    "under_30": ("Please keep your answers under 30 words.", lambda t: 0 < len(t.split()) <= 30),
    "two_sentences": ("From now on, answer in exactly two sentences.", lambda t: len(sentences(t)) == 2),
    "detail": ("From now on, please always explain in detail, in at least three sentences.", lambda t: len(sentences(t)) >= 3),
    "just_answer": ("Next time, just give me the answer in a few words, no full sentence.", lambda t: len(t.split()) <= 5),
    "one_word": ("Next time, answer in one word.", lambda t: len(t.split()) <= 2),
    "sure": ('Please always start your answer with "Sure!".', opener("Sure!")),
    "great": ('Please always start with "Great question!".', opener("Great question!")),
    "answer_colon": ('From now on, start every answer with "Answer:".', opener("Answer:")),
    "the_answer": ('Please always start your answer with "The answer is".', opener("The answer is")),
    "so": ('Please always start your answer with "So,".', opener("So,")),
    "in_short": ('From now on, start your answer with "In short,".', opener("In short")),
    "i_think": ('From now on, start every answer with "I think".', opener("I think")),
    "yes": ('Please always start your answer with "Yes".', opener("Yes")),
    "hello": ('From now on, start every answer with "Hello!".', opener("Hello")),
    "asks_back": ("Please always end your answer with a follow-up question for me.", ending("?")),
    "hope": ('Please always end your answer with "Hope this helps!".', ending("Hope this helps!")),
    "exclaim": ("Please always end your answer with an exclamation mark!", ending("!")),
    "alex": ("Please always call me Alex.", lambda t: "alex" in t.lower()),
    "fun_fact": ("Please always add a fun fact at the end.", lambda t: "fun fact" in t.lower()),
    "bullets": ("From now on, please answer with bullet points.", lines_starting(r"[-*\u2022] ")),
    "numbered": ("Please always answer as a numbered list.", lines_starting(r"\d+[.)] ")),
    "bold": ("Please always put the key words in bold.", lambda t: "**" in t),
    "lowercase": ("From now on, write everything in lowercase.", lambda t: t == t.lower()),
    "french": ("From now on, please answer in French.", words_of("french")),
    "spanish": ("From now on, please answer in Spanish.", words_of("spanish")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"candidates [all: {', '.join(CANDIDATES)}]")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def answer(messages: list[dict]) -> str:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=64, do_sample=False)
        return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    questions = preference_tasks("heldout", 12) + preference_tasks("train", 8, 0)
    base = [answer([{"role": "user", "content": q.prompt}]) for q in questions]
    print(f"{'candidate':14s} {'base keeps':>10s} {'teacher keeps':>13s} {'and answers':>11s}  hint")
    for name in args.names or CANDIDATES:
        correction, keeps = CANDIDATES[name]
        hint = heuristic_hint(correction, "user")
        if hint is None:
            print(f"{name:14s} the judge reads no hint in {correction!r}", flush=True)
            continue
        taught = [answer(teacher_messages([{"role": "user", "content": q.prompt}], hint)) for q in questions]
        n = len(questions)
        both = sum(keeps(t) and holds_key(q.keys, t) for q, t in zip(questions, taught)) / n
        print(f"{name:14s} {sum(map(keeps, base)) / n:10.2f} {sum(map(keeps, taught)) / n:13.2f} {both:11.2f}  {hint!r}",
              flush=True)


if __name__ == "__main__":
    main()
