"""What every agent environment shares: tasks, the `Env` protocol, the setting registry, the outcome reward.

A *setting* (terminal, toolcall, swe, ...) is a family of tasks and the environment that runs them. A setting
module registers itself with ``register_setting(name, list_tasks_fn, make_env_fn)`` when it is imported, and
is then reachable by name. Settings live outside this package, each in its folder (``terminal-rl/``, ...,
or the user's own); ``envs/loader.py`` imports them on demand (the registry asks it when a name is missing):

    task = get_task("terminal", "term-count-lines")
    with make_env("terminal", max_turns=8) as env:
        first_message = env.reset(task)                 # the instruction and how to act
        result = env.step(model_message)                # the env parses the action out of the whole message
        ...                                             # until result.done
        reward = env.outcome()                          # the task's own check, in [-1, 1]

Invariants every setting keeps:

- ``reset`` starts a new episode from scratch (nothing carries over from an earlier one) and returns the first
  user message: the task's instruction plus the action format.
- ``step`` takes the model's whole message; a message without a usable action is answered with a short
  format-help observation and still counts as a turn. ``StepResult.info`` always holds ``turn`` (1-based) and,
  once ``done``, ``reason`` (why the episode ended, e.g. ``"done"`` or ``"max_turns"``). Stepping a finished
  episode raises ``RuntimeError``.
- ``outcome`` is the final reward, from the task's automatic check only (never from the model's own claims),
  and it lies in [-1, 1]: ``fraction_to_reward(checks passed, checks)``. Calling it ends the episode.
- ``next_state_text`` is what a step-wise judge sees as the next state after a step.
- ``tools`` and ``observation_role`` say how the agent loop renders the conversation: the tool schemas offered
  to the model, and whether an observation is a ``"user"`` message or a ``"tool"`` result.
- every ``make_env_fn`` accepts the keyword ``max_turns`` (and may accept ``run_dir``); ``close`` releases what
  the episode holds and may be called more than once; envs are context managers.
- a setting that can show its state as images (for a vision-language model) accepts ``vision=True`` and has
  ``observation_images()``: the PNGs that go with the message ``reset`` or ``step`` returned last (before its
  text); the others are text only (``observation_images(env)`` is then empty).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, runtime_checkable

SPLITS = ("train", "heldout")
Split = Literal["train", "heldout"]


@dataclasses.dataclass(frozen=True)
class EnvTask:
    """One task of a setting. `instruction` is what the agent is asked; `data` is setting-specific and
    JSON-serialisable (set-up, checks, ...). Ids are unique within a setting; the split of an id never changes."""

    id: str
    setting: str
    split: Split
    instruction: str
    data: dict = dataclasses.field(default_factory=dict, hash=False, compare=True)

    def __post_init__(self) -> None:
        if not self.id or not isinstance(self.id, str) or any(c.isspace() for c in self.id):
            raise ValueError(f"task id must be a non-empty string without spaces, got {self.id!r}")
        if self.split not in SPLITS:
            raise ValueError(f"task {self.id}: split must be one of {SPLITS}, got {self.split!r}")
        if not self.instruction.strip():
            raise ValueError(f"task {self.id}: empty instruction")
        try:
            json.dumps(self.data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"task {self.id}: data is not JSON-serialisable: {e}") from None


@dataclasses.dataclass
class StepResult:
    """What one step produced: the observation shown to the agent next, whether the episode is over, and
    details (always ``turn``; ``reason`` once done; setting-specific keys otherwise)."""

    observation: str
    done: bool
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """An agent environment: one episode at a time (see the module docstring for the invariants)."""

    setting: str
    tools: list[dict]  # OpenAI-style tool schemas the model is offered (rendered by its chat template); [] for none
    observation_role: str  # the chat role observations are sent as: "user", or "tool" (a tool result)

    def reset(self, task: EnvTask) -> str:
        """Start an episode of `task`; return the first user message (instruction + action format)."""
        ...

    def step(self, action_text: str) -> StepResult:
        """Apply the model's whole message; return the observation, done and info."""
        ...

    def outcome(self) -> float:
        """The final reward in [-1, 1] from the task's check; ends the episode."""
        ...

    def next_state_text(self, result: StepResult) -> str:
        """The next-state text a step-wise judge sees for `result`."""
        ...

    def close(self) -> None:
        """Release the episode's resources; idempotent."""
        ...

    def __enter__(self) -> Env: ...

    def __exit__(self, *exc: object) -> None: ...


