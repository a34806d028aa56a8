"""Per-token log-probs, computed one way everywhere: engine scoring, the trainer, and tests.

The output layer runs in fp32: bf16 logits are quantized to about 0.1 at typical magnitudes,
which would make recorded log-probs disagree with any re-computation.

**Temperature.** The engine records each sampled token's log-prob under the distribution it was
sampled from, ``log_softmax(logits / T)`` (raw logits for greedy, T = 0), before top-p truncation
(docs/engine.md). Whatever re-scores a recorded or sampled response for training (the trainer's
policy, its reference, the teacher) takes ``temperature`` = that sample's sampling temperature
(``scoring_temperature``), as Slime divides the logits by ``--rollout-temperature``: so the first
PPO ratio against the recorded log-probs is 1, and teacher − rollout compares like with like.
"""

from __future__ import annotations

from typing import Sequence

import torch


def scoring_temperature(sampled_at: float | None) -> float:
    """The temperature a response sampled at ``sampled_at`` is scored at: that temperature, or 1 for
    greedy (0: the engine records raw-logit log-probs) and for an unknown one (None)."""
    if sampled_at is None:
        return 1.0
    t = float(sampled_at)
    if not t >= 0.0 or t == float("inf"):  # NaN or negative or infinite
        raise ValueError(f"a sampling temperature must be a finite number >= 0, got {sampled_at!r}")
    return t if t > 0.0 else 1.0


def output_logits(hidden: torch.Tensor, head_fp32: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Logits from final hidden states with an fp32 copy of the output layer's weight, divided by
    ``temperature`` (a scoring temperature: > 0; see ``scoring_temperature``)."""
    logits = hidden.float() @ head_fp32.T
    return logits if temperature == 1.0 else logits / temperature


def target_logprobs(hidden: torch.Tensor, head_fp32: torch.Tensor, targets: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """``log p_T(targets[i] | position i)`` for hidden states ``[N, H]`` and target ids ``[N]``."""
    logp = torch.log_softmax(output_logits(hidden, head_fp32, temperature), dim=-1)
    return logp.gather(1, targets[:, None])[:, 0]


def teacher_forced_logits(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """fp32 logits ``[len(ids) - start, V]`` predicting each of ``ids[start:]``, from one forward pass,
    divided by ``temperature``."""
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=torch.tensor([list(ids)])).last_hidden_state[0, start - 1 : -1]
        return output_logits(hidden, model.get_output_embeddings().weight.float(), temperature)


def teacher_forced_log_softmax(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """The full log-distributions ``[len(ids) - start, V]`` at ``temperature`` that predict each of
    ``ids[start:]`` (``log_softmax(teacher_forced_logits)``): what top-k and teacher checks compare."""
    return torch.log_softmax(teacher_forced_logits(model, ids, start, temperature), dim=-1)


def teacher_forced_logprobs(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs of ``ids[start:]`` given what precedes each, from one forward pass of ``model``, under
    the distribution at ``temperature`` (``log_softmax(logits / T)``)."""
    logp = teacher_forced_log_softmax(model, ids, start, temperature)
    return logp.gather(1, torch.tensor(list(ids[start:]))[:, None])[:, 0]
