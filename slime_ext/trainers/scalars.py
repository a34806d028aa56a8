"""Training scalars on disk: TensorBoard event files when ``tensorboard`` is installed, else CSV.

Both go under ``<run_dir>/scalars/``. The CSV is long format, one row per value
(``version,wall_time,tag,value``), so a metric that appears only on some steps (``kl_to_ref``)
needs no schema change; ``pandas.read_csv(...).pivot(index="version", columns="tag")`` gives the
wide table. Writes are flushed per step so a crash loses at most the step in progress.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any


class ScalarWriter:
    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir) / "scalars"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._tb = None
        self._csv = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir))
            self.kind = "tensorboard"
        except ImportError:
            path = self.dir / "scalars.csv"
            new = not path.exists()
            self._file = open(path, "a", newline="")
            self._csv = csv.writer(self._file)
            if new:
                self._csv.writerow(["version", "wall_time", "tag", "value"])
            self.kind = "csv"

    def write(self, version: int, metrics: dict[str, Any]) -> None:
        """Record every numeric metric of one training step under ``train/<name>``."""
        now = time.time()
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for name, value in sorted(values.items()):
            if self._tb is not None:
                self._tb.add_scalar(f"train/{name}", value, version, walltime=now)
            else:
                self._csv.writerow([version, f"{now:.3f}", f"train/{name}", f"{value:.6g}"])
        if self._tb is not None:
            self._tb.flush()
        else:
            self._file.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        else:
            self._file.close()
