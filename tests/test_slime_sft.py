"""Slime's SFT rollout over the demonstrations file (``slime_ext.hooks.sft.generate_rollout``): Slime's data
source reads the file as its prompt dataset (``--input-key tokens``), and the rollout hands each row's ids,
response length and loss mask to Slime exactly as written; a file that is not demonstrations of train tasks is
refused before the first step. Slime itself is not needed: ``SlimeDataSource`` does what its data source does."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer
from slime_ext.envs import list_tasks
from slime_ext.envs.demos import demonstrations, write_demos
from slime_ext.hooks import sft
from slime_ext.models import resolve_model
from slime_ext.types import Sample


class SlimeDataSource:
    """What Slime's ``RolloutDataSource`` hands a rollout function for ``--prompt-data F.jsonl --input-key
    tokens --label-key label --metadata-key metadata`` (``slime/utils/data.py``'s ``Dataset``, ``slime/rollout/
    data_source.py``): each row as ``Sample(prompt=row["tokens"], label=row["label"],
    metadata=row["metadata"])``, handed out in order as groups of ``n_samples_per_prompt`` deep copies with
    ``group_index`` and ``index`` set."""

    def __init__(self, path: Path, n_samples_per_prompt: int = 1) -> None:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.samples = [Sample(prompt=r["tokens"], label=r["label"], metadata=r["metadata"] or {}) for r in rows]
        self.n, self.offset, self.group_index, self.index = n_samples_per_prompt, 0, 0, 0

    def get_samples(self, num: int) -> list[list[Sample]]:
        groups = []
        for _ in range(num):
            prompt = self.samples[self.offset % len(self.samples)]
            self.offset += 1
            group = []
            for _ in range(self.n):
                s = copy.deepcopy(prompt)
                s.group_index, s.index = self.group_index, self.index
                self.index += 1
                group.append(s)
            self.group_index += 1
            groups.append(group)
        return groups


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """Four terminal demonstrations in the tiny model's chat template, as `openclaw-rl env demos` writes them."""
    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    samples, skipped = demonstrations("terminal", tok, PromptRenderer(tok), max_turns=8, limit=4)
    assert len(samples) == 4, skipped
    path = tmp_path_factory.mktemp("demos") / "terminal-demos.jsonl"
    write_demos(samples, path)
    return path


def _args(path, **extra):
    return SimpleNamespace(**{"prompt_data": str(path), "rollout_batch_size": 3, **extra})


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_sample_gets_its_rows_ids_response_length_and_loss_mask_as_written(demos):
    rows = _rows(demos)
    out = sft.generate_rollout(_args(demos, openclaw_rl_env={"setting": "terminal"}), 0, SlimeDataSource(demos))
    assert len(out.samples) == 3 and all(len(g) == 1 for g in out.samples)
    for (s,), row in zip(out.samples, rows):
        assert s.tokens == row["tokens"] and s.response_length == row["response_length"]
        assert s.loss_mask == row["loss_mask"] and s.label == row["label"] == row["metadata"]["task_id"]
        assert 0 in s.loss_mask and 1 in s.loss_mask  # the shell's output is in the response, masked out
        assert s.reward == 1.0 and s.status == Sample.Status.COMPLETED and s.rollout_log_probs is None
    agent = sum(sum(r["loss_mask"]) for r in rows[:3])
    observed = sum(r["response_length"] - sum(r["loss_mask"]) for r in rows[:3])
    assert out.metrics == {"openclaw/sft_samples": 3, "openclaw/sft_agent_tokens": agent,
                           "openclaw/sft_observation_tokens": observed}


