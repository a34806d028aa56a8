"""Agent environments: the OS-isolated sandbox their commands run in, the `Env` protocol and task registry
(base.py), and the settings. Importing this package registers the built-in settings
(terminal, toolcall, swe, gui)."""

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
from slime_ext.envs.gui import GuiEnv
from slime_ext.envs.sandbox import (
    RunResult,
    Sandbox,
    SandboxError,
    SandboxLimits,
    fresh_workspace,
    isolation_mode,
    isolation_status,
)
from slime_ext.envs.swe import SweEnv
from slime_ext.envs.terminal import TerminalEnv
from slime_ext.envs.toolcall import ToolCallEnv  # importing a setting registers it (swe, terminal too)

__all__ = ["Env", "EnvTask", "GuiEnv", "RunResult", "Sandbox", "SandboxError", "SandboxLimits", "StepResult", "SweEnv", "TerminalEnv", "ToolCallEnv",
           "fraction_to_reward", "fresh_workspace", "get_task", "isolation_mode", "isolation_status", "known_settings",
           "list_tasks", "make_env", "play_episode", "register_setting"]
