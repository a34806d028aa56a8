"""The tool-call setting: the agent solves a math word problem, calling a sandboxed Python interpreter as a tool.

Tools. One OpenAI-style function, ``python`` (``PYTHON_TOOL``), with a required string argument ``code``.
``tools`` hands it to the agent loop, which renders it with the model's own chat template (natively where the
template knows tools, else in the system message in the Hermes / Qwen convention: see slime_ext/chat/prompt.py).
Observations are tool results (``observation_role = "tool"``).

Episode. ``reset(task)`` makes a fresh temporary workspace and one ``Sandbox`` for the episode (limits per
call: ``timeout_s`` wall clock, ``cpu_s`` CPU seconds, ``memory_mb`` for its processes together, 16 processes, 64 KiB of
output kept per stream; no network in namespace mode), and returns the problem plus how to act: the call
format and "end your final message with the number". ``close`` removes the workspace.

Action format. The model's whole message, in the text it emits: tool calls are ``<tool_call>`` blocks holding
``{"name": "python", "arguments": {"code": "..."}}`` (``slime_ext.chat.reply``'s convention: a block is
accepted exactly when its ``parse_tool_call`` accepts it, so "parameters" and arguments given as a JSON
string work too). Text around the blocks is ignored.

- A message with a ``<tool_call>`` marker is a tool turn, never a final answer. Each block is a valid call
  of ``python`` with a non-empty string ``code``, which runs as ``python3 -I -u -c CODE`` in the episode's
  sandbox (a fresh interpreter per call: variables do not carry over, files in the current directory do;
  stdin is empty), or an error: not JSON, not an object, an unknown tool, no string ``code``, code over
  ``MAX_CODE_CHARS``, a ``<tool_call>`` without ``</tool_call>`` (which ends the scan). At most
  ``MAX_CALLS_PER_MESSAGE`` calls run per message. Either way the message counts as a turn.
- A message without ``<tool_call>`` is the final answer: the episode ends (reason ``"answered"``). A
  whitespace-only message gets ``FORMAT_HELP`` instead and counts as a turn.
- The episode also ends after ``max_turns`` steps (reason ``"max_turns"``; no final answer, then).

Observation (a tool result). For a call that exited 0 with nothing on stderr: what it printed, cut to
``max_output_chars`` with a ``[... stdout truncated: N more characters not shown]`` marker (``(no output:
print() the values you need)`` if nothing). Otherwise ``stdout:`` (if any; its head) and ``stderr:`` (its
*tail*, where a traceback's error is) sections, then a status line: ``[exit status N]``, ``[killed by signal
NAME]`` or ``[timed out after T s]``. An error is ``error: <what is wrong>``; a message with one ends with the
call example. Several blocks in one message: their results in order, each under ``[tool call i of n]``.
``StepResult.info`` also holds ``calls`` (the calls that ran, in OpenAI form) and ``results`` (one text per
block), for a loop that sends one tool message per call, plus ``exit_code`` / ``timed_out`` and
``format_error``. After the final answer the observation is ``"final answer given"`` (no verdict).
``next_state_text`` is the observation.

Reward. ``outcome()`` compares the *last number* of the final answer with the task's exact integer answer:
``fraction_to_reward(1, 1) = +1.0`` when equal, ``-1.0`` otherwise, and ``-1.0`` with no final answer or no
number in it. A number may have thousands commas (``1,200`` is 1200) and a decimal point (``42.0`` equals 42);
``-`` directly before it is its sign; digits glued to a word (``x2``) are not a number. Only the final answer
is graded, never the tool's output. The check is ``checks[0]`` (``env play`` prints it); ``outcome`` ends the
episode.

Tasks. Grade-school word problems from ``slime_ext.simulate.tasks.math_tasks`` (four kinds, exact integer
answers), ``SPLIT_COUNTS`` of each split. The split is math_tasks' own fixed split by the problem's numbers,
and ids are ``tc-<math task id>`` (``tc-shopping-947de73de3be``), so an id never changes split. Every other
block of four problems is the ``big`` variant (``tc-<kind>-big-<hash>``): the same wording with numbers drawn
afresh (deterministically from the base id) in the hundreds and thousands, so that the tool actually helps;
it keeps its base problem's split. The answer is recomputed from the numbers in the text, and must match
math_tasks' answer for the base problem (a RuntimeError otherwise: the generator's wording changed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
import re
import signal
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from slime_ext.chat.reply import CLOSE, OPEN, parse_tool_call
from slime_ext.envs.base import EnvTask, SandboxedEpisode, StepResult, fraction_to_reward, register_setting
from slime_ext.envs.checks import CheckResult, clip
from slime_ext.envs.sandbox import RunResult, Sandbox, SandboxLimits, fresh_workspace
from slime_ext.simulate.tasks import KINDS, math_tasks

SETTING = "toolcall"
TOOL_NAME = "python"
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python 3 code in a fresh sandboxed interpreter; returns what it prints",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python 3 source; print() the values you need"}},
            "required": ["code"],
        },
    },
}
SPLIT_COUNTS = {"train": 200, "heldout": 50}
TASK_SEED = 0
MAX_CALLS_PER_MESSAGE = 4
MAX_CODE_CHARS = 20_000
FINAL_OBSERVATION = "final answer given"
CALL_EXAMPLE = '<tool_call>\n{"name": "python", "arguments": {"code": "print(17 * 23)"}}\n</tool_call>'
FORMAT_HELP = ("Your message was empty. Call the python tool like this:\n" + CALL_EXAMPLE
               + "\nor give your final answer as a message without a tool call that ends with the number, "
               "like: Final answer: 42")
# the last number of a final answer: optional sign, thousands commas, decimal point; not glued to a word
_NUMBER = re.compile(r"(?<![\w.])-?(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?")


# ----------------------------------------------------------------------------- tasks
def solve(kind: str, nums: list[int]) -> int:
    """The answer of a math_tasks problem of `kind` from the numbers in its text, in order."""
    if kind == "shopping":
        a, p, b, q = nums
        return a * p + b * q
    if kind == "sharing":  # total, [kept,] friends
        total, *kept, k = nums
        if len(kept) > 1 or (total - sum(kept)) % k:
            raise ValueError(f"not a sharing problem: {nums}")
        return (total - sum(kept)) // k
    if kind == "rate":
        r, h = nums
        return r * h
    if kind == "multistep":
        a, b, c, k = nums
        return (a + b - c) * k
    raise ValueError(f"unknown kind {kind!r}")


def program(kind: str, nums: list[int]) -> str:
    """The Python a solver writes for a problem of `kind` with the numbers of its text, in order: one print of
    the arithmetic (``solve``'s, spelled out)."""
    if kind == "shopping":
        a, p, b, q = nums
        return f"print({a} * {p} + {b} * {q})"
    if kind == "sharing":
        total, *kept, k = nums
        return f"print(({total} - {kept[0]}) // {k})" if kept else f"print({total} // {k})"
    if kind == "rate":
        r, h = nums
        return f"print({r} * {h})"
    if kind == "multistep":
        a, b, c, k = nums
        return f"print(({a} + {b} - {c}) * {k})"
    raise ValueError(f"unknown kind {kind!r}")


def demonstrate(task: EnvTask, env: Any = None) -> Iterator[str]:
    """The scripted solution (``register_setting``'s ``demonstrate_fn``): one tool call computing the answer from
    the problem's numbers, then the answer the tool printed."""
    nums = [int(n) for n in re.findall(r"[0-9]+", task.instruction)]
    code = program(task.data["kind"], nums)
    yield f"{OPEN}\n{json.dumps({'name': TOOL_NAME, 'arguments': {'code': code}})}\n{CLOSE}"
    yield f"Final answer: {task.data['answer']}"


def big_numbers(kind: str, nums: list[int], rng: random.Random, vehicle: bool = False) -> list[int]:
    """Numbers in the hundreds and thousands for a problem of `kind` with the same shape (count and order) as `nums`
    (`vehicle`: a rate problem about speed, which keeps a plausible speed and gets a long trip instead)."""
    if kind == "shopping":
        return [rng.randint(12, 99), rng.randint(101, 999), rng.randint(12, 99), rng.randint(101, 999)]
    if kind == "sharing":
        k, m = rng.randint(12, 48), rng.randint(101, 999)
        r = rng.randint(1, k - 1) if len(nums) == 3 else 0
        return [k * m + r, r, k] if r else [k * m, k]
    if kind == "rate":
        return [rng.randint(41, 130), rng.randint(13, 99)] if vehicle else [rng.randint(101, 999), rng.randint(13, 99)]
    a, b, k = rng.randint(1001, 9999), rng.randint(101, 999), rng.randint(3, 19)
    return [a, b, rng.randint(101, a + b - 1), k]


def _task(base: Any, split: str, big: bool) -> EnvTask:
    nums = [int(n) for n in re.findall(r"[0-9]+", base.prompt)]
    try:
        ok = solve(base.kind, nums) == base.answer
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"math task {base.id}: its numbers {nums} do not give its answer {base.answer}; "
                           f"did the wording of slime_ext.simulate.tasks change?")
    prompt, kind, hash_ = base.prompt, base.kind, base.id.rsplit("-", 1)[1]
    if big:
        nums = big_numbers(kind, nums, random.Random(f"toolcall-big:{base.id}"), vehicle="km per hour" in prompt)
        it = iter(nums)
        prompt = re.sub(r"[0-9]+", lambda _: str(next(it)), prompt)
    task_id = f"tc-{kind}-big-{hash_}" if big else f"tc-{kind}-{hash_}"
    data = {"category": f"{kind}-big" if big else kind, "kind": kind, "variant": "big" if big else "basic",
            "answer": solve(kind, nums)}
    return EnvTask(task_id, SETTING, split, prompt, data)


