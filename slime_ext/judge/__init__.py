"""The judge loop: score each (request, response, next state) with m votes.

- ``prompts``: the process-reward prompt (``build_judge_messages``); it shows the user's request,
  the response with its tool calls, and the next state with its role.
- ``votes``: ``parse_vote`` (the last ``\\boxed{}`` value), ``majority`` (ties score 0, ``None``
  abstains) and the ``Verdict`` record.
- ``heuristic``: a documented lexical next-state classifier (``heuristic_vote``).
- ``backends``: the async ``Judge`` runner (bounded concurrency, per-vote timeout, never raises)
  and its backends: OpenAI-compatible endpoint, an ``Engine`` (``self``), and the heuristic.

Importing this package is light: no torch, and aiohttp only when an HTTP judge is used.
"""

from slime_ext.judge.backends import (
    EngineJudgeBackend,
    HeuristicBackend,
    Judge,
    JudgeBackend,
    JudgeError,
    JudgeInput,
    OpenAIJudgeBackend,
)
from slime_ext.judge.heuristic import RULES, heuristic_explain, heuristic_vote
from slime_ext.judge.prompts import JUDGE_SYSTEM_PROMPT, build_judge_messages, render_tool_calls
from slime_ext.judge.votes import Verdict, majority, parse_vote

__all__ = [
    "EngineJudgeBackend",
    "HeuristicBackend",
    "JUDGE_SYSTEM_PROMPT",
    "Judge",
    "JudgeBackend",
    "JudgeError",
    "JudgeInput",
    "OpenAIJudgeBackend",
    "RULES",
    "Verdict",
    "build_judge_messages",
    "heuristic_explain",
    "heuristic_vote",
    "majority",
    "parse_vote",
    "render_tool_calls",
]
