"""The preference memory: a user's standing preferences, applied to that user's later requests.

A standing preference is an accepted hint the user stated as one ("from now on ...": the judge's
``preference`` rule on a message the *user* wrote; a tool result, a page or a file never makes one),
kept per user in the store's ``preferences`` table. With ``serve --memory on`` (the default), each
request of that user is served with them where ``--memory-placement`` says (``with_memory``: by default
a block at the end of its system message, a system message added first when the request has none), and
an opening the user quoted (``opening``) is given as the answer's first tokens (``--memory-opening``, in
the server); the request header ``X-OpenClaw-RL-Memory: off`` serves one request without either. The
turn records the messages and prompt ids the model saw, and the preferences applied
(``Turn.memory``), so a trainer can rebuild the prompt without them (``without_memory``: context
distillation, ``learning/memory.py``).

Pure: the store lookup and the rendering happen in the server.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Sequence

HEADER = "X-OpenClaw-RL-Memory"  # "off": serve this request without the memory
MEMORY_TOKENS = 256  # a user's memory block at most this long; past it the oldest preferences are left out
BLOCK = "The user has asked you to follow these preferences in every answer:\n{items}"


def memory_block(hints: list[str]) -> str:
    """The text the memory adds: one line per preference, in the order they were first stated."""
    return BLOCK.format(items="\n".join(f"- {h.strip()}" for h in hints))


# where the memory goes: a block at the end of the system message, or of the latest user message; or the teacher's
# hint block at the end of the latest user message (the served prompt is then the trainer's teacher prompt)
PLACEMENTS = ("system", "user", "hint")

HINT_BLOCK = "\n\n[Hindsight hint: what a better answer to this message takes]\n{hint}\n[End of hint]"


def hint_text(hint: str | Sequence[str]) -> str:
    """The text of the hint block: one hint, or several (empty ones left out), one a line, in order."""
    hints = [hint] if isinstance(hint, str) else list(hint)
    lines = [h.strip() for h in hints if h and h.strip()]
    if not lines:
        raise ValueError("the hint is empty")
    return "\n".join(lines)


def with_hint_block(messages: list[dict[str, Any]], hint: str | Sequence[str]) -> list[dict[str, Any]]:
    """``messages`` with ``hint`` (one, or a list: ``hint_text``) appended, in a marked block, to the
    last user message (a copy): how the trainer's teacher is shown a hint (``learning/teacher.py``), and the
    memory's ``hint`` placement."""
    text = hint_text(hint)
    out = copy.deepcopy(messages)
    for m in reversed(out):
        if m.get("role") != "user":
            continue
        block = HINT_BLOCK.format(hint=text)
        content = m.get("content")
        if isinstance(content, list):  # content parts: add a text part
            m["content"] = [*content, {"type": "text", "text": block.lstrip("\n")}]
        else:
            m["content"] = (content or "") + block
        return out
    raise ValueError("the request has no user message to attach the hint to")


