"""Per-token log-probs, computed one way everywhere: the engine's sampling and scoring, the trainer's
step, the teacher, the teacher check, the canary, and tests.

``token_logprobs`` is the one place a token's log-prob is taken from logits (the fused gather minus
the log-normalizer of ``algorithms/topk.py``: the same values and gradient as ``log_softmax`` then
``gather``, without keeping a ``[.., V]`` log-softmax); ``log_distributions`` the one place a whole
next-token log-distribution is (top-k distillation, topk_select, the engine's sampling).
``tests/test_layout.py`` holds it: no other module calls ``log_softmax`` on model outputs.

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

from slime_ext.algorithms.topk import gather_log_softmax


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


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[target]`` for logits ``[..., V]`` and targets ``[...]`` (float32, with gradient)."""
    flat = logits.reshape(1, -1, logits.shape[-1])
    return gather_log_softmax(flat, targets.reshape(1, -1, 1))[0, :, 0].reshape(targets.shape)


def log_distributions(logits: torch.Tensor) -> torch.Tensor:
    """The whole log-distributions ``log_softmax(logits)`` ``[..., V]`` in float32."""
    return torch.log_softmax(logits.float(), dim=-1)


def without_tokens(logp: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """``logp`` (1-D log-probs) renormalized over every token but ``ids``: the distribution a request that may not
    stop yet samples from (``SamplingParams.min_new_tokens``), and whose log-prob its token records."""
    out = logp.clone()
    out[list(ids)] = float("-inf")
    return log_distributions(out)


def target_logprobs(hidden: torch.Tensor, head_fp32: torch.Tensor, targets: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """``log p_T(targets[i] | position i)`` for hidden states ``[N, H]`` and target ids ``[N]``."""
    return token_logprobs(output_logits(hidden, head_fp32, temperature), targets)


def teacher_forced_logits(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """fp32 logits ``[len(ids) - start, V]`` predicting each of ``ids[start:]``, from one forward pass,
    divided by ``temperature``."""
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=torch.tensor([list(ids)])).last_hidden_state[0, start - 1 : -1]
        return output_logits(hidden, model.get_output_embeddings().weight.float(), temperature)


def teacher_forced_log_softmax(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """The full log-distributions ``[len(ids) - start, V]`` at ``temperature`` that predict each of
    ``ids[start:]``: what top-k distillation and topk_select compare."""
    return log_distributions(teacher_forced_logits(model, ids, start, temperature))


def teacher_forced_logprobs(model, ids: Sequence[int], start: int, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs of ``ids[start:]`` given what precedes each, from one forward pass of ``model``, under
    the distribution at ``temperature`` (``log_softmax(logits / T)``)."""
    logits = teacher_forced_logits(model, ids, start, temperature)
    return token_logprobs(logits, torch.tensor(list(ids[start:]), device=logits.device))
