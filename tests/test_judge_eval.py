"""The heuristic judge on the labelled follow-up set (``tests/data/followups.jsonl``).

450 realistic follow-ups in 13 classes (thanks, approval, moving on, follow-up, correction, standing
preference, redo, complaint, "thanks, but ...", rephrase, tool error, tool success, ambiguous), written
before the rules were tuned; ``dev`` rows were tuned on, ``test``, ``fresh``, ``fresh2`` and ``fresh3`` rows held
out (docs/learning.md has the figures and the first look at each part). The bar: >= 0.95
overall (and on each part), no negative follow-up judged +1, and the hint of a standing preference
(or of a "thanks, but ...", a redo with an instruction) is the preference itself (``hint_matches``).
Other backends: ``bench/judge_eval.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_ext.judge.evaluate import (
    NEGATIVE_CLASSES,
    FollowUp,
    format_table,
    hint_matches,
    load_followups,
    run_heuristic,
    score_rows,
)

DATA = Path(__file__).parent / "data" / "followups.jsonl"
MIN_ACCURACY = 0.95
MIN_PREFERENCE_HINTS = 0.9  # preferences, "thanks, but ..." and redo requests that carry an instruction
HINTED_CLASSES = ("preference", "thanks_but", "redo")
SPLITS = ("dev", "test", "fresh", "fresh2", "fresh3")


@pytest.fixture(scope="module")
def rows() -> list[FollowUp]:
    return load_followups(DATA)


@pytest.fixture(scope="module")
def judged(rows):
    votes, hints = run_heuristic(rows)
    parts = {s: score_rows([r for r in rows if r.split == s], votes, hints) for s in SPLITS}
    return score_rows(rows, votes, hints), parts


def _report(table, parts) -> str:
    misses = "\n".join(m for c, s in sorted(table.items()) for m in s.misses)
    return f"\n{format_table(parts)}\n{misses}"


def test_the_set_is_broad_and_labelled(rows):
    assert len(rows) >= 200
    assert len({r.id for r in rows}) == len(rows)
    classes = {r.cls for r in rows}
    assert {"thanks", "moving_on", "correction", "preference", "redo", "complaint", "thanks_but",
            "tool_error", "tool_success", "ambiguous"} <= classes
    for c in classes:
        assert sum(r.cls == c for r in rows) >= 6, c
    assert all(r.label in (-1, 0, 1) and r.role in ("user", "tool") and r.split in SPLITS for r in rows)
    assert all(r.label == -1 for r in rows if r.cls in NEGATIVE_CLASSES + ("tool_error",))
    assert all(r.hint_keys for r in rows if r.cls == "preference")
    assert sum(r.split == "test" for r in rows) >= 60


def test_heuristic_accuracy_overall_and_on_each_part(judged):
    table, parts = judged
    report = _report(table, parts)
    assert table["all"].accuracy >= MIN_ACCURACY, report
    assert all(part["all"].accuracy >= MIN_ACCURACY for part in parts.values()), report


def test_no_correction_or_preference_is_judged_plus_one(judged):
    table, parts = judged
    assert all(table[c].negative_as_positive == 0 for c in NEGATIVE_CLASSES if c in table), _report(table, parts)


def test_preference_hints_state_the_preference(judged):
    table, parts = judged
    expected = sum(table[c].hints_expected for c in HINTED_CLASSES)
    matched = sum(table[c].hints_matched for c in HINTED_CLASSES)
    assert expected >= 60
    assert matched / expected >= MIN_PREFERENCE_HINTS, _report(table, parts)
    assert table["preference"].hints_matched / table["preference"].hints_expected >= MIN_PREFERENCE_HINTS


@pytest.mark.parametrize(
    ("hint", "keys", "expected"),
    [
        ("Start every answer with 'Sure!'.", ["sure!"], True),
        ("start every answer with \u2018Sure!\u2019", ["'sure!'"], True),  # case and curly quotes
        ("From now on, start every answer with 'Sure!'.", ["sure!"], False),  # the user's framing kept
        ("I wanted just the number.", ["just the number"], False),
        ("Thanks, but shorter.", ["shorter"], False),
        ("Give just the number.", ["just the number"], True),
        ("Give the number.", ["just the number"], False),  # a key phrase missing
        (None, ["x"], False),
    ],
)
def test_hint_match_rule(hint, keys, expected):
    assert hint_matches(hint, keys) is expected


def test_a_bad_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"id": "a"}\n')
    with pytest.raises(ValueError, match=r"set\.jsonl:1"):
        load_followups(path)
