"""A lexical next-state reader: the judge for machines with no usable judge model.

Two tasks: ``heuristic_vote`` scores the turn (the reward judge) and ``heuristic_hint`` extracts
a hindsight hint (the hint judge); both are documented below. Their accuracy per class is measured
on a labelled set of realistic follow-ups (``tests/data/followups.jsonl``, ``tests/test_judge_eval.py``,
``bench/judge_eval.py``): read the misses there before changing a rule.

``heuristic_vote`` reads only the next state (and, optionally, the request it follows) and applies
the rules of ``RULES`` in order; the first rule that matches decides. Text is lower-cased, curly
apostrophes are made straight, and phrases that deny an error ("0 errors", "no failures", "exit
code 0") are removed before matching.

Role "tool" (the result of the assistant's tool call):
  -1  ``tool_error``: error / exception / "TypeError:" / traceback / fatal / "not found" / "no such
      file" / denied / rejected / refused / invalid / unavailable / "limit exceeded" / failed /
      timed out / "could not" / "unable to" / "warning: no ..." / a non-zero exit code or status.
  +1  otherwise (the call ran).

Role "user" (the user's next message):
  -1  ``preference``: a standing preference, which is always a correction of the answer it follows
      (never +1, whatever thanks come with it): "from now on" / "from here on" / "going forward" /
      "in (the) future" / "next time" (not "next time I'm in Rome ...") / "every time" / "whenever"
      / "I like answers that ..."
      / "when I ask" / "always" and "never" at the start of a clause or after "please", "can you"
      ... (not "always do it like this": that approves) / "remember that I ..." / "I('d) prefer",
      "I'd rather", "my preference" / "it would be better/nice if" / "I'd like it if you", "I like
      it when you" / "I want you to" / "I (just/only) wanted/needed ..." (not "what I needed", "I
      wanted to ask") / "call me X" / "keep it/answers ..." (not "keep it up / coming": that approves) /
      "every answer", "all code you write".
  -1  ``correction``: "no," / "nope" / "not X" / "actually" at the start, ", not X", "wrong",
      "incorrect", "that's not", "not right/correct/...", "I said/asked/meant", "can't be",
      "mistake", "typo", "misspelled", "are you sure", "you forgot/missed/ignored/...", "bug",
      "broken", "already read/seen/have ...".
  -1  ``redo``: "try again", "redo", "rewrite", "regenerate", "one more time", "once more", "start
      over", "do it over", "fix it", "(it/that) again", "another one", "a different one", "more
      options", "doesn't work / match / compile / run".
  -1  ``directive``: "you should", "don't", "do not", "stop", "instead", "rather", "shorter", "too
      long/short/verbose/...", "more specific/concise/polite/...", "less detail/formal/text", "fewer
      words", "simpler", "clearer", "keep it short",
      "make it ...", an instruction about the form of the answer at the start ("start / end / answer
      / reply / write / talk (your answer / to me) with / in / like ...": "Start your answer with
      Sure!", "Write in lowercase"; "In one sentence please"), and a reservation after an acknowledgement: ", but" / ", though" / ",
      however" ("thanks, but shorter"), "ok but ...".
  -1  ``complaint``: "useless", "why did/are you", "bad" (not "not bad"), "terrible", "annoying",
      "makes no sense", "boring", "generic", "robotic", "fake", "vague", "meh", "ugh", "disappointed",
      "confusing", "made up", "you didn't answer", "you're not ...", "you keep", "error", "too
      hard/difficult/...", "non-answer".
  -1  ``rephrase``: "let me rephrase", "in other words", "I mean", "as I said", "I told you",
      "again:" (explicit rephrasing cues).
   0  ``deferral``: "let me check/think", "I'll think about it / get back to you", "we'll see",
      "hold on", "brb": the user has not judged the answer yet.
  +1  ``approval``: "thanks", "thank you", "thx", "ty", "cheers", "appreciated", "great", "perfect",
      "ok", "got it", "awesome", "nice", "good", "correct", "love", "beautiful", "cool", "helpful",
      "works/worked", "like a charm", "yes", "that's the one", "exactly", "sounds good/right",
      "makes sense", "keep it up", "keep them coming", a thumbs-up ...; but first, when the request is
      given, ``same_request``: a message of at least 2 words (two letters or more, or numbers) of
      which at least 60% repeat the request is a rephrasing (-1), "please" or "good" in it
      notwithstanding (approval words themselves are not counted, so thanking twice is still thanks).
  Then: ``same_request`` as above (-1); ``new_request`` (+1): a question ("...?", or one opening
  with what / how / who / can you / is ...) or a request opening with a common task verb (write,
  translate, book, remind, move ...), possibly after "ok", "now", "also", "and": the user moved on
  or followed up; except "what about ... / how about ..." (0: it may be a correction).
   0  otherwise (ambiguous: "hmm", "maybe", "interesting, I'll ask my friend").

Negative rules come before ``approval``, so "thanks, but that's wrong" is -1. Known limits (see
the set's misses): a correction stated as a bare fact with no cue ("He gets seasick, so no fishing
trip.") is 0; "whenever" or "every answer" in a new request reads as a preference.

``heuristic_hint`` returns the imperative corrections of a user's next message, in the user's own
words made into an instruction for the teacher, or ``None``:

- Role "tool": always ``None``. A tool result is evidence, not an instruction; turning an error
  message into advice ("the file is in src/") needs a model judge.
- The message is split into sentences (at ``. ! ? ;`` and line breaks) and each sentence into
  clauses (at ``, :`` dashes and "but" / "though" / "however" / "although"). A sentence yields a
  hint from the first clause that carries a cue, through the end of the sentence. Leading filler
  is dropped first ("no," "ok", "thanks", "great", "but", "also", "actually", ...), and so are
  directive leads, which are cues themselves: "you should" / "you need to" / "you must" / "I want
  you to" (dropped: "You should use X" gives "Use X", and so does "I think you should use X";
  "you shouldn't X" and "you don't need to X" give "Do not X" / "Don't X"; "you should have ..."
  is kept as is), the framing of a standing preference "next time" / "in the future" / "from now
  on" / "going forward" / "for future emails" / "remember that" / "instead" (not "instead of"),
  and the polite "please" / "pls" / "can you" / "could you" / "can u".
- First-person preferences are made imperative: "I'd prefer if you gave X" / "it would be better
  if you used X" / "I like it when you give X" give "Give X" / "Use X" (the past tense of common
  verbs made present; "you didn't X" gives "Don't X"); "I prefer X" / "I'd rather have X" / "my
  preference is for X" give "Prefer X"; "I (just/only) wanted X" gives "Give (just/only) X"; and
  facts about the user are told about the user: "I'm vegan" gives "The user is vegan", "I meant
  Anna" gives "The user meant Anna".
- Trailing framing and politeness are dropped: "Use a table next time, thanks" gives "Use a
  table."; "Call me Alex from now on." gives "Call me Alex.".
- Strong cues make a hint on their own: a strong directive lead above (the "you ..." leads, the
  framing of a preference, "if you ..." preferences), or a clause that starts with "don't" / "do
  not" (not "don't worry/mind"), "never" (not "never mind"), "always", "make sure",
  "answer/reply/respond with/in/only/using", "use", "just" (not "just wondering/curious/..."),
  "only" (not "only if/when/because"), "stop ...", "avoid ...", "keep it/the/your/answers ...",
  "be more/less ...", "be concise/brief/specific/precise/succinct/terse/direct/to the point", "every
  answer / your replies ... should/must ...", "make your answer(s) / every answer ...", or a clause that
  contains "you should", "make sure", "instead", "shorter", "more concise", "too long / short / verbose /
  wordy", "keep it short/brief/simple", "less detail", "more detail", "less verbose/wordy".
- Weak cues make a hint only when the message is a correction (``heuristic_vote`` scores it -1 or
  it has a strong cue): the polite leads, the first-person rewrites above ("Prefer X", "Give X",
  "The user is ..."), a clause that opens with an instruction verb ("include", "add", "give",
  "make", "sign", "round", "call", "talk", ...) or with "no X" / "without X" / "less X" / "more
  X" / "fewer X" / "in one X", a clause that carries a correction's concrete value (a number, or
  "X, not Y": "No, it ended in 1945." gives "It ended in 1945."), and the clause after "but" /
  "though" unless it is itself a bare verdict. So "No,
  please write it in French" gives "Write it in French." but "thanks, please continue", "Can you
  tell me more?" and "Write a poem about cats" give nothing.
- A question ("...?") yields a hint only through a polite lead ("Can you make it shorter?" gives
  "Make it shorter."); "Why didn't you use a table instead?" gives nothing.
- Each hint is tidied: whitespace collapsed, trailing framing and politeness dropped, the first
  letter capitalized, one final period (a final "!" after a capitalized word is kept: "Start your
  answer with Sure!"); one with no content word or number ("You should.") is
  dropped, and so are duplicates. The hints are joined with a space, keeping whole sentences while
  the total fits ``max_chars`` (none fits: ``None``).
- Approvals, thanks, bare corrections with nothing to do differently ("No, that's wrong."),
  statements of fact without a value ("That's wrong, the capital is Canberra") and new requests
  give ``None``. Known limits: a new request that starts with a cue ("Use Python to sort this
  list") is taken for a hint, anaphora ("Don't do that again.") is kept as it is, and the
  condition of a preference is dropped ("When I ask for a translation, just give the words" gives
  "Just give the words.").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from slime_ext.chat.memory import ENDING_VERB_FORMS, OPENING_VERB_FORMS


@dataclass(frozen=True)
class Rule:
    role: str  # "tool" or "user"
    score: int
    name: str
    pattern: re.Pattern[str]


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


# Tool results: an error, a refusal or an empty lookup.
_TOOL_ERROR = _rx(
    r"\berrors?\b", r"\bexceptions?\b", r"\b[a-z]+(?:error|exception):", r"\btraceback\b", r"\bnot found\b", r"\bno such file\b",
    r"\bpermission denied\b", r"\bfail(?:ed|s|ure|ing)?\b", r"\btimed out\b", r"\btimeout\b",
    r"\bsegmentation fault\b", r"\bnon-?zero exit\b", r"\breturned non-?zero\b",
    r"\bexit(?:ed)?(?: with)?\s*(?:code|status)\s*[:=]?\s*-?[1-9]\d*\b",
    r"\binvalid\b", r"\b(?:rate )?limit exceeded\b", r"\bdenied\b", r"\brejected\b", r"\brefused\b",
    r"\bunavailable\b", r"\bunauthori[sz]ed\b", r"\bforbidden\b", r"\bunable to\b", r"\bcould ?n[o']t\b",
    r"\bcannot\b", r"\bwarning: no\b", r"\bunknown (?:command|option|argument)\b", r"\bfatal\b", r"\bpanic",
    r"\babort(?:ed)?\b", r"\bsegfault", r"\bkilled\b",
)
# A standing preference: how the user wants every later answer ("from now on", "always", "I'd prefer").
_PREFERENCE = _rx(
    r"\bfrom (?:now|here)(?: on)?\b", r"\bfrom this point\b", r"\bhenceforth\b", r"\bgoing forward\b",
    r"\bmoving forward\b", r"\b(?:in|for) (?:the )?future\b",
    r"\bnext time\b(?!\s+(?:i|we|my|our)\b(?!\s+ask))", r"\b(?:every|each) time\b",
    r"\bwhen(?:ever)? i ask\b",
    r"(?:^|[,.;:!]\s*|\b(?:please|pls|plz|and|you should|can (?:you|u)|could (?:you|u)|will you|would you)\s+)"
    r"(?:always|never)\b(?!\s+mind\b)(?!.*\b(?:like (?:this|that)|this way|that way)\b)",
    r"\bremember (?:that )?(?:i|i'm|my|to)\b", r"\bi (?:like|love|prefer|want|need) (?:\w+ )?(?:answers|replies|responses)\b", r"\bi(?:'d| would)? (?:prefer|rather)\b", r"\bmy preference\b",
    r"\b(?:it(?:'d| would|'s| is) be|would be|it'?s) (?:better|nicer|nice|great|good|ideal|easier) if\b",
    r"\bwhenever\b", r"\bevery (?:answer|reply|response|message|email|time)\b",
    r"(?<!thanks for )(?<!thank you for )(?<!thx for )\ball your (?:answers|replies|responses)\b",
    r"\bfuture (?:answers|replies|responses|messages)\b",
    # "use metric units in all your answers", "Latin American Spanish for all translations" (not "thanks for all
    # your answers")
    r"\b(?:in (?:all|every|each|any) (?:(?:of )?your |future )?|for (?:all|every|each|any) (?:future )?)"
    r"(?:answers?|repl(?:y|ies)|responses?|translations?|summar(?:y|ies)|emails?|messages?|explanations?|examples?"
    r"|recipes?|lists?|code)\b",
    r"\byour (?:answers|replies|responses) (?:should|must|need to|have to|ought to)\b",
    # "make your replies start with ...", "make every answer ...": all answers ("make your answer shorter" is this one)
    r"^\W*(?:please\W+)?make (?:(?:all )?your |all )(?:\w+ )?(?:answers|replies|responses)\b",
    r"^\W*(?:please\W+)?make (?:every|each) (?:\w+ )?(?:answer|reply|response)\b",
    r"\b(?:all|every|each)\b[^.?!]{0,25}\byou (?:write|give|send|make|do|answer|recommend)\b",
    r"\bi(?:'d| would)? (?:really )?(?:like|love|prefer|appreciate) (?:it )?(?:when|if) you\b",
    r"\bi(?:'d| would)? (?:like|want|need) you to\b",
    r"\bi (?:only|just) (?:want|need)(?:ed)?\b(?! to (?:ask|know|say|check|thank))",
    r"(?<!what )\bi (?:really )?(?:wanted|needed)\b(?! to (?:ask|know|say|check|thank))",
    r"\bcall me (?!a |an |back\b)\w",
    r"\bkeep (?:it|them|answers|replies|responses|your (?:answers|replies|responses))\b(?! (?:up|coming)\b)",
)
_CORRECTION = _rx(
    r"^\W*(?:no|nope|nah)\b(?!\s+(?:worries|problem|prob)\b)", r"^\W*not\b(?!\s+(?:sure|yet|now|really)\b)",
    r"\bcan'?t be\b", r"\bcannot be\b", r",\s*not\b", r"\bwrong\b", r"\bincorrect\b",
    r"\bthat'?s not\b", r"\bthat is not\b", r"\bnot what i (?:asked|wanted|meant|said)\b",
    r"\bnot (?:quite )?(?:right|correct|good|great|ok|okay|helpful|useful|it)\b",
    r"\bi (?:said|asked|meant)\b",
    r"\bmistakes?\b", r"\bmisspel", r"\btypo\b", r"\bare you sure\b", r"^\W*actually\b",
    r"\byou (?:forgot|missed|left out|ignored|skipped|misunderstood|misread|mixed up|confused)\b",
    r"\byou(?:'re| are) confusing\b", r"\bbugs?\b", r"\bbroken\b",
    r"\balready (?:read|seen|have|has|tried|did|done|watched|know|own|use)\b",
    r"\b(?:read|seen|tried|watched|done|had|have|has) (?:that|this|it|those|these)(?: one)? already\b",
)
_REDO = _rx(
    r"\btry again\b", r"\bre-?do\b", r"\bone more time\b", r"\bonce more\b", r"\bstart over\b",
    r"\bdo it over\b",
    r"\bfix (?:it|this|that)\b", r"\bre-?write\b", r"\bregenerate\b", r"^\W*again\b",
    r"\b(?:it|that|this) again\b",
    r"\b(?:another|a different|other) (?:one|version|suggestion|option|answer|idea|recipe|take|attempt)s?\b",
    r"^\W*(?:(?:give|show|tell|write) me |can i (?:get|have) |how about )?(?:an?other|(?:a )?different|other)\b"
    r"(?!\s+(?:question|thing|topic|task)\b)",
    r"\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not|not|won'?t|will not) work(?:ing|s|ed)?\b",
    r"\b(?:doesn'?t|does not|didn'?t|did not|won'?t|will not) (?:match|compile|run|load|open|help)\b",
    r"\bmore (?:options|ideas|suggestions|alternatives|choices)\b",
)
# forms of an answer a user names on their own ("in French", "use bullet points"): languages, cases, layouts
_FORMS = (r"english|french|spanish|german|italian|portuguese|dutch|chinese|japanese|korean|russian|arabic|hindi"
          r"|lowercase|lower case|uppercase|upper case|capitals|caps|capital letters|bullet points|bullets"
          r"|(?:a )?(?:numbered |bulleted )?lists?|(?:a )?tables?|headings|headers|emojis?|markdown|plain text"
          r"|prose|(?:simpler|simple|plain|shorter) (?:words|language|english|sentences)")
_ALL_CASE = r"all\s+(?:caps|lowercase|uppercase|capitals)"  # "All caps please"
_FORMAT_VERBS = r"number|bold|italici[sz]e|capitali[sz]e|underline|highlight"  # "Number the steps", "Bold the key terms"
# the verbs that put words at an answer's start or end: "start", "kick off", "sign off", ... (chat/memory.py)
_PLACE_VERBS = "|".join([*OPENING_VERB_FORMS, *ENDING_VERB_FORMS])
_DIRECTIVE = _rx(
    r"\byou should(?:n'?t)?\b", r"\bdon'?t\b(?!\s+(?:worry|mind)\b)", r"\bdo not\b", r"\bstop\b",
    r"\binstead\b",
    r"\brather\b", r"\bshorter\b", r"\btoo (?:long|short|verbose|wordy|much|complicated|formal|casual)\b",
    # the answer, compared with what the user wanted: "more specific", "fewer words", "in simpler terms"
    r"\b(?:more|less) (?:\w+ly|concise|polite|formal|casual|detail(?:ed|s)?|specific|clear|precise|technical"
    r"|friendly|direct|text|words|verbose|wordy)\b", r"\bfewer (?:words|details|sentences|lines|points|emojis)\b",
    r"\b(?:simpler|clearer|briefer|plainer)\b",
    r"\bkeep it (?:short|brief)\b", r"\bmake (?:it|them|this|that)\b",
    # an instruction about the form of the answer: "Start your answer with Sure!", "Answer in one sentence",
    # "Write in lowercase", "Talk to me like a friend", "In one sentence please"
    r"^\W*(?:(?:please|pls|ok|okay|and|also|now|just|can you|could you|would you)\W+)*"
    rf"(?:{_PLACE_VERBS}|answer|reply|respond|write|talk|speak|explain|say)\s+(?:(?:it|that|this|to me|your \w+"
    r"|everything|all of it|(?:each|every|the|all) (?:\w+ )?\w+)\s+)?(?:with|in|using|by|like|as)\b",
    r"^\W*(?:in|without|using|with only)\s+(?:one|two|three|a single|\d+|fewer|less|plain|simple|bullet)\b",
    # the form named first: "In French please", "All caps please", "Use bullet points", "Put it in a table",
    # "Number the steps", "Bold the key terms"
    rf"^\W*(?:please\W+)?in\s+(?:{_FORMS})\b", rf"^\W*(?:please\W+)?{_ALL_CASE}\b",
    rf"^\W*(?:please\W+)?use\s+(?:{_FORMS})\b",
    r"^\W*(?:please\W+)?put (?:it|them|this|that|everything|your answers?) (?:in|into|as)\b",
    rf"^\W*(?:please\W+)?(?:{_FORMAT_VERBS})\s+(?:the|each|every|all|your)\b",
    # a reservation after an acknowledgement: "thanks, but ...", "nice, though ..."
    r"[,.!]\s*(?:but|though|however|although)\b",
    r"^\W*(?:ok|okay|yes|yeah|sure|fine|great|nice|good|thanks?|thx|cool)\s+(?:but|though)\b",
)
_COMPLAINT = _rx(
    r"\buseless\b", r"\bwhy (?:did|would|do|are|is|does) (?:you|it|this|that)\b", r"\bthat'?s bad\b",
    r"(?<!not )(?<!too )\bbad\b", r"\bterrible\b", r"\bannoying\b", r"\bawful\b", r"\bhorrible\b",
    r"\bno sense\b", r"\b(?:doesn'?t|does not) make sense\b", r"\bboring\b", r"\bgeneric\b", r"\brobotic\b",
    r"\bmeh\b", r"\bugh\b", r"\bdisappoint", r"\bunhelpful\b", r"\bconfusing\b", r"\bnonsense\b",
    r"\bdon'?t understand\b", r"\bmade (?:stuff|things|that|it|this) up\b", r"\bmade[- ]up\b",
    r"\bseriously\?",
    r"\byou (?:didn'?t|did not|haven'?t|never) (?:answer|listen|read|do)\b", r"\byou(?:'re| are) not\b",
    r"\byou keep\b", r"\berrors?\b", r"\bnon-?answer\b", r"\bfake\b", r"\bvague\b", r"\blazy\b",
    r"\bsloppy\b", r"\bshallow\b", r"\bsuperficial\b", r"\blame\b", r"\birritating\b", r"\bpointless\b",
    r"\bcringe\b",
    r"\btoo (?:hard|difficult|easy|basic|advanced|vague|generic|little|many|few|slow|expensive)\b",
)
_REPHRASE = _rx(
    r"\blet me rephrase\b", r"\bin other words\b", r"\bi mean\b", r"\bas i said\b", r"\bi told you\b",
    r"\bagain:",
)
# The user puts the answer off ("let me check", "I'll think about it"): it does not tell yet.
_DEFERRAL = _rx(
    r"\blet me (?:check|think|see|look|try|get back)\b",
    r"\bi'?ll (?:think|check|see|get back|look into|try)\b",
    r"\bwe'?ll see\b", r"\bget back to you\b", r"\bhold on\b", r"\bbrb\b",
    r"^\W*(?:hmm+|uh+|erm+|um+)\W+(?:ok(?:ay)?|fine|sure|alright)\W*$",  # "hmm ok": a shrug, not a yes
)
_APPROVAL = _rx(
    r"\bthanks?\b", r"\bthank (?:you|u)\b", r"\bthx\b", r"\bty\b", r"\bcheers\b", r"\bappreciated?\b",
    r"\bgreat\b", r"\bperfect\b", r"\bok\b", r"\bokay\b", r"\bgot it\b", r"\bawesome\b", r"\bexcellent\b",
    r"\bnice\b", r"\bexactly\b", r"\bthat works\b", r"\bsounds good\b", r"\blooks good\b", r"\bwell done\b",
    r"\bgood\b", r"\bcorrect\b", r"\blove\b", r"\bbeautiful\b", r"\blovely\b", r"\bbrilliant\b",
    r"\bamazing\b", r"\bkeep (?:it|them) (?:up|coming)\b", r"\bkeep up the good work\b",
    r"^\W*ta\W*$", r"\byes\b", r"\bthat'?s (?:the one|it)\b", r"\bup my alley\b",
    r"\bsounds (?:right|great|perfect|fine|lovely|interesting)\b", r"\bcool\b", r"\bhelpful\b",
    r"\bwork(?:s|ed)\b",
    r"\blike a charm\b", r"\bdid the trick\b", r"\bfine\b", r"\byep\b", r"\bnot bad\b", r"\bmakes sense\b",
    r"\b(?:gracias|merci|danke|grazie|obrigad[oa]|arigato|dank je)\b", r"\bspot on\b", r"\bnailed it\b",
    # "Smokey it is!", "Python it is then": the user takes the suggestion (not "whatever it is", "not what it is")
    r"^\W*(?!.*\b(?:not|\w+n't|what|whatever|how|where|who|why)\b)[\w' -]{1,30} it is(?: then)?\W*$",
    "\U0001f44d", "\U0001f64f", "\u2764",
)

# The whole rule set, in the order it is applied (first match wins).
RULES: tuple[Rule, ...] = (
    Rule("tool", -1, "tool_error", _TOOL_ERROR),
    Rule("user", -1, "preference", _PREFERENCE),
    Rule("user", -1, "correction", _CORRECTION),
    Rule("user", -1, "redo", _REDO),
    Rule("user", -1, "directive", _DIRECTIVE),
    Rule("user", -1, "complaint", _COMPLAINT),
    Rule("user", -1, "rephrase", _REPHRASE),
    Rule("user", 0, "deferral", _DEFERRAL),
    Rule("user", +1, "approval", _APPROVAL),
)

# Phrases that deny an error ("0 errors", "exit code 0"); removed before the rules run.
_NOT_AN_ERROR = re.compile(
    r"\b(?:0|no|zero|without)\s+(?:errors?|failures?|failed|exceptions?)\b"
    r"|\bexit(?:ed)?(?: with)?\s*(?:code|status)\s*[:=]?\s*0\b"
)
_WORD = re.compile(r"[a-z0-9']+")
_STOPWORDS = frozenset(
    "the a an and or but of to in on at for with from by is are was were be been it this that these those "
    "i you he she we they me my your our their can could would should will please just also what how "
    "why when where which who do does did have has had not now then than so if as its it's i'm".split()
)
SAME_REQUEST_OVERLAP = 0.6
MIN_REQUEST_WORDS = 2
_KEY_WORD = re.compile(r"[a-z]{2,}|\d+")
# The shape of a new request: a question, or an imperative of a common assistant task.
_REQUEST_VERBS = (
    "write|draft|compose|translate|summari[sz]e|explain|tell|show|give|find|search|look|play|order|book|set|add"
    "|remind|schedule|send|create|list|compare|recommend|suggest|calculate|convert|check|open|call|text|email"
    "|plan|help|generate|make|describe|read|get|buy|cancel|turn|start|define|name|print|run|move|reschedule"
    "|update|delete|remove|rename|pay|share|save|download|upload|install|sign|fill|forward|reply|archive"
)
_REQUEST_FORM = re.compile(
    r"^\W*(?:(?:ok|okay|now|next|then|also|and|so|alright|cool|great|thanks|hey|please|pls)\b[\s,!.:-]*)*"
    r"(?:(?:can|could|would|will) (?:you|u)\b|what|what's|how|who|who's|whose|where|where's|when|why|which"
    r"|is|are|was|were|do|does|did|should|may|i(?:'d| would) like\b|i (?:want|need) (?:to|a|an|some)\b"
    rf"|{_REQUEST_VERBS})\b"
)
_REDIRECT = re.compile(r"^\W*(?:(?:and|so|but)\s+)?(?:what|how) about\b")  # "What about Germany?": unclear


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text) if len(w) > 2 and w not in _STOPWORDS}


_NUMBER_WORDS = dict(zip("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                         "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
                         "ninety hundred thousand".split(),
                         [*map(str, range(21)), *map(str, range(30, 100, 10)), "100", "1000"]))


def _key_words(text: str) -> set[str]:
    """Words of two letters or more and numbers, without stopwords: what a rephrasing repeats. A number in words
    is its digits, and "%" is "percent" ("what is fifteen percent of eighty" repeats "What's 15% of 80?")."""
    words = _KEY_WORD.findall(text.replace("%", " percent "))
    return {_NUMBER_WORDS.get(w, w) for w in words if w not in _STOPWORDS}


def _normalize(text: str) -> str:
    return (text or "").lower().replace("\u2019", "'").replace("\u2018", "'")


def _same_request(text: str, request: str | None) -> tuple[int, str] | None:
    """-1 when the message repeats the request (a rephrasing), else ``None``. Approval words do not
    count as repeated: "Thanks, perfect!" after a "Thanks, perfect!" is thanks again, not a rephrasing."""
    words = _key_words(_APPROVAL.sub(" ", text))
    if request and len(words) >= MIN_REQUEST_WORDS:
        shared = words & _key_words(_normalize(request))
        if len(shared) >= SAME_REQUEST_OVERLAP * len(words):
            return -1, f"same_request: {len(shared)}/{len(words)} words repeat the request"
    return None


def _new_request(text: str) -> tuple[int, str]:
    """+1 for a question or a request (the user moved on), else 0 (unclear)."""
    asks = text.rstrip().endswith("?") or _REQUEST_FORM.match(text)
    if _key_words(text) and not _REDIRECT.match(text) and asks:
        return 1, "new_request: a question or a request that no cue marks as a correction"
    return 0, "ambiguous: no rule matched"


def heuristic_explain(next_state: str, role: str, request: str | None = None) -> tuple[int, str]:
    """``(score, reason)`` for a next state; ``reason`` names the rule (and the matched text)."""
    text = _NOT_AN_ERROR.sub(" ", _normalize(next_state))
    for rule in RULES:
        if rule.role != role:
            continue
        if rule.score > 0 and (repeated := _same_request(text, request)) is not None:
            return repeated  # the request again, even with a "please" or a "good" in it
        m = rule.pattern.search(text)
        if m:
            return rule.score, f"{rule.name}: {m.group(0).strip()!r}"
    if role == "tool":
        return 1, "tool_ok: no error cue in the tool result"
    if role == "user":
        return _same_request(text, request) or _new_request(text)
    return 0, "ambiguous: no rule matched"


def heuristic_rule(next_state: str, role: str, request: str | None = None) -> str:
    """The name of the rule that decided (``preference``, ``approval``, ``new_request``, ...):
    every reason ``heuristic_explain`` writes is ``"<rule>: <detail>"``."""
    return heuristic_explain(next_state, role, request)[1].partition(":")[0]


def heuristic_vote(next_state: str, role: str, request: str | None = None) -> int:
    """-1, 0 or 1 for a next state by the rules of ``RULES`` (see the module docstring)."""
    return heuristic_explain(next_state, role, request)[0]


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` longer than two letters that are not stopwords."""
    return _content_words(_normalize(text))


