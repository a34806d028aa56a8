"""The embedded trainer's policy loss by name (``--policy-loss``, docs/extending.md): the template in
examples/custom_loss computes what it says, the trainer steps with a loss from a folder of the user's, and a loss
that cannot load is refused before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slime_ext.algorithms.ppo import PolicyLossConfig, policy_loss
from slime_ext.config import ServeConfig
from slime_ext.learning.objective import resolve_policy_loss

ROOT = Path(__file__).resolve().parents[1]

COUNTING = '''
"""A loss of the user's: the built-in one, counting its calls into a metric."""
from slime_ext.algorithms.ppo import policy_loss

calls = []


def counting(logprobs, behaviour_logprobs, advantages, mask, config, *, ref_logprobs=None):
    calls.append(int(mask.sum()))
    loss, metrics = policy_loss(logprobs, behaviour_logprobs, advantages, mask, config, ref_logprobs=ref_logprobs)
    metrics["my_calls"] = len(calls)
    return loss, metrics
'''


@pytest.fixture
def loss_folder(tmp_path, monkeypatch):
    folder = tmp_path / "losses"
    folder.mkdir()
    (folder / "my_losses.py").write_text(COUNTING)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_template_averages_over_every_token_of_the_batch(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "custom_loss"))
    loss_fn = resolve_policy_loss("token_mean_loss:token_mean_ppo")
    # on-policy (ratio 1): a token's loss is -advantage. A: one token, +1; B: three tokens, -1.
    logp = torch.zeros(2, 3, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    loss, metrics = loss_fn(logp, logp.detach(), adv, mask, PolicyLossConfig())
    assert loss.item() == pytest.approx((-1 + 3) / 4)  # every token counts once
    assert policy_loss(logp, logp.detach(), adv, mask)[0].item() == pytest.approx((-1 + 1) / 2)  # per sample
    assert metrics["loss_tokens"].item() == 4
    loss.backward()
    assert logp.grad is not None and logp.grad[0, 1] == 0  # no gradient through a masked token


def test_a_loss_that_cannot_load_is_refused_naming_why(loss_folder):
    assert resolve_policy_loss("ppo") is policy_loss
    with pytest.raises(ValueError, match="loss 'ppx': expected ppo, a module:attribute path"):
        ServeConfig(policy_loss="ppx").validated()  # a typo of the built-in
    with pytest.raises(ValueError, match="loss 'nowhere:fn': no module named 'nowhere'"):
        resolve_policy_loss("nowhere:fn")
    with pytest.raises(ValueError, match="has no attribute 'missing'"):
        ServeConfig(policy_loss="my_losses:missing").validated()
    with pytest.raises(ValueError, match="not callable"):
        ServeConfig(policy_loss="my_losses:calls").validated()
    assert ServeConfig(policy_loss="my_losses:counting").validated().trainer_config().policy_loss == "my_losses:counting"


def test_the_serve_trainer_steps_with_the_users_loss(loss_folder, tmp_path):
    from test_trainer_loop import setup

    from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora

    _, base, store, _, _ = setup(tmp_path)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=8, lora_alpha=16, micro_batch_size=2,
                        policy_loss="my_losses:counting")
    metrics = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg).step()
    import my_losses

    assert metrics["version"] == 1 and len(my_losses.calls) == 2  # two micro-batches of two turns
    assert metrics["my_calls"] == pytest.approx(1.5)  # the metric it returned, averaged over micro-batches


@pytest.mark.parametrize("command", [["serve", "--model", "tiny"], ["env", "train", "--setting", "terminal",
                                                                      "--model", "tiny", "--out", "OUT"]])
def test_the_cli_refuses_an_unloadable_loss_before_loading_anything(tmp_path, command):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    if command[0] == "serve":
        args += ["--run-dir", str(tmp_path / "run")]
    out = subprocess.run([sys.executable, "-m", "slime_ext.cli", *args, "--policy-loss", "nowhere_losses:mine"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert "loss 'nowhere_losses:mine': no module named 'nowhere_losses'" in out.stderr
    assert "Traceback" not in out.stderr
