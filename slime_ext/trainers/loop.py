"""The embedded trainer: judged turns from the store -> the learning pipeline -> an optimizer step -> a version.

One ``step()``, top to bottom:

1. size the step (``learning/select.py: step_size``): ``batch_size`` turns, more when a backlog waits;
2. read the waiting turns, ``select`` them (drops with reasons) and ``Pipeline.prepare`` them: the
   teacher's scores, the teacher check, groups, replay (``learning/pipeline.py``); record what it says
   (drops, teacher checks, teacher log-probs, turns whose preparation raised);
3. ``train``: optimizer passes (``trainers/step.py``, over ``learning/objective.py``), then the canary's
   verdict (``trainers/canary.py``): a refused update is undone; a refused catch-up step's turns are
   retried in regular steps, a regular one's are dropped with the refusal as their reason;
4. ``publish``: the new version's checkpoint (``trainers/checkpoints.py``), then the turns are marked
   ``trained_in_version``. A crash between the two is repaired by ``resume()``, which re-marks the turns
   listed in the latest checkpoint, so no turn is trained twice or lost.

A step that raises while preparing or training raises ``StepFailed`` with its turns; the process that
runs the trainer (``trainers/process.py``) counts it against them (``set_back``) and restarts: a turn in
two failed steps is set aside, so one turn can never stop learning (a turn whose own preparation raises
is counted the same way, and the step goes on without it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from slime_ext.algorithms import RunningBaseline
from slime_ext.algorithms.staleness import staleness_metrics
from slime_ext.learning.example import Example
from slime_ext.learning.objective import Objective, resolve_policy_loss
from slime_ext.learning.pipeline import Pipeline, Prepared, record, set_back
from slime_ext.learning.replay import replay_metrics
from slime_ext.learning.scorers import TorchScorer
from slime_ext.learning.select import select, step_size
from slime_ext.learning.settings import LearningConfig
from slime_ext.settings import flat_keys
from slime_ext.trainers import checkpoints
from slime_ext.trainers.canary import snapshot
from slime_ext.trainers.step import Batch, response_logprobs, train_step
from slime_ext.types import Baseline, Teacher

log = logging.getLogger(__name__)

@flat_keys
@dataclass
class TrainerConfig(LearningConfig):
    """The learning settings (``learning/settings.py``, declared there once) and what only the trainer has."""

    lora_alpha: int = 32
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"])
    micro_batch_size: int = 4


class StepFailed(RuntimeError):
    """A training step raised while preparing or training ``examples`` (nothing was published)."""

    def __init__(self, examples: list[Example], error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.examples = examples


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
    import warnings

    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing (a FutureWarning)
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                                target_modules=config.lora_targets, lora_dropout=0.0))


class InitialPolicy:
    """The model as it was before training: the KL reference and the default OPD teacher.

    With LoRA it is the model with its adapter disabled (no extra memory); with full weights, a
    frozen copy taken at construction (one more copy of the weights), made only when needed.
    """

    def __init__(self, model, config: TrainerConfig) -> None:
        self.model = model
        needed = bool(config.kl_coef) or (config.method.uses_hints and config.teacher is Teacher.BASE)
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
        if config.method.uses_hints and renderer is None:
            raise ValueError(f"method {config.method}: the trainer needs a PromptRenderer for the teacher prompts")
        if not config.learns:
            raise ValueError("method 'none' trains nothing: expected binary, opd or combine")
        config.validate()
        self.model = model
        self.store = store
        self.renderer = renderer  # renders the teacher's prompts (OPD / Combine)
        self.run_dir = Path(run_dir)
        self.config = config
        self.version = version
        self.pad_id = pad_id
        self.canary = canary  # a trainers.canary.Canary: gates each new version before it is saved
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
        self.objective = Objective.of(config)
        self.loss_fn = resolve_policy_loss(config.policy_loss)
        self.initial = InitialPolicy(model, config)
        self.reference = self.initial.batch_logprobs if config.kl_coef else None
        self.baseline = RunningBaseline() if config.baseline is Baseline.RUNNING else None
        from slime_ext.chat.prompt import stop_token_ids

        stops = stop_token_ids(renderer.tokenizer) if renderer is not None else []
        policy = TorchScorer.of(model, stops)
        teacher = TorchScorer(self.initial.weights, stops) if config.teacher is Teacher.BASE else policy
        # pi_old re-scored for every turn: the engine may serve in bfloat16 (docs/engine.md, "dtype")
        self.pipeline = Pipeline(config, renderer, store, policy=policy, teacher=teacher, context=self.context,
                                 rescore=True)

    @property
    def context(self) -> int:
        """The model's context length in tokens (0: unknown)."""
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    # ------------------------------------------------------------------ one step
    def step(self, started: Callable[[int], None] | None = None) -> dict[str, Any] | None:
        """Train once if enough usable turns wait (module docstring); the step's metrics, or None. ``started`` is
        told how many turns the step means to take once enough wait, before preparing them (the teacher's scoring
        and checks are part of the step), for what the server shows while it runs."""
        cfg = self.config
        size = step_size(self.store.waiting_turn_versions(), cfg.method, self.version, cfg.batch_size,
                         cfg.max_staleness)
        rows = self.store.trainable_turns(size.size * 4)
        candidates, dropped = select([Example.from_row(r) for r in rows], cfg.method, self.version)
        if started is not None and len(candidates) >= size.minimum:
            started(min(len(candidates), size.size))
        try:
            prepared = self.pipeline.prepare(candidates, size.size, size.minimum, self.version)
        except Exception as e:  # not one turn's own preparation: the step's
            raise StepFailed(candidates[: size.size], e) from e
        record(self.store, dropped, prepared)
        if not prepared.taken:
            return None
        try:
            metrics = self.train(prepared, size.waiting)
        except Exception as e:
            raise StepFailed(prepared.taken, e) from e
        return metrics if metrics.get("refused") else self.publish(prepared.taken, metrics)

    def train(self, prepared: Prepared, waiting: int) -> dict[str, Any]:
        """The optimizer passes over the prepared samples, then the canary's verdict (module docstring)."""
        restore = self._canary_prepare()
        started = time.perf_counter()
        baseline = self.baseline.value if self.baseline else 0.0  # from earlier batches only: unbiased
        metrics = self.passes(prepared, baseline)
        metrics.update(prepared.metrics, **self.turn_metrics(prepared.taken, waiting), baseline=baseline)
        if restore is not None and self.refused(prepared.taken, metrics, restore):
            return metrics
        if self.baseline:
            for ex in prepared.taken:
                self.baseline.update(ex.verdict)
        metrics["step_s"] = time.perf_counter() - started
        return metrics

    def passes(self, prepared: Prepared, baseline: float) -> dict[str, Any]:
        """``replay_steps`` optimizer passes over the samples (no new one once ``replay_budget_s`` is spent; the
        first always runs); the last pass's metrics, with the replay's when replay is on."""
        cfg, started, passes = self.config.replay, time.perf_counter(), 0
        while True:
            metrics = train_step(self.model, self.optimizer, prepared.samples, self.objective,
                                 micro_batch_size=self.config.micro_batch_size, pad_id=self.pad_id,
                                 reference=self.reference, baseline=baseline, loss_fn=self.loss_fn)
            passes += 1
            if passes >= cfg.steps or time.perf_counter() - started >= cfg.budget_s:
                break
        if cfg.turns or cfg.steps > 1:
            metrics.update(replay_metrics(prepared.replayed, prepared.replay_skipped, passes,
                                          time.perf_counter() - started))
        return metrics

    def turn_metrics(self, taken: list[Example], waiting: int) -> dict[str, Any]:
        """The step's turns: how many (corrected: verdict -1, approved: +1), their tokens, mean verdict and
        staleness; turns that waited."""
        return dict(turns=len(taken), waiting=waiting, reward_mean=sum(ex.verdict for ex in taken) / len(taken),
                    corrected_turns=sum(ex.verdict < 0 for ex in taken), approved_turns=sum(ex.verdict > 0 for ex in taken),
                    response_tokens=sum(len(ex.response_ids) for ex in taken),
                    **staleness_metrics([self.version - ex.policy_version for ex in taken], self.config.max_staleness))

    def publish(self, taken: list[Example], metrics: dict[str, Any]) -> dict[str, Any]:
        """Write the new version's checkpoint, then mark its turns trained in it."""
        self.version += 1
        keys = [ex.key for ex in taken]
        state = {"turns": keys, "metrics": metrics, "baseline": vars(self.baseline) if self.baseline else None}
        path = checkpoints.write(self.run_dir, self.version, self.model, self.optimizer, state)
        self.store.mark_trained(keys, self.version)
        checkpoints.prune(self.run_dir, self.config.keep_checkpoints)
        return {**metrics, "version": self.version, "checkpoint": str(path)}

    # ------------------------------------------------------------------ the canary
    def _canary_prepare(self) -> Callable[[], None] | None:
        """With a canary: the served version's figures (once), and a snapshot to undo the step with."""
        if self.canary is None:
            return None
        self.canary.prepare(self.model)
        return snapshot(self.model, self.optimizer)

    def refused(self, taken: list[Example], metrics: dict[str, Any], restore: Callable[[], None]) -> bool:
        """The canary's verdict on the updated model, before anything is saved. A refused update is undone
        (weights and optimizer state as before the step) and no version is published: the served one stays.
        A catch-up step's turns are retried in regular steps (``learning/select.py``); a regular step's are
        dropped with the refusal as their reason (``records``), so a refusal costs at most a batch."""
        result = self.canary.check(self.model, self.version + 1)
        metrics.update(result.metrics())
        if not result.refused:
            return False
        restore()
        why = f"canary refused: version {self.version + 1}: " + "; ".join(result.reasons)
        keys = [ex.key for ex in taken]
        if len(keys) > self.config.batch_size:
            self.store.record_setback(keys, "refusals", why)
            metrics["retried_turns"] = len(keys)
        else:
            for session_id, turn in keys:
                self.store.mark_dropped(session_id, turn, why)
        metrics.update(version=self.version, refused=why)
        return True

    # ------------------------------------------------------------------ setbacks and resume
    def set_back(self, examples: list[Example], error: str) -> list[Example]:
        """A step raised with these turns (``learning/pipeline.py: set_back``); returns those set aside."""
        return set_back(self.store, examples, error)

    def resume(self) -> int:
        """Re-mark the turns of the latest checkpoint and return its version (0 when none). An optimizer state
        that cannot be read is logged and started afresh: the weights are what matter."""
        found = checkpoints.latest(self.run_dir)
        if found is None:
            return 0
        path = found[1]
        state = checkpoints.read_state(path)
        checkpoints.load_weights(self.model, path)
        self.store.mark_trained([tuple(k) for k in state["turns"]], state["version"])
        try:
            checkpoints.load_optimizer(self.optimizer, path)
        except Exception as e:
            log.error("version %d's optimizer state could not be read (%s: %s): starting it afresh",
                      state["version"], type(e).__name__, e)
        if self.baseline and state.get("baseline"):
            self.baseline = RunningBaseline(**state["baseline"])
        self.version = state["version"]
        return self.version
