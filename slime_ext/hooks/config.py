"""The plugin's settings inside Slime: the ``openclaw_rl:`` mapping of ``--custom-config-path``.

Slime sets every top-level key of that YAML file onto ``args`` (and ignores unknown command-line
flags), so our settings live under one key that no Slime argument uses, and are the same
``ServeConfig`` the CLI and ``serve --config`` use: one typed object, one validation.
"""

from __future__ import annotations

from typing import Any

from slime_ext.config import ServeConfig

PLUGIN_KEY = "openclaw_rl"


def plugin_config(args: Any) -> ServeConfig:
    """The ``ServeConfig`` of ``args.openclaw_rl`` (defaults when absent); ValueError names bad keys."""
    data = getattr(args, PLUGIN_KEY, None) or {}
    if not isinstance(data, dict):
        raise ValueError(f"--custom-config-path: '{PLUGIN_KEY}' must be a mapping of settings, got {type(data).__name__}")
    return ServeConfig.from_mapping({str(k).replace("-", "_"): v for k, v in data.items()},
                                    f"--custom-config-path ({PLUGIN_KEY}:)")
