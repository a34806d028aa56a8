"""GRPO groups of the agent settings through Slime's default rollout and our generate hook, on CPU against
the SGLang-protocol test server on tiny: ``--n-samples-per-prompt N`` gives N copies of one task's row sharing
a ``group_index`` (``slime_group`` does what Slime's data source does), Slime plays them concurrently with their
own ``sampling_seed`` each (``play_group``: what its ``generate_and_rm_group`` does), and each comes back as its
own episode with its own outcome as its reward. Then the dynamic-sampling filter the agent RL launchers pass
(``slime_ext.hooks.filters.drop_constant_groups``) drops the groups whose episodes all earned the same
reward."""

from __future__ import annotations

import asyncio
import copy
import types
from pathlib import Path

import pytest
from _sglang_server import serving_in_thread
from transformers import AutoTokenizer

from slime_ext.chat.prompt import stop_token_ids
from slime_ext.envs import list_tasks
from slime_ext.hooks import filters
from slime_ext.hooks.filters import drop_constant_groups, episode_rewards
from slime_ext.hooks.generate import generate
from slime_ext.models import resolve_model
from slime_ext.types import Sample

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 6}
SEEDS = [11, 12, 13, 14]

# A setting whose outcome is a function of what the agent said (its messages' total length), so that a group's
# episodes earn different rewards even from the tiny model, and each reward can be checked against its own
# episode.
LENGTHS_SETTING = '''
from slime_ext.envs import EnvTask, StepResult, register_setting


def outcome_of(text):
    return (len(text) % 5) / 2 - 1


def lengths_tasks():
    return [EnvTask(id="len-say", setting="lengths", split="train", instruction="Say anything."),
            EnvTask(id="len-other", setting="lengths", split="heldout", instruction="Say something else.")]


class LengthsEnv:
    setting = "lengths"
    tools = []
    observation_role = "user"

    def __init__(self, max_turns=2):
        self.max_turns, self.actions = max_turns, []

    def reset(self, task):
        self.actions = []
        return task.instruction

    def step(self, action_text):
        self.actions.append(action_text)
        done = len(self.actions) >= self.max_turns
        return StepResult("Go on.", done, {"turn": len(self.actions), **({"reason": "done"} if done else {})})

    def outcome(self):
        return outcome_of("".join(self.actions))

    def next_state_text(self, result):
        return result.observation

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


register_setting("lengths", lengths_tasks, LengthsEnv)
'''


def outcome_of(text: str) -> float:  # the setting's own rule, again
    return (len(text) % 5) / 2 - 1


@pytest.fixture(scope="module")
def router():
    model_dir = resolve_model("tiny")
    with serving_in_thread(model_dir) as fake:
        host, port = fake.url.split("//")[1].split(":")
        yield types.SimpleNamespace(ip=host, port=int(port), model_dir=str(model_dir))


@pytest.fixture(scope="module")
def lengths_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("user") / "lengths-rl"
    d.mkdir()
    (d / "lengths_setting.py").write_text(LENGTHS_SETTING)
    return d


def _args(router, **env):
    return types.SimpleNamespace(sglang_router_ip=router.ip, sglang_router_port=router.port,
                                 hf_checkpoint=router.model_dir, rollout_batch_size=2,
                                 openclaw_rl_env={"max_turns": 2, **env})


def slime_group(row: Sample, n: int, group_index: int, first_index: int) -> list[Sample]:
    """One task's group as Slime's RolloutDataSource.get_samples makes it: n deep copies of the row, one
    group_index, consecutive indices."""
    group = []
    for i in range(n):
        s = copy.deepcopy(row)
        s.group_index, s.index = group_index, first_index + i
        group.append(s)
    return group


def play_group(args, group: list[Sample], seeds: list[int]) -> list:
    """Slime's generate_and_rm_group: every sample of the group generated concurrently with its own copy of the
    sampling params (its own sampling_seed, as with --sglang-enable-deterministic-inference)."""
    async def go():
        return await asyncio.gather(*(generate(args, s, {**SAMPLING, "sampling_seed": seed})
                                      for s, seed in zip(group, seeds)))
    return asyncio.run(go())


def _actions(sample: Sample, tok) -> str:
    """What the agent said in the episode, read back from the sample: its runs of loss-mask-1 tokens (each a
    model message), decoded as the agent loop hands them to the env."""
    response = sample.tokens[len(sample.tokens) - sample.response_length:]
    stops, runs, run = set(stop_token_ids(tok)), [], []
    for t, m in zip(response, sample.loss_mask):
        if m:
            run.append(t)
        elif run:
            runs.append(run)
            run = []
    runs += [run] if run else []
    return "".join(tok.decode(r[:-1] if r[-1] in stops else r, skip_special_tokens=True) for r in runs)


def test_n_samples_of_one_task_are_n_episodes_and_an_all_equal_group_is_dropped(router):
    task = list_tasks("terminal", "train")[0]
    row = Sample(prompt=task.instruction, label=task.id, metadata={"setting": "terminal", "task_id": task.id})
    out = play_group(_args(router), slime_group(row, 4, group_index=7, first_index=20), SEEDS)
    assert [s.index for s in out] == [20, 21, 22, 23] and {s.group_index for s in out} == {7}
    assert [s.rollout_id for s in out] == [20, 21, 22, 23]  # one rollout each: Slime counts each episode once
    assert all(s.status != Sample.Status.FAILED and s.metadata["task_id"] == task.id for s in out)
    assert len({tuple(s.tokens) for s in out}) == 4  # four episodes, not one episode copied
    assert all(s.reward == s.metadata["outcome"] for s in out)
    assert len({s.reward for s in out}) == 1  # the tiny model solves none of them: a constant group
    verdict = drop_constant_groups(_args(router), out)
    # dropped, with the reason in Slime's own format (what it counts per step)
    assert verdict.keep is False and verdict.reason == f"zero_std_{round(out[0].reward, 1)}"


