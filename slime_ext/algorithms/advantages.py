"""Binary RL advantages: the judge's verdict, spread over every response token.

A turn's reward is its verdict r in {-1, 0, +1}. Its advantage is ``r - b`` on every response
token, where the baseline ``b`` is

- ``none`` (the default): ``b = 0``. A thumbs-up raises the whole response, a thumbs-down lowers
  it, an ambiguous verdict contributes nothing. This is the original system's estimator.
- ``running``: an exponential moving average of *earlier* verdicts (``RunningBaseline``). It is
  independent of the sample it is subtracted from, so the gradient stays unbiased, and it lowers
  variance once most answers are judged the same way: when nearly everything is +1, the rare -1
  carries the signal. A batch-mean baseline is deliberately not offered: with the ~4 samples a
  personal agent trains on, it is correlated with each sample and zeroes a batch judged unanimously.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def token_advantages(reward: float, response_length: int, baseline: float = 0.0) -> torch.Tensor:
    """``reward - baseline`` for each of the ``response_length`` response tokens."""
    return torch.full((response_length,), float(reward) - float(baseline))


@dataclass
class RunningBaseline:
    """EMA of verdicts seen so far; ``value`` is read before ``update`` with the current sample."""

    decay: float = 0.9
    value: float = 0.0
    count: int = 0

    def update(self, reward: float) -> float:
        """Fold in one verdict and return the new baseline."""
        self.value = float(reward) if self.count == 0 else self.decay * self.value + (1 - self.decay) * float(reward)
        self.count += 1
        return self.value
