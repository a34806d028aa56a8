"""A judge backend of your own, outside ``slime_ext`` (docs/extending.md): it scores the user's next
message by keywords you choose. Serve with it:

    PYTHONPATH=examples/custom_judge openclaw-rl serve --judge keyword_judge:KeywordJudge

``--judge module:attr`` names a callable that takes the server's settings (``ServeConfig``) and
returns the backend; a class whose ``__init__`` takes them is one. The backend needs one method,
``async vote(messages, *, seed, inputs=None) -> str``, whose answer ends in ``\\boxed{1}``,
``\\boxed{0}`` or ``\\boxed{-1}``. ``inputs`` is the turn (``slime_ext.judge.JudgeInput``: the
request, the response, the next state and its role); ``messages`` the judge prompt, for backends
that ask a model.
"""

from __future__ import annotations

GOOD = ("thanks", "perfect", "great", "exactly")
BAD = ("wrong", "not what i asked", "no,", "incorrect")


class KeywordJudge:
    name = "keyword"  # shown in logs
    default_votes = 1  # deterministic: one vote is enough (model judges default to 3)
    task = "judge"  # it reads the turn, not the prompt: the reward only (hints: the heuristic reading)

    def __init__(self, cfg) -> None:
        self.cfg = cfg  # the server's settings, e.g. cfg.judge_url for a backend that calls a service

    async def vote(self, messages, *, seed, inputs=None) -> str:
        text = (inputs.next_state if inputs else "").lower()
        score = -1 if any(w in text for w in BAD) else 1 if any(w in text for w in GOOD) else 0
        return f"keywords in the next state\n\\boxed{{{score}}}"
