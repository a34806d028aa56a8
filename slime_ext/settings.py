"""Settings declared once: a dataclass field made by ``setting(...)`` is the whole declaration.

Its ``Setting`` (the field's metadata) says the flat **key** it is known by everywhere (a ``serve
--config`` YAML key, a key of Slime's ``openclaw_rl:`` mapping, and the flag ``--key-with-dashes``),
its help, the ``--help`` group it is listed in, and which **drivers** honour it (the embedded
trainer, Slime, or both; ``slime`` says why not). Its type and default are the field's. From the
declarations alone come ``serve``'s flags (``add_arguments``), the YAML and plugin mappings
(``from_mapping``, which refuses unknown keys by name and parses choices), and the Slime driver's
refusals (``hooks/config.py``).

A **section** (``section(Cls)``) is a nested frozen dataclass of settings that one component is
built from (the canary's, the teacher check's, the policy loss's): a user never sees the nesting,
since its settings have flat keys too, and a config class decorated with ``flat_keys`` takes them
as keyword arguments: ``ServeConfig(canary_max_nll_rise=0.5)`` sets ``cfg.canary.max_nll_rise``.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import typing
from dataclasses import dataclass
from typing import Any, Iterable

from slime_ext.types import Choice


class Driver(enum.Flag):
    """Who honours a setting: the embedded trainer (``openclaw-rl serve``), Slime's hooks, or both."""

    EMBEDDED = enum.auto()
    SLIME = enum.auto()
    BOTH = EMBEDDED | SLIME


@dataclass(frozen=True)
class Setting:
    help: str
    key: str = ""  # the flat key; "" is the field's name
    group: str = ""  # the --help group
    drivers: Driver = Driver.BOTH
    slime: str = ""  # why Slime does not honour it (when ``drivers`` lacks it)
    shown: str | None = None  # the default as --help shows it (None: the value itself; "": not shown)
    flag: str | None = None  # the command-line flag (None: --key with dashes; "": none)
    metavar: str | None = None
    append: bool = False  # a list setting whose flag is given once per item
    choices: tuple[str, ...] = ()  # the values a plain string setting may take (a ``Choice`` type knows its own)


