"""A few counters and gauges rendered in the Prometheus text format (no extra dependency)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple], float] = defaultdict(float)
        self.help: dict[str, str] = {}
        self.gauges: dict[str, Callable[[], float]] = {}

    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += value
        if help:
            self.help.setdefault(name, help)

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
            label_text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
        for name, fn in sorted(self.gauges.items()):
            lines.append(f"# HELP {name} {self.help[name]}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {float(fn()):g}")
        return "\n".join(lines) + "\n"
