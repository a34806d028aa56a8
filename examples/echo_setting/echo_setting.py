"""A setting of your own, outside ``slime_ext``: the agent must say the word its task names.

A template for docs/extending.md and the test that loads it from a folder (``tests/test_extending.py``): a
setting is a list of tasks and an environment class, registered by name when the module is imported.

    openclaw-rl env list --setting echo --setting-path examples/echo_setting
    printf 'apple\\n' | openclaw-rl env play --setting echo --task echo-apple --setting-path examples/echo_setting
"""

from __future__ import annotations

from echo_words import WORDS  # a sibling module: the folder is on the Python path, as in Slime's examples

from slime_ext.envs import EnvTask, StepResult, register_setting

SETTING = "echo"


def list_echo_tasks() -> list[EnvTask]:
    """Two train tasks and one held-out task; the id names the word."""
    return [EnvTask(id=f"echo-{word}", setting=SETTING, split="heldout" if i == len(WORDS) - 1 else "train",
                    instruction=f"Reply with the single word: {word}", data={"word": word})
            for i, word in enumerate(WORDS)]


class EchoEnv:
    """One episode: the agent's message is checked for the word; the episode ends when it is said or after
    ``max_turns`` messages. Reward 1 when it was said, -1 otherwise."""

    setting = SETTING
    tools: list[dict] = []
    observation_role = "user"

    def __init__(self, max_turns: int = 2) -> None:
        self.max_turns = max_turns
        self.word, self.turn, self.said = "", 0, False

    def reset(self, task: EnvTask) -> str:
        self.word, self.turn, self.said = task.data["word"], 0, False
        return task.instruction

    def step(self, action_text: str) -> StepResult:
        if self.turn >= self.max_turns or self.said:
            raise RuntimeError("the episode is over")
        self.turn += 1
        self.said = self.word in action_text.lower()
        done = self.said or self.turn >= self.max_turns
        info = {"turn": self.turn, **({"reason": "done" if self.said else "max_turns"} if done else {})}
        return StepResult("Correct." if self.said else f"Say {self.word}.", done, info)

    def outcome(self) -> float:
        return 1.0 if self.said else -1.0

    def next_state_text(self, result: StepResult) -> str:
        return result.observation

    def close(self) -> None:
        pass

    def __enter__(self) -> EchoEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


register_setting(SETTING, list_echo_tasks, EchoEnv)
