"""The repetition stop: the server ends a reply that has fallen into a loop (``--repetition-stop``, on by default).

A small model sampled at a low temperature (smollm2-135m's 0.2 / 0.9) often starts to say the same passage over
and over, and would go on to the reply's token limit: on 40 open prompts a new user would type, 10 seeds, 41% of
its replies fell into a loop (bench/reply_length.py; figures in bench/README.md).

The rule, on the reply's token ids as they are sampled: the reply ends with a passage of ``period`` <= ``max_period``
tokens said ``repeats`` times in a row, token for token, and that repeated tail is at least ``min_tokens`` long.
With the defaults: a passage of 64 to 256 tokens said twice in a row, or a shorter one said over and over for 128
tokens ("ha ha ha ...", a sentence eight times). Natural text almost never repeats 128 tokens back to back; a reply
asked to (a matrix of zeros, a line a hundred times) is cut too: serve those with ``--repetition-stop off``, or send
``ignore_eos`` (the stop never cuts a reply asked for whatever the model says).

``loop_period`` is the rule as a pure function of the whole reply; ``RepetitionStop`` is the same rule fed one token
at a time, as the server's generation loop does: for each period p it keeps how many of the latest tokens equal the
token p before them, and only the periods where the new token appeared before are touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_PERIOD = 256  # the longest passage looked for, in tokens
REPEATS = 2  # said this many times in a row
MIN_TOKENS = 128  # and the repeated tail at least this long


def loop_period(ids: list[int], max_period: int = MAX_PERIOD, repeats: int = REPEATS,
                min_tokens: int = MIN_TOKENS) -> int:
    """The period of the loop ``ids`` ends in (the shortest, if several), or 0 when it ends in none."""
    for p in range(1, max_period + 1):
        span = max(repeats * p, min_tokens)
        if len(ids) >= span and all(ids[-i] == ids[-i - p] for i in range(1, span - p + 1)):
            return p
    return 0


@dataclass
class RepetitionStop:
    """Fed a reply's tokens one by one, says when the reply has fallen into a loop: the rule of ``loop_period``."""

    max_period: int = MAX_PERIOD
    repeats: int = REPEATS
    min_tokens: int = MIN_TOKENS
    period: int = 0  # the loop's period once one is seen (0: none yet)
    tokens: int = 0  # tokens fed
    _seen: dict[int, list[int]] = field(default_factory=dict, repr=False)  # token -> its positions, latest max_period
    _runs: dict[int, int] = field(default_factory=dict, repr=False)  # period -> latest tokens equal to the one p before

    def __post_init__(self) -> None:
        if self.max_period < 1 or self.repeats < 2 or self.min_tokens < 1:
            raise ValueError("a repetition stop needs max_period >= 1, repeats >= 2 and min_tokens >= 1")

    def feed(self, token: int) -> bool:
        """Take the next token; True once the reply ends in a loop (and from then on)."""
        n = self.tokens
        self.tokens += 1
        positions = self._seen.setdefault(token, [])
        while positions and n - positions[0] > self.max_period:
            positions.pop(0)
        # a run of period p goes on only where this token equals the one p before: the periods of its positions
        runs = {n - q: self._runs.get(n - q, 0) + 1 for q in positions}
        self._runs = runs
        positions.append(n)
        if not self.period:
            loops = [p for p, run in runs.items() if run + p >= max(self.repeats * p, self.min_tokens)]
            self.period = min(loops, default=0)
        return bool(self.period)

    def describe(self) -> str:
        return (f"a passage of at most {self.max_period} tokens said {self.repeats} times in a row, the repeated "
                f"tail at least {self.min_tokens} tokens")
