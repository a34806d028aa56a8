"""The layout issue #16 asks for: ``slime_ext`` is the core and never imports a setting; each setting lives in
its ``*-rl/`` folder, imports the core and its own folder's modules, and no other setting's."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTING_DIRS = sorted(p.parent for p in ROOT.glob("*-rl/*.py"))


def imported_modules(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports (anywhere in it, functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def registers_a_setting(path: Path) -> bool:
    """Whether ``path`` calls ``register_setting(...)`` at its top level (what makes a module a setting)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "register_setting":
            return True
    return False


def setting_modules() -> dict[str, Path]:
    return {p.stem: p.parent for d in set(SETTING_DIRS) for p in d.glob("*.py")}


def test_every_builtin_setting_lives_in_its_folder():
    folders = {d.name for d in SETTING_DIRS}
    assert {"terminal-rl", "toolcall-rl", "swe-rl", "gui-rl"} <= folders
    for d in ("terminal-rl", "toolcall-rl", "swe-rl", "gui-rl"):
        assert any(registers_a_setting(p) for p in (ROOT / d).glob("*.py")), d
    core = [p.relative_to(ROOT).as_posix() for p in (ROOT / "slime_ext").rglob("*.py") if registers_a_setting(p)]
    assert core == []


def test_the_core_never_imports_a_setting():
    settings = setting_modules()
    assert len(settings) == sum(1 for d in set(SETTING_DIRS) for _ in d.glob("*.py")), "module names must be unique"
    for path in (ROOT / "slime_ext").rglob("*.py"):
        assert not imported_modules(path) & set(settings), f"{path.relative_to(ROOT)} imports a setting module"


def test_a_setting_imports_the_core_and_its_own_folder_only():
    settings = setting_modules()
    for path in (p for d in set(SETTING_DIRS) for p in d.glob("*.py")):
        foreign = {m for m in imported_modules(path) & set(settings) if settings[m] != path.parent}
        assert not foreign, f"{path.relative_to(ROOT)} imports {sorted(foreign)} from another setting's folder"
