"""The learning pipeline: judged turns chosen for a step -> the samples the optimizer sees.

One example, top to bottom (``Pipeline.prepare``):

    Example.from_row(store row)                 learning/example.py   (the driver reads the store)
    select(...) -> candidates, drops            learning/select.py    (the driver writes the drops)
    for each candidate, until the step is full:
        student: a turn served with the preference memory, without it (its pi_old and verdict weights); with
                 ``rescore`` (the embedded trainer) every other turn's pi_old too     learning/memory.py
        teach: the teacher's log-probs under the hint (topk_select: of each candidate hint; an unhinted turn
               its top-K term against the unhinted teacher, as upstream)
                                                learning/teacher.py
        check: does the teacher follow the hint; an unfollowed one is dropped or loses its term
                                                learning/teachability.py
    groups: fresh samples and their implicit rewards; context-distillation demonstrations
                                                learning/groups.py
    replay: each user's earlier turns under all of their standing preferences
                                                learning/replay.py
    -> Prepared: one group of samples per taken turn, the replayed samples, and what to record
    advantages and the loss over them           learning/objective.py (the driver's step calls it)

The stages never write: ``Prepared`` says what the driver records, with ``record`` (drops with their
reasons, teacher checks, teacher log-probs) and ``set_back`` (turns whose preparation, or whose step,
raised: counted, and set aside at the second time so that one turn can never stop learning). The same pipeline runs in the embedded
trainer (``trainers/loop.py``, torch ``Scorer``s) and in Slime's rollout hook (``hooks/rollout.py``,
``EngineScorer``s on SGLang); a setting one of them cannot honour is refused when it starts.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from typing import Any

from slime_ext.judge.backends import error_text
from slime_ext.judge.hints import candidate_hints, parse_hint
from slime_ext.learning.example import Example, Key
from slime_ext.learning.groups import build_group, demonstration
from slime_ext.learning.memory import student_example
from slime_ext.learning.replay import replay_examples, replay_sample
from slime_ext.learning.scorers import Scorer
from slime_ext.learning.select import Drop
from slime_ext.learning.settings import LearningConfig
from slime_ext.learning.teachability import TeacherChecker, excluded
from slime_ext.learning.teacher import TeacherTerm, teach, teach_candidates, teacher_prompt
from slime_ext.types import Distill, Method, Sample, Unfollowed

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What ``Pipeline.prepare`` made of one step's candidates."""

    taken: list[Example] = field(default_factory=list)  # the judged turns the step trains on
    groups: list[list[Sample]] = field(default_factory=list)  # per taken turn: its sample, then fresh ones
    group_records: list[dict[str, Any]] = field(default_factory=list)  # each group's rewards (and why dropped)
    replayed: list[Sample] = field(default_factory=list)
    replay_skipped: list[str] = field(default_factory=list)  # earlier turns replay could not teach, and why
    dropped: list[Drop] = field(default_factory=list)
    failed: list[tuple[Example, str]] = field(default_factory=list)  # preparing the turn raised (and the error)
    checks: list[tuple[Key, str, dict[str, Any]]] = field(default_factory=list)  # teacher checks to store
    scored: list[tuple[Key, list[float]]] = field(default_factory=list)  # teacher log-probs to store
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> list[Sample]:
        """Everything the optimizer sees, groups in order, then the replayed turns."""
        return [s for group in self.groups for s in group] + self.replayed