def with_memory(messages: list[dict[str, Any]], hints: list[str], placement: str = "system") -> list[dict[str, Any]]:
    """``messages`` (not changed) with the memory block added; unchanged when there are no hints. ``system``: at
    the end of the first system message (or in a new system message first); ``user``: at the end of the latest
    user message; ``hint``: the hint block there (``with_hint_block``); ``user`` and ``hint`` without a user
    message: the system block. Content given as parts gets a text part."""
    if not hints:
        return messages
    if placement not in PLACEMENTS:
        raise ValueError(f"memory placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
    block = memory_block(hints)
    at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if placement == "hint" and at is not None:
        return with_hint_block(messages, hints)
    if placement == "system" or at is None:
        if messages and messages[0].get("role") in ("system", "developer"):
            return [_appended(messages[0], block), *messages[1:]]
        return [{"role": "system", "content": block}, *messages]
    return [*messages[:at], _appended(messages[at], block), *messages[at + 1:]]


def _appended(message: dict[str, Any], block: str) -> dict[str, Any]:
    """A copy of ``message`` with ``block`` after its content."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [*content, {"type": "text", "text": "\n\n" + block}]
    else:
        out["content"] = f"{content}\n\n{block}" if content else block
    return out


def without_memory(messages: list[dict[str, Any]], hints: list[str]) -> list[dict[str, Any]] | None:
    """The messages as the client sent them: ``messages`` as ``with_memory`` served them with ``hints``, the
    block taken out (a system message that is only the block, removed), wherever it was placed; None when the
    block is not there as served (a system prompt cut to fit the context took part of it)."""
    if not hints:
        return messages
    block, hinted = "\n\n" + memory_block(hints), HINT_BLOCK.format(hint=hint_text(hints))
    for i in [0, *range(len(messages) - 1, 0, -1)] if messages else []:  # the system message, then the latest first
        m = messages[i]
        content = m.get("content")
        if content == block[2:] and m.get("role") == "system" and i == 0:  # a system message it added (or emptied)
            return messages[1:]
        out = dict(m)
        if content == block[2:]:  # the block in an empty message
            out["content"] = ""
        elif isinstance(content, list) and content and content[-1] in ({"type": "text", "text": block},
                                                                     {"type": "text", "text": hinted.lstrip("\n")}):
            out["content"] = content[:-1]
        elif isinstance(content, str) and (content.endswith(block) or content.endswith(hinted)):
            out["content"] = content[:-len(block if content.endswith(block) else hinted)]
        else:
            continue
        return [*messages[:i], out, *messages[i + 1:]]
    return None


# ------------------------------------------------------------------ an opening the user quoted
# The verbs that put words at an answer's start or at its end, each with the pattern of its forms ("begin",
# "beginning"). The opening, the preference's aspect (below) and the heuristic judge's cues read them from here.
OPENING_VERB_FORMS = {"start": r"start(?:s|ed|ing)?", "begin": r"begin(?:s|ning)?", "open": r"open(?:s|ed|ing)?",
                      "lead": r"lead(?:s|ing)?", "prefix": r"prefix(?:es|ed|ing)?", "preface": r"prefac(?:e|es|ed|ing)",
                      "kick off": r"kick(?:s|ed|ing)?\s+off"}
ENDING_VERB_FORMS = {"end": r"end(?:s|ed|ing)?", "finish": r"finish(?:es|ed|ing)?", "close": r"clos(?:e|es|ed|ing)",
                     "conclude": r"conclud(?:e|es|ed|ing)", "sign off": r"sign(?:s|ed|ing)?\s+off",
                     "wrap up": r"wrap(?:s|ped|ping)?\s+up"}
OPENING_VERBS = r"\b(?:" + "|".join(OPENING_VERB_FORMS.values()) + r")\b"
ENDING_VERBS = r"\b(?:" + "|".join(ENDING_VERB_FORMS.values()) + r")\b"
# Where the words go when the verb does not say it: "... at the start of every answer", "at the beginning of"
OPENING_PLACE = r"\b(?:at|in) the (?:very )?(?:start|beginning|top) of\b"
# A literal in quotes (straight or curly; a single-quoted one closes before a space, punctuation or the end, so
# "Here's" stays inside)
_QUOTED = (r"(\"(?P<d>[^\"\n]{1,60})\"|\u201c(?P<c>[^\u201d\n]{1,60})\u201d"
           r"|['\u2018](?P<s>[^\n]{1,60}?)['\u2019](?=[\s.,;:!?)]|$))")
_OPENING = (
    # "Start every answer with 'So,'", "begin by saying 'Hi'": the verb, up to 40 characters, "with" ("with the
    # word") or "by saying", then the literal
    re.compile(OPENING_VERBS + r".{0,40}?\b(?:with|by (?:saying|writing))\s*"
               r"(the\s+(word|words|phrase|line|greeting)\s*:?\s*)?" + _QUOTED, re.I),
    # "Say 'Howdy' at the start of every answer", "put 'TL;DR:' at the beginning of each reply"
    re.compile(r"\b(?:say|put|write|add|place|use|include)\s+(the\s+(word|words|phrase|line|greeting)\s*)?"
               + _QUOTED + r"\s*" + OPENING_PLACE, re.I),
)
_CONDITIONAL = re.compile(r"\b(when|whenever|if|unless|only|except)\b", re.I)


def opening(hints: Sequence[str]) -> str | None:
    """The literal the user asked every answer to start with, quoted in one of their standing preferences (the
    newest such), or None. Only an unconditional one ("start every answer with 'So,'", not "when you write emails,
    start with 'Dear'") and only a quoted one: "start with a summary" names no words. The server writes it as the
    answer's first tokens and the model continues after it (``--memory-opening``): a 135M model told in its system
    message never opens with "So," (docs/learning.md, "The preference memory")."""
    for hint in reversed(list(hints)):
        m = next((m for rx in _OPENING if (m := rx.search(hint))), None)
        if m is None or _CONDITIONAL.search(hint):
            continue
        text = (m["d"] or m["c"] or m["s"]).strip()
        if text:
            return text
    return None


# ------------------------------------------------------------------ which preferences a new message replaces
LANGUAGES = ("english", "french", "german", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
             "mandarin", "japanese", "korean", "arabic", "hindi", "turkish", "polish", "swedish", "latin", "greek")
ASPECTS = (  # (aspect, pattern): two standing preferences of one aspect contradict; the newer one stays
    ("opening", OPENING_VERBS + r".{0,40}\b(with|by (saying|writing))\b|\bfirst (word|line)\b|" + OPENING_PLACE),
    ("ending", ENDING_VERBS + r".{0,40}\bwith\b|\blast (word|line)\b|\b(at|in) the (very )?(end|bottom) of\b"),
    ("language", r"\b(in|into|use|using|speak|speaking)\s+(" + "|".join(LANGUAGES) + r")\b"),
    ("format", r"\b(bullet|bulleted|numbered|list|lists|json|markdown|table|tables|code block|plain text)\b"),
    ("length", r"\b(short|shorter|brief|briefly|concise|long|longer|detailed|verbose|length|lengthy|in depth|"
               r"elaborate|one (short )?sentence|\d+ (words?|sentences?|lines?|paragraphs?)|words?|sentences?|"
               r"paragraphs?)\b"),
    ("tone", r"\b(formal|informal|casual|friendly|polite|professional|playful|serious|emoji|emojis)\b"),
    ("name", r"\bcall me\b|\bmy name is\b|\baddress me\b"),
)
_ASPECTS = [(name, re.compile(pattern, re.I)) for name, pattern in ASPECTS]
FORGET_LAST = re.compile(r"^\W*(ok(ay)?\W+)?(please\W+)?(forget (that|it|this|what i (just )?(said|asked))|never\s?mind"
                         r"|scratch that|undo that|cancel that|take that back|(disregard|ignore|forget) (that|my last)"
                         r"( (instruction|preference|request))?)\W*$", re.I)
# The other ways to name what is taken back: "forget what I said about French", "ignore my earlier instruction
# about emojis", "you no longer have to start with 'So,'", "you don't need to ... anymore", "no need to ...
# anymore", and, kept short so that "cancel my 3 pm meeting" is not read as one, "drop the French", "never mind
# the French thing", "disregard the length rule"
TAKE_BACK = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|actually|please|and)\W+)*(?:you can\W+)?(?:"
    r"(?:forget|ignore|disregard) (?:what i (?:said|told you|asked(?: for)?)|my (?:earlier |previous |last |old )?"
    r"(?:instructions?|requests?|preferences?|rules?)) (?:about|on|regarding)\s+(?P<about>.+?)"
    r"|(?:you )?no longer (?:need|have) to\s+(?P<longer>.+?)"
    r"|(?:(?:you )?(?:don'?t|do not) (?:need|have) to|no need to)\s+(?P<anymore>.+?)\s+any ?more"
    r"|(?:cancel|drop|never ?mind|disregard|ignore|scrap)\s+(?P<short>(?:the|that|your|my)\s+\S+(?:\s+\S+)?)"
    r")(?:\s+any ?more)?\W*$", re.I | re.S)
STOP = re.compile(r"^\W*(ok(ay)?\W+)?(please\W+)?(you can\W+)?"
                  r"(?P<verb>stop|quit|no longer|no more(?!\s+than\b)|don'?t|do not|forget about)"
                  r"\s+(?P<what>.+?)(\s+any ?more)?\W*$", re.I | re.S)
# "You can go back to normal length", "longer answers are fine now": what was asked for is no longer wanted
RELAX = re.compile(r"^\W*(?:(?:ok(?:ay)?|actually|well|so|and)\W+)*(?:you can\W+)?(?:"
                   r"(?:go|get|switch) back to\s+"
                   r"(?P<back>(?:normal|usual|regular|default|your (?:normal|usual|old|default))\b.*?)"
                   r"|(?P<fine>.+?)\s+(?:is|are)\s+(?:fine|ok(?:ay)?|allowed|welcome)\s+(?:now|again))\W*$",
                   re.I | re.S)
_LANGUAGE = re.compile(r"\b(" + "|".join(LANGUAGES) + r")\b", re.I)
STOPWORDS = frozenset("the a an and or to of in on at with your my me you it that this do doing please any more anymore "
                      "answer answers answering reply replies respond every each all from now thanks thank".split())


def preference_aspect(text: str) -> str | None:
    """What a preference is about (``opening``, ``ending``, ``language``, ``format``, ``length``, ``tone``,
    ``name``), by the first rule that matches, or None: a newer standing preference replaces older ones of
    the same aspect ("answer in French", then "answer in English")."""
    return next((name for name, rx in _ASPECTS if rx.search(text)), None)


def retraction(message: str) -> tuple[str, str] | None:
    """Does the user's message take a preference back? ``("last", "")`` for "forget that" / "never mind",
    ``("matching", what)`` for "stop starting with 'So,'" / "don't answer in French anymore" / "no longer
    ...", "no more ...", "you can go back to normal length", "longer answers are fine now", "forget what I said
    about French", "drop the French" (``TAKE_BACK``), else None. "Don't X" alone states a new preference; it takes
    one back only with "anymore"."""
    text = message.strip()
    if len(text) > 300:
        return None
    if FORGET_LAST.match(text):
        return "last", ""
    named = RELAX.match(text) or TAKE_BACK.match(text)
    if named:
        return "matching", next(what for what in named.groups() if what).rstrip(".!?,;: ")
    m = STOP.match(text)
    if not m:
        return None
    if m["verb"].lower().replace("'", "") in ("dont", "do not") and not re.search(r"\bany ?more\b", text, re.I):
        return None
    return "matching", m.group("what")


def matches(preference: str, what: str) -> bool:
    """Does "stop <what>" name this preference: the same aspect, or, where ``what`` has none, a word in common?"""
    aspect = preference_aspect(what) or ("language" if _LANGUAGE.search(what) else None)  # "English is fine now"
    if aspect is not None:
        return preference_aspect(preference) == aspect
    words = {w for w in re.findall(r"[a-z']+", what.lower()) if len(w) > 2 and w not in STOPWORDS}
    return bool(words & set(re.findall(r"[a-z']+", preference.lower())))


def fit_memory(hints: list[str], count_tokens, budget: int) -> list[str]:
    """The newest of ``hints`` (given oldest first) whose memory block fits ``budget`` tokens, oldest first:
    past the budget the oldest preferences are left out."""
    kept: list[str] = []
    for hint in reversed(hints):
        if count_tokens(memory_block([hint, *kept])) > budget:
            break
        kept.insert(0, hint)
    return kept