# ---------------------------------------------------------------- hints (see the module docstring)

_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n+")


def sentences(text: str) -> list[str]:
    """The non-empty sentences (and ``;`` clauses, and lines) of ``text``, as the hint rules read them."""
    return [s for s in _SENTENCE_BREAK.split(text) if s.strip()]


_CONTRAST = r"\b(?:but|though|however|although)\b"
_CLAUSE_BREAK = re.compile(rf",|:|\s[-\u2013\u2014]+\s|{_CONTRAST}", re.I)
_FILLER_LEAD = re.compile(
    r"(?:(?:no|nope|nah)(?=\s*[,.!:;-]|\s+no\b|\s*$)|ok|okay|hmm+|well|also|and|but|though|however|although"
    r"|so|actually|yes|yeah|oh|thanks"
    r"|thank you|thx|ty|again|great|nice|good|lovely|perfect|cool|awesome|helpful|sounds good|that works"
    r"|appreciate it|hey)\b[\s,:!.-]*",
    re.I,
)
# Past forms of common verbs, for "I'd prefer if you gave ..." -> "Give ..."; other "-ed" forms are
# reduced by rule (``_base_form``).
_IRREGULAR_PAST = {
    "gave": "give", "kept": "keep", "wrote": "write", "made": "make", "said": "say", "told": "tell",
    "put": "put", "began": "begin", "left": "leave", "sent": "send", "took": "take", "found": "find",
    "brought": "bring", "chose": "choose", "spoke": "speak", "stuck": "stick", "did": "do", "went": "go",
    "added": "add", "got": "get",
}
_SILENT_E = ("us", "iz", "yz", "at", "ud", "ov", "as", "ag", "ac", "ot", "uc", "in")