class Pipeline:
    """The stages over one driver's scorers: ``policy`` (the current weights: fresh samples, pi_old) and
    ``teacher`` (the weights shown the hint). ``store`` is only read (hint votes, preferences, earlier turns).
    ``rescore``: every turn's pi_old is the policy's, not the recorded log-probs (the embedded trainer, whose
    engine may compute in another dtype; on Slime, ``TIS_CAP`` corrects that gap in Megatron instead)."""

    def __init__(self, config: LearningConfig, renderer, store, *, policy: Scorer, teacher: Scorer,
                 context: int = 0, rescore: bool = False) -> None:
        self.config = config
        self.rescore = rescore
        self.renderer = renderer
        self.store = store
        self.policy = policy
        self.teacher = teacher
        self.context = context
        self.term = TeacherTerm(config.distill, config.distill_topk, config.distill_support, config.topk_select_rule,
                                config.distill_clip)
        self.checker = TeacherChecker(config.teacher_check, renderer.tokenizer) if renderer is not None else None

    def prepare(self, candidates: list[Example], size: int, minimum: int, version: int) -> Prepared:
        """Up to ``size`` of ``candidates`` taught and checked, grouped, with the replayed turns; nothing is
        taken when fewer than ``minimum`` could be (the drops and checks are still returned)."""
        out = Prepared()
        if len(candidates) < minimum:
            return out
        for ex in candidates:
            if len(out.taken) == size:
                break
            try:
                ex, why = self.teach(ex, out)
            except Exception as e:  # this turn's preparation raised: the driver counts it (set aside twice)
                out.failed.append((ex, error_text(e)))
                continue
            (out.dropped.append((ex.key, why)) if why else out.taken.append(ex))
        for ex in list(out.taken) if len(out.taken) >= minimum else []:
            try:
                out.groups.append(self.group(ex, version, out))
            except Exception as e:
                out.taken.remove(ex)
                out.failed.append((ex, error_text(e)))
        if len(out.taken) < minimum:
            out.taken, out.groups = [], []
            return out
        out.replayed = self.replay(out)
        out.metrics = self.metrics(out)
        return out

    # ------------------------------------------------------------------ teach and check
    def teach(self, ex: Example, out: Prepared) -> tuple[Example, str | None]:
        """The student without the memory, the teacher stage and the teacher check for one example (the teacher
        under OPD / Combine, for a hinted example or one served with the memory; with ``distill: topk_select``, for
        a verdict alone too, against the unhinted teacher); why it is dropped."""
        ex, method = self.student(ex), self.config.method
        if not method.uses_hints:
            return ex, None
        hints = self.hints_of(ex)
        if not hints:  # a verdict alone (Combine), or a memory turn whose preferences the teacher follows none of
            if ex.memory and (method is Method.OPD or not ex.verdict):
                return ex, "served with the memory, but the teacher follows none of its preferences: nothing to distill"
            if self.config.distill is Distill.TOPK_SELECT:  # upstream: the top-K term against the unhinted teacher too
                return teach_candidates(ex, [()], renderer=self.renderer, teacher=self.teacher, policy=self.policy,
                                        term=self.term, context=self.context)
            return ex, None
        if self.config.distill is Distill.TOPK_SELECT:
            memory = [h for h in hints if h != ex.hint]
            candidates = [[*memory, h] for h in self.candidate_hints(ex)] if ex.hint else [memory]
            ex, why = teach_candidates(ex, candidates, renderer=self.renderer, teacher=self.teacher,
                                       policy=self.policy, term=self.term, context=self.context)
        else:
            ex, why = teach(ex, hints, renderer=self.renderer, teacher=self.teacher, term=self.term,
                            context=self.context)
        if why is not None:
            return ex, why
        out.scored.append((ex.key, ex.teaching.logprobs))
        return self.check(ex, out) if ex.hint else (ex, None)

    def student(self, ex: Example) -> Example:
        """``ex`` trained without the preference memory it was served with (``learning/memory.py``); as recorded
        when the memory cannot be taken out of its prompt (logged). With ``rescore`` every turn's pi_old is the
        policy's."""
        student, why = student_example(ex, renderer=self.renderer, policy=self.policy, rescore=self.rescore)
        if why is not None:
            log.warning("turn %s/%s is trained with its memory: %s", ex.session_id, ex.turn, why)
        return student

    def hints_of(self, ex: Example) -> list[str]:
        """What the teacher is shown: the preferences the memory served the turn with that the teacher follows
        (``replays_hint``), then the turn's own hint (once)."""
        hints = [h for h in ex.memory if self.replays_hint(h)]
        return hints + [ex.hint] if ex.hint and ex.hint not in hints else hints

    def candidate_hints(self, ex: Example) -> list[str]:
        """``distill: topk_select``: the accepted hint first, then the other hint votes' (``hint_m`` at most)."""
        texts = self.store.hint_vote_texts(ex.session_id, ex.turn) if self.config.hint_candidates > 1 else []
        return candidate_hints(ex.hint, [parse_hint(t) for t in texts], self.config.hint_candidates)

    def check(self, ex: Example, out: Prepared) -> tuple[Example, str | None]:
        """Does the hinted teacher follow the example's hint; an unfollowed one loses its teacher term
        (``unfollowed: skip``) or the example is dropped (``drop``; OPD or a zero verdict: nothing left). The hint
        is measured alone: a turn served with the memory has its preferences in its teacher prompt too, and they
        would count as the hint's effect (and decide what ``teacher_follows`` says of it)."""
        cfg = self.config.teacher_check
        if not cfg.enabled:
            return ex, None
        hinted = ex.teaching.prompt_ids
        if ex.memory:
            alone, why = teacher_prompt(self.renderer, ex, ex.hint, self.context)
            hinted = alone if why is None else hinted
        check = self.checker.check(self.teacher, ex.prompt_ids, hinted, ex.hint, self.context)
        out.checks.append((ex.key, ex.hint, check.record()))
        strip, why = excluded(self.config.method, ex.verdict, check, cfg)
        return (ex.taught(None) if strip else ex), why

    def replays_hint(self, hint: str) -> bool:
        """Whether replay teaches ``hint``: not when the teacher check found the teacher does not follow it
        (unless ``unfollowed: train``); a hint not measured yet is replayed."""
        cfg = self.config.teacher_check
        if not cfg.enabled or cfg.unfollowed is Unfollowed.TRAIN:
            return True
        return self.checker.follows(hint) is not False

    # ------------------------------------------------------------------ groups and replay
    def group(self, ex: Example, version: int, out: Prepared) -> list[Sample]:
        """The taken example's sample, its fresh group members (``group_size`` > 1) and demonstrations
        (``sft_coef`` > 0); an unhinted example is a group of one."""
        sample, cfg = ex.sample(), self.config
        if not ex.hinted or (cfg.groups.size <= 1 and not cfg.sft_coef):
            return [sample]
        seed = zlib.crc32(f"{version}:{ex.session_id}:{ex.turn}".encode())  # reproducible
        members = [sample]
        if cfg.groups.size > 1:
            members, record = build_group(ex, sample, policy=self.policy, teacher=self.teacher, term=self.term,
                                          config=cfg.groups, version=version, context=self.context, seed=seed)
            out.group_records.append(record)
        for j in range(cfg.sft_samples if cfg.sft_coef else 0):
            demo = demonstration(ex, teacher=self.teacher, policy=self.policy, config=cfg.groups,
                                 sft_coef=cfg.sft_coef, version=version, context=self.context, seed=seed + 1 + j)
            members += [demo] if demo is not None else []
        return members

    def replay(self, out: Prepared) -> list[Sample]:
        """The taken turns' users' earlier turns, taught under all of each user's standing preferences."""
        if not self.config.replay.turns:
            return []
        samples, skipped = [], []
        for ex, hints in replay_examples(self.store, out.taken, self.config.replay.turns, keep=self.replays_hint):
            taught, why = teach(self.student(ex), hints, renderer=self.renderer, teacher=self.teacher, term=self.term,
                                context=self.context)
            if why is None:
                samples.append(replay_sample(taught))  # not stored: a turn keeps its own teacher's
            else:
                skipped.append(f"{ex.session_id}/{ex.turn}: {why}")
        out.replay_skipped = skipped
        return samples

    # ------------------------------------------------------------------ metrics
    @staticmethod
    def metrics(out: Prepared) -> dict[str, Any]:
        """What the stages add to a step's metrics: hinted turns and the teacher gap, turns trained without the
        memory they were served with (and their mean verdict weight), the mean |pi_old - recorded| of the other
        re-scored turns (the engine's numerics against the trainer's, and staleness), groups (formed,
        constant, fresh samples and their mean implicit reward), context distillation, topk_select's choices."""
        m: dict[str, Any] = {}
        if out.checks:  # the teacher checks of this step: seconds spent, hints the teacher does not follow
            m.update(teacher_check_s=sum(c["seconds"] for _, _, c in out.checks),
                     hints_unfollowed=sum(not c["follows"] for _, _, c in out.checks))
        hinted = [ex for ex in out.taken if ex.hinted]
        m["hinted_turns"] = len(hinted)
        rescored = [ex for ex in out.taken if ex.verdict_weights is not None]
        unmemorized = [ex for ex in rescored if ex.memory]  # served with the memory, trained without
        if unmemorized:
            weights = [w for ex in unmemorized for w in ex.verdict_weights]
            m.update(memory_turns=len(unmemorized), memory_weight_mean=sum(weights) / len(weights))
        gaps = [abs(o - r) for ex in rescored if not ex.memory
                for o, r in zip(ex.rollout_logprobs[ex.forced:], ex.recorded_logprobs[ex.forced:])]
        if gaps:
            m["rescored_logprob_gap"] = sum(gaps) / len(gaps)
        if hinted:
            gaps = [t - o for ex in hinted for t, o in zip(ex.teaching.logprobs, ex.rollout_logprobs)]
            m["teacher_gap_mean"] = sum(gaps) / len(gaps)
        selected = [ex.teaching.selection for ex in out.taken if ex.teaching is not None and ex.teaching.selection]
        if selected:
            m["topk_select"] = selected
        samples = out.samples
        sft = [s.response_length for s in samples if s.metadata.get("sft")]
        if sft:
            m.update(sft_samples=len(sft), sft_tokens=sum(sft))
        records = out.group_records
        if records:
            fresh = [float(s.reward) for s in samples if s.metadata.get("fresh")]
            m.update(groups=len(records), constant_groups=sum(r["dropped"] is not None for r in records),
                     fresh_samples=len(fresh), fresh_reward_mean=sum(fresh) / len(fresh) if fresh else 0.0,
                     group_records=records)
        return m


