"""Never worse: the canary that decides whether a freshly trained version may be served.

After each optimizer step, and before the new version's checkpoint is written (the server swaps
in whatever is written), the trainer probes the updated model off the serving path:

- ``nll``: mean negative log-likelihood per token of short reference answers to held-out general
  questions (the first ``NLL_REFERENCES`` of ``canary_data.CANARY_QA``; the end-of-turn token
  included), teacher-forced in one batched forward pass;
- ``forgotten``, from the same pass: of the facts the *first* version recalled (its top choice at
  the reference answer's key word, "The capital of Spain is" -> " Madrid"), the fraction this version
  no longer recalls. Per fact, not a net count: a step that trades capitals for opposites forgot the
  capitals. Measured on the experiment's kept checkpoints (docs/learning.md): versions that still
  answered every held-out question forgot 0-3 of smollm2's 43, versions that lost some forgot 8-14;
- greedy generations (``max_new_tokens``) for a few of those questions and a few of the user's own
  recent prompts: ``distinct2`` (distinct bigrams over all generated bigrams, pooled: it falls with
  repetition inside a reply and with the same reply to every prompt), ``eos_rate`` (the fraction
  that ended with an end-of-turn token), ``mean_length`` (new tokens) and ``answered`` (the
  fraction of the canary questions' generations that contain a key of the reference answer).

The figures are compared with the served version's, measured on the same prompts (cached: the
base model's before the first step, then each accepted version's; the user's prompts are re-chosen
every ``refresh_every`` accepted versions, the served version then re-measured). ``regressions``
states the rule. ``answered`` is compared with the *first* version the trainer measured (the base
model on a fresh run; kept in ``canary.json`` across restarts), not only with the served one: a
policy that drifts, step by step, from answering questions to answering something else (a judge
that rewards only the style) passes every step-to-step comparison and fails this one. A refused version is never written: the trainer restores the weights and
optimizer state it had before the step (``snapshot``), the previous version keeps serving, and the
refusal is recorded with its reasons and figures in ``<run_dir>/canary.json`` (``/healthz``,
``/metrics``), on the step's turns (dropped with the reason: ``openclaw-rl records``) and as a
WARNING in the log.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from slime_ext.learning.settings import CanaryConfig
from slime_ext.trainers.canary_data import CANARY_QA, NLL_REFERENCES, holds_key

log = logging.getLogger(__name__)

STATUS_FILE = "canary.json"  # in the run directory


@dataclass(frozen=True)
class CanaryFigures:
    nll: float  # mean reference NLL, nats/token
    distinct2: float
    eos_rate: float
    mean_length: float
    answered: float = 1.0  # the fraction of the canary questions generated for whose answer holds a key
    forgotten: float = 0.0  # the fraction of the facts the first version recalled that this one does not


@dataclass
class CanaryResult:
    before: CanaryFigures
    after: CanaryFigures
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def refused(self) -> bool:
        return bool(self.reasons)

    def metrics(self) -> dict[str, float]:
        """The step metrics (scalars, trainer state) this check adds."""
        a = self.after
        return {"canary_nll": a.nll, "canary_nll_rise": a.nll - self.before.nll, "canary_distinct2": a.distinct2,
                "canary_eos_rate": a.eos_rate, "canary_length": a.mean_length, "canary_answered": a.answered,
                "canary_forgotten": a.forgotten,
                "canary_s": self.seconds,
                "canary_refused": int(self.refused)}


# ---------------------------------------------------------------- pure figures
def distinct_n(sequences: Sequence[Sequence[int]], n: int = 2) -> float:
    """Distinct n-grams / all n-grams over ``sequences`` (pooled); 1.0 when there is none."""
    grams = [tuple(s[i : i + n]) for s in sequences for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def generation_figures(responses: Sequence[Sequence[int]], stopped: Sequence[bool]) -> tuple[float, float, float]:
    """``(distinct2, eos_rate, mean_length)`` of generated responses (stop tokens excluded)."""
    if not responses:
        return 1.0, 1.0, 0.0
    return (distinct_n(responses, 2), sum(map(bool, stopped)) / len(stopped),
            sum(len(r) for r in responses) / len(responses))


def answered(texts: Sequence[str], keys: Sequence[Sequence[str]]) -> float:
    """The fraction of ``texts`` that contain one of their ``keys`` (lowercase; case-insensitive)."""
    if not texts:
        return 1.0
    return sum(holds_key(ks, t) for t, ks in zip(texts, keys)) / len(texts)


def regressions(before: CanaryFigures, after: CanaryFigures, cfg: CanaryConfig,
                first: CanaryFigures | None = None) -> list[str]:
    """Why ``after`` may not replace ``before`` (empty: it may). Each rule bounds one regression:
    the NLL rise (absolute, nats/token) and the EOS rate's fall (absolute), each against the served
    version and the ``first`` (steps that each pass add up), distinct-2 (relative; a fall under 0.05 always
    passes: a handful of bigrams), the length (relative; a growth of at most 4
    tokens always passes, so short replies may grow), the canary questions answered since the
    ``first`` version (absolute; default ``before``) and the facts forgotten since it."""
    figures = asdict(after)
    bad = [k for k, v in figures.items() if not math.isfinite(v)]
    if bad:
        return [f"non-finite canary figures ({', '.join(bad)})"]
    reasons = []
    first = first or before
    base, since = held_to(before.nll, first.nll, higher_is_better=False)
    if after.nll - base > cfg.max_nll_rise:
        reasons.append(f"reference NLL rose {after.nll - base:+.3f} nats/token{since} ({base:.3f} -> {after.nll:.3f}; "
                       f"limit {cfg.max_nll_rise:g})")
    if after.distinct2 < cfg.min_distinct_ratio * before.distinct2 and before.distinct2 - after.distinct2 >= 0.05:
        reasons.append(f"distinct-2 fell {before.distinct2:.3f} -> {after.distinct2:.3f} (limit {cfg.min_distinct_ratio:g}x)")
    base, since = held_to(before.eos_rate, first.eos_rate, higher_is_better=True)
    if after.eos_rate < base - cfg.max_eos_drop - 1e-9:
        reasons.append(f"EOS rate fell {base:.2f} -> {after.eos_rate:.2f}{since} (limit -{cfg.max_eos_drop:g})")
    if after.mean_length > max(cfg.max_length_ratio * before.mean_length, before.mean_length + 4):
        reasons.append(f"mean length grew {before.mean_length:.1f} -> {after.mean_length:.1f} tokens "
                       f"(limit {cfg.max_length_ratio:g}x)")
    if after.answered < first.answered - cfg.max_answered_drop - 1e-9:
        reasons.append(f"canary questions answered fell {first.answered:.2f} -> {after.answered:.2f} since the first "
                       f"version (limit -{cfg.max_answered_drop:g})")
    if after.forgotten > cfg.max_forgotten + 1e-9:
        reasons.append(f"forgot {after.forgotten:.0%} of the canary facts the first version recalled "
                       f"(limit {cfg.max_forgotten:.0%})")
    return reasons


def held_to(served: float, first: float, higher_is_better: bool) -> tuple[float, str]:
    """The value a figure is held to: the served version's, or the first version's where that one was
    better (so steps that each pass cannot add up past a limit), and how a reason names it."""
    first_better = first > served if higher_is_better else first < served
    return (first, " since the first version") if first_better else (served, "")


def forgotten(first_known: Collection[str] | None, known: Collection[str]) -> float:
    """The fraction of ``first_known`` (the facts the first version recalled) not in ``known``; 0 when
    the first version recalled none (or is this one: ``None``)."""
    if not first_known:
        return 0.0
    return len(set(first_known) - set(known)) / len(set(first_known))


# ---------------------------------------------------------------- the probe (model compute)
def reference_pass(model, pairs: Sequence[tuple[list[int], list[int]]], key_at: Sequence[int | None],
                   nll_of: int, pad_id: int = 0) -> tuple[float, list[bool]]:
    """One batched teacher-forced pass over reference answers given their prompts: the mean NLL per
    token of the first ``nll_of`` answers, and per pair whether the answer's token at ``key_at`` (None:
    no key) is the model's top choice there (the fact is *recalled*). Answers past ``nll_of`` are cut
    after their key; the prompts' common start (the chat template's system turn, about half the
    tokens) is run once and its cache shared by every row."""
    import torch
    from transformers import DynamicCache

    from slime_ext.logprobs import output_logits, token_logprobs

    kept = [(i, p, a if i < nll_of else a[: k + 1]) for i, ((p, a), k) in enumerate(zip(pairs, key_at))
            if i < nll_of or k is not None]
    rows = [p + a for _, p, a in kept]
    shared = common_prefix(rows, limit=min(len(p) for _, p, _ in kept) - 1)
    hidden = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda r: len(rows[r]))  # similar lengths together: little padding
    with torch.no_grad():
        decoder = model.get_decoder()
        for chunk in (order[i : i + 16] for i in range(0, len(order), 16)):
            width = max(len(rows[r]) for r in chunk) - shared
            suffix = torch.tensor([rows[r][shared:] + [pad_id] * (width + shared - len(rows[r])) for r in chunk])
            mask = torch.tensor([[1] * len(rows[r]) + [0] * (width + shared - len(rows[r])) for r in chunk])
            cache = None
            if shared:
                cache = DynamicCache(config=decoder.config)
                decoder(input_ids=torch.tensor([rows[0][:shared]]), cache=cache, use_cache=True)
                cache.batch_repeat_interleave(len(chunk))
            out = decoder(input_ids=suffix, attention_mask=mask, cache=cache).last_hidden_state
            for j, r in enumerate(chunk):
                hidden[r] = out[j]
        head = model.get_output_embeddings().weight.float()
        total, count, recalled = 0.0, 0, [False] * len(pairs)
        for h, (i, prompt, answer) in zip(hidden, kept):
            start, key = len(prompt) - shared, key_at[i]
            if i < nll_of:
                logits = output_logits(h[start - 1 : start - 1 + len(answer)], head, 1.0)  # p predicts p + 1
                total -= float(token_logprobs(logits, torch.tensor(answer)).sum())
                count += len(answer)
            if key is not None:
                recalled[i] = int(output_logits(h[start - 1 + key], head, 1.0).argmax()) == answer[key]
    return total / max(count, 1), recalled


def common_prefix(rows: Sequence[Sequence[int]], limit: int) -> int:
    """The length of the tokens every row starts with, at most ``limit`` (at least 1 when they share one)."""
    n = 0
    while n < limit and all(len(r) > n and r[n] == rows[0][n] for r in rows):
        n += 1
    return n


def key_index(tokenizer, answer: str, keys: Sequence[str]) -> int | None:
    """Where the first of ``keys`` starts in ``answer``'s tokens (the token that begins its word), or
    None when the answer holds none or its tokens do not split there."""
    low = answer.lower()
    found = [low.find(k) for k in keys if k in low]
    if not found:
        return None
    head = tokenizer.encode(answer[: min(found)].rstrip(), add_special_tokens=False)
    full = tokenizer.encode(answer, add_special_tokens=False)
    return len(head) if len(head) < len(full) and full[: len(head)] == head else None


def greedy(model, prompts: Sequence[list[int]], max_new_tokens: int, stop_ids: Sequence[int],
           pad_id: int = 0) -> tuple[list[list[int]], list[bool]]:
    """Greedy continuations of ``prompts`` (one left-padded batch): their tokens before the first
    stop token, and whether one came."""
    import torch
    from transformers import GenerationConfig

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    # temperature / top_p / top_k: transformers' neutral values, stated: left unset they are the model's sampling
    # ones (smollm2-135m: 0.2 / 0.9), which greedy decoding ignores, with a "generation flags are not valid" warning
    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=list(stop_ids),
                           pad_token_id=pad_id, temperature=1.0, top_p=1.0, top_k=50)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)[:, width:].tolist()
    stops = set(stop_ids)
    responses, stopped = [], []
    for row in out:
        end = next((i for i, t in enumerate(row) if t in stops), None)
        responses.append(row if end is None else row[:end])
        stopped.append(end is not None)
    return responses, stopped


def snapshot(model, optimizer) -> Callable[[], None]:
    """Copy the trainable parameters and the optimizer state; the returned function puts them back."""
    import copy

    import torch

    params = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    state = copy.deepcopy(optimizer.state_dict())

    def restore() -> None:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in params:
                    p.copy_(params[n])
        optimizer.load_state_dict(state)

    return restore


# ---------------------------------------------------------------- the gate
class Canary:
    """Measures versions on the canary set and keeps the served version's figures (see the module doc)."""

    def __init__(self, config: CanaryConfig, tokenizer, store, run_dir: str | Path) -> None:
        from slime_ext.chat.prompt import PromptRenderer, stop_token_ids

        config.validate()
        self.config = config
        self.store = store
        self.status_path = Path(run_dir) / STATUS_FILE
        self.stop_ids = stop_token_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        renderer = PromptRenderer(tokenizer)
        end = [tokenizer.convert_tokens_to_ids("<|im_end|>")] if "<|im_end|>" in tokenizer.get_vocab() else list(self.stop_ids[:1])
        self.tokenizer = tokenizer
        self.questions = [renderer.render([{"role": "user", "content": q}], []) for q, _, _ in CANARY_QA]
        self.pairs = [(q, tokenizer.encode(a, add_special_tokens=False) + end)
                      for q, (_, a, _) in zip(self.questions, CANARY_QA)]
        self.keys = [k for _, _, k in CANARY_QA]
        self.facts = [q for q, _, _ in CANARY_QA]
        self.key_at = [key_index(tokenizer, a, k) for _, a, k in CANARY_QA]
        self.prompts: list[list[int]] = []
        self.before: CanaryFigures | None = None
        self.age = 0
        self.status = self._read_status()
        self.first = CanaryFigures(**self.status["first"]) if "first" in self.status else None
        # the facts the first version recalled (an older canary.json has none: counted from the served one)
        self.first_known: set[str] | None = set(self.status["first_known"]) if "first_known" in self.status else None

    def user_prompts(self) -> list[list[int]]:
        """The user's most recent distinct judged prompts (at most ``user_prompts``, none too long)."""
        chosen: list[list[int]] = []
        for row in self.store.recent_judged(8 * self.config.user_prompts):
            p = row["prompt_token_ids"]
            if len(chosen) == self.config.user_prompts:
                break
            if len(p) <= self.config.max_prompt_tokens and p not in chosen:
                chosen.append(p)
        return chosen

    def probe(self, model) -> tuple[CanaryFigures, set[str]]:
        """The canary figures of ``model`` on the current prompts, and the facts it recalls."""
        was_training = model.training
        model.eval()
        try:
            nll, recalled = reference_pass(model, self.pairs, self.key_at, NLL_REFERENCES, self.pad_id)
            responses, stopped = greedy(model, self.prompts, self.config.max_new_tokens, self.stop_ids, self.pad_id)
        finally:
            model.train(was_training)
        asked = min(self.config.prompts, len(self.questions))
        texts = [self.tokenizer.decode(r, skip_special_tokens=True) for r in responses[:asked]]
        known = {q for q, r in zip(self.facts, recalled) if r}
        return CanaryFigures(nll, *generation_figures(responses, stopped), answered(texts, self.keys[:asked]),
                             forgotten(self.first_known, known)), known

    def prepare(self, model) -> None:
        """Before a step: measure the served version (``model`` as it is) when there are no figures
        yet or its prompts are due to be re-chosen."""
        if self.before is not None and self.age < self.config.refresh_every:
            return
        self.prompts = self.questions[: self.config.prompts] + self.user_prompts()
        self.before, known = self.probe(model)
        self.age = 0
        if self.first is None:
            self.first = self.before
            self.status["first"] = asdict(self.first)
        if self.first_known is None:
            self.first_known = known
            self.status["first_known"] = sorted(known)

    def check(self, model, version: int) -> CanaryResult:
        """Measure the candidate ``version`` (``model`` after the step) against the served one; record it."""
        assert self.before is not None, "prepare() before check()"
        started = time.perf_counter()
        after, _ = self.probe(model)
        result = CanaryResult(self.before, after, regressions(self.before, after, self.config, self.first),
                              time.perf_counter() - started)
        if result.refused:
            log.warning("canary refused version %d: %s; the previous version keeps serving",
                        version, "; ".join(result.reasons))
        else:
            self.before, self.age = after, self.age + 1
        self.record(result, version)
        return result

    def _read_status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {"checks": 0, "refused": 0}

    def record(self, result: CanaryResult, version: int) -> None:
        """Write ``canary.json`` (atomically): counts, the last check, the last refusal."""
        entry = {"version": version, "accepted": not result.refused, "reasons": result.reasons, "at": time.time(),
                 "before": asdict(result.before), "after": asdict(result.after), "seconds": round(result.seconds, 3)}
        self.status["checks"] = self.status.get("checks", 0) + 1
        self.status["last"] = entry
        if result.refused:
            self.status["refused"] = self.status.get("refused", 0) + 1
            self.status["last_refusal"] = entry
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status))
        tmp.replace(self.status_path)


def brief(status: dict[str, Any]) -> dict[str, Any]:
    """``canary.json`` short, for ``/healthz``: the counts, how many canary facts the first version recalled, and
    the verdict of the last check and of the last refusal (version, accepted, reasons, when, how long). The
    figures and which facts stay in the file."""
    out = {k: status[k] for k in ("checks", "refused") if k in status}
    if "first_known" in status:
        out["first_recalled"] = len(status["first_known"])
    for key in ("last", "last_refusal"):
        if status.get(key):
            out[key] = {k: v for k, v in status[key].items() if k not in ("before", "after")}
    return out


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    """What the trainer's canary recorded in ``run_dir`` (None before its first check)."""
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