def test_each_episode_earns_its_own_outcome_and_a_varied_group_is_kept(router, lengths_dir):
    tok = AutoTokenizer.from_pretrained(router.model_dir)
    args = _args(router, setting_paths=[str(lengths_dir)])
    row = Sample(prompt="Say anything.", label="len-say", metadata={"setting": "lengths"})
    out = play_group(args, slime_group(row, 4, group_index=2, first_index=8), SEEDS)
    assert {s.group_index for s in out} == {2} and [s.rollout_id for s in out] == [8, 9, 10, 11]
    for s in out:  # the reward is the outcome of this sample's own messages
        assert s.status == Sample.Status.COMPLETED and s.metadata["steps"] == 2
        assert s.reward == s.metadata["outcome"] == outcome_of(_actions(s, tok))
    rewards = [s.reward for s in out]
    assert len(set(rewards)) > 1, rewards
    assert drop_constant_groups(args, out).keep is True

    # the same group with one sample per model message (SAMPLES=step): Slime hands the filter one list of
    # siblings per episode; the same seeds play the same episodes, and the filter reads one reward per episode
    step_args = _args(router, setting_paths=[str(lengths_dir)], samples="step")
    fanned = play_group(step_args, slime_group(row, 4, group_index=2, first_index=8), SEEDS)
    assert all(isinstance(siblings, list) and len(siblings) == 2 for siblings in fanned)
    for siblings, index in zip(fanned, [8, 9, 10, 11]):
        assert {s.rollout_id for s in siblings} == {index} and {s.group_index for s in siblings} == {2}
    assert [[s.reward for s in siblings] for siblings in fanned] == [[r, r] for r in rewards]
    assert episode_rewards(step_args, fanned) == rewards and drop_constant_groups(step_args, fanned).keep is True
    constant = [fanned[0], copy.deepcopy(fanned[0])]
    verdict = drop_constant_groups(step_args, constant)
    assert verdict.keep is False and verdict.reason == f"zero_std_{round(rewards[0], 1)}"


# ------------------------------------------------------------------------------------------- the filter alone


def _s(reward, failed=False, index=0):
    s = Sample(index=index, reward=reward, status=Sample.Status.FAILED if failed else Sample.Status.COMPLETED)
    s.remove_sample = failed
    return s


@pytest.fixture
def fresh_filter(monkeypatch):
    monkeypatch.setattr(filters, "_state", {"constant_in_a_row": 0, "warned": False})


ARGS = types.SimpleNamespace(rollout_batch_size=2, over_sampling_batch_size=None, reward_key=None)


@pytest.mark.parametrize("group, keep, reason", [
    ([_s(1.0), _s(-1.0)], True, None),
    ([_s(-1.0), _s(-1.0), _s(-1.0)], False, "zero_std_-1.0"),
    ([_s(1.0), _s(1.0)], False, "zero_std_1.0"),
    # an episode that could not be played (reward 0.0, removed) is no outcome: this group is constant
    ([_s(-1.0), _s(-1.0), _s(-1.0), _s(0.0, failed=True)], False, "zero_std_-1.0"),
    ([_s(0.5), _s(-1.0), _s(0.0, failed=True)], True, None),
    ([_s(1.0), _s(0.0, failed=True), _s(0.0, failed=True)], False, "too_few_episodes"),
    ([[_s(0.5), _s(0.5)], [_s(-1.0)], _s(0.0, failed=True)], True, None),  # fan-out: one reward per episode
    ([[_s(-1.0), _s(-1.0)], [_s(-1.0), _s(-1.0), _s(-1.0)]], False, "zero_std_-1.0"),
], ids=["varied", "none-solved", "all-solved", "failed-left-out", "varied-with-failed", "one-played",
        "fan-out-varied", "fan-out-constant"])
def test_the_filter_keeps_varied_groups_and_drops_constant_ones_with_the_reason(fresh_filter, group, keep,
                                                                                  reason):
    verdict = drop_constant_groups(ARGS, group)
    assert (verdict.keep, verdict.reason, verdict.keep_when_insufficient) == (keep, reason, False)


def test_the_filter_reads_slimes_reward_key(fresh_filter):
    args = types.SimpleNamespace(rollout_batch_size=2, reward_key="acc")
    assert drop_constant_groups(args, [_s({"acc": 1.0, "len": 3}), _s({"acc": 0.0, "len": 3})]).keep is True
    assert drop_constant_groups(args, [_s({"acc": 1.0, "len": 3}), _s({"acc": 1.0, "len": 9})]).keep is False


def test_constant_groups_in_a_row_stop_the_resampling_until_a_varied_group_comes(fresh_filter, caplog):
    """With every task constant for the model, dropping alone would make Slime sample forever: after ROUNDS
    batches' worth of constant groups in a row, a constant group is kept when dropping it would start another
    sampling round (Slime's keep_when_insufficient); a varied group resets that."""
    limit = filters.ROUNDS * ARGS.rollout_batch_size
    flags = [drop_constant_groups(ARGS, [_s(-1.0), _s(-1.0)]).keep_when_insufficient for _ in range(limit + 2)]
    assert flags == [False] * limit + [True, True]
    assert "constant-reward groups in a row" in caplog.text
    assert drop_constant_groups(ARGS, [_s(1.0), _s(-1.0)]).keep is True
    after = drop_constant_groups(ARGS, [_s(-1.0), _s(-1.0)])
    assert (after.keep, after.keep_when_insufficient) == (False, False)
