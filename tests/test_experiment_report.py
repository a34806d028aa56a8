"""The experiment's outputs from rows: the Markdown summary (start, end, spread over seeds, the
first probe reaching the target, the first from which it stays there, the teacher's score,
correctness / distinct-2 / length start -> end) and `openclaw-rl experiment report` merging CSVs;
the pure probe helpers (distinct-2, the hinted teacher's compliance)."""

import csv

import pytest

from slime_ext.cli import main
from slime_ext.judge.heuristic import heuristic_hint
from slime_ext.learning.teacher import teacher_messages
from slime_ext.simulate.adaptation import adaptation, adaptation_table, bootstrap_ci, sessions_to_adaptation
from slime_ext.simulate.experiment import COLUMNS, distinct_2, markdown_table, teacher_compliance, write_csv
from slime_ext.simulate.personas import get_persona
from slime_ext.simulate.questions import preference_tasks


def _row(method, persona, seed, sessions, score, interactions=None, wall=10.0, correct="", teacher="", memory=None,
         correct_memory=""):
    return {"score_memory": score if memory is None else memory, "correct_memory": correct_memory, "method": method, "persona": persona, "seed": seed, "sessions": sessions,
            "interactions": sessions * 3 if interactions is None else interactions, "policy_version": sessions // 2,
            "score_mean": score, "score_std": 0.1, "probe_n": 8, "correct": correct, "distinct2": 0.8,
            "mean_words": 10 + sessions, "teacher_score": teacher, "wall_s": wall, "failed_requests": 0}


def _table_line(md, method, persona):
    return next(line for line in md.splitlines() if line.startswith(f"| {method} | {persona} |"))


def test_markdown_table_reports_mean_start_end_spread_first_and_stable_probe_reaching_the_target():
    rows = [_row("opd", "teacher", 0, 0, 0.6, correct=1.0, teacher=0.9), _row("opd", "teacher", 0, 4, 0.7),
            _row("opd", "teacher", 0, 8, 0.9, correct=0.9, memory=1.0, correct_memory=0.95),
            _row("opd", "teacher", 1, 0, 0.6, correct=1.0, teacher=0.7), _row("opd", "teacher", 1, 4, 0.9),
            _row("opd", "teacher", 1, 8, 0.7, correct=0.8, memory=0.8, correct_memory=0.85),
            _row("binary", "teacher", 0, 0, 0.6), _row("binary", "teacher", 0, 8, 0.5, wall=30.0)]
    md = markdown_table(rows)
    cells = [c.strip() for c in _table_line(md, "opd", "teacher").strip("|").split("|")]
    # seeds, teacher, start mean, end mean ± population sd, first probe whose mean >= 0.8, stable from (none)
    assert cells[2:8] == ["2", "0.800", "0.600", "0.800 ± 0.100", "12", "-"]
    assert cells[8:12] == ["1.00 -> 0.85", "0.900, 0.90", "0.80 -> 0.80", "10.00 -> 18.00"]  # memory on: at the end
    cells = [c.strip() for c in _table_line(md, "binary", "teacher").strip("|").split("|")]
    assert cells[2:8] == ["1", "nan", "0.600", "0.500 ± 0.000", "-", "-"] and cells[-1] == "30"


def test_stable_is_the_first_of_three_consecutive_probe_points_at_the_target():
    scores = [0.2, 0.9, 0.5, 0.8, 0.85, 0.9, 0.7]  # one dip after the first crossing; then three in a row
    rows = [_row("combine", "sure", 0, 4 * i, s, interactions=4 * i) for i, s in enumerate(scores)]
    cells = [c.strip() for c in _table_line(markdown_table(rows), "combine", "sure").strip("|").split("|")]
    assert cells[6:8] == ["4", "12"]
    rows = [_row("combine", "sure", 0, 4 * i, s, interactions=4 * i) for i, s in enumerate([0.2, 0.9, 0.9])]
    cells = [c.strip() for c in _table_line(markdown_table(rows), "combine", "sure").strip("|").split("|")]
    assert cells[6:8] == ["4", "-"]  # two points at the end are not three


def test_distinct_2():
    assert distinct_2(["a b c", "a b d"]) == 0.75  # bigrams ab bc ab bd: three distinct of four
    assert distinct_2(["Sure sure SURE sure"]) == pytest.approx(1 / 3)
    assert distinct_2(["one", ""]) == 1.0


