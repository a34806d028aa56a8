"""One loader for user code: an object named by dotted path, or by an installed package's entry point.

A **spec** is ``module:attr`` (``attr`` may be dotted: ``pkg.mod:Class.make``) or ``module.attr``
(the form Slime's ``load_function`` takes), imported from ``sys.path`` as Python would (the working
directory and ``PYTHONPATH`` first). A bare **name** is looked up in the entry-point group of its
kind (``GROUPS``): an installed package registers, in its ``pyproject.toml``::

    [project.entry-points."openclaw_rl.judges"]
    mine = "my_pkg.judges:MyJudge"

so that ``--judge mine`` finds it (``openclaw_rl.losses`` likewise for ``--policy-loss``). Every failure is a ``PluginError`` (a ``ValueError``: the CLI
prints it and exits 2) naming the kind, the spec and what failed: the module is not there, it
raised on import (its exception type and message, no traceback), or it has no such attribute.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Sequence
from types import ModuleType
from typing import Any

GROUPS = {"judge": "openclaw_rl.judges", "loss": "openclaw_rl.losses"}  # kind -> entry-point group


class PluginError(ValueError):
    """User code named by a spec could not be loaded; the message says which and why."""


def is_spec(value: str) -> bool:
    """Whether ``value`` names code by path (``module:attr`` or ``module.attr``) rather than by name."""
    return ":" in value or "." in value


def split_spec(spec: str) -> tuple[str, str]:
    """``(module, attribute path)`` of a spec; PluginError when it has no attribute part."""
    module, sep, attr = spec.partition(":") if ":" in spec else spec.rpartition(".")
    if not sep or not module or not attr:
        raise PluginError(f"{spec!r}: expected module:attribute (or module.attribute)")
    return module, attr


def import_module(name: str, what: str) -> ModuleType:
    """Import module ``name`` for ``what`` (the words a refusal starts with); PluginError when it is not
    on the Python path or raises on import (its error, no traceback)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise PluginError(f"{what}: no module named {e.name!r} on the Python path (is its folder on "
                              f"PYTHONPATH, or its package installed?)") from None
        raise PluginError(f"{what}: importing {name} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # user code raising on import: its error, not ours
        raise PluginError(f"{what}: importing {name} failed: {type(e).__name__}: {e}") from None


def load_object(spec: str, kind: str) -> Any:
    """The object ``spec`` names (a spec, or an entry-point name in ``kind``'s group)."""
    if not is_spec(spec):
        return _entry_point(spec, kind)
    module_name, attr = split_spec(spec)
    obj: Any = import_module(module_name, f"{kind} {spec!r}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{kind} {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def check_choice(value: str, kind: str, builtins: Sequence[str], needs: str) -> None:
    """PluginError unless ``value`` is one of ``builtins`` or names a callable of the user's (a spec, or a name an
    installed package registered for ``kind``); ``needs`` says what the callable must do."""
    if value in builtins:
        return
    installed = [] if is_spec(value) else entry_point_names(kind)
    if not is_spec(value) and value not in installed:
        raise PluginError(f"{kind} {value!r}: expected {', '.join(builtins)}, a module:attribute path to your own "
                          f"(docs/extending.md), or the name of an installed one ({', '.join(installed) or 'none installed'})")
    if not callable(load_object(value, kind)):
        raise PluginError(f"{kind} {value!r}: not callable; {needs}")


def entry_point_names(kind: str) -> list[str]:
    """The names installed packages registered for ``kind``."""
    return sorted(ep.name for ep in importlib.metadata.entry_points(group=GROUPS[kind]))


def _entry_point(name: str, kind: str) -> Any:
    matches = [ep for ep in importlib.metadata.entry_points(group=GROUPS[kind]) if ep.name == name]
    if not matches:
        known = ", ".join(entry_point_names(kind)) or "none installed"
        raise PluginError(f"{kind} {name!r}: not a module:attribute path, and no installed package registers it "
                          f"in the entry-point group {GROUPS[kind]} ({known})")
    return load_object(matches[0].value, kind)
