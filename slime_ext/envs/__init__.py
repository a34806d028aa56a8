"""Agent environments, the machinery every setting shares: the `Env` protocol and setting registry (base.py), the
OS-isolated sandbox their commands run in, workspace file I/O, check helpers, the browser driver, the agent loop,
the recipe and the `env` CLI. The settings themselves (terminal, toolcall, swe, gui, and the user's own) live in
folders outside this package and are loaded on demand by ``loader.py``: nothing here imports one."""

from slime_ext.envs import loader as _loader  # noqa: F401 (adds the registry's finder: settings load on demand)
from slime_ext.envs.base import (
    Env,
    EnvTask,
    StepResult,
    fraction_to_reward,
    get_task,
    known_settings,
    list_tasks,
    make_env,
    play_episode,
    register_setting,
)
from slime_ext.envs.sandbox import (
    RunResult,
    Sandbox,
    SandboxError,
    SandboxLimits,
    fresh_workspace,
    isolation_mode,
    isolation_status,
)

__all__ = ["Env", "EnvTask", "RunResult", "Sandbox", "SandboxError", "SandboxLimits", "StepResult",
           "fraction_to_reward", "fresh_workspace", "get_task", "isolation_mode", "isolation_status", "known_settings",
           "list_tasks", "make_env", "play_episode", "register_setting"]
