"""Where the embedded engine and trainer compute: ``--device auto|cpu|cuda|cuda:N``.

``auto`` is the first CUDA GPU torch can use, else the CPU. A CUDA device on a machine without one (a CPU
build of torch, no driver, or an index past the GPUs there are) is refused at once with what was found, before
any model is loaded. ``check_device_spec`` checks the spelling without importing torch (the config does).
"""

from __future__ import annotations

import re

_SPEC = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device_spec(spec: str) -> str:
    """``spec`` when it is auto, cpu, cuda or cuda:N; ValueError naming it otherwise."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise ValueError(f"device {spec!r}: expected auto, cpu, cuda or cuda:N")
    return spec


def resolve_device(spec: str):
    """The ``torch.device`` for ``spec`` (see the module docstring)."""
    import torch

    check_device_spec(spec)
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + (" (a CPU-only build)" if torch.version.cuda is None else "")
        raise ValueError(f"device {spec!r}: this machine has no CUDA GPU that torch can use ({build}); "
                         "use --device cpu (or auto)")
    index = int(spec.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {spec!r}: there are {torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    return torch.device(f"cuda:{index}")
