"""Slime's SFT rollout over the agent settings' demonstrations (the warm start before agent RL):
``--rollout-function-path slime_ext.hooks.sft.generate_rollout`` with ``--loss-type sft_loss``.

``openclaw-rl env demos --setting S --model M --out F.jsonl`` plays each train task's scripted solution through
the environment with the agent loop (``envs/demos.py``) and writes one JSON line per demonstration: ``tokens``
(prompt + response ids, in the checkpoint's chat template), ``response_length``, ``loss_mask`` (over the
response: 1 on the agent's tokens, 0 on the observations'), ``label`` (the task id) and ``metadata`` ({setting,
task_id, outcome, reason, steps}). Held-out tasks are never in it.

**That file is Slime's prompt dataset** (``--prompt-data F.jsonl --input-key tokens --label-key label
--metadata-key metadata``, as ``<setting>-rl/*_sft.sh`` pass it). Why this, not a path in our settings:

- Slime's SFT path is built around ``--prompt-data``: its data source reads the rows, shuffles them per epoch
  (``--rollout-shuffle``), keeps its place in checkpoints (a restart resumes mid-epoch), and ``--num-epoch``
  turns the row count into the number of steps (``num_epoch * rows // rollout_batch_size``). A file read on
  the side would have to redo all of that, and Slime would refuse ``--num-epoch`` without a prompt dataset.
- Slime's own ``slime.rollout.sft_rollout`` rebuilds the ids and the mask from chat messages with its
  ``MultiTurnLossMaskGenerator``; ours must not: the demonstration's ids are exactly the ids the agent loop
  holds (observations cut from the chat template, the end-of-turn token added), and re-tokenizing text can
  split differently. With ``--input-key tokens`` each sample's ``prompt`` *is* its row's token ids, so Slime
  hands us the ids as written and no text is ever tokenized.
- Slime's ``Dataset`` keeps only the prompt, label and metadata of a row, so ``response_length`` and
  ``loss_mask`` are taken from the same file (``args.prompt_data``, read once per process with
  ``envs.demos.read_demos``), matched by the exact token ids. Two rows with the same ids but different masks
  are refused, never guessed between.

Each sample comes back with ``tokens``, ``response_length`` and ``loss_mask`` exactly as written, ``reward`` 1.0
(every demonstration earned +1; Slime's SFT loss reads no reward, it only logs it), status ``COMPLETED`` and no
``rollout_log_probs`` (no model sampled these tokens), like Slime's own SFT rollout. Before the first step the
file is checked: every row is a demonstration (``read_demos``'s checks), names its setting and task, and no row
is a held-out task of its setting (those are what the warm start is measured on); with an ``openclaw_rl_env:``
mapping in ``--custom-config-path`` every row must be of its ``setting``, and its ``setting_paths`` are loaded
first. Slime's SFT runs with ``--debug-train-only`` and never evaluates; asked to, this refuses (held-out
evaluation is the RL launcher's ``--eval-prompt-data`` or ``openclaw-rl env eval``).

Nothing here imports Slime, Ray or Megatron at module level.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

log = logging.getLogger(__name__)

_SLICE = re.compile(r"^(?P<path>.*)@\[-?\d*:-?\d*\]$")  # Slime's "file.jsonl@[start:end]" row slice
# (path, size, mtime) -> {token ids: (response_length, loss_mask)}
_INDEX: dict[tuple[str, int, int], dict[tuple[int, ...], tuple[int, list[int]]]] = {}


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False):
    """``rollout_batch_size`` groups from Slime's data source, each sample filled from its demonstration row."""
    from slime_ext.types import RolloutFnTrainOutput

    if evaluation:
        raise ValueError("slime_ext.hooks.sft.generate_rollout trains on demonstrations and has nothing "
                         "to evaluate: run the SFT with --debug-train-only (the *_sft.sh launchers do), and "
                         "evaluate the held-out tasks with the RL launcher (--eval-prompt-data) or "
                         "`openclaw-rl env eval`")
    index = demo_index(args)
    groups = data_source.get_samples(int(getattr(args, "rollout_batch_size", 1) or 1))
    agent = observed = 0
    for group in groups:
        for sample in group:
            fill_sample(sample, index)
            agent += sum(sample.loss_mask)
            observed += sample.response_length - sum(sample.loss_mask)
    n = sum(len(g) for g in groups)
    metrics = {"openclaw/sft_samples": n, "openclaw/sft_agent_tokens": agent,
               "openclaw/sft_observation_tokens": observed}
    return RolloutFnTrainOutput(samples=groups, metrics=metrics)