@functools.lru_cache(maxsize=1)
def _tasks() -> tuple[EnvTask, ...]:
    out = []
    for split, count in SPLIT_COUNTS.items():
        for i, base in enumerate(math_tasks(split, count, seed=TASK_SEED)):
            out.append(_task(base, split, big=(i // len(KINDS)) % 2 == 1))  # kinds come in turn: blocks of four
    return tuple(out)


def list_toolcall_tasks() -> list[EnvTask]:
    return list(_tasks())


# ----------------------------------------------------------------------------- parsing messages (pure)
@dataclasses.dataclass(frozen=True)
class ToolRequest:
    """One ``<tool_call>`` block: the accepted call (OpenAI form) and its code, or why it cannot run."""

    call: dict | None
    code: str | None
    error: str | None


def _diagnose(block: str) -> str:
    """Why parse_tool_call refused `block`."""
    try:
        obj = json.loads(block.strip())
    except ValueError as e:
        return f"the <tool_call> block is not valid JSON ({e})"
    if not isinstance(obj, dict):
        return 'the <tool_call> block must hold a JSON object {"name": ..., "arguments": {...}}'
    if obj.get("name") != TOOL_NAME:
        name = f"unknown tool {obj['name']!r}" if "name" in obj else 'no tool "name"'
        return f"{name}; the only tool is {TOOL_NAME!r}"
    return 'the "arguments" of python must be a JSON object like {"code": "..."}'


def _request(block: str) -> ToolRequest:
    call = parse_tool_call(block, {TOOL_NAME})
    if call is None:
        return ToolRequest(None, None, _diagnose(block))
    args = json.loads(call["function"]["arguments"])
    code = args.get("code") if isinstance(args, dict) else None
    if not isinstance(code, str) or not code.strip():
        return ToolRequest(call, None, 'the python tool needs a non-empty string argument "code"')
    if len(code) > MAX_CODE_CHARS:
        return ToolRequest(call, None, f"the code is {len(code)} characters long; at most {MAX_CODE_CHARS} run")
    return ToolRequest(call, code, None)


def parse_tool_requests(text: str) -> list[ToolRequest]:
    """Every ``<tool_call>`` block of a message, in order ([] for a message without one: a final answer).
    A ``<tool_call>`` without ``</tool_call>`` is an error request and ends the scan."""
    requests = []
    pos = 0
    while (i := text.find(OPEN, pos)) >= 0:
        j = text.find(CLOSE, i + len(OPEN))
        if j < 0:
            requests.append(ToolRequest(None, None, "<tool_call> without a closing </tool_call>"))
            break
        requests.append(_request(text[i + len(OPEN):j]))
        pos = j + len(CLOSE)
    return requests


def final_number(text: str) -> Decimal | None:
    """The last number in `text` (thousands commas dropped), or None."""
    numbers = _NUMBER.findall(text)
    return Decimal(numbers[-1].replace(",", "")) if numbers else None


def grade(final_text: str | None, answer: int) -> CheckResult:
    """The outcome check: the final answer's last number equals `answer`."""
    description = f"final answer equals {answer}"
    if final_text is None:
        return CheckResult(description, False, "no final answer (a message without a tool call)")
    got = final_number(final_text)
    if got is None:
        return CheckResult(description, False, "no number in the final answer")
    return CheckResult(description, got == answer, f"the final answer's last number is {got}")


def clip_tail(text: str, max_chars: int, name: str) -> str:
    """`text` without its final newline, cut to its last `max_chars` characters (where a traceback's error is)
    behind a marker saying how much was cut."""
    text = text[:-1] if text.endswith("\n") else text
    if len(text) <= max_chars:
        return text
    return f"[... {name} truncated: {len(text) - max_chars} earlier characters not shown]\n{text[-max_chars:]}"


def format_result(res: RunResult, timeout_s: float, cpu_s: int, max_chars: int) -> str:
    """The observation for one python call (see the module docstring)."""
    if res.exit_code == 0 and not res.stderr and not res.truncated:
        return clip(res.stdout, max_chars, "stdout") if res.stdout else "(no output: print() the values you need)"
    lines = [f"stdout:\n{clip(res.stdout, max_chars, 'stdout')}"] if res.stdout else []
    if res.stderr:
        lines.append(f"stderr:\n{clip_tail(res.stderr, max_chars, 'stderr')}")
    if res.truncated:
        lines.append("[output truncated: the code printed too much]")
    if res.timed_out:
        lines.append(f"[timed out after {timeout_s:g} s]")
    elif res.stopped_by:  # a run total (memory, processes, workspace size): say which, not just "signal 9"
        lines.append(f"[stopped: {res.stop_reason}]")
    elif res.exit_code is None:
        try:
            name = signal.Signals(res.signal).name
        except ValueError:
            name = str(res.signal)
        cpu = f" (CPU time limit of {cpu_s} s)" if res.signal == signal.SIGXCPU else ""
        lines.append(f"[killed by signal {name}{cpu}]")
    elif res.exit_code != 0:
        lines.append(f"[exit status {res.exit_code}]")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the environment
class ToolCallEnv(SandboxedEpisode):
    """One tool-call episode at a time (see the module docstring).

    max_turns: steps before the episode ends; timeout_s: wall clock of each python call; cpu_s: its CPU seconds;
    memory_mb: the memory of its processes together; max_output_chars: stdout / stderr shown per call; mode: the
    sandbox mode (None: the best available); require_isolation: refuse the sandbox's rlimits fallback (None: only
    when OPENCLAW_REQUIRE_ISOLATION=1).
    """

    setting = SETTING
    tools: list[dict] = [PYTHON_TOOL]
    observation_role = "tool"

    def __init__(self, max_turns: int = 6, timeout_s: float = 10.0, cpu_s: int = 5, memory_mb: int = 256,
                 max_output_chars: int = 2000, mode: str | None = None,
                 require_isolation: bool | None = None) -> None:
        if max_turns < 1 or timeout_s <= 0 or cpu_s < 1 or memory_mb < 1 or max_output_chars < 1:
            raise ValueError("max_turns, timeout_s, cpu_s, memory_mb and max_output_chars must be positive")
        self.max_turns = max_turns
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.mode = mode
        self.require_isolation = require_isolation
        self.limits = SandboxLimits(cpu_s=cpu_s, wall_s=timeout_s, memory_mb=memory_mb, max_procs=16,
                                    file_size_mb=16, output_bytes=64 * 1024, tmp_mb=64)
        self.task: EnvTask | None = None
        self.workspace: Path | None = None
        self.sandbox: Sandbox | None = None
        self.turns = 0
        self.done = False
        self.final_text: str | None = None
        self.checks: list[CheckResult] | None = None
        self._stack = contextlib.ExitStack()

    def reset(self, task: EnvTask) -> str:
        if task.setting != SETTING:
            raise ValueError(f"task {task.id} is of setting {task.setting!r}, not {SETTING!r}")
        if not isinstance(task.data.get("answer"), int):
            raise ValueError(f"task {task.id}: data needs an integer 'answer'")
        self.close()
        self.workspace = self._stack.enter_context(fresh_workspace(f"toolcall-{task.id}-"))
        self.sandbox = self._new_sandbox(self.workspace)
        self.task, self.turns, self.done, self.final_text, self.checks = task, 0, False, None, None
        return (f"{task.instruction}\n\n"
                f"You can use the tool `python`: it runs Python 3 code in a fresh sandboxed interpreter "
                f"({self.timeout_s:g} s limit, no network) and returns what the code prints, so print() the values "
                f"you need. Call it like this:\n{CALL_EXAMPLE}\n"
                f"Call it as often as you need (at most {self.max_turns} messages in all). When you know the answer, "
                f"reply without a tool call and end your message with the number, like: Final answer: 42")

    def step(self, action_text: str) -> StepResult:
        self._begin_step()
        info: dict[str, Any] = {"turn": self.turns}
        requests = parse_tool_requests(action_text)
        if not requests and not action_text.strip():
            observation = FORMAT_HELP
            info["format_error"] = True
        elif not requests:
            self.final_text, observation = action_text, FINAL_OBSERVATION
            self.done, info["reason"] = True, "answered"
            return StepResult(observation, self.done, info)
        else:
            info["calls"] = []
            results = [self._run(req, i, info) for i, req in enumerate(requests)]
            observation = results[0] if len(results) == 1 else "\n\n".join(
                f"[tool call {i} of {len(results)}]\n{text}" for i, text in enumerate(results, 1))
            if info.get("format_error"):
                observation += f"\n\nCall the tool like this:\n{CALL_EXAMPLE}"
            info["results"] = results
        if self.turns >= self.max_turns:
            self.done, info["reason"] = True, "max_turns"
        return StepResult(observation, self.done, info)

    def _run(self, req: ToolRequest, index: int, info: dict[str, Any]) -> str:
        """The text of one request: the python call's result, or an error."""
        if req.error is not None:
            info["format_error"] = True
            return f"error: {req.error}"
        if index >= MAX_CALLS_PER_MESSAGE:
            return f"error: not run; at most {MAX_CALLS_PER_MESSAGE} tool calls per message"
        assert self.sandbox is not None and req.code is not None
        info["calls"].append(req.call)
        res = self.sandbox.run(["python3", "-I", "-u", "-c", req.code], stdin="", timeout_s=self.timeout_s)
        info["timed_out"] = info.get("timed_out", False) or res.timed_out
        info["exit_code"] = res.exit_code
        return format_result(res, self.timeout_s, self.limits.cpu_s, self.max_output_chars)

    def outcome(self) -> float:
        """+1 if the final answer's last number is the task's answer, else -1 (see the module docstring)."""
        if self.sandbox is None or self.task is None:
            raise RuntimeError("no episode: call reset(task) first")
        self.done = True
        if self.checks is None:
            self.checks = [grade(self.final_text, self.task.data["answer"])]
        return fraction_to_reward(sum(c.passed for c in self.checks), len(self.checks))



register_setting(SETTING, list_toolcall_tasks, ToolCallEnv, demonstrate)
