"""``--model`` as a Hugging Face hub id, resolved through the standard HF cache: a cache laid out as
huggingface_hub writes it (``models--org--name/refs/main``, ``snapshots/<commit>/``), built in a temporary
folder from the converted SmolLM2 checkpoint, serves offline; what is not cached is refused naming what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slime_ext.models import resolve_model
from slime_ext.models.hub import is_hub_id

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
COMMIT = "12fd25f77366fa6b3b4b768ec3050bf629380bac"  # any 40-hex name: what refs/main points at


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """An HF hub cache holding REPO at COMMIT (the files of the packaged SmolLM2, converted)."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(resolve_model("smollm2-135m"), snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub_cache


def test_a_hub_id_resolves_to_its_cached_snapshot(offline):
    snapshot = offline / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT
    assert resolve_model(REPO) == snapshot
    assert resolve_model(f"{REPO}@{COMMIT}") == snapshot  # a pinned revision


def test_what_is_not_cached_is_refused_offline_saying_what_to_do(offline, tmp_path):
    with pytest.raises(ValueError, match=r"'Qwen/Qwen3-4B': not in the Hugging Face cache .*HF_HUB_OFFLINE=1 "
                                         r"forbids downloading it; download it once online"):
        resolve_model("Qwen/Qwen3-4B")
    with pytest.raises(ValueError, match="not a built-in model .* not a directory, not a .gguf file and not a Hugging Face hub id"):
        resolve_model(str(tmp_path / "nothing" / "here"))
    assert is_hub_id("Qwen/Qwen3-4B") and is_hub_id("org/name@v1.0") and not is_hub_id("smollm2-135m")
    assert not is_hub_id("../escape") and not is_hub_id("/abs/path")


def test_serve_takes_a_hub_id_from_an_offline_cache(make_server, offline):
    srv = make_server(model=REPO, env={"HF_HUB_CACHE": str(offline), "HF_HUB_OFFLINE": "1"})
    out = srv.chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=8, temperature=0)
    text = out["choices"][0]["message"]["content"]
    assert out["model"] == REPO and "Paris" in text, out  # the real SmolLM2 answered, not a random model
