"""Per-token log-probs, computed one way everywhere: engine scoring, the trainer, and tests.

The output layer runs in fp32: bf16 logits are quantized to about 0.1 at typical magnitudes,
which would make recorded log-probs disagree with any re-computation.
"""

from __future__ import annotations

from typing import Sequence

import torch


def output_logits(hidden: torch.Tensor, head_fp32: torch.Tensor) -> torch.Tensor:
    """Logits from final hidden states with an fp32 copy of the output layer's weight."""
    return hidden.float() @ head_fp32.T


def target_logprobs(hidden: torch.Tensor, head_fp32: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log p(targets[i] | position i)`` for hidden states ``[N, H]`` and target ids ``[N]``."""
    logp = torch.log_softmax(output_logits(hidden, head_fp32), dim=-1)
    return logp.gather(1, targets[:, None])[:, 0]


def teacher_forced_logits(model, ids: Sequence[int], start: int) -> torch.Tensor:
    """fp32 logits ``[len(ids) - start, V]`` predicting each of ``ids[start:]``, from one forward pass."""
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=torch.tensor([list(ids)])).last_hidden_state[0, start - 1 : -1]
        return output_logits(hidden, model.get_output_embeddings().weight.float())


def teacher_forced_logprobs(model, ids: Sequence[int], start: int) -> torch.Tensor:
    """Log-probs of ``ids[start:]`` given what precedes each, from one forward pass of ``model``."""
    logits = teacher_forced_logits(model, ids, start)
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(list(ids[start:]))[:, None])[:, 0]
