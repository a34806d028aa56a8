"""A lexical next-state reader: the judge for machines with no usable judge model.

Two tasks: ``heuristic_vote`` scores the turn (the reward judge) and ``heuristic_hint`` extracts
a hindsight hint (the hint judge); both are documented below.

``heuristic_vote`` reads only the next state (and, optionally, the request it follows) and applies
the rules of ``RULES`` in order; the first rule that matches decides. Text is lower-cased and
curly apostrophes are made straight before matching.

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

``heuristic_hint`` returns the imperative corrections of a user's next message, in the user's own
words, or ``None``:

- Role "tool": always ``None``. A tool result is evidence, not an instruction; turning an error
  message into advice ("the file is in src/") needs a model judge.
- The message is split into sentences (at ``. ! ? ;`` and line breaks) and each sentence into
  clauses (at ``, :`` dashes and "but"). A sentence yields a hint from the first clause that
  carries a cue, through the end of the sentence. Leading filler is dropped first ("no", "ok",
  "thanks", "but", "also", "actually", ...), and so are directive leads, which are cues
  themselves: "you should" / "you need to" / "you must" / "I want you to" (dropped: "You should
  use X" gives "Use X", and so does "I think you should use X"; "you shouldn't X" gives "Do not
  X"; "you should have ..." is kept as is), "next time" / "in the future" / "from now on" /
  "instead" (not "instead of"), and the polite "please" / "can you" / "could you".
- Strong cues make a hint on their own: a directive lead above (other than the polite ones), or
  a clause that starts with "don't" / "do not" (not "don't worry/mind"), "never" (not "never
  mind"), "always", "make sure", "answer/reply/respond with/in/only/using", "use", "just" (not
  "just wondering/curious/..."), "only" (not "only if/when/because"), "stop ...", "avoid ...",
  "keep it/the/your ...", "be more/less ...", "be concise/brief/specific/precise", or a clause
  that contains "you should", "make sure", "instead", "shorter", "more concise", "too long /
  short / verbose / wordy", "keep it short/brief/simple", "less detail", "more detail", "less
  verbose/wordy".
- Weak cues (only "please" / "can you" / "could you" / "would you" / "will you") make a hint only
  when the message is a correction: ``heuristic_vote`` scores it -1 or it has a strong cue. So
  "No, please write it in French" gives "Write it in French." but "thanks, please continue" and
  "Can you tell me more?" give nothing.
- A question ("...?") yields a hint only through a polite lead ("Can you make it shorter?" gives
  "Make it shorter."); "Why didn't you use a table instead?" gives nothing.
- Each hint is tidied: whitespace collapsed, a trailing "please" / "thanks" dropped, the first
  letter capitalized, one final period; one with no content word ("You should.") is dropped, and
  so are duplicates. The hints are joined with a space, keeping whole sentences while the total
  fits ``max_chars`` (none fits: ``None``).
- Approvals, thanks, bare corrections with nothing to do differently ("No, that's wrong."),
  statements of fact and new requests give ``None``. Known limits: a new request that starts
  with a cue ("Use Python to sort this list") is taken for a hint, and anaphora ("Don't do that
  again.") is kept as it is.
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


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` longer than two letters that are not stopwords."""
    return _content_words(_normalize(text))


# ---------------------------------------------------------------- hints (see the module docstring)

