"""One optimizer step of Binary RL on a causal LM (the embedded backend's counterpart of Slime's
Megatron step). Pure compute: no store, no threads, no settings read from the environment.

Invariants:
- trained tokens are exactly the recorded response token ids (never re-tokenized text);
- the PPO ratio is taken against ``Sample.rollout_log_probs``, the log-probs recorded when the
  tokens were sampled, so a sample from an older policy version is corrected;
- log-probs are computed from hidden states sliced to the response positions, with the output
  layer in fp32 (as the engine does when it records them), at each sample's own sampling temperature
  (``metadata["temperature"]``; ``logprobs.scoring_temperature``: greedy and unknown are 1), the
  distribution the engine recorded them under, so the ratio of a fresh recording starts at 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import torch

from slime_ext.algorithms import AdvantageWeights, PolicyLossConfig, TopK, policy_loss
from slime_ext.algorithms.divergence import topk_divergence_loss
from slime_ext.algorithms.topk_select import SelectedSupport, topk_select_loss
from slime_ext.learning.objective import LossFn, Objective
from slime_ext.logprobs import output_logits, scoring_temperature, token_logprobs
from slime_ext.types import Distill, Method, Sample


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, L] right-padded prompt + response
    attention_mask: torch.Tensor  # [B, L]
    response_start: list[int]  # index of each sample's first response token
    response_mask: torch.Tensor  # [B, T] over response positions (T = longest response)
    rollout_logprobs: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B, T]: the advantage (with distill topk_select_token: its verdict term)
    teacher_advantages: torch.Tensor | None = None  # [B, T]: distill topk_select_token's teacher term, apart
    # top-k distillation: the teacher's top-k (ids and log-probs [B, T, k]), or its full log-probs
    # [B, T, V] for student-top-k support; zeros where absent
    teacher_topk: TopK | torch.Tensor | None = None
    topk_mask: torch.Tensor | None = None  # [B, T]: response tokens of samples with a teacher top-k
    temperatures: list[float] | None = None  # each sample's scoring temperature (None: all 1)
    select: SelectedSupport | None = None  # topk_select: each sample's support [B, T, K] (topk_mask: where)

    def temperature(self, i: int) -> float:
        """The temperature sample ``i``'s log-probs are taken at (``scoring_temperature`` of its sampling)."""
        return self.temperatures[i] if self.temperatures is not None else 1.0

    def to(self, device: torch.device) -> Batch:
        """The batch with its tensors (and those of its top-k / support tuples) on ``device``."""
        def move(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return v.to(device)
            if isinstance(v, tuple) and hasattr(v, "_fields"):  # TopK, SelectedSupport
                return type(v)(*(move(x) for x in v))
            return v

        return Batch(**{f.name: move(getattr(self, f.name)) for f in fields(self)})


BINARY = Objective(AdvantageWeights.for_method(Method.BINARY), Distill.TOKEN, PolicyLossConfig())


def collate(samples: list[Sample], pad_id: int = 0, baseline: float = 0.0, objective: Objective = BINARY) -> Batch:
    """Right-pad samples into tensors, with each sample's per-token advantages from ``objective``
    (``learning/objective.py``: the verdict on every token for Binary RL, plus the teacher term for samples
    with ``teacher_log_probs``, a group member's group advantage, a context-distillation sample's fixed one).
    A sample is scored at ``metadata["temperature"]``, the temperature it was sampled at (absent: 1)."""
    lengths = [len(s.tokens) for s in samples]
    width = max(lengths)
    t_max = max(s.response_length for s in samples)
    n = len(samples)
    tokens = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.long)
    resp_mask = torch.zeros(n, t_max)
    old = torch.zeros(n, t_max)
    terms = [torch.zeros(n, t_max) for _ in range(2 if objective.separate_teacher_term else 1)]
    starts = []
    for i, s in enumerate(samples):
        if s.rollout_log_probs is None or len(s.rollout_log_probs) != s.response_length:
            raise ValueError(f"sample {i}: rollout_log_probs must have one value per response token")
        tokens[i, : lengths[i]] = torch.tensor(s.tokens)
        attn[i, : lengths[i]] = 1
        r = s.response_length
        starts.append(lengths[i] - r)
        resp_mask[i, :r] = torch.tensor(s.loss_mask if s.loss_mask is not None else [1] * r, dtype=torch.float32)
        old[i, :r] = torch.tensor(s.rollout_log_probs, dtype=torch.float32)
        for term, values in zip(terms, objective.advantages(s, baseline)):
            term[i, :r] = values
    batch = Batch(tokens, attn, starts, resp_mask, old, terms[0], terms[1] if len(terms) == 2 else None,
                  temperatures=[scoring_temperature((s.metadata or {}).get("temperature")) for s in samples])
    tops = [(i, s.metadata.get("teacher_topk")) for i, s in enumerate(samples)]
    tops = [(i, t) for i, t in tops if t is not None]
    if tops and isinstance(tops[0][1], SelectedSupport):
        batch.select, batch.topk_mask = _collate_select(samples, tops, resp_mask)
    elif tops and isinstance(tops[0][1], torch.Tensor):  # full teacher log-probs [r, V] -> [B, T, V]
        full = torch.zeros(n, t_max, tops[0][1].shape[1])
        batch.topk_mask = torch.zeros(n, t_max)
        for i, t in tops:
            r = samples[i].response_length
            full[i, :r] = t
            batch.topk_mask[i, :r] = resp_mask[i, :r]
        full[batch.topk_mask == 0] = -torch.log(torch.tensor(float(full.shape[2])))  # uniform where masked
        batch.teacher_topk = full
    elif tops:  # per sample (ids [r, k], log-probs [r, k]) -> padded [B, T, k]
        k = tops[0][1][0].shape[1]
        ids = torch.zeros(n, t_max, k, dtype=torch.long)
        lps = torch.zeros(n, t_max, k)
        batch.topk_mask = torch.zeros(n, t_max)
        for i, (tid, tlp) in tops:
            r = samples[i].response_length
            ids[i, :r], lps[i, :r] = tid, tlp
            ids[i, r:] = torch.arange(k)  # distinct ids on padding (masked out)
            batch.topk_mask[i, :r] = resp_mask[i, :r]
        for i in set(range(n)) - {i for i, _ in tops}:
            ids[i] = torch.arange(k)
        batch.teacher_topk = TopK(ids, lps)
    return batch


