"""The embedded trainer (Binary RL, OPD, Combine): judged turns from the store -> optimizer step -> checkpoint.

One ``step()``: take ``batch_size`` judged, untrained turns, or more when a backlog waits
(``catchup_size``: enough that no waiting turn is trained more than ``max_staleness`` versions
after it was sampled); drop (with a stored reason) those without a training signal for the method
(a zero verdict for Binary RL, no hint for OPD, neither for Combine), never a turn for its age
(the policy loss corrects it with its recorded log-probs under a capped ratio); score the hinted ones with
the teacher (``slime_ext.teacher``; its log-probs are stored for ``records``); train on the rest
with ``train_step``; write the new version's checkpoint (adapter or weights, optimizer state, the
turns it used); then mark those turns ``trained_in_version``. A crash between the
checkpoint and the marking is repaired by ``resume()``, which re-marks the turns listed in the
latest checkpoint, so no turn is trained twice or lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from slime_ext.algorithms import PolicyLossConfig, RunningBaseline, staleness_filter
from slime_ext.algorithms.staleness import catchup_size, staleness_metrics
from slime_ext.algorithms.topk import teacher_topk
from slime_ext.algorithms.topk_select import select_support
from slime_ext.judge.hints import candidate_hints, parse_hint
from slime_ext.logprobs import scoring_temperature, teacher_forced_log_softmax, teacher_forced_logits
from slime_ext.teacher import teacher_prompt_ids
from slime_ext.trainers.canary import CanaryConfig, snapshot
from slime_ext.trainers.groups import build_group, demonstration
from slime_ext.trainers.learning import LearningConfig
from slime_ext.trainers.replay import replay_metrics, replay_rows, replay_samples
from slime_ext.trainers.step import Batch, resolve_policy_loss, response_logprobs, train_step
from slime_ext.trainers.teachability import TeachabilityConfig, TeacherChecker, excluded
from slime_ext.types import Method, Sample, TrainingRow

log = logging.getLogger(__name__)


@dataclass
class TrainerConfig(LearningConfig):
    """The learning settings (``trainers/learning.py``, declared there once) and what only the trainer has."""

    lora_alpha: int = 32
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"])
    micro_batch_size: int = 4
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    canary: CanaryConfig = field(default_factory=CanaryConfig)  # used when the trainer is given a Canary
    # does the hinted teacher follow each hint, and what an unfollowed one gets (trainers/teachability.py)
    teacher_check: TeachabilityConfig = field(default_factory=TeachabilityConfig)

    def validate(self) -> None:
        """Raise ValueError naming the setting that cannot work."""
        super().validate()
        self.teacher_check.validate()


def no_signal(method: str, row: TrainingRow) -> str | None:
    """Why a judged turn gives ``method`` nothing to learn from, or None when it does."""
    has_hint, m = row.get("hint") is not None, Method.parse(method)
    if m is Method.BINARY and row["verdict"] == 0:
        return "verdict 0 (ambiguous): no training signal"
    if m is Method.OPD and not has_hint:
        return "no hint: nothing to distill" if row.get("hint_judged_at") else "no hint: not judged for hints"
    if m is Method.COMBINE and row["verdict"] == 0 and not has_hint:
        return "verdict 0 and no hint: no training signal"
    return None


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint (``checkpoints/v<N>``; unfinished ones are ``.v<N>.tmp``).

    Only the newest is guaranteed to hold weights: older ones may be pruned to their trainer state.
    """
    done = sorted((Path(run_dir) / "checkpoints").glob("v*"))
    if not done:
        return None
    return int(done[-1].name[1:]), done[-1]


def select_turns(store, rows: list[TrainingRow], method: str, version: int, n: int,
                 check: Callable[[dict[str, Any]], str | None] | None = None) -> list[dict[str, Any]]:
    """Up to ``n`` of ``rows`` with a training signal for ``method``, whatever their age (both drivers
    use this rule); refused rows are marked dropped with their reason. ``version``: the trainer's
    (a turn sampled by a newer one is refused). ``check(row)`` (costly: the teacher pass) runs only
    once ``n`` candidates exist, and only on the rows about to be taken; it may refuse one too."""
    candidates = []
    newer = staleness_filter([r["policy_version"] for r in rows], version)
    for row, why in zip(rows, newer):
        why = why or no_signal(method, row)
        if why is not None:
            store.mark_dropped(row["session_id"], row["idx"], why)
        else:
            candidates.append(row)
    if check is None or len(candidates) < n:
        return candidates[:n]
    usable: list[dict[str, Any]] = []
    for row in candidates:
        if len(usable) == n:
            break
        why = check(row)
        if why is not None:
            store.mark_dropped(row["session_id"], row["idx"], why)
        else:
            usable.append(row)
    return usable


