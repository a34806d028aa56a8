"""Judge accuracy per class on the labelled follow-up set (``tests/data/followups.jsonl``).

Runs each chosen judge backend over the set (or a per-class subset) and prints, per class and per
split (``dev``: what the heuristic's rules were tuned on; ``test``, ``fresh``, ``fresh2``, ``fresh3``: held
out), the share of follow-ups judged with the expected score, the negatives judged +1, and the
hints that state the expected instruction (``slime_ext.judge.evaluate.hint_matches``).

Backends: ``heuristic`` (instant), ``self`` (the served model with no adapter: ``EngineJudgeBackend``
on ``--model``, as ``serve --judge self`` runs it) and ``openai`` (``--judge-url`` / ``--judge-model``).

    .venv/bin/python bench/judge_eval.py                                  # the heuristic, all rows
    .venv/bin/python bench/judge_eval.py --backend self --per-class 4 --votes 1 --max-new-tokens 256
    .venv/bin/python bench/judge_eval.py --backend openai --judge-url http://127.0.0.1:30000 --judge-model smollm2-135m
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slime_ext.judge.evaluate import (  # noqa: E402
    FollowUp,
    format_table,
    load_followups,
    run_heuristic,
    score_rows,
)

DATA = ROOT / "tests" / "data" / "followups.jsonl"
RESULTS = ROOT / "bench" / "results"


def pick(rows: list[FollowUp], per_class: int | None) -> list[FollowUp]:
    """The first ``per_class`` rows of each class, spread over the splits (all rows when None)."""
    if not per_class:
        return rows
    picked: list[FollowUp] = []
    for cls in sorted({r.cls for r in rows}):
        of_class = [r for r in rows if r.cls == cls]
        splits = dict.fromkeys(r.split for r in of_class)
        by_split = {s: [r for r in of_class if r.split == s] for s in splits}
        while len([r for r in picked if r.cls == cls]) < min(per_class, len(of_class)):
            for split_rows in by_split.values():
                if split_rows and len([r for r in picked if r.cls == cls]) < per_class:
                    picked.append(split_rows.pop(0))
    return picked


def judge_input(row: FollowUp):
    """The turn a row describes, as the server hands it to a judge."""
    from slime_ext.judge import JudgeInput

    return JudgeInput(request_messages=[{"role": "user", "content": row.request}], response_text=row.response,
                      response_tool_calls=None, next_state=row.next, next_state_role=row.role)


async def run_model(backend, rows: list[FollowUp], votes: int | None, hints: bool) -> tuple[dict, dict, dict]:
    """Votes (and hints) of a model backend through the judge's own runners, as the server runs them."""
    from slime_ext.judge import HintJudge, Judge

    judge = Judge(backend, votes=votes, timeout_s=600.0, max_concurrency=4)
    hint_judge = HintJudge.from_judge(judge) if hints else None
    out_votes: dict = {}
    out_hints: dict = {}
    texts: dict = {}

    async def one(row: FollowUp) -> None:
        verdict = await judge.judge(judge_input(row))
        out_votes[row.id], texts[row.id] = verdict.score, verdict.texts
        if hint_judge is not None:
            out_hints[row.id] = (await hint_judge.judge(judge_input(row))).hint

    await asyncio.gather(*(one(r) for r in rows))
    return out_votes, (out_hints if hints else None), texts


def self_backend(model: str, max_new_tokens: int, threads: int | None):
    """``serve --judge self``'s backend: an engine on ``model`` judging with its base weights."""
    from transformers import AutoTokenizer

    from slime_ext.engines.local import LocalEngine
    from slime_ext.judge import EngineJudgeBackend
    from slime_ext.models import resolve_model

    model_dir = resolve_model(model)
    engine = LocalEngine(model_dir, threads=threads)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return EngineJudgeBackend(engine, tokenizer, frozen_base=True, max_new_tokens=max_new_tokens), engine


async def run_backend(args, name: str, rows: list[FollowUp]) -> tuple[dict, dict | None, dict]:
    """Votes, hints (``None`` when not run) and answer texts of backend ``name`` on ``rows``."""
    if name == "heuristic":
        votes, hints = run_heuristic(rows)
        return votes, hints, {}
    if name == "self":
        backend, engine = self_backend(args.model, args.max_new_tokens, args.threads)
        try:
            return await run_model(backend, rows, args.votes, args.hints)
        finally:
            await engine.close()
    from slime_ext.judge import OpenAIJudgeBackend

    if not args.judge_url or not args.judge_model:
        raise SystemExit("--backend openai needs --judge-url and --judge-model")
    backend = OpenAIJudgeBackend(args.judge_url, args.judge_model, max_tokens=args.max_new_tokens)
    try:
        return await run_model(backend, rows, args.votes, args.hints)
    finally:
        await backend.close()


def main(argv: list[str] | None = None) -> None:
    """Print the per-class table of each chosen backend and write its raw votes to bench/results/."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", action="append", choices=("heuristic", "self", "openai"),
                   help="a judge backend to score (repeatable) [heuristic]")
    p.add_argument("--per-class", type=int, default=None, help="score only this many rows per class [all]")
    p.add_argument("--model", default="smollm2-135m", help="the self judge's model [smollm2-135m]")
    p.add_argument("--judge-url", help="the openai backend's endpoint")
    p.add_argument("--judge-model", help="the openai backend's model name")
    p.add_argument("--votes", type=int, default=None, help="votes per turn [the backend's default: 3 for models]")
    p.add_argument("--max-new-tokens", type=int, default=512, help="a model judge's answer length [512: serve's]")
    p.add_argument("--threads", type=int, default=None, help="torch threads of the self judge's engine")
    p.add_argument("--hints", action="store_true", help="also run a model backend's hint judge (slower)")
    args = p.parse_args(argv)
    rows = pick(load_followups(DATA), args.per_class)
    splits = list(dict.fromkeys(r.split for r in rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in args.backend or ["heuristic"]:
        t0 = time.monotonic()
        votes, hints, texts = asyncio.run(run_backend(args, name, rows))
        elapsed = time.monotonic() - t0
        columns = {s: score_rows([r for r in rows if r.split == s], votes, hints) for s in splits}
        columns["all"] = score_rows(rows, votes, hints)
        print(f"\n## {name}: {len(rows)} follow-ups, {elapsed:.0f} s\n\n```\n{format_table(columns)}\n```")
        record = {"rows": len(rows), "seconds": elapsed, "votes": votes, "hints": hints, "texts": texts}
        (RESULTS / f"judge_eval_{name}.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
