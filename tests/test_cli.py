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
    r = cli("serve", "--model", str(tmp_path / "missing-model"), "--run-dir", str(tmp_path / "run"), "--port", "0")
    assert r.returncode == 2 and "not a built-in model" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # a failed start leaves nothing behind


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


@pytest.mark.parametrize("flags, named", [
    (["--api-key", "sekret-api-1234"], "--api-key"),
    (["--user-key", "alice=sekret-user-1234"], "--user-key"),
    (["--judge-key", "sekret-judge-1234"], "--judge-key"),
])
def test_secret_on_the_command_line_is_warned_about_without_echoing_it(tmp_path, flags, named):
    """Any local user can read /proc/PID/cmdline: say so, point to the env var / YAML file, never print the key."""
    r = cli("serve", "--model", str(tmp_path / "missing-model"), "--run-dir", str(tmp_path / "run"), "--port", "0",
            *flags)
    assert f"{named} on the command line is visible" in r.stderr and "YAML" in r.stderr, r.stderr
    assert "sekret" not in r.stderr + r.stdout


def test_secret_from_the_environment_or_yaml_gives_no_warning(tmp_path):
    import os

    cfg = tmp_path / "serve.yaml"
    cfg.write_text("user_keys: {alice: sekret-user-1234}\n")
    r = cli("serve", "--config", str(cfg), "--model", str(tmp_path / "missing-model"), "--run-dir", str(tmp_path / "run"),
            "--port", "0", env={**os.environ, "OPENCLAW_RL_API_KEY": "sekret-api-1234"})
    assert r.returncode == 2 and "not a built-in model" in r.stderr
    assert "on the command line is visible" not in r.stderr and "sekret" not in r.stderr


def test_http_settings_are_flags_and_are_validated(tmp_path):
    args = build_parser().parse_args(["serve", "--header-timeout-s", "3", "--body-timeout-s", "9", "--max-connections", "64",
                                      "--keepalive-timeout-s", "20", "--allowed-origin", "http://localhost:3000",
                                      "--allowed-origin", "https://app.example", "--allowed-host", "proxy.example"])
    c = serve_config(args)
    assert (c.header_timeout_s, c.body_timeout_s, c.max_connections, c.keepalive_timeout_s) == (3, 9, 64, 20)
    assert c.allowed_origins == ["http://localhost:3000", "https://app.example"] and c.allowed_hosts == ["proxy.example"]
    for flags, named in ((["--allowed-origin", "*"], "allowed origin"), (["--header-timeout-s", "0"], "header_timeout_s"),
                         (["--max-connections", "2"], "max_connections")):
        r = cli("serve", "--model", "tiny", "--run-dir", str(tmp_path / "run"), *flags)
        assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr, r.stderr
