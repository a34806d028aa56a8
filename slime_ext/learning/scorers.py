"""Where the learning pipeline's tokens and log-probs come from: a ``Scorer`` over some weights.

The pipeline asks a model four things: the teacher-forced log-probs of a response after a prompt, at
a temperature (``logprobs``); the full next-token log-distributions there (``distributions``: what
top-k distillation and topk_select compare); fresh samples of a prompt (``sample``); and, for the
teacher check, an answer's log-probs together with whether greedy decoding after the prompt gives
that answer (``logprobs_and_greedy``).

- ``TorchScorer``: a torch model in this process (the embedded trainer): the policy being trained,
  or the frozen initial weights (``weights`` is a context manager yielding the model). It computes
  with ``slime_ext.logprobs`` (the one log-prob implementation) and generates with
  ``sample_responses``.
- ``EngineScorer``: an ``Engine`` (under Slime, the SGLang client on Slime's router, serving the
  synced policy), called from another thread through the engine's event loop. An engine scores at
  temperature 1 only and hands out no distributions; the Slime driver refuses the settings that
  would need them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable, ContextManager, Protocol, Sequence

import torch

from slime_ext.logprobs import (
    output_logits,
    scoring_temperature,
    teacher_forced_log_softmax,
    teacher_forced_logprobs,
)


class Scorer(Protocol):
    def logprobs(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> list[float]: ...

    def distributions(self, prompt_ids: list[int], response_ids: list[int],
                      temperature: float = 1.0) -> torch.Tensor: ...

    def sample(self, prompt_ids: list[int], n: int, *, temperature: float, max_new_tokens: int,
               seed: int | None = None) -> list[list[int]]: ...

    def logprobs_and_greedy(self, prompt_ids: list[int], answer: list[int]) -> tuple[list[float], bool]: ...


def sample_responses(model, prompt_ids: Sequence[int], n: int, *, temperature: float, max_new_tokens: int,
                     stop_ids: Sequence[int], generator: torch.Generator | None = None) -> list[list[int]]:
    """``n`` responses to ``prompt_ids`` from ``model`` (KV-cached decoding, batch ``n``), each ending
    at its first stop token (kept) or after ``max_new_tokens``. Logits come from the fp32 output
    layer as everywhere else, divided by ``temperature``; 0 is greedy, otherwise plain sampling (no top-k / top-p)."""
    from transformers import DynamicCache

    decoder, head = model.get_decoder(), model.get_output_embeddings().weight.float()
    stops = set(int(s) for s in stop_ids)
    seqs: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    cache = DynamicCache(config=model.config)  # filled in place by each call
    with torch.no_grad():
        out = decoder(input_ids=torch.tensor([list(prompt_ids)] * n), cache=cache, use_cache=True)
        for _ in range(max_new_tokens):
            logits = output_logits(out.last_hidden_state[:, -1], head, scoring_temperature(temperature))
            if temperature > 0:
                tokens = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)[:, 0]
            else:
                tokens = logits.argmax(-1)
            for i, t in enumerate(tokens.tolist()):
                if not done[i]:
                    seqs[i].append(t)
                    done[i] = t in stops
            if all(done):
                break
            out = decoder(input_ids=tokens[:, None], cache=cache, use_cache=True)
    return seqs


class TorchScorer:
    """A ``Scorer`` over a torch model: ``weights()`` yields it (the policy, or the initial weights)."""

    def __init__(self, weights: Callable[[], ContextManager[Any]], stop_ids: Sequence[int]) -> None:
        self.weights = weights
        self.stop_ids = list(stop_ids)

    @classmethod
    def of(cls, model, stop_ids: Sequence[int]) -> TorchScorer:
        """A scorer over ``model`` as it is at each call."""
        return cls(lambda: contextlib.nullcontext(model), stop_ids)

    def logprobs(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> list[float]:
        with self.weights() as m:
            return teacher_forced_logprobs(m, list(prompt_ids) + list(response_ids), len(prompt_ids),
                                           temperature).tolist()

    def distributions(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> torch.Tensor:
        with self.weights() as m:
            return teacher_forced_log_softmax(m, list(prompt_ids) + list(response_ids), len(prompt_ids), temperature)

    def sample(self, prompt_ids: list[int], n: int, *, temperature: float, max_new_tokens: int,
               seed: int | None = None) -> list[list[int]]:
        with self.weights() as m:
            device = next(m.parameters()).device  # the generator must be where the sampling happens
            generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
            return sample_responses(m, prompt_ids, n, temperature=temperature, max_new_tokens=max_new_tokens,
                                    stop_ids=self.stop_ids, generator=generator)

    def logprobs_and_greedy(self, prompt_ids: list[int], answer: list[int]) -> tuple[list[float], bool]:
        """``answer``'s log-probs after the prompt (temperature 1), and whether greedy decoding gives it: it
        does exactly when the argmax is ``answer``'s token at every position (given the answer so far). Both
        read off one teacher-forced pass, no generation."""
        dist = self.distributions(prompt_ids, answer)
        target = torch.tensor(answer, dtype=torch.long)[:, None]
        return dist.gather(1, target)[:, 0].tolist(), bool((dist.argmax(-1) == target[:, 0]).all())


class EngineScorer:
    """A ``Scorer`` over an ``Engine`` that lives on event loop ``loop`` (called from another thread)."""

    def __init__(self, engine, loop: asyncio.AbstractEventLoop, stop_ids: Sequence[int],
                 timeout_s: float = 600.0) -> None:
        self.engine = engine
        self.loop = loop
        self.stop_ids = tuple(stop_ids)
        self.timeout_s = timeout_s

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout_s)

    def logprobs(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> list[float]:
        if abs(temperature - 1.0) > 1e-6:
            raise ValueError(f"an engine scores at temperature 1, not {temperature:g}")
        ids = list(prompt_ids) + list(response_ids)
        return list(self._run(self.engine.score(ids, len(prompt_ids))))

    def distributions(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0) -> torch.Tensor:
        raise NotImplementedError("an engine hands out per-token log-probs, not whole distributions")

    def sample(self, prompt_ids: list[int], n: int, *, temperature: float, max_new_tokens: int,
               seed: int | None = None) -> list[list[int]]:
        from slime_ext.engines.base import SamplingParams

        async def one(i: int) -> list[int]:
            sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens,
                                      stop_token_ids=self.stop_ids, seed=None if seed is None else seed + i)
            return [out.token_id async for out in self.engine.generate(list(prompt_ids), sampling)]

        async def all_of() -> list[list[int]]:
            return list(await asyncio.gather(*(one(i) for i in range(n))))

        return self._run(all_of())

    def logprobs_and_greedy(self, prompt_ids: list[int], answer: list[int]) -> tuple[list[float], bool]:
        """``answer``'s log-probs after the prompt, and whether greedy decoding (a generation here) gives it."""
        (greedy,) = self.sample(prompt_ids, 1, temperature=0.0, max_new_tokens=max(1, len(answer)))
        return self.logprobs(prompt_ids, answer), greedy[: len(answer)] == list(answer)