def setting(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = dataclasses.MISSING,
            **meta: Any) -> Any:
    """A declared setting: a dataclass field with its ``Setting`` (see the module docstring)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"setting": Setting(help, **meta)})


def section(cls: type) -> Any:
    """A nested frozen dataclass of settings (its own ``setting`` fields; flat keys)."""
    return dataclasses.field(default_factory=cls, metadata={"section": cls})


@dataclass(frozen=True)
class Declared:
    """One setting as found in a config class: its flat key, where it lives, its type, default and ``Setting``."""

    key: str
    path: tuple[str, ...]  # attribute names from the config: ("canary", "max_nll_rise")
    type: Any
    default: Any
    meta: Setting

    def value(self, cfg: Any) -> Any:
        for name in self.path:
            cfg = getattr(cfg, name)
        return cfg


@functools.cache
def declared(cls: type) -> tuple[Declared, ...]:
    """Every setting of ``cls`` and of its sections, in declaration order."""
    hints = typing.get_type_hints(cls)
    out: list[Declared] = []
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            out += [dataclasses.replace(d, path=(f.name, *d.path)) for d in declared(f.metadata["section"])]
        elif "setting" in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            meta = f.metadata["setting"]
            out.append(Declared(meta.key or f.name, (f.name,), hints[f.name], default, meta))
    keys = [d.key for d in out]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise TypeError(f"{cls.__name__}: settings declared twice: {', '.join(duplicated)}")
    return tuple(out)


def flat_keys(cls: type) -> type:
    """Let ``cls(**kwargs)`` take its sections' settings by their flat keys (module docstring) and parse each
    choice given as a string (``method="opd"`` holds ``Method.OPD``). For every class of settings."""
    init = cls.__init__
    sections = {f.name: f.metadata["section"] for f in dataclasses.fields(cls) if "section" in f.metadata}
    by_key = {d.key: d for d in declared(cls)}
    by_name = {d.path[0]: d for d in declared(cls) if len(d.path) == 1}

    @functools.wraps(init)
    def __init__(self, **kwargs: Any) -> None:
        given: dict[str, Any] = {}
        parts: dict[str, dict[str, Any]] = {}
        for key, value in kwargs.items():
            d = by_key.get(key)
            if key in sections and isinstance(value, sections[key]):  # the section itself (dataclasses.replace)
                given[key] = value
            elif d is not None and len(d.path) == 2:
                parts.setdefault(d.path[0], {})[d.path[1]] = parse_value(d, value)
            else:
                given[key] = parse_value(by_name[key], value) if key in by_name else value
        for name, values in parts.items():
            given[name] = dataclasses.replace(given.get(name) or sections[name](), **values)
        init(self, **given)

    cls.__init__ = __init__
    return cls


def parse_value(d: Declared, value: Any) -> Any:
    """``value`` (from YAML or a flag) as the setting's type: a choice parsed (ValueError names the key)."""
    kind = d.type
    if isinstance(kind, type) and issubclass(kind, Choice):
        return kind.parse(value, d.key)
    if d.meta.choices and value not in d.meta.choices:
        raise ValueError(f"{d.key} {value!r}: expected one of {', '.join(d.meta.choices)}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def check_choices(cfg: Any) -> None:
    """Raise ValueError naming a plain string setting whose value is not one of its ``choices``."""
    for d in declared(type(cfg)):
        if d.meta.choices:
            parse_value(d, d.value(cfg))


def from_mapping(cls: type, data: dict[str, Any], source: str) -> Any:
    """``cls`` from flat keys (a YAML file, Slime's mapping, the flags); ValueError names unknown keys."""
    known = {d.key for d in declared(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return cls(**data)  # flat_keys' __init__ parses each value


# ---------------------------------------------------------------- the command line


def shown_default(d: Declared) -> str:
    """The default as ``--help`` shows it, in brackets (empty when it is not shown)."""
    if d.meta.shown is not None:
        return f" [{d.meta.shown}]" if d.meta.shown else ""
    value = d.default
    if isinstance(value, bool):
        value = "on" if value else "off"
    elif isinstance(value, float):
        value = f"{value:g}"
    elif value in ("", None) or value == [] or value == {}:
        return ""
    return f" [{value}]"


def add_arguments(parser: Any, cls: type, groups: Iterable[str]) -> None:
    """One flag per declared setting of ``cls`` (unless its ``flag`` is ""), in ``groups`` order; every flag
    defaults to None, so a YAML file's value stands unless the flag is given (``given_on_command_line``)."""
    order = list(groups) + [g for g in dict.fromkeys(d.meta.group for d in declared(cls)) if g not in groups]
    made = {name: parser.add_argument_group(name) for name in order}
    for d in sorted(declared(cls), key=lambda d: order.index(d.meta.group)):
        if d.meta.flag == "":
            continue
        group = made[d.meta.group]
        kw: dict[str, Any] = {"dest": d.key, "default": None, "help": d.meta.help + shown_default(d)}
        if d.meta.metavar:
            kw["metavar"] = d.meta.metavar
        if d.type is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif d.meta.append:
            kw["action"] = "append"
        elif isinstance(d.type, type) and issubclass(d.type, Choice):
            kw["choices"] = [c.value for c in d.type]
        elif d.meta.choices:
            kw["choices"] = list(d.meta.choices)
        elif d.type in (int, float):
            kw["type"] = d.type
        group.add_argument(d.meta.flag or "--" + d.key.replace("_", "-"), **kw)


def given_on_command_line(args: Any, cls: type) -> dict[str, Any]:
    """The settings of ``cls`` the parsed ``args`` hold (flags not given are None and left out)."""
    return {d.key: getattr(args, d.key) for d in declared(cls) if getattr(args, d.key, None) is not None}