def test_ids_are_never_tokenized_again(tmp_path):
    """A row whose ids are no tokenizer's rendering of anything (an unusual split) comes back as it is, with
    every sample of a group of two (``--n-samples-per-prompt 2``) and a Slime row slice on the path."""
    task = list_tasks("terminal", "train")[0].id
    rows = [{"tokens": [7, 7, 7, 900, 3, 3, 1], "response_length": 4, "loss_mask": [1, 0, 0, 1], "label": task,
             "metadata": {"setting": "terminal", "task_id": task}}]
    path = _write(tmp_path / "odd.jsonl", rows)
    out = sft.generate_rollout(_args(f"{path}@[0:1]", rollout_batch_size=1), 4, SlimeDataSource(path, 2))
    (group,) = out.samples
    assert [s.index for s in group] == [0, 1] and {s.group_index for s in group} == {0}
    for s in group:
        assert (s.tokens, s.response_length, s.loss_mask) == ([7, 7, 7, 900, 3, 3, 1], 4, [1, 0, 0, 1])


def _bad_files(tmp_path: Path, demos: Path) -> dict[str, tuple[list[dict], str]]:
    good = _rows(demos)[0]
    heldout = list_tasks("terminal", "heldout")[0].id
    same_ids = {**good, "loss_mask": [1] * good["response_length"]}
    return {
        "heldout": ([good, {**good, "tokens": good["tokens"] + [5], "label": heldout,
                            "metadata": {**good["metadata"], "task_id": heldout}}],
                    f"held-out terminal tasks must never be trained on, but the file holds {heldout}"),
        "other-setting": ([{**good, "metadata": {**good["metadata"], "setting": "toolcall"}}],
                          "is a demonstration of the toolcall setting, but openclaw_rl_env.setting is terminal"),
        "unknown-task": ([{**good, "label": "nope", "metadata": {**good["metadata"], "task_id": "nope"}}],
                         "terminal has no tasks nope"),
        "no-task": ([{**good, "label": None, "metadata": {}}], "row 1 names no task"),
        "mask-values": ([{**good, "loss_mask": [2] * good["response_length"]}], "must be 0 / 1"),
        "all-masked": ([{**good, "loss_mask": [0] * good["response_length"]}], "with at least one 1"),
        "same-ids-other-mask": ([good, same_ids], "has the token ids of an earlier row but another"),
        "mask-length": ([{**good, "loss_mask": [1]}], "do not fit"),
        "empty": ([], "no demonstrations in it"),
    }


@pytest.mark.parametrize("case", ["heldout", "other-setting", "unknown-task", "no-task", "mask-values",
                                  "all-masked", "same-ids-other-mask", "mask-length", "empty"])
def test_a_file_that_is_not_train_demonstrations_is_refused_before_the_first_step(demos, tmp_path, case):
    rows, message = _bad_files(tmp_path, demos)[case]
    path = _write(tmp_path / f"{case}.jsonl", rows)
    with pytest.raises(ValueError) as e:
        sft.generate_rollout(_args(path, openclaw_rl_env={"setting": "terminal"}), 0, SlimeDataSource(demos))
    assert message in str(e.value)


def test_a_prompt_that_is_not_token_ids_says_how_to_pass_the_file(demos):
    class TextPrompts(SlimeDataSource):  # --input-key naming a text field
        def get_samples(self, num):
            return [[Sample(index=0, prompt="Count the lines of notes.txt", label="x")]]

    with pytest.raises(ValueError, match="--input-key tokens"):
        sft.generate_rollout(_args(demos), 0, TextPrompts(demos))
    with pytest.raises(ValueError, match="needs the demonstrations file as Slime's prompt dataset"):
        sft.generate_rollout(SimpleNamespace(prompt_data=None, rollout_batch_size=1), 0, SlimeDataSource(demos))


def test_a_row_rewritten_while_slime_runs_is_found_or_named(demos, tmp_path):
    path = _write(tmp_path / "d.jsonl", _rows(demos)[:2])
    source = SlimeDataSource(path)
    sft.generate_rollout(_args(path, rollout_batch_size=1), 0, source)
    _write(path, _rows(demos)[2:3])  # another file version: read again, and the old rows are gone
    with pytest.raises(ValueError, match="its token ids are no row of --prompt-data"):
        sft.generate_rollout(_args(path, rollout_batch_size=1), 1, source)


def test_evaluation_is_refused_with_where_to_evaluate(demos):
    with pytest.raises(ValueError, match="--debug-train-only"):
        sft.generate_rollout(_args(demos), 0, SlimeDataSource(demos), evaluation=True)
