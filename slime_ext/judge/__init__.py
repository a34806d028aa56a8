"""The judge loop: score each (request, response, next state) with m votes, and find its hint.

- ``prompts``: the turn rendered once (``render_turn``: the user's request, the response with its
  tool calls, and the next state with its role) under two questions: the process-reward prompt
  (``build_judge_messages``) and the hindsight-hint prompt (``build_hint_messages``).
- ``votes``: ``parse_vote`` (the last ``\\boxed{}`` value), ``majority`` (ties score 0, ``None``
  abstains) and the ``Verdict`` record.
- ``heuristic``: a documented lexical reader of the next state: ``heuristic_vote`` (a score) and
  ``heuristic_hint`` (the user's imperative corrections).
- ``backends``: the async runners' shared machinery ``VoteRunner`` (bounded concurrency, per-vote
  timeout, never raises), the reward ``Judge``, and the backends: OpenAI-compatible endpoint, an
  ``Engine`` (``self``), and the heuristic.
- ``hints``: the hint judge for On-Policy Distillation: ``parse_hint`` (a hint needs a final
  ``\\boxed{1}`` and the markers), ``select_hint`` (a strict majority of the m votes must give a
  hint; the consensus hint is chosen), the ``HintVerdict`` record, ``HintJudge`` and the heuristic's
  ``HeuristicHintBackend``.

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
    VoteRunner,
)
from slime_ext.judge.heuristic import RULES, heuristic_explain, heuristic_hint, heuristic_vote
from slime_ext.judge.hints import HeuristicHintBackend, HintJudge, HintVerdict, parse_hint, select_hint
from slime_ext.judge.prompts import (
    HINT_END,
    HINT_START,
    HINT_SYSTEM_PROMPT,
    JUDGE_SYSTEM_PROMPT,
    MAX_HINT_CHARS,
    MIN_HINT_CHARS,
    build_hint_messages,
    build_judge_messages,
    render_tool_calls,
    render_turn,
)
from slime_ext.judge.votes import Verdict, majority, parse_vote

__all__ = [
    "EngineJudgeBackend",
    "HINT_END",
    "HINT_START",
    "HINT_SYSTEM_PROMPT",
    "HeuristicBackend",
    "HeuristicHintBackend",
    "HintJudge",
    "HintVerdict",
    "JUDGE_SYSTEM_PROMPT",
    "Judge",
    "JudgeBackend",
    "JudgeError",
    "JudgeInput",
    "MAX_HINT_CHARS",
    "MIN_HINT_CHARS",
    "OpenAIJudgeBackend",
    "RULES",
    "Verdict",
    "VoteRunner",
    "build_hint_messages",
    "build_judge_messages",
    "heuristic_explain",
    "heuristic_hint",
    "heuristic_vote",
    "majority",
    "parse_hint",
    "parse_vote",
    "render_tool_calls",
    "render_turn",
    "select_hint",
]
