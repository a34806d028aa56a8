"""Sampling defaults from the model: a request that omits ``temperature`` / ``top_p`` is sampled with
the served model's ``generation_config.json`` values (smollm2-135m: its card's 0.2 / 0.9), a request's
own values win, and a model without them gets OpenAI's 1.0 / 1.0. The recorded turn says which
values were used."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from openai import OpenAI

from slime_ext.config import ServeConfig
from slime_ext.models import resolve_model
from slime_ext.models.builtin import BUILTIN_GENERATION, ensure_generation_defaults
from slime_ext.models.generation import parse_generation_config, sampling_defaults


def model_dir_with(tmp_path, generation: dict | None):
    """A copy of ``tiny``'s checkpoint whose generation_config.json is ``generation`` (None: no file)."""
    folder = tmp_path / "model"
    shutil.copytree(resolve_model("tiny"), folder)
    path = folder / "generation_config.json"
    if generation is None:
        path.unlink()
    else:
        path.write_text(json.dumps(generation))
    return folder


# ---------------------------------------------------------------- reading generation_config.json
def test_the_models_values_are_the_defaults_and_absent_ones_are_openais():
    both = parse_generation_config({"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}, "g")
    assert (both.temperature, both.top_p, both.source) == (0.6, 0.95, "g")
    assert (parse_generation_config({"temperature": 0.7}, "g").top_p) == 1.0
    assert (parse_generation_config({"top_p": 0.8}, "g").temperature) == 1.0
    neither = parse_generation_config({"bos_token_id": 1, "eos_token_id": 2}, "g")
    assert (neither.temperature, neither.top_p) == (1.0, 1.0) and "sets neither" in neither.source


def test_do_sample_false_is_greedy():
    greedy = parse_generation_config({"do_sample": False, "temperature": 0.6, "top_p": 0.9}, "g")
    assert (greedy.temperature, greedy.top_p) == (0.0, 0.9) and "greedy" in greedy.source


@pytest.mark.parametrize("bad, field", [({"temperature": -0.1}, "temperature"), ({"temperature": "hot"}, "temperature"),
                                        ({"temperature": float("nan")}, "temperature"), ({"top_p": 1.5}, "top_p"),
                                        ({"top_p": True}, "top_p"), ({"do_sample": "yes"}, "do_sample")])
def test_a_bad_value_is_an_error_naming_the_file_and_field(bad, field):
    with pytest.raises(ValueError, match=f"model/generation_config.json: '{field}'"):
        parse_generation_config(bad, "model/generation_config.json")


def test_a_model_without_generation_config_gets_openais_defaults(tmp_path):
    assert (sampling_defaults(tmp_path).temperature, sampling_defaults(tmp_path).top_p) == (1.0, 1.0)
    assert "does not exist" in sampling_defaults(tmp_path).source
    assert sampling_defaults(None).temperature == 1.0  # e.g. Slime's tokenizer named by a hub id, not a folder
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="generation_config.json: cannot be read as JSON"):
        sampling_defaults(tmp_path)


def test_sampling_defaults_openai_ignores_the_models_values(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.2, "top_p": 0.9}))
    assert sampling_defaults(tmp_path, "model").temperature == 0.2
    openai = sampling_defaults(tmp_path, "openai")
    assert (openai.temperature, openai.top_p) == (1.0, 1.0)
    with pytest.raises(ValueError, match="sampling_defaults 'greedy': expected one of model, openai"):
        ServeConfig(sampling_defaults="greedy").validated()


def test_the_default_setting_is_the_models_own():
    """The trainer scores each turn at the temperature it was sampled at (tests/test_sampled_temperature.py),
    so serving at the model's recommended values is the default (vLLM's and SGLang's convention)."""
    assert ServeConfig().sampling_defaults == "model"
    assert ServeConfig.from_mapping({}, "test").sampling_defaults == "model"


