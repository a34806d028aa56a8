"""``--device``: where the engine and the trainer compute. On this CPU-only machine ``auto`` is the CPU and a
CUDA device is refused at once, naming what torch found; a batch moves to the model's device whole (its top-k
and support tuples too). The CUDA path itself runs on a GPU machine (bench/gpu_check.sh)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slime_ext.algorithms.topk import TopK
from slime_ext.engines.device import check_device_spec, resolve_device
from slime_ext.engines.local import resolve_dtype
from slime_ext.trainers.step import Batch

ROOT = Path(__file__).resolve().parents[1]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU: the refusal cannot happen")


def test_device_spellings():
    for ok in ("auto", "cpu", "cuda", "cuda:3"):
        assert check_device_spec(ok) == ok
    for bad in ("gpu", "cuda:", "CUDA", "cuda:x", ""):
        with pytest.raises(ValueError, match="expected auto, cpu, cuda or cuda:N"):
            check_device_spec(bad)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", device="cuda")[0] == "bfloat16"  # GPUs compute bf16
    assert resolve_dtype("auto", cpuinfo="flags: avx2", device="cpu")[0] == "float32"  # the CPU path unchanged
    assert resolve_dtype("float32", device="cuda")[0] == "float32"  # asked for wins


@no_cuda
def test_without_a_gpu_auto_is_the_cpu_and_cuda_is_refused():
    assert resolve_device("auto") == torch.device("cpu")
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match=f"device '{spec}': this machine has no CUDA GPU that torch can use"):
            resolve_device(spec)


@no_cuda
@pytest.mark.parametrize("command", [["serve", "--run-dir", "RUN"], ["env", "eval", "--setting", "terminal"]])
def test_the_cli_refuses_a_missing_gpu_before_loading_a_model(tmp_path, command):
    args = [str(tmp_path / "run") if a == "RUN" else a for a in command]
    out = subprocess.run([sys.executable, "-m", "slime_ext.cli", *args, "--model", "tiny", "--device", "cuda"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert "device 'cuda': this machine has no CUDA GPU that torch can use" in out.stderr
    assert "Traceback" not in out.stderr and "Loading" not in out.stderr  # refused before any weights loaded
    bad = subprocess.run([sys.executable, "-m", "slime_ext.cli", *args, "--model", "tiny", "--device", "gpu"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "expected auto, cpu, cuda or cuda:N" in bad.stderr


def test_a_batch_moves_whole_to_the_models_device():
    z = torch.zeros(1, 2)
    batch = Batch(tokens=z.long(), attention_mask=z.long(), response_start=[0], response_mask=z, rollout_logprobs=z,
                  advantages=z, teacher_topk=TopK(torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(1, 2, 3)),
                  topk_mask=z, temperatures=[1.0])
    moved = batch.to(torch.device("meta"))
    tensors = [moved.tokens, moved.attention_mask, moved.response_mask, moved.rollout_logprobs, moved.advantages,
               moved.topk_mask, *moved.teacher_topk]
    assert all(t.device.type == "meta" for t in tensors) and isinstance(moved.teacher_topk, TopK)
    assert moved.response_start == [0] and moved.temperatures == [1.0] and moved.select is None
    assert batch.to(torch.device("cpu")).tokens is batch.tokens  # on the CPU nothing is copied


@no_cuda
def test_the_gpu_check_skips_cleanly_without_a_gpu():
    import shutil

    out = subprocess.run([shutil.which("bash") or "/bin/bash", str(ROOT / "bench" / "gpu_check.sh")],
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                          "OPENCLAW_PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("gpu_check: skipped: no CUDA GPU that torch can use here"), out.stdout
