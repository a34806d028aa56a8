"""A model's sampling defaults: what a chat request that omits ``temperature`` / ``top_p`` gets.

The convention of vLLM and SGLang: the model's ``generation_config.json`` (transformers'
``GenerationConfig``) holds the values its authors recommend; a request's own values always win;
a model without them gets OpenAI's defaults (temperature 1, top-p 1). One difference: an explicit
``"do_sample": false`` means greedy here (temperature 0), as it does in transformers' ``generate``
(vLLM and SGLang ignore ``do_sample``).

The file is read once, when the server starts (``sampling_defaults``); ``parse_generation_config``
is the pure part.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATION_CONFIG = "generation_config.json"
CHOICES = ("model", "openai")  # where omitted values come from: the model's file, or OpenAI's defaults


@dataclass(frozen=True)
class SamplingDefaults:
    """The temperature and top-p a request that omits them is sampled with, and where they came from."""

    temperature: float = 1.0
    top_p: float = 1.0
    source: str = "OpenAI's defaults"

    def describe(self) -> str:
        """One line for the start-up log."""
        return f"temperature {self.temperature:g}, top_p {self.top_p:g} ({self.source})"


OPENAI_DEFAULTS = SamplingDefaults()


def _number(data: dict[str, Any], name: str, lo: float, hi: float, where: str) -> float | None:
    v = data.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{where}: '{name}' must be a number between {lo:g} and {hi:g}, got {v!r}")
    return float(v)


def parse_generation_config(data: Any, where: str) -> SamplingDefaults:
    """The defaults a ``generation_config.json`` mapping gives; ValueError names a bad field.

    Absent fields keep OpenAI's values (as transformers' own defaults are 1.0 too); ``do_sample``
    set to false makes the default greedy (temperature 0)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object")
    temperature = _number(data, "temperature", 0.0, 2.0, where)
    top_p = _number(data, "top_p", 0.0, 1.0, where)
    do_sample = data.get("do_sample")
    if do_sample is not None and not isinstance(do_sample, bool):
        raise ValueError(f"{where}: 'do_sample' must be true or false, got {do_sample!r}")
    if do_sample is False:
        return SamplingDefaults(0.0, 1.0 if top_p is None else top_p, f"{where}: do_sample false, greedy")
    if temperature is None and top_p is None:
        return SamplingDefaults(source=f"OpenAI's defaults: {where} sets neither")
    return SamplingDefaults(1.0 if temperature is None else temperature, 1.0 if top_p is None else top_p, where)


def sampling_defaults(model_dir: str | Path | None, choice: str = "model") -> SamplingDefaults:
    """The defaults for the model in ``model_dir``: from its ``generation_config.json`` when ``choice``
    is ``model`` and the file exists, otherwise OpenAI's."""
    if choice not in CHOICES:
        raise ValueError(f"sampling_defaults {choice!r}: expected {' or '.join(CHOICES)}")
    if choice == "openai":
        return SamplingDefaults(source="OpenAI's defaults: sampling_defaults openai")
    if model_dir is None or not Path(model_dir).is_dir():
        return SamplingDefaults(source="OpenAI's defaults: no local model directory to read")
    path = Path(model_dir) / GENERATION_CONFIG
    if not path.exists():
        return SamplingDefaults(source=f"OpenAI's defaults: {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot be read as JSON: {e}") from None
    return parse_generation_config(data, str(path))
