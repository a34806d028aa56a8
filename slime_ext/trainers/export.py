"""Export a learned version out of a run directory, for the tools a user runs every day.

``openclaw-rl export --run-dir DIR [--version N] --format peft|merged|gguf --out PATH``:

- ``peft``: the version's LoRA adapter as a folder that peft, vLLM and SGLang load (``adapter_config.json``
  naming the base checkpoint, ``adapter_model.safetensors``), with the base's tokenizer beside it;
- ``merged``: a Hugging Face checkpoint (config, tokenizer, ``model.safetensors``, generation config)
  with the version's weights merged in; ``serve --model PATH`` serves it;
- ``gguf``: one file llama.cpp and Ollama load (``models/gguf.py``); ``serve --model FILE``
  serves it too.

A version is a ``checkpoints/v<N>`` folder the trainer wrote (``trainers/checkpoints.py``). The canary
never lets a refused version be written (the previous version keeps serving), so a refused version has
nothing to export: asking for one says so, as does asking for one whose weights were pruned
(``--keep-checkpoints``).
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


class ExportError(Exception):
    """An export that cannot be made, saying why."""


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
    lora = _is_adapter(path)
    base = _base_of(path)
    progress(f"exporting version {version} of {run_dir} ({'a LoRA adapter' if lora else 'full weights'} on "
             f"{base}) as {fmt}...")
    if fmt == "peft":
        if not lora:
            raise ExportError(f"version {version} holds full weights, not a LoRA adapter: export it as merged or gguf")
        atomic_build(out, lambda tmp: _peft(path, base, tmp))
    else:
        model, tok = merged_model(path, base)
        if fmt == "merged":
            atomic_build(out, lambda tmp: save_checkpoint(model, tok, tmp))
        else:
            from slime_ext.models.gguf import write_gguf

            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(f".{out.name}.tmp")
            write_gguf(model, tok, tmp, gguf_type)
            tmp.rename(out)
    progress(f"wrote version {version} to {out}")
    return {"version": version, "format": fmt, "out": str(out), "base": str(base), "lora": lora}


def merged_model(path: Path, base: Path):
    """The base model in float32 with the checkpoint's weights in it (a LoRA adapter merged), and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    if _is_adapter(path):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    else:
        checkpoints.load_weights(model, path)
    return model.eval(), AutoTokenizer.from_pretrained(str(base))


def _peft(path: Path, base: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    config = json.loads((path / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    shutil.copy2(path / "adapter_model.safetensors", out / "adapter_model.safetensors")
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(out)


def _base_of(path: Path) -> Path:
    """The base checkpoint the version was trained on: where its adapter (or config) says it was loaded from."""
    if _is_adapter(path):
        name = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
    else:
        name = json.loads((path / "config.json").read_text()).get("_name_or_path")
    if not name or not (Path(name) / "config.json").exists():
        raise ExportError(f"the base model of {path} ({name!r}) is not a checkpoint folder on this machine")
    return Path(name)


def _is_adapter(path: Path) -> bool:
    return all((path / f).exists() for f in ADAPTER_FILES)


def _has_weights(path: Path) -> bool:
    return _is_adapter(path) or any(path.glob("*.safetensors"))


def _listed(versions: list[int]) -> str:
    return ", ".join(map(str, versions)) if versions else "none"
