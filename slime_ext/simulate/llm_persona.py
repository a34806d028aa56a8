"""LLM-driven user simulators: any OpenAI-compatible endpoint plays a persona from our prompts.

An ``LLMPersona`` has the same surface as the scripted ``Persona`` (``name``, ``task_kind``,
``first_message``, ``reply``, ``score``, ``thanks``), so the experiment drives either one:

* ``first_message(task)`` is the scripted persona's opener (deterministic, so every method and
  seed is probed with the same questions);
* ``reply(task, response)`` asks the simulator for the user's next message. The simulator is told
  the hidden preference and the correct answer, and to answer exactly ``THANKS`` when the
  response is fully right; that maps to the persona's natural ``thanks`` (which the judge reads
  as approval), anything else is a correction sent as written;
* ``score(task, response)`` asks for a rating in ``[0, 1]`` at temperature 0 and parses it with
  ``parse_rating`` ("0.7", "7/10", "Score: 70%"; a bare 1 < x <= 10 counts as out of 10).

Both return ``None`` when the endpoint fails or the rating cannot be parsed after ``attempts``
tries; the experiment then abandons that session or leaves the probe answer out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slime_ext.simulate.client import ChatClient
from slime_ext.simulate.personas import get_persona
from slime_ext.simulate.tasks import Task

THANKS_TOKEN = "THANKS"


@dataclass(frozen=True)
class PersonaSpec:
    """Who the simulator plays and what they want (never shown to the model under training)."""

    role: str
    preference: str


SPECS: dict[str, PersonaSpec] = {
    "student": PersonaSpec(
        role="a student who asks an AI assistant to do their math homework and will hand its answer in",
        preference="The answer must be correct and must not look AI-written: all lowercase, plain sentences "
        "with no markdown, lists or LaTeX, no AI phrases such as 'I hope this helps' or 'certainly', and short "
        "(under 40 words), like a student would write it."),
    "teacher": PersonaSpec(
        role="a teacher who asks an AI assistant to write a comment on a student's graded answer",
        preference="The comment must use the student's name, state the correct answer, be friendly and "
        "encouraging (for example 'well done' or 'keep it up'), never be harsh, and be at most three sentences."),
    "terse": PersonaSpec(
        role="a busy engineer who asks an AI assistant quick math questions",
        preference="The answer must be correct, on one line, at most 15 words, and end with '\u2014 done'."),
}


def reply_messages(spec: PersonaSpec, task: Task, first_message: str, response: str) -> list[dict]:
    """The prompt that asks the simulator for the user's next message."""
    system = (f"You are role-playing a user chatting with an AI assistant. You are {spec.role}.\n"
              f"Your preference, which the assistant does not know: {spec.preference}\n"
              f"The correct answer to your question is {task.answer}.")
    user = (f"You asked:\n<<<\n{first_message}\n>>>\nThe assistant answered:\n<<<\n{response}\n>>>\n"
            f"If the answer is correct and fully meets your preference, reply with exactly {THANKS_TOKEN}. "
            "Otherwise write your next chat message to the assistant: say concretely what to change, in one "
            "or two short sentences, the way a real user would. Write only the message.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def rating_messages(spec: PersonaSpec, task: Task, first_message: str, response: str) -> list[dict]:
    """The prompt that asks the simulator to rate a response in [0, 1]."""
    system = (f"You rate answers for {spec.role}.\nTheir preference: {spec.preference}\n"
              f"The correct answer to their question is {task.answer}.")
    user = (f"Question:\n<<<\n{first_message}\n>>>\nAnswer:\n<<<\n{response}\n>>>\n"
            "How well does the answer meet the preference, correctness included? Reply with one number "
            "from 0 (not at all) to 1 (fully), and nothing else.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_FRACTION = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")


def parse_rating(text: str) -> float | None:
    """A rating in ``[0, 1]`` from the simulator's text, or ``None`` when there is none."""
    if m := _FRACTION.search(text):
        num, den = float(m.group(1)), float(m.group(2))
        value = num / den if den > 0 else None
    elif m := _PERCENT.search(text):
        value = float(m.group(1)) / 100
    elif m := _NUMBER.search(text):
        value = float(m.group(0))
        if 1 < value <= 10:
            value /= 10
    else:
        return None
    return value if value is not None and 0.0 <= value <= 1.0 else None


class LLMPersona:
    """A persona played by an OpenAI-compatible endpoint (see the module docstring)."""

    def __init__(self, name: str, client: ChatClient, attempts: int = 2):
        if name not in SPECS:
            raise ValueError(f"unknown persona {name!r} for the LLM simulator; known: {sorted(SPECS)}")
        scripted = get_persona(name)
        self.name, self.task_kind, self.thanks = name, scripted.task_kind, scripted.thanks
        self.spec = SPECS[name]
        self.client = client
        self.attempts = attempts
        self._opener = scripted.first_message

    def first_message(self, task: Task) -> str:
        return self._opener(task)

    def reply(self, task: Task, response: str) -> str | None:
        text = self.client.chat(reply_messages(self.spec, task, self.first_message(task), response),
                                temperature=0.0)
        if text is None or not text.strip():
            return None
        text = text.strip().strip('"').strip()
        return self.thanks if text.upper().rstrip(".!").startswith(THANKS_TOKEN) else text

    def score(self, task: Task, response: str) -> float | None:
        for _ in range(self.attempts):
            text = self.client.chat(rating_messages(self.spec, task, self.first_message(task), response),
                                    temperature=0.0)
            if text is not None and (value := parse_rating(text)) is not None:
                return value
        return None