_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n+")
_CLAUSE_BREAK = re.compile(r",|:|\s[-\u2013\u2014]+\s|\bbut\b", re.I)
_FILLER_LEAD = re.compile(
    r"(?:no|nope|nah|ok|okay|hmm+|well|also|and|but|so|actually|yes|yeah|oh|thanks|thank you|again)\b[\s,:!.-]*",
    re.I,
)
# (pattern, replacement, strong): directive leads, dropped (or rewritten) at the start of a clause.
_DIRECTIVE_LEADS: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (re.compile(r"you should(?:n't| not)\s+(?!have\b)", re.I), "do not ", True),
    (re.compile(r"you (?:should|need to|must|have to|ought to)\s+(?!have\b)", re.I), "", True),
    (re.compile(r"i(?:'d| would)? (?:like|want|need) you to\s+", re.I), "", True),
    (re.compile(r"(?:next time|in (?:the )?future|from now on|going forward|instead(?!\s+of\b))\b[\s,:]*", re.I), "", True),
    (re.compile(r"(?:can|could|would|will) you\s+(?:please\b[\s,]*)?", re.I), "", False),
    (re.compile(r"please\b[\s,]*", re.I), "", False),
)
# A directive lead in the middle of a clause ("I think you should use ..."): the hint starts there.
_MID_LEAD = re.compile(r"\b(?:you (?:should|need to|must|have to)|i(?:'d| would)? (?:like|want|need) you to)\s", re.I)
_START_CUE = re.compile(
    r"(?:don't|do not)\s+(?!worry\b|mind\b)\w|never\s+(?!mind\b)\w|always\s+\w|make sure\b"
    r"|(?:answer|reply|respond)\s+(?:with|in|only|using)\b|use\s+\w"
    r"|just\s+(?!(?:wondering|curious|checking|kidding|saying|asking)\b)\w|only\s+(?!(?:if|when|because)\b)\w"
    r"|stop\s+\w|avoid\s+\w|keep\s+(?:it|the|your)\b|be\s+(?:more|less)\s+\w|be\s+(?:concise|brief|specific|precise)\b",
    re.I,
)
_ANYWHERE_CUE = re.compile(
    r"\b(?:you should|make sure|instead|shorter|more concise|too (?:long|short|verbose|wordy)"
    r"|keep it (?:short|brief|simple)|less detail|more detail|less (?:verbose|wordy))",
    re.I,
)
_TRAILING_POLITENESS = re.compile(r"(?:[\s,]+(?:please|thanks|thank you))+\s*$", re.I)


def _strip_leads(text: str) -> tuple[str, bool, bool]:
    """``(rest, strong, polite)``: ``text`` without its leading filler and directive leads, and
    whether a strong (resp. polite) directive lead was among them."""
    strong = polite = False
    while True:
        text = text.lstrip(" \t,:;-")
        m = _FILLER_LEAD.match(text)
        if m and m.end():
            text = text[m.end():]
            continue
        for pattern, replacement, is_strong in _DIRECTIVE_LEADS:
            m = pattern.match(text)
            if m:
                text = replacement + text[m.end():]
                strong, polite = strong or is_strong, polite or not is_strong
                break
        else:
            return text, strong, polite


def _tidy(hint: str) -> str:
    """One clean sentence: collapsed whitespace, no trailing politeness, capitalized, one final period."""
    hint = " ".join(hint.split())
    hint = _TRAILING_POLITENESS.sub("", hint).rstrip(" ,:;-.!?")
    return hint[:1].upper() + hint[1:] + "." if hint else ""


def _sentence_hint(sentence: str) -> tuple[str, bool] | None:
    """``(hint, strong)`` from the first clause of ``sentence`` that carries a cue, through the end
    of the sentence; ``None`` when no clause does (or it is a question without a polite lead)."""
    question = sentence.rstrip().endswith("?")
    body = sentence.strip().rstrip(".!?; ")
    starts = [0] + [m.end() for m in _CLAUSE_BREAK.finditer(body)]
    for k, start in enumerate(starts):
        clause = body[start : starts[k + 1] if k + 1 < len(starts) else len(body)]
        rest, strong, polite = _strip_leads(body[start:])
        mid = _MID_LEAD.search(clause)
        if mid and mid.start() > 0 and not strong and not _START_CUE.match(rest):
            rest, strong, polite = _strip_leads(body[start + mid.start():])
        strong = strong or bool(_START_CUE.match(rest)) or bool(_ANYWHERE_CUE.search(clause))
        if (strong or polite) and (polite or not question):
            hint = _tidy(rest)
            if content_words(hint):  # "You should." alone says nothing
                return hint, strong
    return None


def heuristic_hint(next_state: str, role: str, max_chars: int | None = None) -> str | None:
    """The imperative corrections of a user's next message, tidied and joined, or ``None``.

    Invariant: ``None`` for any role but "user", and for a message with no strong cue unless
    ``heuristic_vote`` scores it -1; otherwise whole tidied sentences in the user's order, within
    ``max_chars`` when given. The rules are in the module docstring.
    """
    if role != "user" or not next_state:
        return None
    text = next_state.replace("\u2019", "'").replace("\u2018", "'")
    found = [h for s in _SENTENCE_BREAK.split(text) if s.strip() and (h := _sentence_hint(s)) is not None]
    if not any(strong for _, strong in found) and heuristic_vote(next_state, role) != -1:
        return None
    picked: list[str] = []
    for hint, _ in found:
        if hint.lower() in (p.lower() for p in picked):
            continue
        if max_chars is not None and len(" ".join([*picked, hint])) > max_chars:
            break
        picked.append(hint)
    return " ".join(picked) or None