def _collate_select(samples: list[Sample], tops: list[tuple[int, SelectedSupport]],
                    resp_mask: torch.Tensor) -> tuple[SelectedSupport, torch.Tensor]:
    """Per-sample ``SelectedSupport`` ``[r, K]`` -> padded ``[B, T, K]`` (distinct ids and an empty
    support on padding and on samples without one), and the mask of positions that have one."""
    n, t_max = resp_mask.shape
    k = tops[0][1].ids.shape[1]
    ids = torch.arange(k).repeat(n, t_max, 1)
    in_support = torch.zeros(n, t_max, k, dtype=torch.bool)
    adv, old = torch.zeros(n, t_max, k), torch.zeros(n, t_max, k)
    where = torch.zeros(n, t_max)
    for i, top in tops:
        r = samples[i].response_length
        ids[i, :r], in_support[i, :r], adv[i, :r], old[i, :r] = top.ids, top.in_support, top.advantages, top.old_logprobs
        where[i, :r] = resp_mask[i, :r]
    return SelectedSupport(ids, in_support, adv, old), where


def response_logits(model, batch: Batch) -> torch.Tensor:
    """fp32 logits ``[B, T, V]`` at each sample's response positions (0 past the end), divided by each
    sample's scoring temperature."""
    hidden = model.get_decoder()(input_ids=batch.tokens, attention_mask=batch.attention_mask).last_hidden_state
    head = model.get_output_embeddings().weight.float()
    t_max = batch.response_mask.shape[1]
    out = hidden.new_zeros(len(batch.response_start), t_max, head.shape[0], dtype=torch.float32)
    for i, start in enumerate(batch.response_start):
        r = int(batch.attention_mask[i].sum()) - start
        out[i, :r] = output_logits(hidden[i, start - 1 : start - 1 + r], head, batch.temperature(i))  # p predicts p + 1
    return out


def response_targets(batch: Batch) -> torch.Tensor:
    """The response token ids ``[B, T]`` (0 past each sample's end)."""
    t_max = batch.response_mask.shape[1]
    return torch.stack([torch.nn.functional.pad(batch.tokens[i, s : s + t_max], (0, max(0, s + t_max - batch.tokens.shape[1])))
                        for i, s in enumerate(batch.response_start)])


