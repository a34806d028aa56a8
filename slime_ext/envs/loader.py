"""Settings, all from outside ``slime_ext``: the built-in folders, a user's folder, file or module, a package.

A setting registers itself when its module is imported (``register_setting(name, list_tasks, make_env)``), as
the built-in ones do, so loading one is importing the module that registers it. A **spec** is

- a folder: the user's setting folder (``my-rl/``). It goes on ``sys.path`` (as Slime's examples put their
  folder on ``PYTHONPATH``), and every top-level ``*.py`` in it that calls ``register_setting`` is imported
  (launch helpers and tests beside them are not);
- a ``.py`` file: its folder goes on ``sys.path`` and the file is imported;
- anything else: a module path (``my_pkg.my_setting``), imported from the Python path.

The built-in settings are folders of this repository (``BUILTIN``: ``terminal-rl/``, ``toolcall-rl/``,
``swe-rl/``, ``gui-rl/``), loaded the same way: the core never imports a setting; the registry
(``envs/base.py``) calls ``load_settings`` when asked for a setting it lacks. ``load_settings(specs)`` loads
the built-in folders, ``specs``, the specs in ``OPENCLAW_RL_SETTINGS`` (separated by ``os.pathsep``: how
a launcher hands them to Slime's rollout workers) and the modules installed packages name in the entry-point
group ``openclaw_rl.settings``; each at most once per process. A module's file name is its module name, so
names must be unique across folders; a clash, a failed import, or a spec that registers no setting is a
``PluginError`` naming the spec and why.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from slime_ext.envs.base import add_finder, registered_settings
from slime_ext.plugins import PluginError, import_module

ROOT = Path(__file__).resolve().parents[2]  # the repository: slime_ext/envs/loader.py
BUILTIN = tuple(ROOT / name for name in ("terminal-rl", "toolcall-rl", "swe-rl", "gui-rl"))
ENV_VAR = "OPENCLAW_RL_SETTINGS"
ENTRY_POINTS = "openclaw_rl.settings"
_loaded: set[str] = set()  # specs (resolved paths or module names) already imported in this process
_installed_loaded = False  # the built-in folders and the entry-point group were loaded


def load_settings(specs: Iterable[str] = ()) -> list[str]:
    """Load the built-in setting folders and installed packages' settings (once per process: the registry
    and the generate hook call this on every lookup that misses, and for every sample), then ``specs`` and
    ``$OPENCLAW_RL_SETTINGS``; the setting names that loading them registered (new ones only)."""
    before = set(registered_settings())
    if not _installed_loaded:
        _load_installed()
    from_env = [s for s in os.environ.get(ENV_VAR, "").split(os.pathsep) if s.strip()]
    for spec in [*specs, *from_env]:
        load_setting(spec)
    return sorted(set(registered_settings()) - before)


def _load_installed() -> None:
    """The built-in folders and the modules of the entry-point group (one scan of the installed packages)."""
    global _installed_loaded
    for folder in BUILTIN:
        if folder.is_dir():
            load_setting(str(folder))
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        module = ep.value.partition(":")[0].strip()  # a module; an attribute after ':' is not needed
        if module not in _loaded:
            _import_module(module, f"the package entry point {ep.name!r} ({ENTRY_POINTS})")
            _loaded.add(module)
    _installed_loaded = True


def load_setting(spec: str) -> None:
    """Import what one spec names (module doc); PluginError when it fails or registers no setting."""
    path = Path(spec).expanduser()
    key = str(path.resolve()) if path.exists() else spec
    if key in _loaded:
        return
    before = set(registered_settings())
    if path.is_dir():
        files = [f for f in sorted(path.glob("*.py")) if "register_setting" in f.read_text(errors="replace")]
        if not files:
            raise PluginError(f"setting {spec!r}: no .py file in that folder calls register_setting")
        ran = [_import_file(f, spec) for f in files]
    elif path.suffix == ".py" and path.is_file():
        ran = [_import_file(path, spec)]
    elif spec.endswith(".py") or os.sep in spec:
        raise PluginError(f"setting {spec!r}: no such folder or .py file")
    else:
        ran = [_import_module(spec, f"setting {spec!r}")]
    if any(ran) and set(registered_settings()) == before:
        raise PluginError(f"setting {spec!r}: importing it registered no setting (call "
                          f"slime_ext.envs.register_setting(name, list_tasks, make_env) in the module)")
    _loaded.add(key)


def _import_file(path: Path, spec: str) -> bool:
    """Import ``path`` as module ``path.stem``; False when it already was (by this loader or an import)."""
    name = path.stem
    taken = sys.modules.get(name)
    if taken is not None:
        if Path(getattr(taken, "__file__", "") or "").resolve() == path.resolve():
            return False
        raise PluginError(f"setting {spec!r}: the module name {name!r} of {path} is taken by "
                          f"{getattr(taken, '__file__', None) or 'a built-in module'}; rename the file")
    folder = str(path.parent.resolve())
    if folder not in sys.path:
        sys.path.append(folder)  # its siblings import as in Slime's examples (folder on PYTHONPATH)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # the user's code raising on import: its error, not ours
        del sys.modules[name]
        raise PluginError(f"setting {spec!r}: importing {path} failed: {type(e).__name__}: {e}") from None
    return True


def _import_module(name: str, what: str) -> bool:
    """Import module ``name``; False when it already was."""
    if name in sys.modules:
        return False
    import_module(name, what)
    return True


add_finder(load_settings)