# ---------------------------------------------------------------- the built-in models
def test_smollm2_resolves_to_its_cards_values_even_from_a_cache_converted_before_them(tmp_path, monkeypatch):
    """An existing cache (config.json present, generation_config.json without sampling values) is
    upgraded in place on resolve, keeping its other fields; no model is loaded or converted."""
    monkeypatch.setenv("OPENCLAW_RL_CACHE", str(tmp_path))
    old = tmp_path / "models" / "smollm2-135m"
    old.mkdir(parents=True)
    (old / "config.json").write_text("{}")
    (old / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    said = []
    folder = resolve_model("smollm2-135m", progress=said.append)
    defaults = sampling_defaults(folder)
    assert (defaults.temperature, defaults.top_p) == (0.2, 0.9)
    data = json.loads((folder / "generation_config.json").read_text())
    assert data["eos_token_id"] == 2 and data["do_sample"] is True
    assert len(said) == 1 and "recommended sampling defaults" in said[0]
    resolve_model("smollm2-135m", progress=said.append)
    assert len(said) == 1  # written once


def test_tiny_keeps_openais_defaults(tmp_path):
    assert "tiny" not in BUILTIN_GENERATION
    folder = model_dir_with(tmp_path, {"bos_token_id": 1})
    assert ensure_generation_defaults("tiny", folder) is False
    assert json.loads((folder / "generation_config.json").read_text()) == {"bos_token_id": 1}
    assert sampling_defaults(resolve_model("tiny")).temperature == 1.0


# ---------------------------------------------------------------- through the server
def test_slime_path_reads_the_defaults_of_the_checkpoint_its_tokenizer_came_from(tmp_path):
    """Inside Slime, build_server gets SGLang's engine and the tokenizer of ``--hf-checkpoint``."""
    from transformers import AutoTokenizer

    from slime_ext.serve import build_server

    folder = model_dir_with(tmp_path, {"temperature": 0.4, "top_p": 0.7})
    cfg = ServeConfig(model="ignored-on-slime", method="none", run_dir=str(tmp_path / "run"), sampling_defaults="model")
    engine = SimpleNamespace(policy_version=0)
    server = build_server(cfg, engine=engine, tokenizer=AutoTokenizer.from_pretrained(str(folder)))
    try:
        assert (server.settings.sampling.temperature, server.settings.sampling.top_p) == (0.4, 0.7)
    finally:
        server.store.close()


def test_omitted_values_come_from_the_model_and_a_requests_own_win(make_server, tmp_path):
    folder = model_dir_with(tmp_path, {"do_sample": True, "temperature": 0.3, "top_p": 0.8})
    srv = make_server(str(folder))  # the default: --sampling-defaults model
    assert srv.health()["sampling_defaults"]["temperature"] == 0.3
    c = OpenAI(base_url=srv.url, api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "Hello"}]
    omitted = c.chat.completions.create(model="m", messages=msgs, max_tokens=4, seed=1)
    own = c.chat.completions.create(model="m", messages=msgs, max_tokens=4, seed=1, temperature=1.0, top_p=1.0)
    half = c.chat.completions.create(model="m", messages=msgs, max_tokens=4, seed=1, temperature=0.9)
    streamed = c.chat.completions.create(model="m", messages=msgs, max_tokens=4, seed=1, stream=True)
    streamed_id = next(iter(streamed)).id
    for _ in streamed:
        pass
    turns = {t["request_id"]: t["sampling"] for s in srv.records()["sessions"] for t in s["turns"]}
    assert (turns[omitted.id]["temperature"], turns[omitted.id]["top_p"]) == (0.3, 0.8)
    assert (turns[streamed_id]["temperature"], turns[streamed_id]["top_p"]) == (0.3, 0.8)
    assert (turns[own.id]["temperature"], turns[own.id]["top_p"]) == (1.0, 1.0)
    assert (turns[half.id]["temperature"], turns[half.id]["top_p"]) == (0.9, 0.8)
    assert "requests without temperature / top_p: temperature 0.3, top_p 0.8" in srv.log_tail(20000)


def test_a_model_without_generation_defaults_samples_at_one(make_server, tmp_path):
    srv = make_server(str(model_dir_with(tmp_path, None)), extra=["--sampling-defaults", "model"])
    c = OpenAI(base_url=srv.url, api_key="k", max_retries=0)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, seed=1)
    (turn,) = [t for s in srv.records()["sessions"] for t in s["turns"] if t["request_id"] == r.id]
    assert (turn["sampling"]["temperature"], turn["sampling"]["top_p"]) == (1.0, 1.0)
    shown = srv.health()["sampling_defaults"]
    assert (shown["temperature"], shown["top_p"]) == (1.0, 1.0) and "does not exist" in shown["source"]
