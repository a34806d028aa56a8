"""``--model`` as a Hugging Face hub id (``Qwen/Qwen3-4B``, ``org/name@revision``): the checkpoint from the
standard Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``),
downloaded into it on first use when online, read from it alone when ``HF_HUB_OFFLINE=1``.

Only what a causal LM needs is fetched (``FILES``: configs, safetensors weights, tokenizer files, chat
templates), never ``.bin`` / ``.gguf`` / ``.pt`` duplicates. A cached checkpoint is used without contacting
the hub. Every failure is a ``ValueError`` that names the id and what to do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py"]
_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a hub id (``org/name``, optionally ``@revision``)."""
    return bool(_ID.match(name)) and ".." not in name


def hub_offline() -> bool:
    """Whether the user asked for no hub access (``HF_HUB_OFFLINE``, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cache() -> Path:
    """The Hugging Face hub cache this process reads and writes."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def hub_checkpoint(spec: str, progress: Callable[[str], None] = print) -> Path:
    """The local snapshot folder of hub id ``spec`` (see the module docstring)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, _, revision = spec.partition("@")
    kw = {"revision": revision or None, "allow_patterns": FILES, "cache_dir": str(hub_cache())}
    try:
        path = Path(snapshot_download(repo, local_files_only=True, **kw))
    except LocalEntryNotFoundError:
        if hub_offline():
            raise ValueError(f"--model {spec!r}: not in the Hugging Face cache ({hub_cache()}), and HF_HUB_OFFLINE=1 "
                             f"forbids downloading it; download it once online (huggingface-cli download {repo}) or "
                             "unset HF_HUB_OFFLINE") from None
        progress(f"{spec}: downloading into the Hugging Face cache ({hub_cache()})")
        try:
            path = Path(snapshot_download(repo, **kw))
        except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError) as e:
            raise ValueError(f"--model {spec!r}: the hub refused it ({type(e).__name__}: "
                             f"{str(e).splitlines()[0]}); check the id, the revision and your access (HF_TOKEN)") from None
        except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
            raise ValueError(f"--model {spec!r}: could not download it ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else 'no network?'})") from None
    if not (path / "config.json").exists():
        raise ValueError(f"--model {spec!r}: the snapshot at {path} has no config.json; not a Hugging Face "
                         "causal-LM checkpoint")
    if not any(path.glob("*.safetensors")):
        raise ValueError(f"--model {spec!r}: the snapshot at {path} has no .safetensors weights (only those are "
                         "loaded)")
    return path
