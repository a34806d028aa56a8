"""The `openclaw-rl` command as a user runs it."""

import json
import subprocess
import sys

import pytest

from slime_ext.cli import build_parser, serve_config


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", *args], capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("sub", ["serve", "records", "models"])
def test_every_subcommand_has_help(sub):
    r = cli(sub, "--help")
    assert r.returncode == 0 and f"openclaw-rl {sub}" in r.stdout and "--" in r.stdout


def test_records_on_a_missing_run_dir_is_a_clear_error(tmp_path):
    r = cli("records", "--run-dir", str(tmp_path / "nope"))
    assert r.returncode == 2 and "not a run directory" in r.stderr and "Traceback" not in r.stderr


def test_records_of_an_empty_run(tmp_path):
    from slime_ext.store import Store

    Store(tmp_path).close()
    assert json.loads(cli("records", "--run-dir", str(tmp_path), "--json").stdout) == {"sessions": []}
    assert "no sessions recorded yet" in cli("records", "--run-dir", str(tmp_path)).stdout


def test_yaml_config_maps_onto_the_settings_and_flags_override(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: tiny\nport: 31111\nmax-tokens-cap: 77\n")
    args = build_parser().parse_args(["serve", "--config", str(cfg), "--port", "31112"])
    c = serve_config(args)
    assert (c.model, c.port, c.max_tokens_cap) == ("tiny", 31112, 77)


def test_unknown_yaml_setting_is_named(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("modle: tiny\n")
    r = cli("serve", "--config", str(cfg))
    assert r.returncode == 2 and "modle" in r.stderr and "Traceback" not in r.stderr


def test_unknown_model_is_a_clear_error(tmp_path):
    r = cli("serve", "--model", str(tmp_path / "missing-model"), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 2 and "not a built-in model" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flags, named", [
    (["--judge", "self", "--method", "binary", "--lora-rank", "0"], "judge self needs LoRA"),
    (["--judge", "openai"], "judge_url"),
    (["--batch-size", "0"], "batch_size"),
])
def test_settings_that_cannot_work_are_refused_before_loading_anything(tmp_path, flags, named):
    r = cli("serve", "--model", "tiny", "--run-dir", str(tmp_path / "run"), *flags)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("folder, method", [("openclaw-binary", "binary"), ("openclaw-opd", "opd"),
                                            ("openclaw-combine", "combine")])
def test_setting_folders_run_serve_with_their_method(folder, method):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = root / folder / "run_local.sh"
    assert f"--method {method}" in script.read_text() and "run_local.sh" in (root / folder / "README.md").read_text()
    r = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "--method" in r.stdout, r.stderr[-2000:]
