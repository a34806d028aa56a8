"""A lexical next-state classifier: the judge for machines with no usable judge model.

It reads only the next state (and, optionally, the request it follows) and applies the rules of
``RULES`` in order; the first rule that matches decides. Text is lower-cased and curly
apostrophes are made straight before matching.

Role "tool" (the result of the assistant's tool call):
  -1  ``tool_error``: error / exception / traceback / "not found" / "no such file" /
      "permission denied" / failed / timed out / a non-zero exit code or status.
      Phrases that deny an error ("no errors", "0 failures", "exit code 0") are removed first.
  +1  otherwise (the call ran).

Role "user" (the user's next message):
  -1  ``correction``: "no," / "nope" at the start, "wrong", "incorrect", "that's not",
      "not what I asked/wanted/meant", "not right/correct/good/helpful", "I said/asked/meant".
  -1  ``redo``: "try again", "redo", "one more time", "start over", "fix it", "doesn't work".
  -1  ``directive``: "you should", "don't", "do not", "stop", "instead", "shorter", "too long",
      "too short", "too verbose", "more concise", "less detail", "keep it short".
  -1  ``complaint``: "useless", "why did you", "that's bad", "terrible", "annoying".
  -1  ``rephrase``: "let me rephrase", "in other words", "I mean", "as I said", "I told you",
      "again:" (explicit rephrasing cues).
  +1  ``approval``: "thanks", "thank you", "great", "perfect", "ok", "okay", "got it", "awesome",
      "excellent", "nice", "exactly", "that works", "sounds good", "looks good", "well done".
  Then, only when the request text is given and the message has at least 3 content words:
  -1  ``same_request``: at least 60% of its content words appear in the request (a rephrasing).
  +1  ``new_request``: none of its content words appear in the request (the user moved on).
   0  otherwise (ambiguous).

Negative rules come before ``approval``, so "thanks, but that's wrong" is -1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    role: str  # "tool" or "user"
    score: int
    name: str
    pattern: re.Pattern[str]


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


# The whole rule set, in the order it is applied (first match wins).
RULES: tuple[Rule, ...] = (
    Rule("tool", -1, "tool_error", _rx(
        r"\berrors?\b", r"\bexceptions?\b", r"\btraceback\b", r"\bnot found\b", r"\bno such file\b",
        r"\bpermission denied\b", r"\bfail(?:ed|s|ure|ing)?\b", r"\btimed out\b", r"\bsegmentation fault\b",
        r"\bnon-?zero exit\b", r"\breturned non-?zero\b",
        r"\bexit(?:ed)?(?: with)?\s*(?:code|status)\s*[:=]?\s*-?[1-9]\d*\b",
    )),
    Rule("user", -1, "correction", _rx(
        r"^\W*(?:no|nope|nah)\b", r"\bwrong\b", r"\bincorrect\b", r"\bthat'?s not\b", r"\bthat is not\b",
        r"\bnot what i (?:asked|wanted|meant|said)\b",
        r"\bnot (?:quite )?(?:right|correct|good|great|ok|okay|helpful|useful|it)\b",
        r"\bi (?:said|asked|meant)\b",
    )),
    Rule("user", -1, "redo", _rx(
        r"\btry again\b", r"\bre-?do\b", r"\bone more time\b", r"\bstart over\b", r"\bfix (?:it|this|that)\b",
        r"\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not|not) work(?:ing|s)?\b",
    )),
    Rule("user", -1, "directive", _rx(
        r"\byou should(?:n'?t)?\b", r"\bdon'?t\b", r"\bdo not\b", r"\bstop\b", r"\binstead\b", r"\bshorter\b",
        r"\btoo (?:long|short|verbose|wordy|much)\b", r"\bmore concise\b", r"\bless (?:detail|verbose)\b",
        r"\bkeep it (?:short|brief)\b",
    )),
    Rule("user", -1, "complaint", _rx(
        r"\buseless\b", r"\bwhy (?:did|would) you\b", r"\bthat'?s bad\b", r"\bterrible\b", r"\bannoying\b",
    )),
    Rule("user", -1, "rephrase", _rx(
        r"\blet me rephrase\b", r"\bin other words\b", r"\bi mean\b", r"\bas i said\b", r"\bi told you\b",
        r"\bagain:",
    )),
    Rule("user", +1, "approval", _rx(
        r"\bthanks?\b", r"\bthank you\b", r"\bthx\b", r"\bgreat\b", r"\bperfect\b", r"\bok\b", r"\bokay\b",
        r"\bgot it\b", r"\bawesome\b", r"\bexcellent\b", r"\bnice\b", r"\bexactly\b", r"\bthat works\b",
        r"\bsounds good\b", r"\blooks good\b", r"\bwell done\b",
    )),
)

# Phrases that deny an error; removed from a tool result before the rules run.
_NOT_AN_ERROR = re.compile(
    r"\b(?:0|no|zero|without)\s+(?:errors?|failures?|exceptions?)\b|\bexit(?:ed)?(?: with)?\s*(?:code|status)\s*[:=]?\s*0\b"
)
_WORD = re.compile(r"[a-z0-9']+")
_STOPWORDS = frozenset(
    "the a an and or but of to in on at for with from by is are was were be been it this that these those "
    "i you he she we they me my your our their can could would should will please just also what how "
    "why when where which who do does did have has had not now then than so if as its it's i'm".split()
)
SAME_REQUEST_OVERLAP = 0.6
MIN_CONTENT_WORDS = 3


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text) if len(w) > 2 and w not in _STOPWORDS}


def _normalize(text: str) -> str:
    return (text or "").lower().replace("\u2019", "'").replace("\u2018", "'")


def heuristic_explain(next_state: str, role: str, request: str | None = None) -> tuple[int, str]:
    """``(score, reason)`` for a next state; ``reason`` names the rule (and the matched text)."""
    text = _normalize(next_state)
    if role == "tool":
        text = _NOT_AN_ERROR.sub(" ", text)
    for rule in RULES:
        if rule.role != role:
            continue
        m = rule.pattern.search(text)
        if m:
            return rule.score, f"{rule.name}: {m.group(0).strip()!r}"
    if role == "tool":
        return 1, "tool_ok: no error cue in the tool result"
    if role == "user" and request:
        words = _content_words(text)
        if len(words) >= MIN_CONTENT_WORDS:
            shared = words & _content_words(_normalize(request))
            if len(shared) >= SAME_REQUEST_OVERLAP * len(words):
                return -1, f"same_request: {len(shared)}/{len(words)} content words repeat the request"
            if not shared:
                return 1, "new_request: no content word in common with the request"
    return 0, "ambiguous: no rule matched"


def heuristic_vote(next_state: str, role: str, request: str | None = None) -> int:
    """-1, 0 or 1 for a next state by the rules of ``RULES`` (see the module docstring)."""
    return heuristic_explain(next_state, role, request)[0]
