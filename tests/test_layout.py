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


# ---------------------------------------------------------------- the learning half (issue 26)
LEARNING = ROOT / "slime_ext" / "learning"
DRIVERS = ("slime_ext.trainers", "slime_ext.hooks", "slime_ext.serve", "slime_ext.api", "slime_ext.cli")


def imported_names(path: Path) -> set[str]:
    """The full dotted names of the modules ``path`` imports (anywhere in it)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def calls(path: Path) -> set[str]:
    """The names of the functions ``path`` calls (``f(...)`` and ``x.f(...)``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            out.add(getattr(node.func, "id", None) or getattr(node.func, "attr", None))
    return out


def test_the_learning_pipeline_imports_no_driver():
    for path in LEARNING.rglob("*.py"):
        bad = {m for m in imported_names(path) if m.startswith(DRIVERS)}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: learning/ is what both drivers call"


def test_no_driver_computes_log_probs_or_advantages_itself():
    """Per-token log-probs come from logprobs.py (and the fused primitive in algorithms/), advantages and group
    advantages from algorithms/ through learning/objective.py and learning/groups.py: a driver calls them."""
    owners = {"log_softmax": {"logprobs.py"}, "gather_log_softmax": {"logprobs.py"},
              "group_advantages": {"learning/groups.py"}, "implicit_reward": {"learning/groups.py"},
              "combined_advantages": {"learning/objective.py"}, "mix_advantages": set()}
    for path in (ROOT / "slime_ext").rglob("*.py"):
        rel = path.relative_to(ROOT / "slime_ext").as_posix()
        if rel.startswith("algorithms/"):
            continue
        for name in calls(path) & set(owners):
            assert rel in owners[name], f"slime_ext/{rel} calls {name}: only {sorted(owners[name]) or 'algorithms/'} may"


def test_each_setting_is_declared_once_and_the_cli_derives_its_flags():
    from slime_ext.config import ServeConfig
    from slime_ext.settings import declared

    keys = [d.key for d in declared(ServeConfig)]  # declared() refuses a key declared twice
    assert len(keys) == len(set(keys)) and len(keys) > 80
    cli = (ROOT / "slime_ext" / "cli.py").read_text()
    serve = cli[cli.index("def _add_serve_args"):cli.index("def serve_config")]  # serve's own flags
    hand_written = [k for k in keys if f'"--{k.replace("_", "-")}"' in serve]
    assert hand_written == [], f"flags written by hand in cli.py instead of derived: {hand_written}"


def test_methods_and_distillation_kinds_are_types_not_strings():
    import re

    names = ("combine|binary|opd|token|topk|forward_kl|jsd|topk_select|topk_select_token|base|policy|running|"
             "uniform|teacher|student|overlap|drop|skip|train|grpo|drgrpo|shortest|token_optimal|sequence_optimal")
    compared = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](""" + names + r""")["']""")
    settings = re.compile(r"\b(method|distill|teacher|baseline|topk_support|verdict_credit|unfollowed|estimator|rule|"
                          r"support)\b")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "slime_ext").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if compared.search(line.split("#")[0]) and settings.search(line.split("#")[0])]
    assert found == [], f"compare the Choice members (types.py), not their names: {found}"
