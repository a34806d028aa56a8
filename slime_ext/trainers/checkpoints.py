"""The checkpoint format, in one place: what the trainer writes and the server swaps in.

``RUN_DIR/checkpoints/v<NNNNNN>/`` holds one version: its weights as ``save_pretrained`` writes them
(a peft adapter, or the full weights in safetensors: what ``LocalEngine.swap`` reads), the optimizer
state (``optimizer.pt``) and ``trainer_state.json`` (the version, the turns it trained on, the step's
metrics, the running baseline). A version is written to ``.v<NNNNNN>.tmp`` and renamed, so a
``v*`` directory is always complete. Only the newest ``keep`` versions keep their weights and
optimizer state; older ones keep ``trainer_state.json`` as the run's audit trail (resume and the
server read only the newest).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"


def directory(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def latest(run_dir: str | Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint: ``(version, path)``, or None."""
    done = sorted(directory(run_dir).glob("v*"))
    if not done:
        return None
    return int(done[-1].name[1:]), done[-1]


def write(run_dir: str | Path, version: int, model, optimizer, state: dict[str, Any]) -> Path:
    """Write version ``version`` atomically (a temp dir, then rename); ``state`` goes to trainer_state.json."""
    import torch

    final = directory(run_dir) / f"v{version:06d}"
    tmp = directory(run_dir) / f".v{version:06d}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)  # a peft adapter, or full weights
    torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({"version": version, "saved_at": time.time(), **state}))
    tmp.rename(final)
    return final


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.json."""
    return json.loads((path / STATE_FILE).read_text())


def prune(run_dir: str | Path, keep: int) -> None:
    """Delete the weights and optimizer state of all but the newest ``keep`` versions (0: keep all)."""
    if keep <= 0:
        return
    for old in sorted(directory(run_dir).glob("v*"))[:-keep]:
        for f in old.iterdir():
            if f.name != STATE_FILE:
                f.unlink()


def load_weights(model, path: Path) -> None:
    """Load a checkpoint's weights into ``model`` (a peft model for an adapter), read as the engine reads them."""
    from slime_ext.engines.local import LoraUpdate
    from slime_ext.engines.local import load_weights as read_weights

    update = read_weights(path)
    if isinstance(update, LoraUpdate):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, update.tensors)
    else:
        model.load_state_dict(update, strict=False)


def load_optimizer(optimizer, path: Path) -> None:
    import torch

    optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE))