class _Answers:
    """A chat client that answers from a table and records the requests."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def chat(self, messages, headers=None, **sampling):
        text = messages[-1]["content"]
        self.asked.append((text, headers, sampling))
        return self.table.get(text)


def test_teacher_compliance_asks_the_hinted_prompt_only_where_the_base_answer_fails():
    sure = get_persona("sure")
    tasks = preference_tasks("heldout", 3)
    base = ["Sure! It is Tokyo.", "It is the Pacific.", None]
    hinted = [teacher_messages([{"role": "user", "content": tasks[1].prompt}],
                               heuristic_hint(sure.reply(tasks[1], base[1]), "user"))[-1]["content"]]
    client = _Answers({hinted[0]: "Sure! The Pacific."})
    assert teacher_compliance(client, sure, tasks, base) == 1.0  # the passing answer and the hinted one
    assert [a for a, _, _ in client.asked] == hinted
    assert all(h["X-Turn-Type"] == "side" and s == {"temperature": 0.0} for _, h, s in client.asked)
    client = _Answers({hinted[0]: "It is the Pacific."})
    assert teacher_compliance(client, sure, tasks, base) == 0.5


def test_report_merges_csvs_of_separate_runs(tmp_path, capsys):
    a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "merged"
    write_csv([_row("combine", "student", 0, 0, 0.2), _row("combine", "student", 0, 8, 0.4)], a)
    write_csv([_row("combine", "student", 1, 0, 0.2), _row("combine", "student", 1, 8, 0.6)], b)
    assert main(["experiment", "report", str(a), str(b), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert list(rows[0]) == COLUMNS and [r["seed"] for r in rows] == ["0", "0", "1", "1"]
    line = _table_line((out / "results.md").read_text(), "combine", "student")
    assert "| 2 | nan | 0.200 | 0.500 ± 0.100 |" in line
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"
    assert "| combine | student |" in capsys.readouterr().out


def test_report_refuses_a_file_that_is_not_a_results_csv(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("method,score\nx,1\n")
    assert main(["experiment", "report", str(bad), "--out", str(tmp_path / "o")]) != 0
    assert "bad.csv: not a results.csv, missing columns ['persona'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ sessions to adaptation (v3)


def test_adaptation_is_the_first_of_three_consecutive_sessions_that_meet_the_preference():
    assert sessions_to_adaptation([1, 1, 1, 0]) == 1
    assert sessions_to_adaptation([0, 1, 1, 0, 1, 1, 1]) == 5  # two in a row is not three
    assert sessions_to_adaptation([0.5, 0.9, 0.8, 1.0]) == 2  # partial credit meets it at 0.8
    assert sessions_to_adaptation([1, 1, 0, 1, 1]) is None and sessions_to_adaptation([]) is None


def test_the_bootstrap_interval_holds_the_mean_and_narrows_with_agreeing_seeds():
    lo, hi = bootstrap_ci([4.0, 4.0, 4.0, 4.0, 4.0])
    assert lo == hi == 4.0
    lo, hi = bootstrap_ci([2.0, 3.0, 10.0, 4.0, 6.0])
    assert lo < 5.0 < hi and 2.0 <= lo and hi <= 10.0
    assert bootstrap_ci([2.0, 3.0, 10.0, 4.0, 6.0]) == (lo, hi)  # seeded: the same table each time
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_a_run_that_never_adapts_counts_as_one_past_its_sessions_and_is_flagged():
    a = adaptation({0: [1, 1, 1, 1], 1: [0, 0, 0, 0]})
    assert a["mean"] == (1 + 5) / 2 and a["censored"] == 1 and a["from_second"] == 0.5
    rows = [{"method": "m", "persona": "p", "seed": seed, "session": i + 1, "score": sc}
            for seed, scores in ((0, [1, 1, 1, 1]), (1, [0, 0, 0, 0])) for i, sc in enumerate(scores)]
    line = adaptation_table(list(reversed(rows))).splitlines()[-1]  # any row order: sessions are sorted
    assert line.startswith("| m | p | 2 | 0.500 | >3.0 [") and line.endswith("| 1 |")
