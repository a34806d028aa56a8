"""``openclaw-rl export``: a learned version, out of the run directory, into the tools users run.

A LoRA version of the tiny model (random, non-zero adapter) is written as the trainer writes one
(``trainers/checkpoints.py``), served by the engine (the reference: what the server serves), exported in each
format through the CLI, and loaded in its target: peft for ``peft``, transformers for ``merged`` and, through its
GGUF loader, for ``gguf``; and ``serve --model`` of the GGUF file (``resolve_model``). Each gives the served
version's greedy tokens and teacher-forced log-probs (float32: 1e-4; a GGUF in f16: 2e-2).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model
from slime_ext.trainers import checkpoints

PROMPT = list(range(20, 40))
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    run = tmp_path_factory.mktemp("run")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    checkpoints.write(run, 1, model, optimizer, {"turns": [], "metrics": {}})
    return run


@pytest.fixture(scope="module")
def served(run_dir):
    """The version as the server serves it: greedy tokens and their teacher-forced log-probs."""
    async def serve():
        eng = LocalEngine(resolve_model("tiny"), dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            base = [t.token_id async for t in eng.generate(PROMPT, SamplingParams(temperature=0, max_new_tokens=12))]
            await eng.swap(checkpoints.latest(run_dir)[1], 1)
            tokens = [t.token_id async for t in eng.generate(PROMPT, SamplingParams(temperature=0, max_new_tokens=12))]
            assert tokens != base  # the adapter changes what is served
            return tokens, await eng.score(PROMPT + tokens, len(PROMPT))
        finally:
            await eng.close()

    return asyncio.run(serve())


def export(run_dir, fmt, out, *extra):
    done = subprocess.run([sys.executable, "-m", "slime_ext.cli", "export", "--run-dir", str(run_dir), "--format", fmt,
                           "--out", str(out), *extra], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written["version"] == 1 and f"wrote version 1 to {out}" in done.stderr
    return written


def check(model, served, tol):
    tokens, logprobs = served
    model.eval()
    with torch.no_grad():
        greedy = model.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False)[0, len(PROMPT):].tolist()
        got = teacher_forced_logprobs(model, PROMPT + tokens, len(PROMPT))
    assert greedy[:len(tokens)] == tokens
    assert (got - torch.tensor(logprobs)).abs().max().item() < tol


async def test_peft_export_loads_in_peft_and_gives_the_served_version(run_dir, served, tmp_path):
    from peft import PeftModel

    export(run_dir, "peft", tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(resolve_model("tiny"))
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    check(PeftModel.from_pretrained(base, str(tmp_path / "adapter")), served, 1e-4)


async def test_merged_export_is_a_checkpoint_transformers_loads(run_dir, served, tmp_path):
    export(run_dir, "merged", tmp_path / "merged")
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in (tmp_path / "merged").iterdir()}
    check(AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32), served, 1e-4)


@pytest.mark.parametrize("gguf_type,tol", [("f32", 1e-4), ("f16", 2e-2)])
async def test_gguf_export_loads_in_transformers_and_serves(run_dir, served, tmp_path, gguf_type, tol):
    out = tmp_path / f"model-{gguf_type}.gguf"
    export(run_dir, "gguf", out, "--gguf-type", gguf_type)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=out.name, dtype=torch.float32)
    if gguf_type == "f32":
        check(model, served, tol)
        # serve --model FILE.gguf: converted once into a cached checkpoint the engine serves
        eng = LocalEngine(resolve_model(str(out)), dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            tokens = [t.token_id async for t in eng.generate(PROMPT, SamplingParams(temperature=0, max_new_tokens=12))]
        finally:
            await eng.close()
        assert tokens == served[0]
    else:  # f16 rounding may flip a near-tie of the random model's greedy choice: the log-probs of its tokens
        with torch.no_grad():
            got = teacher_forced_logprobs(model, PROMPT + served[0], len(PROMPT))
        assert (got - torch.tensor(served[1])).abs().max().item() < tol


def test_export_refuses_what_it_cannot_write_and_says_why(run_dir, tmp_path):
    def refused(*args):
        done = subprocess.run([sys.executable, "-m", "slime_ext.cli", "export", "--run-dir", *map(str, args)],
                              capture_output=True, text=True)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        return done.stderr

    assert "no trained version yet" in refused(tmp_path / "empty", "--format", "peft", "--out", tmp_path / "a")
    (run_dir / "canary.json").write_text(json.dumps({"last_refusal": {"version": 2, "reasons": ["nll rose by 0.9"]}}))
    try:
        err = refused(run_dir, "--version", "2", "--format", "merged", "--out", tmp_path / "b")
    finally:
        (run_dir / "canary.json").unlink()
    assert "the canary refused it (nll rose by 0.9)" in err and "versions with weights: 1" in err
    full = tmp_path / "full-run"  # a --lora-rank 0 version: full weights, no record of its base or tokenizer
    AutoModelForCausalLM.from_pretrained(resolve_model("tiny")).save_pretrained(checkpoints.directory(full) / "v000001")
    assert "holds full weights (trained with --lora-rank 0)" in refused(full, "--format", "merged", "--out", tmp_path / "c")
    (tmp_path / "full").mkdir()
    (tmp_path / "full/x").write_text("")
    assert "exists and is not empty" in refused(run_dir, "--format", "peft", "--out", tmp_path / "full")