def target_logprobs_of(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Log-probs ``[B, T]`` of the response tokens from their logits (0 past the end)."""
    return token_logprobs(logits, response_targets(batch)) * (batch.response_mask > 0)


def response_logprobs(model, batch: Batch) -> torch.Tensor:
    """Log-probs ``[B, T]`` of the response tokens under ``model`` where ``response_mask`` > 0, 0 elsewhere:
    ``target_logprobs_of(response_logits(model, batch), batch)`` (same values, same gradient) with logits
    made for the trained positions alone. An agent episode's response is mostly observation tokens (mask 0),
    and ``[T, vocab]`` fp32 logits over all of them are gigabytes."""
    hidden = model.get_decoder()(input_ids=batch.tokens, attention_mask=batch.attention_mask).last_hidden_state
    head = model.get_output_embeddings().weight.float()
    out = hidden.new_zeros(batch.response_mask.shape, dtype=torch.float32)
    for i, start in enumerate(batch.response_start):
        pos = torch.nonzero(batch.response_mask[i] > 0)[:, 0]
        if len(pos) == 0:
            continue
        logits = output_logits(hidden[i, start - 1 + pos], head, batch.temperature(i))  # p predicts token p + 1
        out = out.index_put((torch.full_like(pos, i), pos), token_logprobs(logits, batch.tokens[i, start + pos]))
    return out


def train_step(model, optimizer, samples: list[Sample], objective: Objective = BINARY, *,
               micro_batch_size: int = 4, max_grad_norm: float = 1.0, pad_id: int = 0, baseline: float = 0.0,
               reference: Callable[[Batch], torch.Tensor] | None = None, loss_fn: LossFn = policy_loss) -> dict[str, Any]:
    """One optimizer step over ``samples`` with gradient accumulation over micro-batches: ``objective``'s
    advantages and policy loss (``learning/objective.py``; ``loss_fn``: the built-in PPO or the user's),
    and the embedded trainer's own distillation terms.

    ``reference(batch)`` gives the reference policy's response log-probs for the KL term (used only when
    ``objective.loss.kl_coef`` > 0); with ``tis_cap`` the ratio is taken against the model's own log-probs
    before the step (the proximal policy), each token weighted by their truncated ratio to the recorded
    ones. Samples with ``metadata["teacher_topk"]`` add ``topk_coef`` x the top-k ``divergence`` to the
    teacher at every response position (reverse KL, forward KL or JSD(``beta``), ``algorithms/divergence.py``):
    over the teacher's top-k (ids and log-probs ``[r, k]``), or over the student's top ``topk`` tokens (the
    teacher's full log-probs ``[r, V]``); a ``SelectedSupport`` instead (``--distill topk_select``) adds
    ``topk_coef`` x ``topk_select_loss`` over its support, PPO-clipped with the loss's eps
    (``algorithms/topk_select.py``).
    """
    device = next(model.parameters()).device  # the batch is made on the CPU and computed where the model is
    model.train()
    optimizer.zero_grad(set_to_none=True)
    chunks = [samples[i : i + micro_batch_size] for i in range(0, len(samples), micro_batch_size)]
    totals: dict[str, float] = {}
    for chunk in chunks:
        batch = collate(chunk, pad_id, baseline, objective).to(device)
        loss, metrics = _chunk_loss(model, batch, objective, loss_fn, reference)
        (loss * len(chunk) / len(samples)).backward()
        for k, v in {"loss": loss.detach(), **metrics}.items():
            totals[k] = totals.get(k, 0.0) + float(v) * len(chunk) / len(samples)
    params = [p for p in model.parameters() if p.requires_grad]
    totals["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    optimizer.step()
    model.eval()
    return totals


def _chunk_loss(model, batch: Batch, objective: Objective, loss_fn: LossFn,
                reference: Callable[[Batch], torch.Tensor] | None) -> tuple[torch.Tensor, dict[str, Any]]:
    """One micro-batch's loss: the policy loss (``Objective.policy_loss``) plus the distillation term."""
    ref = proximal = None
    with torch.no_grad():
        if reference is not None and objective.loss.kl_coef:
            ref = reference(batch)
        if objective.loss.tis_cap:
            proximal = response_logprobs(model, batch)
    distills = objective.topk_coef and (batch.teacher_topk is not None or batch.select is not None)
    if distills:  # the distillation term needs every position's logits
        logits = response_logits(model, batch)
        logp = target_logprobs_of(logits, batch)
    else:
        logp = response_logprobs(model, batch)
    terms = [batch.advantages] + ([batch.teacher_advantages] if batch.teacher_advantages is not None else [])
    loss, metrics = objective.policy_loss(loss_fn, logp, batch.rollout_logprobs, terms, batch.response_mask,
                                          proximal=proximal, ref=ref)
    if distills and batch.select is not None:  # topk_select: w_opd x the top-K OPD term
        distill, distill_metrics = topk_select_loss(logits, batch.select, batch.topk_mask,
                                                    eps_low=objective.loss.eps_low, eps_high=objective.loss.eps_high)
    elif distills:
        student_support = isinstance(batch.teacher_topk, torch.Tensor)
        distill, distill_metrics = topk_divergence_loss(
            logits, batch.teacher_topk, batch.topk_mask, divergence=objective.divergence, beta=objective.beta,
            k=objective.topk if student_support else None, support="student" if student_support else "teacher")
    else:
        return loss, metrics
    return loss + objective.topk_coef * distill, {**metrics, **distill_metrics}
