"""Agent environments: the OS-isolated sandbox their commands run in."""

from slime_ext.envs.sandbox import (
    RunResult,
    Sandbox,
    SandboxError,
    SandboxLimits,
    fresh_workspace,
    isolation_mode,
    isolation_status,
)

__all__ = ["RunResult", "Sandbox", "SandboxError", "SandboxLimits", "fresh_workspace", "isolation_mode", "isolation_status"]