class SandboxedEpisode:
    """The lifetime every built-in setting shares: an episode holds its workspace and sandbox in an
    ``ExitStack`` (``_stack``); ``close`` releases them (idempotent) and forgets the task; a context manager.
    ``next_state_text`` is the observation itself unless a setting says otherwise."""

    _stack: contextlib.ExitStack
    workspace: Any
    sandbox: Any
    task: EnvTask | None

    turns: int
    done: bool
    limits: Any  # SandboxLimits of every run of the episode
    mode: str | None  # the sandbox mode (None: the best available)
    require_isolation: bool | None  # refuse the rlimits fallback (None: only when OPENCLAW_REQUIRE_ISOLATION=1)

    def _new_sandbox(self, workspace: Any) -> Any:
        """A ``Sandbox`` on ``workspace`` with this setting's limits, mode and isolation requirement."""
        from slime_ext.envs.sandbox import Sandbox

        return Sandbox(workspace, self.limits, mode=self.mode, require_isolation=self.require_isolation)

    def _begin_step(self) -> int:
        """Refuse a step outside a running episode; count it; return its 1-based turn number."""
        if self.sandbox is None or self.task is None:
            raise RuntimeError("no episode: call reset(task) first")
        if self.done:
            raise RuntimeError("the episode is over: call reset(task) to start another")
        self.turns += 1
        return self.turns

    def next_state_text(self, result: StepResult) -> str:
        return result.observation

    def close(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.workspace = self.sandbox = None
        self.task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fraction_to_reward(passed: int, total: int) -> float:
    """The outcome reward: 2 * passed / total - 1, so no check passed is -1, all passed is +1, half is 0.

    Raises ValueError unless 0 <= passed <= total and total > 0.
    """
    if total <= 0 or not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total and total > 0, got passed={passed}, total={total}")
    return 2.0 * passed / total - 1.0


# ----------------------------------------------------------------------------- the setting registry
# (task, env just reset for it) -> the messages a competent agent sends, in order; a generator may read the
# env's state between messages (gui names page nodes as they are now). What ``env sft`` learns from.
Demonstrate = Callable[[EnvTask, "Env"], Iterable[str]]


@dataclasses.dataclass(frozen=True)
class _Setting:
    list_tasks: Callable[[], list[EnvTask]]
    make_env: Callable[..., Env]
    demonstrate: Demonstrate | None = None


_SETTINGS: dict[str, _Setting] = {}
# what makes settings known on demand: envs/loader.py adds its load_settings (the built-in setting folders,
# $OPENCLAW_RL_SETTINGS, installed packages), so the registry never imports a setting itself
_FINDERS: list[Callable[[], object]] = []


def add_finder(find: Callable[[], object]) -> None:
    """Call ``find()`` whenever the registry is asked for the settings it knows or for one it lacks."""
    if find not in _FINDERS:
        _FINDERS.append(find)


def _find() -> None:
    for find in _FINDERS:
        find()


def register_setting(name: str, list_tasks_fn: Callable[[], list[EnvTask]], make_env_fn: Callable[..., Env],
                     demonstrate_fn: Demonstrate | None = None) -> None:
    """Make a setting reachable by name. ``demonstrate_fn`` (optional) plays a task's scripted solution
    (``Demonstrate``; ``envs/demos.py`` turns it into warm-start data). Registering the same functions again is a
    no-op; different ones under a taken name raise ValueError."""
    entry = _Setting(list_tasks_fn, make_env_fn, demonstrate_fn)
    if _SETTINGS.get(name, entry) != entry:
        raise ValueError(f"setting {name!r} is already registered with other functions")
    _SETTINGS[name] = entry


def known_settings() -> list[str]:
    """Every setting there is: the registered ones after the finders looked for more."""
    _find()
    return sorted(_SETTINGS)


def registered_settings() -> list[str]:
    """The settings registered so far, without looking for more."""
    return sorted(_SETTINGS)


def _setting(name: str) -> _Setting:
    if name not in _SETTINGS:
        _find()
    try:
        return _SETTINGS[name]
    except KeyError:
        known = ", ".join(sorted(_SETTINGS)) or "none"
        raise ValueError(f"unknown setting {name!r}; known settings: {known} (a setting of your own: --setting-path "
                         f"DIR, or OPENCLAW_RL_SETTINGS; docs/extending.md)") from None


def demonstrator(setting: str) -> Demonstrate:
    """The setting's scripted solutions (``register_setting``'s ``demonstrate_fn``); ValueError when it has none."""
    demonstrate = _setting(setting).demonstrate
    if demonstrate is None:
        raise ValueError(f"setting {setting!r} has no scripted solutions to learn from (register_setting's "
                         f"demonstrate_fn; docs/extending.md)")
    return demonstrate


def list_tasks(setting: str, split: str | None = None) -> list[EnvTask]:
    """The setting's tasks (train and held-out, or only `split`), in the setting's order.

    Checks that every task belongs to `setting` and that ids are unique.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tasks = list(_setting(setting).list_tasks())
    seen: set[str] = set()
    for t in tasks:
        if t.setting != setting:
            raise ValueError(f"task {t.id} is listed by setting {setting!r} but says setting={t.setting!r}")
        if t.id in seen:
            raise ValueError(f"setting {setting!r} lists task id {t.id!r} twice")
        seen.add(t.id)
    return [t for t in tasks if split is None or t.split == split]


def get_task(setting: str, task_id: str) -> EnvTask:
    """The task `task_id` of `setting`; ValueError naming close ids (or the first few) when there is none."""
    tasks = list_tasks(setting)
    for t in tasks:
        if t.id == task_id:
            return t
    ids = [t.id for t in tasks]
    close = difflib.get_close_matches(task_id, ids, n=3)
    more = ", ..." if len(ids) > 8 else ""
    hint = f"did you mean {', '.join(close)}?" if close else f"known ids: {', '.join(ids[:8])}{more}"
    raise ValueError(f"unknown task {task_id!r} for setting {setting!r}; {hint} "
                     f"(`openclaw-rl env list --setting {setting}` lists all {len(ids)})")


def make_env(setting: str, *, run_dir: Any = None, vision: bool = False, **kwargs: Any) -> Env:
    """A new environment of `setting`; `kwargs` go to its constructor (every setting accepts max_turns).
    `run_dir` (where a setting may keep debugging artifacts, e.g. screenshots) goes only to a setting whose
    constructor declares it; the others have nothing to keep. `vision` (images with the observations, for a
    vision-language model) needs a setting that declares it; ValueError otherwise."""
    make = _setting(setting).make_env
    params = inspect.signature(make).parameters
    if run_dir is not None and "run_dir" in params:
        kwargs["run_dir"] = run_dir
    if vision:
        if "vision" not in params:
            raise ValueError(f"setting {setting!r} shows no images: its environment has no vision option "
                             "(only text observations)")
        kwargs["vision"] = True
    return make(**kwargs)


def observation_images(env: Env) -> list[bytes]:
    """The images (PNG bytes) that go with the message ``env.reset`` or ``env.step`` returned last: a setting
    that can show them has ``observation_images()`` (gui with vision); for the others, none."""
    images = getattr(env, "observation_images", None)
    return list(images()) if callable(images) else []


def play_episode(env: Env, task: EnvTask, actions: Iterable[str],
                 on_step: Callable[[int, str, StepResult], None] | None = None) -> tuple[str, list[StepResult], float]:
    """Run a scripted episode: reset, step through `actions` until the episode is done (actions left over are
    not used) and take the outcome. Returns (first message, step results, reward); `on_step(turn, action,
    result)` is called after each step. Used by ``env play`` and by tests of hand-written solutions."""
    first = env.reset(task)
    results: list[StepResult] = []
    for action in actions:
        result = env.step(action)
        results.append(result)
        if on_step is not None:
            on_step(len(results), action, result)
        if result.done:
            break
    return first, results, env.outcome()
