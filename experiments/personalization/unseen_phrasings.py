"""Preferences and phrasings not in the issue, through the real experiment (issue 28's check).

    .venv/bin/python experiments/personalization/unseen_phrasings.py experiment personalization \
        --methods none --personas well,tldr,short15 --seeds 0,1 --sessions 6 --probe-every 6 --heldout 8 \
        --rounds 1 --max-tokens 64 --jobs 2 --out DIR

Runs ``openclaw-rl`` (any command, same arguments) with three more scripted personas, each asking for its
preference in three phrasings none of the built-in personas use:

- ``well``: answers open with "Well," ("Kick off every reply with 'Well,' from now on.", "Prefix every answer
  with 'Well,' please, always.", "Say 'Well,' at the start of every answer.");
- ``tldr``: answers open with "TL;DR:" ("Always lead with 'TL;DR:'.", "Every answer should start with
  'TL;DR:'.", "Going forward, begin by saying 'TL;DR:'.");
- ``short15``: at most 15 words ("Be succinct going forward, 15 words max.", "Please keep all future answers
  under 15 words.", "Your replies must stay under 15 words.").

Each must also answer the question (all or nothing), as the built-in preference personas do. Most of these
forms were tried by hand first and fixed in the memory and the judge before this ran, so it checks the fixed
product end to end, not a first look. What it measured is in ``README.md`` ("Phrasings not in the issue").
"""

from __future__ import annotations

import sys

from slime_ext.cli import main
from slime_ext.simulate import personas

MORE = (
    personas.opener_persona("well", "Well,", ("Kick off every reply with 'Well,' from now on.",
                                              "Prefix every answer with 'Well,' please, always.",
                                              "Say 'Well,' at the start of every answer.")),
    personas.opener_persona("tldr", "TL;DR:", ("Always lead with 'TL;DR:'.", "Every answer should start with 'TL;DR:'.",
                                               "Going forward, begin by saying 'TL;DR:'.")),
    personas.preference_persona("short15", "at most 15 words", lambda r: 0 < len(r.split()) <= 15,
                                ("Be succinct going forward, 15 words max.",
                                 "Please keep all future answers under 15 words.",
                                 "Your replies must stay under 15 words.")),
)

if __name__ == "__main__":
    personas.PERSONAS.update({p.name: p for p in MORE})
    raise SystemExit(main(sys.argv[1:]))