def _base_form(verb: str) -> str:
    """The imperative of a past-tense verb ("used" -> "use", "stopped" -> "stop"), best effort."""
    low = verb.lower()
    if low in _IRREGULAR_PAST:
        return _IRREGULAR_PAST[low]
    if low.endswith("ied"):
        return low[:-3] + "y"
    if len(low) > 4 and low.endswith("ed") and low[-3] == low[-4] and low[-3] not in "lsz":
        return low[:-3]  # stopped, skipped, formatted
    if low.endswith("ed"):
        return low[:-1] if low[:-2].endswith(_SILENT_E) else low[:-2]
    return low


def _you_verb(m: re.Match[str]) -> str:
    """``... if you <verb>`` as an imperative: "didn't X" gives "don't X"."""
    if m.group("neg"):
        return "don't "
    return _base_form(m.group("verb")) + " "


_YOU_CLAUSE = r"you (?:(?P<neg>didn't|did not|wouldn't|would not)\s+|(?P<verb>[a-z]+)\s+)"
_NEXT_TIME = r"next time(?!\s+(?:i|we|my|our)\b(?!\s+ask))"  # not "next time I'm in Rome, ..."
Replacement = str | Callable[[re.Match[str]], str]
# (pattern, replacement, kind): leads dropped (or rewritten) at the start of a clause. A "strong" lead
# makes a hint on its own; "polite" and "weak" ones only in a message scored -1, and only a polite
# one makes a hint of a question ("Can you make it shorter?").
_DIRECTIVE_LEADS: tuple[tuple[re.Pattern[str], Replacement, str], ...] = (
    (re.compile(r"you should(?:n't| not)\s+(?!have\b)", re.I), "do not ", "strong"),
    (re.compile(r"you (?:should|need to|must|have to|ought to)\s+(?!have\b)", re.I), "", "strong"),
    (re.compile(r"you (?:don't|do not) (?:need|have) to\s+", re.I), "don't ", "strong"),
    (re.compile(r"i(?:'d| would)? (?:like|want|need) you to\s+", re.I), "", "strong"),
    (re.compile(rf"(?:{_NEXT_TIME}|for future \w+|(?:in|for) (?:the )?future|from (?:now|here)(?: on(?: out)?)?"
                r"|from this point(?: on)?|henceforth|going forward|moving forward|instead(?!\s+of\b))\b[\s,:]*", re.I),
     "", "strong"),
    (re.compile(r"remember(?: that)?\s+", re.I), "", "strong"),
    # first-person preferences, made imperative: the teacher gets the preference itself
    (re.compile(r"(?:i(?:'d| would)? (?:prefer|rather|like|love)(?: it)?(?: better)? (?:if|when|that) "
                r"|i(?:'d| would) rather |i(?:'d| would)? (?:really )?(?:like|love|prefer|appreciate) it (?:if|when) "
                r"|(?:it(?:'d| would|'s| is) be|would be|it'?s) (?:better|nicer|nice|great|good|ideal|easier) if "
                r"|i (?:really )?like it when )"
                + _YOU_CLAUSE, re.I), _you_verb, "strong"),
    (re.compile(r"i(?:'d| would) rather (?:have|get|see)\s+", re.I), "prefer ", "weak"),
    (re.compile(r"(?:i(?:'d| would)? (?:prefer|like|love)|i(?:'d| would) rather|my preference is(?: for)?)"
                r"\s+(?!to\b|you\b|it\b)", re.I), "prefer ", "weak"),
    (re.compile(r"i (?:(?P<adv>just|only) )?(?:want|need)(?:ed)?\s+(?!to\b|you\b)"
                r"|i (?:wanted|needed)\s+(?!to\b|you\b)",
                re.I), lambda m: f"give {m.group('adv') or ''} ".replace("  ", " "), "weak"),
    # what the user is, meant or asked for, told about the user: "I meant Anna" -> "The user meant Anna"
    (re.compile(r"(?:i'm|i am)\s+", re.I), "the user is ", "weak"),
    (re.compile(r"i (meant|asked (?:for|about)|said)\s+", re.I), lambda m: f"the user {m.group(1)} ", "weak"),
    (re.compile(r"(?:can|could|would|will) (?:you|u)\s+(?:please\b[\s,]*)?", re.I), "", "polite"),
    (re.compile(r"(?:please|pls|plz)\b[\s,]*", re.I), "", "polite"),
)
# A directive lead in the middle of a clause ("I think you should use ..."): the hint starts there.
_MID_LEAD = re.compile(r"\b(?:you (?:should|need to|must|have to)|i(?:'d| would)? (?:like|want|need) you to)\s", re.I)
_START_CUE = re.compile(
    r"(?:don't|do not)\s+(?!worry\b|mind\b)\w|never\s+(?!mind\b)\w|always\s+\w|make sure\b"
    r"|(?:answer|reply|respond)\s+(?:with|in|only|using)\b|use\s+\w"
    r"|just\s+(?!(?:wondering|curious|checking|kidding|saying|asking)\b)\w|only\s+(?!(?:if|when|because)\b)\w"
    r"|stop\s+\w|avoid\s+\w|keep\s+(?:it|the|your|answers|replies|them)\b(?!\s+(?:up|coming)\b)|be\s+(?:more|less)\s+\w"
    r"|be\s+(?:concise|brief|specific|precise|succinct|terse|direct|to the point)\b"
    r"|(?:every|each|all|your|all (?:of )?your|(?:all )?future)\s+(?:future\s+)?(?:answers?|repl(?:y|ies)|responses?)"
    r"\s+(?:should|must|need to|needs to|has to|have to|ought to)\b"
    r"|make\s+(?:your|all|every|each)\s+(?:\w+\s+)?(?:answers?|repl(?:y|ies)|responses?)\s+\w",
    re.I,
)
_ANYWHERE_CUE = re.compile(
    r"\b(?:you should|make sure|instead|shorter|more concise|too (?:long|short|verbose|wordy)"
    r"|keep it (?:short|brief|simple)|less detail|more detail|less (?:verbose|wordy))",
    re.I,
)
# A weak cue (a hint only from a message scored -1): a clause that opens with an instruction verb.
_INSTRUCTION_VERB = re.compile(
    rf"(?:{_PLACE_VERBS}|include|add|give|write|answer|reply|respond|keep|make|put|sign|call|show|skip|list"
    r"|summari[sz]e|explain|tell|recommend|suggest|round|format|mention|translate|say|try|redo|rewrite|sort"
    r"|cite|prefer|remove|drop|leave|cut|focus|stick|send|the user|without|talk|speak|less|more|fewer"
    rf"|{_FORMAT_VERBS})\b"
    r"|no\s+(?!worries\b|problem\b)\W*\w|in (?:one|two|three|a single|\d+|plain|simple)\b"
    rf"|in (?:{_FORMS})\b|{_ALL_CASE}\b",
    re.I,
)
# A weak cue too: a correction's concrete value, a number or "X, not Y" ("No, it ended in 1945.").
_FACT = re.compile(r"\d|,\s*not\b", re.I)
# Framing and politeness at the end of a hint: "Use a table next time, thanks" gives "Use a table."
_TRAILING_FRAMING = re.compile(
    r"(?:[\s,]+(?:please|pls|thanks|thank you|lol|haha|from (?:now|here) on(?: out)?|going forward|moving forward"
    r"|next time"
    r"|would be (?:nice|great|better|good)"
    r"|in (?:the )?future|(?:every|each) time))+\s*$",
    re.I,
)