def sampled_temperature(row: TrainingRow) -> float | None:
    """The temperature a recorded turn was sampled at (its ``sampling``; 0 is greedy), None if unknown."""
    return (row.get("sampling") or {}).get("temperature")


def turn_to_sample(row: TrainingRow) -> Sample:
    """A judged turn as a Slime ``Sample``: exactly the recorded tokens and log-probs (and the
    teacher's, when the turn has them), and the temperature it was sampled at
    (``metadata["temperature"]``), which its log-probs are taken at in training."""
    response = row["response_token_ids"]
    return Sample(
        tokens=row["prompt_token_ids"] + response,
        response_length=len(response),
        loss_mask=[1] * len(response),
        rollout_log_probs=row["response_logprobs"],
        teacher_log_probs=row.get("teacher_logprobs"),
        reward=float(row["verdict"]),
        session_id=row["session_id"],
        metadata={"session_id": row["session_id"], "turn": row["idx"], "user": row.get("user"),
                  "teacher_topk": row.get("teacher_topk"),
                  "policy_version": row["policy_version"], "policy_version_end": row["policy_version_end"],
                  "temperature": sampled_temperature(row)},
    )


def group_metrics(groups: list[dict[str, Any]], samples: list[Sample]) -> dict[str, Any]:
    """A step's group metrics: groups formed, constant ones (no RL term), fresh samples and their
    mean implicit reward, each group's record (its rewards and why it was dropped, if it was), and
    the context-distillation samples and tokens."""
    fresh = [float(s.reward) for s in samples if (s.metadata or {}).get("fresh")]
    sft = [s.response_length for s in samples if (s.metadata or {}).get("sft")]
    out = {"sft_samples": len(sft), "sft_tokens": sum(sft)} if sft else {}
    if groups:
        out.update(groups=len(groups), constant_groups=sum(g["dropped"] is not None for g in groups),
                   fresh_samples=len(fresh), fresh_reward_mean=sum(fresh) / len(fresh) if fresh else 0.0,
                   group_records=groups)
    return out


