"""Export a learned version out of a run directory, for the tools a user runs every day.

``openclaw-rl export --run-dir DIR [--version N] --format peft|merged|gguf --out PATH``:

- ``peft``: the version's LoRA adapter as a folder that peft, vLLM and SGLang load (``adapter_config.json``
  naming the base checkpoint, ``adapter_model.safetensors``), with the base's tokenizer beside it;
- ``merged``: a Hugging Face checkpoint (config, tokenizer, ``model.safetensors``, generation config)
  with the version's adapter merged in; ``serve --model PATH`` serves it;
- ``gguf``: one file llama.cpp and Ollama load (``models/gguf.py``); ``serve --model FILE``
  serves it too.

A version is a ``checkpoints/v<N>`` folder the trainer wrote (``trainers/checkpoints.py``). The canary
never lets a refused version be written (the previous version keeps serving), so a refused version has
nothing to export: asking for one says so, as does asking for one whose weights were pruned
(``--keep-checkpoints``). Versions of LoRA training (the default) are exported; a full-weight version
(``--lora-rank 0``) records neither its base model nor its tokenizer, and is refused saying so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from slime_ext.models.builtin import atomic_build, save_checkpoint
from slime_ext.trainers import canary, checkpoints

FORMATS = ("peft", "merged", "gguf")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class ExportError(ValueError):
    """An export that cannot be made, saying why (the CLI prints it and exits 2, as for any ValueError)."""


def find_version(run_dir: str | Path, version: int | None) -> tuple[int, Path]:
    """``(version, its checkpoint folder)``: ``version``, or the newest; ``ExportError`` naming what exists."""
    run_dir = Path(run_dir)
    done = sorted(checkpoints.directory(run_dir).glob("v*"))
    have = [int(p.name[1:]) for p in done if _has_weights(p)]
    if not done:
        raise ExportError(f"{run_dir} has no trained version yet (no {checkpoints.directory(run_dir)}/v*): serve with "
                          "learning on and give feedback first")
    if version is None:
        if not have:
            raise ExportError(f"no version in {run_dir} keeps its weights (all pruned by --keep-checkpoints)")
        version = have[-1]
    path = checkpoints.directory(run_dir) / f"v{version:06d}"
    if version in have:
        return version, path
    if path.exists():
        raise ExportError(f"version {version}'s weights were pruned (--keep-checkpoints keeps the newest); "
                          f"versions with weights: {_listed(have)}")
    refusal = (canary.read_status(run_dir) or {}).get("last_refusal") or {}
    why = (f": the canary refused it ({'; '.join(refusal.get('reasons', []))}), so it was never written"
           if refusal.get("version") == version else "")
    raise ExportError(f"version {version} is not in {run_dir}{why}; versions with weights: {_listed(have)}")


def export(run_dir: str | Path, version: int | None, fmt: str, out: str | Path, *, gguf_type: str = "f16",
           progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Write version ``version`` (None: the newest) of ``run_dir`` as ``fmt`` to ``out``; what was written."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    if out.exists() and (out.is_file() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not empty: choose a new --out")
    version, path = find_version(run_dir, version)
    base = _base_of(path)
    progress(f"exporting version {version} of {run_dir} (a LoRA adapter on {base}) as {fmt}...")
    if fmt == "peft":
        atomic_build(out, lambda tmp: _peft(path, base, tmp))
    else:
        model, tok = merged_model(path, base)
        if fmt == "merged":
            atomic_build(out, lambda tmp: save_checkpoint(model, tok, tmp))
        else:
            from slime_ext.models.gguf import write_gguf

            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(f".{out.name}.tmp")
            try:
                write_gguf(model, tok, tmp, gguf_type)
                tmp.rename(out)
            finally:
                tmp.unlink(missing_ok=True)
    progress(f"wrote version {version} to {out}")
    return {"version": version, "format": fmt, "out": str(out), "base": str(base)}


def merged_model(path: Path, base: Path):
    """The base model in float32 with the version's LoRA adapter merged in, and the base's tokenizer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    return model.eval(), AutoTokenizer.from_pretrained(str(base))


def _peft(path: Path, base: Path, out: Path) -> None:
    """The adapter as the trainer saved it (its config names the base it was trained on) and the base's tokenizer."""
    from transformers import AutoTokenizer

    for name in ADAPTER_FILES:
        shutil.copy2(path / name, out / name)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(out)


def _base_of(path: Path) -> Path:
    """The base checkpoint a LoRA version was trained on: where its adapter config says it was loaded from. A
    full-weight version (``--lora-rank 0``) does not record its base (nor its tokenizer), so it is refused."""
    if not _is_adapter(path):
        raise ExportError(f"{path} holds full weights (trained with --lora-rank 0), which do not record their base "
                          "model or tokenizer: export reads LoRA versions (the default)")
    name = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not name or not (Path(name) / "config.json").exists():
        raise ExportError(f"the base model of {path} ({name!r}) is not a checkpoint folder on this machine")
    return Path(name)


def _is_adapter(path: Path) -> bool:
    return all((path / f).exists() for f in ADAPTER_FILES)


def _has_weights(path: Path) -> bool:
    return _is_adapter(path) or any(path.glob("*.safetensors"))


def _listed(versions: list[int]) -> str:
    return ", ".join(map(str, versions)) if versions else "none"