def _strip_leads(text: str) -> tuple[str, bool, bool, bool]:
    """``(rest, strong, polite, weak)``: ``text`` without its leading filler and directive leads,
    and whether a lead of each kind was among them."""
    kinds: set[str] = set()
    while True:
        text = text.lstrip(" \t,:;-")
        m = _FILLER_LEAD.match(text)
        if m and m.end():
            text = text[m.end():]
            continue
        for pattern, replacement, kind in _DIRECTIVE_LEADS:
            m = pattern.match(text)
            if m:
                text = (replacement(m) if callable(replacement) else replacement) + text[m.end():]
                kinds.add(kind)
                break
        else:
            return text, "strong" in kinds, "polite" in kinds, "weak" in kinds


def _tidy(hint: str) -> str:
    """One clean sentence: collapsed whitespace, no trailing politeness, capitalized, one final period."""
    text = " ".join(hint.split()).rstrip(" ,:;-.?")
    hint = _TRAILING_FRAMING.sub("", text.rstrip("!")).rstrip(" ,:;-.!?")
    words = hint.split()
    if text.endswith("!") and hint == text.rstrip("!") and len(words) > 1 and words[-1][:1].isupper():
        return hint[:1].upper() + hint[1:] + "!"  # a word the user wants said as written: "... with Sure!"
    return hint[:1].upper() + hint[1:] + "." if hint else ""