def fill_sample(sample: Any, index: dict[tuple[int, ...], tuple[int, list[int]]]) -> None:
    """Set ``sample``'s ids, response length and loss mask from its row (its prompt is the row's ids)."""
    from slime_ext.types import Sample

    ids = sample.prompt
    where = f"sample {getattr(sample, 'index', '?')}"
    if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
        raise ValueError(f"{where}: its prompt is not a demonstration's token ids (got {type(ids).__name__}); "
                         "pass the demonstrations file with --prompt-data F.jsonl --input-key tokens "
                         "(openclaw-rl env demos writes it)")
    try:
        response_length, mask = index[tuple(ids)]
    except KeyError:
        raise ValueError(f"{where} (label {sample.label!r}): its token ids are no row of --prompt-data; was the "
                         "file rewritten while Slime ran?") from None
    sample.tokens = list(ids)
    sample.response_length = response_length
    sample.loss_mask = list(mask)
    sample.reward = 1.0
    sample.rollout_log_probs = None
    sample.response = sample.response or ""
    sample.status = Sample.Status.COMPLETED


def demos_path(args: Any) -> str:
    """The demonstrations file: Slime's ``--prompt-data`` (a ``@[start:end]`` row slice taken off)."""
    path = getattr(args, "prompt_data", None)
    if not path:
        raise ValueError("slime_ext.hooks.sft needs the demonstrations file as Slime's prompt dataset: "
                         "--prompt-data F.jsonl --input-key tokens (openclaw-rl env demos --setting S --model M "
                         "--out F.jsonl)")
    path = str(path)
    m = _SLICE.match(path)
    return m.group("path") if m else path


def demo_index(args: Any) -> dict[tuple[int, ...], tuple[int, list[int]]]:
    """{token ids: (response_length, loss_mask)} of the demonstrations file, checked once per file version."""
    path = demos_path(args)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"--prompt-data {path}: {e.strerror}") from None
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _INDEX:
        _INDEX[key] = build_index(path, args)
        log.info("SFT on %d demonstrations from %s", len(_INDEX[key]), path)
    return _INDEX[key]


def build_index(path: str, args: Any = None) -> dict[tuple[int, ...], tuple[int, list[int]]]:
    """Read and check the demonstrations file (see the module docstring); ValueError says what is wrong."""
    from pathlib import Path

    from slime_ext.envs.demos import read_demos

    setting, paths = _settings(args)
    samples = read_demos(Path(path))
    if not samples:
        raise ValueError(f"--prompt-data {path}: no demonstrations in it")
    index: dict[tuple[int, ...], tuple[int, list[int]]] = {}
    named: dict[str, set[str]] = {}
    for n, s in enumerate(samples, 1):
        if any(m not in (0, 1) for m in s.loss_mask) or not any(s.loss_mask):
            raise ValueError(f"{path}: row {n} (label {s.label!r}): the loss mask must be 0 / 1 with at least "
                             "one 1")
        meta = s.metadata or {}
        row_setting, task_id = meta.get("setting"), meta.get("task_id") or s.label
        if not row_setting or not task_id:
            raise ValueError(f"{path}: row {n} names no task (metadata setting and task_id, or label): not a "
                             "file of `openclaw-rl env demos`")
        if setting and row_setting != setting:
            raise ValueError(f"{path}: row {n} is a demonstration of the {row_setting} setting, but "
                             f"openclaw_rl_env.setting is {setting}")
        named.setdefault(str(row_setting), set()).add(str(task_id))
        key = tuple(s.tokens)
        if index.get(key, (s.response_length, s.loss_mask)) != (s.response_length, s.loss_mask):
            raise ValueError(f"{path}: row {n} (label {s.label!r}) has the token ids of an earlier row but "
                             "another response length or loss mask")
        index[key] = (s.response_length, list(s.loss_mask))
    _refuse_heldout(path, named, paths)
    return index


def _settings(args: Any) -> tuple[str | None, tuple[str, ...]]:
    """(setting, setting_paths) of the ``openclaw_rl_env:`` mapping, when Slime's args carry one."""
    from slime_ext.hooks.generate import SETTINGS_KEY, EnvSettings

    if args is None or getattr(args, SETTINGS_KEY, None) is None:
        return None, ()
    settings = EnvSettings.from_args(args)
    return settings.setting, settings.setting_paths


def _refuse_heldout(path: str, named: dict[str, set[str]], setting_paths: tuple[str, ...]) -> None:
    """ValueError naming the held-out tasks (or unknown ones) the file holds."""
    from slime_ext.envs import list_tasks
    from slime_ext.envs.loader import load_settings

    load_settings(setting_paths)
    for setting, ids in sorted(named.items()):
        splits = {t.id: t.split for t in list_tasks(setting)}
        heldout = sorted(i for i in ids if splits.get(i) == "heldout")
        if heldout:
            raise ValueError(f"{path}: held-out {setting} tasks must never be trained on, but the file holds "
                             f"{', '.join(heldout)}")
        unknown = sorted(i for i in ids if i not in splits)
        if unknown:
            raise ValueError(f"{path}: {setting} has no tasks {', '.join(unknown[:5])}"
                             f"{', ...' if len(unknown) > 5 else ''}")