def recompute_activations(model) -> None:
    """Recompute each layer's activations in the backward pass instead of keeping them all: the trainer's
    memory then grows with one layer's activations, not every layer's (measured on smollm2 with one
    4.6k-token agent episode: 14.5 GB peak without, 7.8 GB with, 25% slower)."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers' new name (the old one warns)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def wrap_lora(model, config: TrainerConfig):
    """The model to train: a peft LoRA wrapper, or the model itself for full-weight training."""
    if config.lora_rank <= 0:
        return model
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                            target_modules=config.lora_targets, lora_dropout=0.0))


class InitialPolicy:
    """The model as it was before training: the KL reference and the default OPD teacher.

    With LoRA it is the model with its adapter disabled (no extra memory); with full weights, a
    frozen copy taken at construction (one more copy of the weights), made only when needed.
    """

    def __init__(self, model, config: TrainerConfig) -> None:
        self.model = model
        needed = bool(config.loss.kl_coef) or (Method.parse(config.method).uses_hints and config.teacher == "base")
        self.frozen = None
        if config.lora_rank <= 0 and needed:
            import copy

            self.frozen = copy.deepcopy(model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def weights(self):
        if self.frozen is not None:
            yield self.frozen
        else:
            with self.model.disable_adapter():
                yield self.model

    def batch_logprobs(self, batch: Batch) -> torch.Tensor:
        with self.weights() as m:
            return response_logprobs(m, batch)


class OnlineTrainer:
    def __init__(self, model, store, run_dir: str | Path, config: TrainerConfig, version: int = 0,
                 pad_id: int = 0, renderer=None, canary=None) -> None:
        self.model = model
        self.canary = canary  # a trainers.canary.Canary: gates each new version before it is saved
        self.renderer = renderer  # a PromptRenderer for the teacher's prompts (OPD / Combine)
        if Method.parse(config.method).uses_hints and renderer is None:
            raise ValueError(f"method {config.method}: the trainer needs a PromptRenderer for the teacher prompts")
        _ = config.weights  # validates the method
        config.validate()
        self.store = store
        self.config = config
        self.version = version
        self.pad_id = pad_id
        self.checkpoints = Path(run_dir) / "checkpoints"
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
        self.initial = InitialPolicy(model, config)
        self.reference = self.initial.batch_logprobs if config.loss.kl_coef else None
        self.loss_fn = resolve_policy_loss(config.policy_loss)
        self.baseline = RunningBaseline() if config.baseline == "running" else None
        self.teacher_s = 0.0
        self.checker: TeacherChecker | None = None  # made at the first hinted turn (trainers/teachability.py)
        self.check_s, self.unfollowed = 0.0, 0  # this step's teachability checks: seconds, hints not followed

    @property
    def context(self) -> int:
        """The model's context length in tokens (0: unknown)."""
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    def step_size(self) -> tuple[int, int]:
        """How many turns the next step takes (``catchup_size`` of the waiting turns with a signal),
        and how many such turns wait."""
        waiting = [r for r in self.store.waiting_turn_versions() if no_signal(self.config.method, r) is None]
        ages = [self.version - r["policy_version"] for r in waiting]
        return catchup_size(ages, self.config.batch_size, self.config.max_staleness), len(waiting)

    def step(self) -> dict[str, Any] | None:
        """Train once if ``batch_size`` usable turns are waiting (more when a backlog waits: ``step_size``);
        returns the step's metrics."""
        n, waiting = self.step_size()
        self.check_s, self.unfollowed = 0.0, 0
        rows = self.store.trainable_turns(n * 4)
        usable = select_turns(self.store, rows, self.config.method, self.version, n, check=self._teach)
        if len(usable) < self.config.batch_size:
            return None
        restore = self._canary_prepare()
        started = time.perf_counter()
        samples, groups = self.grouped([turn_to_sample(r) for r in usable], usable)
        baseline = self.baseline.value if self.baseline else 0.0  # from earlier batches only: unbiased
        pairs = replay_rows(self.store, usable, self.config.replay.turns, keep=self.replays_hint)
        replayed, skipped = replay_samples(pairs, self._score, turn_to_sample)  # not stored: a turn keeps its own teacher's
        metrics = self._passes(samples + replayed, baseline, replayed, skipped)
        metrics.update(group_metrics(groups, samples))
        if self.checker is not None:
            metrics.update(teacher_check_s=self.check_s, hints_unfollowed=self.unfollowed)
        if restore is not None and self._canary_refused(usable, metrics, restore):
            return metrics
        if self.baseline:
            for r in usable:
                self.baseline.update(r["verdict"])
        metrics["baseline"] = baseline
        selected = [r["topk_select"] for r in usable if r.get("topk_select")]
        if selected:  # distill topk_select: each turn's candidates, overlap sums and positions each taught
            metrics["topk_select"] = selected
        hinted = [r for r in usable if r.get("teacher_logprobs")]
        if hinted:
            gaps = [t - o for r in hinted for t, o in zip(r["teacher_logprobs"], r["response_logprobs"])]
            metrics["teacher_gap_mean"] = sum(gaps) / len(gaps)
        metrics.update(turns=len(usable), hinted_turns=len(hinted), waiting=waiting,
                       reward_mean=sum(r["verdict"] for r in usable) / len(usable),
                       response_tokens=sum(len(r["response_token_ids"]) for r in usable),
                       **staleness_metrics([self.version - r["policy_version"] for r in usable],
                                           self.config.max_staleness))
        self.version += 1
        metrics["step_s"] = time.perf_counter() - started
        keys = [(r["session_id"], r["idx"]) for r in usable]
        path = self.save(keys, metrics)
        self.store.mark_trained(keys, self.version)
        self.prune()
        metrics.update(version=self.version, checkpoint=str(path))
        return metrics

    def _passes(self, samples: list[Sample], baseline: float, replayed: list[Sample], skipped: list[str]) -> dict[str, Any]:
        """``replay.steps`` optimizer passes over ``samples`` (no new one once ``replay.budget_s`` is
        spent; the first always runs); the last pass's metrics, with the replay's when replay is on."""
        cfg, started, passes = self.config.replay, time.perf_counter(), 0
        while True:
            metrics = train_step(self.model, self.optimizer, samples, self.config.loss,
                                 micro_batch_size=self.config.micro_batch_size, pad_id=self.pad_id,
                                 reference=self.reference, baseline=baseline, weights=self.config.weights,
                                 topk_coef=self.config.topk_coef, topk=self.config.topk,
                                 divergence=self.config.divergence, beta=self.config.jsd_beta,
                                 loss_fn=self.loss_fn)
            passes += 1
            if passes >= cfg.steps or time.perf_counter() - started >= cfg.budget_s:
                break
        if cfg.turns or cfg.steps > 1:
            metrics.update(replay_metrics(replayed, skipped, passes, time.perf_counter() - started))
        return metrics

    def _canary_prepare(self) -> Callable[[], None] | None:
        """With a canary: the served version's figures (once), and a snapshot to undo the step with."""
        if self.canary is None:
            return None
        self.canary.prepare(self.model)
        return snapshot(self.model, self.optimizer)

    def _canary_refused(self, rows: list[TrainingRow], metrics: dict[str, Any], restore: Callable[[], None]) -> bool:
        """The canary's verdict on the updated model, before anything is saved. A refused update is
        undone (weights and optimizer state as before the step), its turns are dropped with the
        reason, and no version is published: the served one stays."""
        result = self.canary.check(self.model, self.version + 1)
        metrics.update(result.metrics())
        if not result.refused:
            return False
        restore()
        why = f"canary refused: version {self.version + 1}: " + "; ".join(result.reasons)
        for r in rows:
            self.store.mark_dropped(r["session_id"], r["idx"], why)
        metrics.update(version=self.version, turns=len(rows), refused=why)
        return True

    def grouped(self, samples: list[Sample], rows: list[TrainingRow]) -> tuple[list[Sample], list[dict[str, Any]]]:
        """``samples`` with each hinted turn's fresh group members added (``group_size`` > 1) and its
        context-distillation samples (``sft_coef`` > 0), and a record of each group
        (``trainers/groups.py``). Unhinted turns stay groups of one."""
        if self.config.group_size <= 1 and not self.config.sft_coef:
            return samples, []
        from slime_ext.chat.prompt import stop_token_ids

        out, records = [], []
        context = self.context
        for sample, row in zip(samples, rows):
            if not row.get("teacher_prompt_ids"):
                out.append(sample)
                continue
            seed = zlib.crc32(f"{self.version}:{row['session_id']}:{row['idx']}".encode())  # reproducible
            device = next(self.model.parameters()).device  # the generator must be where the sampling happens
            generator, stops = torch.Generator(device).manual_seed(seed), stop_token_ids(self.renderer.tokenizer)
            if self.config.group_size > 1:
                members, record = build_group(self.model, row, sample, self._teacher_scores, self.config.groups,
                                              stop_ids=stops, version=self.version, context=context, generator=generator)
                out.extend(members)
                records.append(record)
            else:
                out.append(sample)
            for _ in range(self.config.sft_samples if self.config.sft_coef else 0):
                with self._teacher_weights() as teacher:
                    demo = demonstration(teacher, row, self.model, self.config.groups, self.config.sft_coef,
                                         stop_ids=stops, version=self.version, context=context, generator=generator)
                out.extend([demo] if demo is not None else [])
        return out, records

    def _teach(self, row: TrainingRow) -> str | None:
        """Score a hinted row with the teacher (OPD / Combine) before it is taken; why not, or None."""
        if row.get("hint") and Method.parse(self.config.method).uses_hints:
            return self.score_with_teacher(row) or self.select_hint(row) or self.check_teacher(row)
        return None

    def select_hint(self, row: TrainingRow) -> str | None:
        """``distill: topk_select``: score each candidate hint's teacher and pi_old (the policy now) on the
        recorded response, choose by overlap and fix the support and its advantages
        (``algorithms/topk_select.py``); the turn's teacher log-probs become the chosen candidate's at each
        position. Its teacher prompt stays the accepted hint's (fresh group members' implicit rewards and
        the teacher check use it). Why not, or None."""
        if self.config.distill != "topk_select":
            return None
        texts = self.store.hint_vote_texts(row["session_id"], row["idx"]) if self.config.hint_m > 1 else []
        hints = candidate_hints(row["hint"], [parse_hint(t) for t in texts], self.config.hint_m)
        temperature = scoring_temperature(sampled_temperature(row))
        response = row["response_token_ids"]
        kept = []  # (hint, teacher prompt) of the candidates that render within the context
        for hint in hints:
            prompt, why = self._teacher_prompt(row, hint)
            if why is None:
                kept.append((hint, prompt))
            elif not prompt:  # a template that cannot render it: not a candidate (too long: silently)
                log.warning("candidate hint %r: %s", hint, why)
        hints, prompts = [h for h, _ in kept], [p for _, p in kept]
        if not prompts:
            return "topk_select: no candidate hint's teacher prompt could be rendered within the context"
        teachers = torch.stack([torch.log_softmax(self._teacher_logits(p + response, len(p), temperature), -1)
                                for p in prompts])  # [H, r, V]
        student = teacher_forced_log_softmax(self.model, row["prompt_token_ids"] + response,
                                             len(row["prompt_token_ids"]), temperature)
        cfg = self.config
        chosen = select_support(student, teachers, cfg.topk, cfg.topk_select_rule, cfg.topk_support, cfg.opd_clip)
        picked = teachers.gather(0, chosen.choice.view(1, -1, 1).expand(1, *teachers.shape[1:]))[0]
        row["teacher_logprobs"] = picked.gather(1, torch.tensor(response)[:, None])[:, 0].tolist()
        row["teacher_topk"] = chosen.support
        row["topk_select"] = {"session_id": row["session_id"], "turn": row["idx"], "candidates": hints,
                              "chosen": torch.bincount(chosen.choice, minlength=len(prompts)).tolist(),
                              "overlap": chosen.overlap.sum(-1).tolist()}
        self.store.set_teacher_logprobs(row["session_id"], row["idx"], row["teacher_logprobs"])
        return None

    def replays_hint(self, hint: str) -> bool:
        """Whether replay teaches ``hint``: not when the teacher check found the teacher does not follow it
        (unless ``unfollowed: train``); a hint not measured yet is replayed."""
        if self.checker is None or self.config.teacher_check.unfollowed == "train":
            return True
        return self.checker.follows(hint) is not False

    def check_teacher(self, row: TrainingRow) -> str | None:
        """Does the hinted teacher follow the row's hint (``trainers/teachability.py``)? Stores the check;
        an unfollowed hint loses its teacher term (``unfollowed: skip``). Why the turn is dropped, or None."""
        if not self.config.teacher_check.enabled:
            return None
        if self.checker is None:
            from slime_ext.chat.prompt import stop_token_ids

            tokenizer = self.renderer.tokenizer
            self.checker = TeacherChecker(self.config.teacher_check, tokenizer, stop_token_ids(tokenizer))
        context = self.context
        with self._teacher_weights() as m:
            check = self.checker.check(m, row["prompt_token_ids"], row["teacher_prompt_ids"], row["hint"],
                                       context)
        self.check_s += check.seconds
        self.unfollowed += not check.follows
        self.store.record_teacher_check(row["session_id"], row["idx"], row["hint"], check.record())
        strip, why = excluded(self.config.method, row["verdict"], check, self.config.teacher_check)
        if strip:  # trained like an unhinted turn: no teacher term, no group, no demonstration
            row.update(teacher_logprobs=None, teacher_topk=None, teacher_prompt_ids=None)
        return why

    def score_with_teacher(self, row: TrainingRow) -> str | None:
        """Set ``row["teacher_logprobs"]`` (and store them; ``topk_select``: ``select_hint`` stores the chosen
        candidates' instead); return why not when that is impossible."""
        why = self._score(row, row["hint"])
        if why is None and self.config.distill != "topk_select":
            self.store.set_teacher_logprobs(row["session_id"], row["idx"], row["teacher_logprobs"])
        return why

    def _score(self, row: TrainingRow, hint: str | list[str]) -> str | None:
        """Set ``row``'s teacher log-probs, top-k and prompt ids under ``hint`` (one, or several: a
        user's preferences); return why not when that is impossible."""
        prompt, why = self._teacher_prompt(row, hint)
        if why is not None:
            return why
        started = time.perf_counter()
        row["teacher_logprobs"], row["teacher_topk"] = self._teacher_scores(
            prompt, row["response_token_ids"], scoring_temperature(sampled_temperature(row)))  # the student's temperature
        row["teacher_prompt_ids"] = prompt
        self.teacher_s = time.perf_counter() - started
        return None

    def _teacher_prompt(self, row: TrainingRow, hint: str | list[str]) -> tuple[list[int], str | None]:
        """``row``'s teacher prompt ids under ``hint``, and why it cannot be used (None when it can): a
        template that cannot render it, or no room for the response within the context."""
        try:
            prompt = teacher_prompt_ids(self.renderer, row["messages"], hint, row.get("tools"), row.get("tool_choice"),
                                        (row.get("sampling") or {}).get("chat_template_kwargs"))
        except Exception as e:  # a template that cannot render it: the turn cannot be distilled under it
            return [], f"teacher prompt could not be rendered: {type(e).__name__}: {str(e)[:100]}"
        context, response = self.context, row["response_token_ids"]
        if context and len(prompt) + len(response) > context:
            return prompt, f"teacher prompt too long: {len(prompt)} + {len(response)} tokens > context {context}"
        return prompt, None

    def _teacher_scores(self, prompt: list[int], response: list[int], temperature: float = 1.0) -> tuple[list[float], Any]:
        """The teacher's log-probs of ``response`` after its (hinted) ``prompt`` at ``temperature`` (the
        one the student's log-probs of it are taken at), from one pass, and what the distillation term
        needs: its top-k (ids, log-probs ``[r, k]``), its full log-probs ``[r, V]`` (student-top-k
        support), or None (token-level distillation)."""
        logits = self._teacher_logits(prompt + response, len(prompt), temperature)  # [r, V]
        logprobs = torch.log_softmax(logits, -1)
        values = logprobs.gather(1, torch.tensor(response)[:, None])[:, 0].tolist()
        if self.config.distill in ("token", "topk_select"):  # topk_select: the turn's own in select_hint
            return values, None
        if self.config.topk_support == "student":
            return values, logprobs  # for this step only
        top = teacher_topk(logits[None], self.config.topk)
        return values, (top.ids[0], top.logprobs[0])

    def _teacher_logits(self, ids: list[int], start: int, temperature: float = 1.0) -> torch.Tensor:
        """Teacher-forced logits under the teacher (the initial policy or the current one), divided by
        ``temperature``."""
        with self._teacher_weights() as m:
            return teacher_forced_logits(m, ids, start, temperature)

    @contextlib.contextmanager
    def _teacher_weights(self):
        """The teacher's weights: the initial policy (``teacher: base``) or the current one."""
        if self.config.teacher == "base":
            with self.initial.weights() as m:
                yield m
        else:
            yield self.model

    def save(self, keys: list[tuple[str, int]], metrics: dict[str, Any] | None = None) -> Path:
        """Write ``checkpoints/v<version>`` atomically (temp dir, then rename)."""
        final = self.checkpoints / f"v{self.version:06d}"
        tmp = self.checkpoints / f".v{self.version:06d}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(tmp)  # a peft adapter, or full weights
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        state = {"version": self.version, "turns": keys, "metrics": metrics or {}, "saved_at": time.time(),
                 "baseline": vars(self.baseline) if self.baseline else None}
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        tmp.rename(final)
        return final

    def prune(self) -> None:
        """Delete the weights and optimizer state of all but the newest ``keep_checkpoints`` versions.

        Their ``trainer_state.json`` (the turns each version trained on, its metrics) stays as the
        run's audit trail; resume and the server only ever read the newest version.
        """
        keep = self.config.keep_checkpoints
        if keep <= 0:
            return
        for old in sorted(self.checkpoints.glob("v*"))[:-keep]:
            for f in old.iterdir():
                if f.name != "trainer_state.json":
                    f.unlink()

    def load_weights(self, path: Path) -> None:
        """Load a checkpoint written by ``save`` (read the way the engine reads it for a swap)."""
        from slime_ext.engines.local import LoraUpdate, load_weights

        update = load_weights(path)
        if isinstance(update, LoraUpdate):
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, update.tensors)
        else:
            self.model.load_state_dict(update, strict=False)

    def resume(self) -> int:
        """Re-mark the turns of the latest checkpoint and return its version (0 when none)."""
        found = latest_checkpoint(self.checkpoints.parent)
        if found is None:
            return 0
        path = found[1]
        state = json.loads((path / "trainer_state.json").read_text())
        self.load_weights(path)
        self.store.mark_trained([tuple(k) for k in state["turns"]], state["version"])
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt"))
        if self.baseline and state.get("baseline"):
            self.baseline = RunningBaseline(**state["baseline"])
        self.version = state["version"]
        return self.version