def _sentence_hint(sentence: str) -> tuple[str, bool] | None:
    """``(hint, strong)`` from the first clause of ``sentence`` that carries a cue, through the end
    of the sentence; ``None`` when no clause does (or it is a question without a polite lead)."""
    question = sentence.rstrip().endswith("?")
    body = sentence.strip().rstrip(".?; ")
    breaks = list(_CLAUSE_BREAK.finditer(body))
    starts = [0] + [m.end() for m in breaks]
    contrast = [False] + [bool(re.fullmatch(_CONTRAST, m.group(0).strip(), re.I)) for m in breaks]
    for k, start in enumerate(starts):
        clause = body[start : starts[k + 1] if k + 1 < len(starts) else len(body)]
        rest, strong, polite, weak = _strip_leads(body[start:])
        mid = _MID_LEAD.search(clause)
        if mid and mid.start() > 0 and not strong and not _START_CUE.match(rest):
            rest, strong, polite, weak = _strip_leads(body[start + mid.start():])
        strong = strong or bool(_START_CUE.match(rest)) or bool(_ANYWHERE_CUE.search(clause))
        instruction = bool(_INSTRUCTION_VERB.match(rest) or _FACT.search(clause)) or _reservation(contrast[k], rest)
        weak = polite or (not question and (weak or instruction))
        if (strong or weak) and (polite or not question):
            hint = _tidy(rest)
            if content_words(hint) or _FACT.search(hint):  # "You should." alone says nothing
                return hint, strong
    return None


def _reservation(after_contrast: bool, clause: str) -> bool:
    """Whether a clause after "but" / "though" says what to change (not a bare "that's wrong")."""
    if not after_contrast:
        return False
    text = _normalize(clause)
    verdicts = (rule for rule in RULES if rule.role == "user" and rule.name != "preference")
    return not any(rule.pattern.search(text) for rule in verdicts)


def heuristic_hint(next_state: str, role: str, max_chars: int | None = None) -> str | None:
    """The imperative corrections of a user's next message, tidied and joined, or ``None``.

    Invariant: ``None`` for any role but "user", and for a message with no strong cue unless
    ``heuristic_vote`` scores it -1; otherwise whole tidied sentences in the user's order, within
    ``max_chars`` when given. The rules are in the module docstring.
    """
    if role != "user" or not next_state:
        return None
    text = next_state.replace("\u2019", "'").replace("\u2018", "'")
    found = [h for s in sentences(text) if (h := _sentence_hint(s)) is not None]
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
