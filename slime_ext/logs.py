"""The server's log: on stderr and in ``RUN_DIR/serve.log`` (the trainer process's lines too), without the
libraries' known noise.

Known noise, each silenced where it starts:

- transformers' ``Loading weights`` progress bars, one per model load (the engine's and the trainer's): a log is
  no terminal. In the spawned trainer the bar's multiprocessing lock was also the semaphore that the resource
  tracker reported "leaked" at shutdown: the trainer is ended by SIGTERM, before its finalizers run, so nothing
  unregistered it. Without the bar no such lock is made. The hub's download bars stay (a first start downloads).
- peft's use of transformers' deprecated ``is_gradient_checkpointing`` (a FutureWarning when the LoRA wrapper is
  made): ignored around that one call (``trainers/loop.py``, ``wrap_lora``).
- "generation flags are not valid" (the canary's greedy generations inherited the model's sampling temperature
  and top_p): the canary's generation config states neutral ones (``trainers/canary.py``, ``greedy``).

What the ``warnings`` module still says goes through logging (``captureWarnings``), so it reaches ``serve.log``.
The log's rate limits (``api/guard.py``, ``install_log_limits``) are filters on the loggers, before any handler:
the file gets what stderr gets. The file is created readable by its owner only (a log can quote requests)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

LOG_FILE = "serve.log"  # in the run directory
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_file(path: str | Path, fmt: str = FORMAT) -> logging.Handler:
    """Append the root logger's records to ``path`` too (created 0600 when new); the handler, to remove and
    close when done."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(fmt))
    logging.getLogger().addHandler(handler)
    return handler


def quiet_libraries() -> None:
    """Turn the libraries' known noise off in this process (the module docstring), and route the ``warnings``
    module through logging."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    download_bars = not are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # transformers' bars, and the hub's with them
    if download_bars:  # the hub's back: a first start's download shows its progress
        enable_progress_bars()
    logging.captureWarnings(True)
