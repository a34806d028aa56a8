"""``serve --engine sglang``: our server and trainer beside an SGLang server on the same model (one GPU, in
practice). Requests are served by SGLang; each version the trainer makes is loaded into it in place as a LoRA
adapter (``/load_lora_adapter``) and named by every request after it; turns record the version that served them.
Here the SGLang server is the protocol test server backed by the tiny model."""

from __future__ import annotations

import time

import pytest
from _sglang_server import serving_in_thread

from slime_ext.models import resolve_model


@pytest.fixture
def sglang():
    with serving_in_thread(resolve_model("tiny")) as fake:
        yield fake


def wait(pred, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := pred():
            return value
        time.sleep(0.5)
    raise AssertionError("timed out")


def test_trained_versions_are_loaded_into_sglang_in_place_and_serve(make_server, sglang):
    srv = make_server(extra=["--engine", "sglang", "--sglang-url", sglang.url, "--method", "binary", "--batch-size", "2",
                             "--lora-rank", "4", "--lr", "1e-3", "--no-canary", "--status-interval-s", "0"])
    for i, feedback in enumerate(["Thanks, perfect!", "No, that's wrong."]):
        u = {"role": "user", "content": f"question {i}"}
        reply = srv.chat([u], seed=i)["choices"][0]["message"]["content"]
        srv.chat([u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)
    wait(lambda: srv.health()["policy_version"] >= 1)
    assert ("load", "openclaw-v1") in sglang.lora_calls
    served = srv.chat([{"role": "user", "content": "after the step"}], seed=7)
    assert sglang.requests[-1]["lora_path"] == "openclaw-v1"  # SGLang was asked for the new adapter
    turn = next(t for s in srv.records()["sessions"] for t in s["turns"]
                if t["response_text"] == served["choices"][0]["message"]["content"])
    assert turn["policy_version"] == 1
    assert all("lora_path" not in body for body in sglang.requests[:4])  # before any training: the base model


def test_engine_sglang_needs_a_url_and_lora(tmp_path):
    import subprocess
    import sys

    for args, message in ((["--engine", "sglang"], "engine sglang needs sglang_url"),
                          (["--engine", "sglang", "--sglang-url", "http://127.0.0.1:9", "--lora-rank", "0",
                            "--method", "binary"], "lora_rank must be > 0")):
        out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "serve", "--model", "tiny", "--run-dir",
                              str(tmp_path / "run"), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
