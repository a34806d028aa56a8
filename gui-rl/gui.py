"""The GUI setting: the agent uses web pages in headless Chromium, seeing their accessibility tree.

Episode. ``reset(task)`` publishes the task's pages on the loopback page server (``gui_server``), opens a
tab in a fresh browser context of the process's shared Chromium (``browser.shared_browser``), loads the
start page and returns the instruction, the action format and the page's tree (``axtree``: one line per
node, ``[id] role "name" value=... states``; ids stay the same for a node all episode).

Actions. One per line, anywhere in the message (code fences allowed); lines that are not actions are
ignored, so the model may think aloud first. At most ``MAX_ACTIONS`` run per message, in order, stopping at
the first that fails or that loads a new page (the ids after it were written for the old one):

    click [ID]                 a real mouse click on the node (an option of a drop-down list is chosen)
    type [ID] "TEXT"           replace a text field's content with TEXT
    select [ID] "OPTION"       choose an option of a drop-down list by its label
    press KEY                  Enter, Tab, Escape, Backspace, Space, ArrowUp/Down/Left/Right on the focused node
    scroll down | scroll up    the page, by most of a screen
    done                       the task is complete: ends the episode
    infeasible                 the task cannot be done on this site: ends the episode (a reason may follow)

Observation (a user message). One line per action run (``clicked [8] button "Save"``, or ``error: ...``
saying what was wrong: an unknown id, a node that is not a text field, a missing option), then the page's
tree after them. A message with no action gets ``FORMAT_HELP`` and counts as a turn.

Next state (what a step-wise judge sees, ``next_state_text``): the action results, the tree diff (``+``
added, ``~`` changed, ``-`` removed nodes) and the task's progress (checks passing so far).

Reward. ``outcome()`` reads the page state the task pages recorded (``record(key, value)`` in their
scripts) and applies the task's checks (``state[key] == expected``):

- a feasible task: the checks plus one more, "the agent said done"; ``fraction_to_reward(passed, total)``.
  So +1 needs every check and ``done``: an episode cut short (turn limit, context) never earns it.
- an infeasible task: +1 only when the agent said ``infeasible`` and every check holds (they say that
  nothing was changed, e.g. no order placed); otherwise -1, truncated episodes included.
- saying ``infeasible`` on a feasible task is -1.

Screenshots. With ``run_dir``, a PNG of the page after every step goes to
``run_dir/screenshots/<task id>-<episode>/step-<turn>.png`` (for debugging; ~10-40 kB each). With
``vision=True`` (for a vision-language model on SGLang: ``gui_qwen3vl_8b_rl.sh``) the page's screenshot also
goes with every message the agent reads (``observation_images``), the tree still below it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gui_server import STATE_JS, Site, site

from slime_ext.envs.axtree import NodeIds, TreeLine, render_tree, tree_diff, tree_text
from slime_ext.envs.base import EnvTask, SandboxedEpisode, StepResult, fraction_to_reward, register_setting
from slime_ext.envs.browser import Browser, BrowserError, Page, shared_browser
from slime_ext.envs.checks import CheckResult

SETTING = "gui"
MAX_ACTIONS = 8
SCROLL_PX = 600
MAX_TREE_LINES = 120
ACTION_HELP = """Act with one action per line:
click [ID]
type [ID] "text"
select [ID] "option"
press Enter   (or Tab, Escape, Backspace, Space, ArrowDown, ...)
scroll down   (or scroll up)
done          (when the task is complete)
infeasible    (when the task cannot be done on this site)
ID is the number in brackets before a node of the page below."""
FORMAT_HELP = "Your message had no action. " + ACTION_HELP
_ID = r"\[?(\d+)\]?"
_TEXT = r"(\"(?:[^\"\\]|\\.)*\"|'[^']*'|\S.*?)"
_PATTERNS = [
    ("click", re.compile(rf"click\s+{_ID}\s*$", re.I)),
    ("type", re.compile(rf"type\s+{_ID}\s+{_TEXT}\s*$", re.I)),
    ("select", re.compile(rf"select\s+{_ID}\s+{_TEXT}\s*$", re.I)),
    ("press", re.compile(r"press\s+([A-Za-z]+)\s*$", re.I)),
    ("scroll", re.compile(r"scroll\s+(down|up)\s*$", re.I)),
    ("done", re.compile(r"done\.?\s*$", re.I)),
    ("infeasible", re.compile(r"infeasible\b.*$", re.I)),
]


@dataclasses.dataclass(frozen=True)
class Action:
    verb: str  # click, type, select, press, scroll, done, infeasible
    node: int | None = None
    text: str | None = None

    def __str__(self) -> str:
        out = self.verb + (f" [{self.node}]" if self.node is not None else "")
        return out + (f" {json.dumps(self.text)}" if self.text is not None else "")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return json.loads(text)
        except ValueError:
            return text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    return text


def parse_actions(message: str) -> list[Action]:
    """The actions of a message, in order (see the module docstring); lines that are not actions are skipped.
    A line may start with a list marker, ``>`` or ``Action:``; the verb is case-insensitive."""
    actions = []
    for raw in message.splitlines():
        line = re.sub(r"^\s*(?:[-*>]|\d+[.)]|action\s*:)?\s*", "", raw, flags=re.I).strip().strip("`").strip()
        for verb, pattern in _PATTERNS:
            m = pattern.match(line)
            if not m:
                continue
            if verb in ("click",):
                actions.append(Action(verb, int(m.group(1))))
            elif verb in ("type", "select"):
                actions.append(Action(verb, int(m.group(1)), _unquote(m.group(2))))
            elif verb == "press":
                actions.append(Action(verb, text=m.group(1)))
            elif verb == "scroll":
                actions.append(Action(verb, text=m.group(1).lower()))
            else:
                actions.append(Action(verb))
            break
    return actions


def check_state(state: dict, checks: list[list]) -> list[CheckResult]:
    """Each ``[description, key, expected]`` check against the recorded page state (pure)."""
    out = []
    for description, key, expected in checks:
        got = state.get(key)
        out.append(CheckResult(description, got == expected,
                               f"{key} is {json.dumps(got)}" + ("" if got == expected else f", not {json.dumps(expected)}")))
    return out


def outcome_checks(task_checks: list[CheckResult], feasible: bool, ending: str | None) -> list[CheckResult]:
    """The checks the reward counts: the task's, plus how the agent ended (``"done"``, ``"infeasible"`` or
    None for a cut-short episode); see the module docstring."""
    if feasible:
        return [*task_checks, CheckResult("the agent said done", ending == "done",
                                          f"it ended with {ending or 'no declaration'}")]
    return [*task_checks, CheckResult("the agent declared the task infeasible", ending == "infeasible",
                                      f"it ended with {ending or 'no declaration'}")]


def reward_of(checks: list[CheckResult], feasible: bool, ending: str | None) -> float:
    """The outcome reward from ``outcome_checks`` (pure): partial credit on a feasible task unless the agent
    wrongly declared it infeasible; all or nothing on an infeasible one."""
    passed = sum(c.passed for c in checks)
    if feasible:
        return -1.0 if ending == "infeasible" else fraction_to_reward(passed, len(checks))
    return 1.0 if passed == len(checks) else -1.0


_episodes = itertools.count(1)


class GuiEnv(SandboxedEpisode):
    """One GUI episode at a time in a tab of the shared browser (see the module docstring).

    max_turns: steps before the episode ends; run_dir: where screenshots go (None: none);
    browser: the Chromium to use (None: the process's shared one, started on first use);
    chromium: the executable for the shared browser (None: found on PATH);
    vision: show the model a screenshot of the page with each message (``observation_images``).
    """

    setting = SETTING
    tools: list[dict] = []
    observation_role = "user"

    def __init__(self, max_turns: int = 10, run_dir: str | Path | None = None, browser: Browser | None = None,
                 chromium: str | None = None, max_tree_lines: int = MAX_TREE_LINES, vision: bool = False) -> None:
        if max_turns < 1 or max_tree_lines < 1:
            raise ValueError("max_turns and max_tree_lines must be positive")
        self.max_turns = max_turns
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.browser = browser
        self.chromium = chromium
        self.max_tree_lines = max_tree_lines
        self.vision = vision
        self._images: list[bytes] = []  # the screenshot that goes with the last message (vision)
        self.task: EnvTask | None = None
        self.workspace: Site | None = None
        self.sandbox: Page | None = None  # the episode's tab: everything the agent does happens in it
        self.turns = 0
        self.done = False
        self.ending: str | None = None
        self.checks: list[CheckResult] | None = None
        self.ids = NodeIds()
        self.lines: list[TreeLine] = []
        self.timings: dict[str, float] = {}
        self._shots: Path | None = None
        self._stack = contextlib.ExitStack()

    # -- episode
    def reset(self, task: EnvTask) -> str:
        if task.setting != SETTING:
            raise ValueError(f"task {task.id} is of setting {task.setting!r}, not {SETTING!r}")
        for key in ("pages", "start", "checks", "feasible"):
            if key not in task.data:
                raise ValueError(f"task {task.id}: data needs {key!r}")
        self.close()
        t0 = time.monotonic()
        browser = self.browser or shared_browser(self.chromium)
        self.timings = {"browser_s": time.monotonic() - t0}
        self.workspace = self._stack.enter_context(contextlib.closing(site(task.data["pages"])))
        self.sandbox = self._stack.enter_context(contextlib.closing(browser.new_page()))
        self.task, self.turns, self.done, self.ending, self.checks = task, 0, False, None, None
        self.ids, self.lines = NodeIds(), []
        self.sandbox.navigate(self.workspace.url(task.data["start"]))
        self.lines = self._tree()
        self.timings["reset_s"] = time.monotonic() - t0
        self._shots = None
        if self.run_dir is not None:
            self._shots = self.run_dir / "screenshots" / f"{task.id}-{next(_episodes)}"
        self._capture(None)
        seeing = "a screenshot of it and its accessibility tree" if self.vision else "its accessibility tree"
        return (f"{task.instruction}\n\nYou are using a web page through {seeing}. {ACTION_HELP}\n"
                f"You have at most {self.max_turns} messages.\n\nThe page:\n"
                + tree_text(self.lines, self.max_tree_lines))

    def _tree(self) -> list[TreeLine]:
        assert self.sandbox is not None and self.workspace is not None
        return render_tree(self.sandbox.ax_nodes(), self.ids, self.workspace.base_url)

    def state(self) -> dict:
        """What the task pages recorded so far (``record(key, value)``)."""
        assert self.sandbox is not None
        value = self.sandbox.evaluate(STATE_JS)
        return value if isinstance(value, dict) else {}

    def step(self, action_text: str) -> StepResult:
        turn = self._begin_step()
        t0 = time.monotonic()
        info: dict[str, Any] = {"turn": turn}
        actions = parse_actions(action_text)[:MAX_ACTIONS]
        before = self.lines
        results: list[str] = []
        if not actions:
            info["format_error"] = True
        for i, action in enumerate(actions):
            if action.verb in ("done", "infeasible"):
                self.ending = action.verb
                self.done, info["reason"] = True, action.verb
                results.append(f"you declared the task {'complete' if action.verb == 'done' else 'infeasible'}")
                break
            loads = self.sandbox.loads
            ok, text = self._apply(action)
            results.append(text)
            self.sandbox.settle()
            self.lines = self._tree()  # the next action's ids are checked against the page as it is now
            if not ok:
                info["action_error"] = True
                break
            if self.sandbox.loads != loads and i + 1 < len(actions):
                results.append(f"a new page loaded, so the {len(actions) - i - 1} action(s) after this one were "
                               "not run: read the new page's ids first")
                break
        info["actions"] = [str(a) for a in actions]
        checks = check_state(self.state(), self.task.data["checks"])
        info["progress"] = f"{sum(c.passed for c in checks)}/{len(checks)}"
        if not self.done and self.turns >= self.max_turns:
            self.done, info["reason"] = True, "max_turns"
        diff = tree_diff(before, self.lines)
        info["next_state"] = "\n".join(
            [*(results or ["no action"]), "page changes:" if diff else "the page did not change", *diff,
             f"task progress: {info['progress']} checks pass"])
        info["step_s"] = round(time.monotonic() - t0, 4)
        self._capture(turn)
        if not actions:
            observation = FORMAT_HELP + "\n\nThe page:\n" + tree_text(self.lines, self.max_tree_lines)
        elif self.done and info["reason"] != "max_turns":
            observation = "\n".join(results)
        else:
            observation = "\n".join(results) + "\n\nThe page:\n" + tree_text(self.lines, self.max_tree_lines)
        return StepResult(observation, self.done, info)

    def _capture(self, turn: int | None) -> None:
        """One screenshot of the page, when wanted: for the model (vision) and, after a step (``turn``),
        for the run directory."""
        self._images = []
        keep = self._shots is not None and turn is not None
        if not (self.vision or keep):
            return
        assert self.sandbox is not None
        png = self.sandbox.screenshot_png()
        if self.vision:
            self._images = [png]
        if keep:
            self._shots.mkdir(parents=True, exist_ok=True)
            (self._shots / f"step-{turn}.png").write_bytes(png)

    def observation_images(self) -> list[bytes]:
        """PNGs that go with the message ``reset`` or ``step`` returned last: the page's screenshot when
        ``vision`` is on, else none."""
        return list(self._images)

    def _apply(self, action: Action) -> tuple[bool, str]:
        """Run one action; (ok, what happened or what was wrong)."""
        page = self.sandbox
        assert page is not None
        if action.verb == "scroll":
            page.scroll(SCROLL_PX if action.text == "down" else -SCROLL_PX)
            return True, f"scrolled {action.text}"
        if action.verb == "press":
            try:
                page.press(action.text or "")
            except BrowserError as e:
                return False, f"error: {e}"
            return True, f"pressed {action.text}"
        line = next((ln for ln in self.lines if ln.id == action.node), None)
        backend = self.ids.backend_of(action.node) if line is not None else None
        if line is None or backend is None:
            return False, f"error: there is no node [{action.node}] on the page now; use an id from the page below"
        try:
            if action.verb == "click":
                page.click(backend)
                return True, f"clicked [{line.id}] {_label(line)}"
            if action.verb == "type":
                page.type(backend, action.text or "")
                return True, f"typed {json.dumps(action.text)} into [{line.id}] {_label(line)}"
            page.select(backend, action.text or "")
            return True, f"selected {json.dumps(action.text)} in [{line.id}] {_label(line)}"
        except BrowserError as e:
            return False, f"error: cannot {action.verb} [{line.id}] {_label(line)}: {e}"

    def next_state_text(self, result: StepResult) -> str:
        return result.info.get("next_state", result.observation)

    def outcome(self) -> float:
        """The reward from the recorded page state and how the agent ended (see the module docstring)."""
        if self.sandbox is None or self.task is None:
            raise RuntimeError("no episode: call reset(task) first")
        self.done = True
        if self.checks is None:
            task_checks = check_state(self.state(), self.task.data["checks"])
            self.checks = outcome_checks(task_checks, self.task.data["feasible"], self.ending)
        return reward_of(self.checks, self.task.data["feasible"], self.ending)


def _label(line: TreeLine) -> str:
    """A line's role and name, without value or states."""
    m = re.match(r'\S+(?: "(?:[^"\\]|\\.)*")?', line.text)
    return m.group(0) if m else line.text


def list_gui_tasks() -> list[EnvTask]:
    from gui_tasks import gui_tasks

    return gui_tasks()


def demonstrate(task: EnvTask, env: GuiEnv) -> Iterator[str]:
    """The task's scripted solution (``register_setting``'s ``demonstrate_fn``), naming the page's nodes as they
    are when each message is sent."""
    from gui_tasks import solution_messages

    return solution_messages(task, lambda: env.lines)


register_setting(SETTING, list_gui_tasks, GuiEnv, demonstrate)
