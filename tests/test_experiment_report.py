"""The experiment's outputs from rows: the Markdown summary (start, end, spread over seeds, the
first probe reaching the target) and `openclaw-rl experiment report` merging CSVs."""

import csv

from slime_ext.cli import main
from slime_ext.simulate.experiment import COLUMNS, markdown_table, write_csv


def _row(method, persona, seed, sessions, score, interactions=None, wall=10.0):
    return {"method": method, "persona": persona, "seed": seed, "sessions": sessions,
            "interactions": sessions * 3 if interactions is None else interactions, "policy_version": sessions // 2,
            "score_mean": score, "score_std": 0.1, "probe_n": 8, "wall_s": wall, "failed_requests": 0}


def _table_line(md, method, persona):
    return next(line for line in md.splitlines() if line.startswith(f"| {method} | {persona} |"))


def test_markdown_table_reports_mean_start_end_spread_and_first_probe_reaching_the_target():
    rows = [_row("opd", "teacher", 0, 0, 0.6), _row("opd", "teacher", 0, 4, 0.7), _row("opd", "teacher", 0, 8, 0.9),
            _row("opd", "teacher", 1, 0, 0.6), _row("opd", "teacher", 1, 4, 0.9), _row("opd", "teacher", 1, 8, 0.7),
            _row("binary", "teacher", 0, 0, 0.6), _row("binary", "teacher", 0, 8, 0.5, wall=30.0)]
    md = markdown_table(rows)
    cells = [c.strip() for c in _table_line(md, "opd", "teacher").strip("|").split("|")]
    # seeds, start mean, end mean, end mean ± population sd, interactions at the first probe whose mean >= 0.8
    assert cells[2:7] == ["2", "0.600", "0.800", "0.800 ± 0.100", "12"]
    cells = [c.strip() for c in _table_line(md, "binary", "teacher").strip("|").split("|")]
    assert cells[2:8] == ["1", "0.600", "0.500", "0.500 ± 0.000", "not reached", "30"]


def test_report_merges_csvs_of_separate_runs(tmp_path, capsys):
    a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "merged"
    write_csv([_row("combine", "student", 0, 0, 0.2), _row("combine", "student", 0, 8, 0.4)], a)
    write_csv([_row("combine", "student", 1, 0, 0.2), _row("combine", "student", 1, 8, 0.6)], b)
    assert main(["experiment", "report", str(a), str(b), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert list(rows[0]) == COLUMNS and [r["seed"] for r in rows] == ["0", "0", "1", "1"]
    line = _table_line((out / "results.md").read_text(), "combine", "student")
    assert "| 2 | 0.200 | 0.500 | 0.500 ± 0.100 |" in line
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"
    assert "| combine | student |" in capsys.readouterr().out


def test_report_refuses_a_file_that_is_not_a_results_csv(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("method,score\nx,1\n")
    assert main(["experiment", "report", str(bad), "--out", str(tmp_path / "o")]) != 0
    assert "bad.csv: not a results.csv, missing columns ['persona'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
