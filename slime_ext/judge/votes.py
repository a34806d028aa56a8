"""Reading a judge's answer and combining m votes (pure functions).

- ``parse_vote``: the LAST complete ``\\boxed{...}`` expression of the text decides. Its content,
  with whitespace and ``{}`` / ``\\text{}``-style wrappers removed, must be -1, 0 or 1 (``+1`` and
  ``- 1`` are accepted); anything else, or no boxed expression at all, is ``None`` (an abstention).
  A trailing unclosed ``\\boxed{`` (a truncated answer) is not an expression and is ignored.
- ``majority``: ``None`` votes abstain and are ignored; the value with strictly the most votes
  wins; a tie for the most votes scores 0; no valid vote scores 0.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_BOXED = "\\boxed{"
_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mathbf|bf)\s*\{(.*)\}$", re.DOTALL)
_VALUE = re.compile(r"^([+-]?)\s*([01])$")


def _boxed_contents(text: str) -> list[str]:
    """The contents of every complete ``\\boxed{...}`` in ``text`` (balanced braces), in order."""
    out = []
    start = text.find(_BOXED)
    while start != -1:
        i = start + len(_BOXED)
        depth = 1
        j = i
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth:  # unclosed: a truncated answer
            break
        out.append(text[i : j - 1])
        start = text.find(_BOXED, j)
    return out


def _unwrap(content: str) -> str:
    s = content.strip()
    while True:
        if s.startswith("{") and s.endswith("}"):
            s = s[1:-1].strip()
            continue
        m = _WRAPPER.match(s)
        if m:
            s = m.group(1).strip()
            continue
        return s


def parse_vote(text: str | None) -> int | None:
    """The score in the last ``\\boxed{...}`` of ``text``: -1, 0 or 1; ``None`` when absent or not one of those."""
    if not text:
        return None
    contents = _boxed_contents(text)
    if not contents:
        return None
    m = _VALUE.match(_unwrap(contents[-1]))
    if not m:
        return None
    value = int(m.group(2))
    return -value if m.group(1) == "-" else value


def majority(votes: list[int | None]) -> int:
    """Majority of the valid votes; ``None`` abstains; ties and no valid votes score 0."""
    counts = Counter(v for v in votes if v is not None)
    if not counts:
        return 0
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return 0
    return ranked[0][0]


@dataclass
class Verdict:
    """The judged score of one turn and every vote behind it.

    ``votes[i]`` is vote i's parsed score, or ``None`` when it abstained; ``texts[i]`` is its raw
    judge text, or, for a vote that failed or timed out, the reason (``"abstained: ..."``).
    """

    score: int
    votes: list[int | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
