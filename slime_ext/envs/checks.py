"""What settings share to check an episode and report on it: a check's result, clipped output, the split rule.

Pure helpers, no I/O. ``split_of`` is the train / held-out rule of the settings whose task ids are stable
strings (terminal, swe): a task's split follows from its id alone, so adding a task never moves another.
"""

from __future__ import annotations

import dataclasses
import hashlib

HELDOUT_MODULUS = 5  # about one task in five is held out


@dataclasses.dataclass(frozen=True)
class CheckResult:
    description: str
    passed: bool
    detail: str


def clip(text: str, max_chars: int, name: str) -> str:
    """`text` without its final newline, cut to `max_chars` characters with a marker saying how much was cut."""
    text = text[:-1] if text.endswith("\n") else text
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... {name} truncated: {len(text) - max_chars} more characters not shown]"


def split_of(task_id: str) -> str:
    """"heldout" iff sha256(task_id) as an integer is divisible by HELDOUT_MODULUS, else "train"."""
    return "heldout" if int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % HELDOUT_MODULUS == 0 else "train"