FAILURES_TO_SET_ASIDE = 2  # failed steps a turn may be in before it is set aside


def record(store, dropped: list[Drop], prepared: Prepared) -> None:
    """What a driver stores of a prepared step (``records`` shows it): the drops with their reasons, the
    teacher checks, the teacher log-probs; and the turns whose preparation raised (``set_back``)."""
    for (session_id, turn), why in dropped + prepared.dropped:
        store.mark_dropped(session_id, turn, why)
    for (session_id, turn), hint, check in prepared.checks:
        store.record_teacher_check(session_id, turn, hint, check)
    for (session_id, turn), logprobs in prepared.scored:
        store.set_teacher_logprobs(session_id, turn, logprobs)
    for ex, error in prepared.failed:
        set_back(store, [ex], error)


def set_back(store, examples: list[Example], error: str) -> list[Example]:
    """Preparing or training a step raised with these turns: count it against each; a turn now in
    ``FAILURES_TO_SET_ASIDE`` failed steps is set aside (dropped with the error) so that it cannot stop learning
    again. Returns those set aside."""
    store.record_setback([ex.key for ex in examples], "failures", f"a training step failed: {error}")
    aside = [ex for ex in examples if ex.failures + 1 >= FAILURES_TO_SET_ASIDE]
    for ex in aside:
        store.mark_dropped(ex.session_id, ex.turn, f"set aside: training failed {ex.failures + 1} times with this "
                                                   f"turn: {error}")
    return aside
