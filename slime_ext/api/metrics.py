"""A few counters and gauges rendered in the Prometheus text format (no extra dependency)."""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from typing import Callable


def label_value(value: str) -> str:
    r"""``value`` escaped for a label in the Prometheus text format: ``\\``, ``\"`` and ``\n`` as the format
    says, and every other control or line-separator character as the visible text ``\xHH`` (an escaped
    backslash, then ``xHH``: the format has no escape for them, and a raw carriage return splits a line
    for many readers)."""
    out = []
    for ch in value:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            out.append(f"\\\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple], float] = defaultdict(float)
        self.help: dict[str, str] = {}
        self.gauges: dict[str, Callable[[], float]] = {}

    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += value
        if help:
            self.help.setdefault(name, help)

    def total(self, name: str) -> float:
        """A counter's value, summed over its labels (0 before it was first counted)."""
        return sum(v for (n, _), v in self.counters.items() if n == name)

    def gauge(self, name: str, fn: Callable[[], float], help: str) -> None:
        self.gauges[name] = fn
        self.help[name] = help

    def render(self) -> str:
        lines: list[str] = []
        seen: set[str] = set()
        for (name, labels), value in sorted(self.counters.items()):
            if name not in seen:
                seen.add(name)
                lines.append(f"# HELP {name} {self.help.get(name, name)}")
                lines.append(f"# TYPE {name} counter")
            label_text = ",".join(f'{k}="{label_value(v)}"' for k, v in labels)
            lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
        for name, fn in sorted(self.gauges.items()):
            lines.append(f"# HELP {name} {self.help[name]}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {float(fn()):g}")
        return "\n".join(lines) + "\n"
