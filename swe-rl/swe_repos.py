"""The SWE setting's source repositories: small, correct Python packages with stdlib ``unittest`` suites.

Each repository is a folder of real files under ``repos/`` (``repos/<name>/<package>/...`` and
``repos/<name>/tests/``), read into ``REPOS[name] = {relative path: text}``: one package (1-2 modules) and a
``tests/`` package that ``python3 -m unittest`` discovers from the repository root (``cd repos/calc &&
python3 -m unittest`` runs one by hand). Every suite passes on the
code as written here (``tests/test_env_swe.py`` checks it). Tasks are made by injecting one bug into a
module (see ``swe_mutations.py``); only the files outside ``tests/`` are ever mutated.

``TABLE`` at the end is generated, not hand-written: for each repository, a digest of its files, the ids of
its tests and, for every qualifying mutation site (by its index in the site enumeration), the tests that fail
once that mutation is applied. Regenerate it after changing a repository or the mutation rules:

    PYTHONPATH=swe-rl .venv/bin/python -c "from swe_table import write_table; write_table()"

Editing a repository without regenerating makes ``list_tasks("swe")`` raise (the digest no longer matches).
"""

from __future__ import annotations

from pathlib import Path

DESCRIPTIONS = {
    "stackq": "a stack and a bounded FIFO queue",
    "textutil": "string helpers: slugify, truncate, wrap, center, word counts",
    "spans": "half-open intervals and calendar arithmetic",
    "calc": "a tokenizer and recursive-descent evaluator for integer arithmetic",
    "vecmat": "vector and matrix helpers on nested lists",
    "bank": "bank accounts with overdrafts, transfers and interest",
    "inventory": "a stock inventory with reservations and restock planning",
    "roman": "Roman numeral conversion",
}

REPOS_DIR = Path(__file__).resolve().parent / "repos"  # one folder per repository, its files as they are


def _read_repo(folder: Path) -> dict[str, str]:
    """``{relative path: text}`` of the files under ``folder`` (caches left out)."""
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


REPOS: dict[str, dict[str, str]] = {name: _read_repo(REPOS_DIR / name) for name in DESCRIPTIONS}


# ----------------------------------------------------------------------------- generated task table
# Written by swe_table.write_table(); do not edit by hand. Per repository: the
# digest of its files and mutation sites, its test ids, and mutation site index -> indices (in
# `tests`) of the tests that fail with that mutation.
TABLE: dict[str, dict] = {
    "stackq": {
        "digest": "a2fb6b267be5d7d6",
        "tests": [
            "tests.test_structures.BoundedQueueTest.test_capacity_one",  # 0
            "tests.test_structures.BoundedQueueTest.test_dequeue_empty_raises",  # 1
            "tests.test_structures.BoundedQueueTest.test_fifo_order",  # 2
            "tests.test_structures.BoundedQueueTest.test_free_slots",  # 3
            "tests.test_structures.BoundedQueueTest.test_full_queue_rejects",  # 4
            "tests.test_structures.StackTest.test_drain_top_first",  # 5
            "tests.test_structures.StackTest.test_peek_does_not_remove",  # 6
            "tests.test_structures.StackTest.test_peek_empty_raises",  # 7
            "tests.test_structures.StackTest.test_pop_empty_raises",  # 8
            "tests.test_structures.StackTest.test_push_pop_is_lifo",  # 9
        ],
        "tasks": {
            0: [8, 9],
            1: [8, 9],
            2: [8],
            3: [8, 9],
            4: [6, 7],
            5: [6],
            6: [6],
            7: [5],
            8: [5],
            9: [5],
            10: [0, 1, 2, 3, 4],
            11: [0],
            12: [0],
            13: [0],
            14: [4],
            15: [0, 2, 3, 4],
            16: [0, 1, 2],
            17: [0, 1, 2],
            18: [1],
            19: [0, 1, 2],
            20: [2],
            21: [0, 2],
            22: [3],
            23: [3],
        },
    },
    "textutil": {
        "digest": "93158a90367378c9",
        "tests": [
            "tests.test_text.TextTest.test_center",  # 0
            "tests.test_text.TextTest.test_palindrome",  # 1
            "tests.test_text.TextTest.test_slugify",  # 2
            "tests.test_text.TextTest.test_truncate_cuts_long_text",  # 3
            "tests.test_text.TextTest.test_truncate_keeps_text_that_fits",  # 4
            "tests.test_text.TextTest.test_truncate_rejects_tiny_width",  # 5
            "tests.test_text.TextTest.test_word_count",  # 6
            "tests.test_text.TextTest.test_wrap",  # 7
        ],
        "tasks": {
            0: [3, 4, 5],
            1: [5],
            2: [3, 4, 5],
            3: [4],
            4: [4],
            5: [3, 5],
            6: [3, 5],
            7: [1],
            8: [1],
            9: [1],
            10: [6],
            11: [6],
            12: [6],
            13: [6],
            14: [6],
            15: [6],
            16: [6],
            17: [7],
            18: [7],
            21: [7],
            22: [7],
            23: [7],
            24: [7],
            25: [7],
            26: [7],
            27: [7],
            28: [7],
            29: [0],
            31: [0],
            32: [0],
            33: [0],
            34: [0],
            35: [0],
            36: [0],
            37: [0],
            38: [0],
            39: [0],
            40: [0],
        },
    },
    "spans": {
        "digest": "d1eb8cf84df7e9b5",
        "tests": [
            "tests.test_dates.DatesTest.test_day_of_year",  # 0
            "tests.test_dates.DatesTest.test_day_of_year_rejects_bad_days",  # 1
            "tests.test_dates.DatesTest.test_days_in_month",  # 2
            "tests.test_dates.DatesTest.test_leap_years",  # 3
            "tests.test_intervals.IntervalTest.test_contains_is_half_open",  # 4
            "tests.test_intervals.IntervalTest.test_intersection",  # 5
            "tests.test_intervals.IntervalTest.test_length_and_bad_interval",  # 6
            "tests.test_intervals.IntervalTest.test_merge",  # 7
            "tests.test_intervals.IntervalTest.test_overlaps",  # 8
            "tests.test_intervals.IntervalTest.test_total_covered",  # 9
        ],
        "tasks": {
            0: [0, 1, 2, 3],
            1: [0, 1, 2, 3],
            2: [0, 1, 2, 3],
            3: [0, 1, 2, 3],
            4: [0, 1, 2, 3],
            5: [0, 1, 2, 3],
            6: [3],
            7: [3],
            8: [0, 1, 2, 3],
            9: [3],
            10: [3],
            11: [0, 1, 2, 3],
            12: [3],
            13: [3],
            14: [3],
            15: [3],
            16: [3],
            17: [0, 1, 2],
            18: [0, 1, 2],
            19: [2],
            20: [0, 1, 2],
            21: [2],
            22: [0, 2],
            23: [0, 2],
            24: [2],
            25: [0, 1, 2],
            26: [0, 1, 2],
            27: [0, 1, 2],
            28: [0, 1, 2],
            29: [0, 1, 2],
            30: [0, 1, 2],
            31: [0, 2],
            32: [0, 1, 2],
            33: [0, 1, 2],
            34: [0, 1, 2],
            35: [0, 1],
            36: [0],
            37: [1],
            38: [0],
            39: [1],
            40: [0, 1],
            41: [0, 1],
            42: [0, 1],
            43: [0, 1],
            44: [0, 1],
            45: [4, 5, 6, 7, 8, 9],
            46: [6],
            47: [6, 9],
            48: [4],
            49: [4],
            51: [5, 8],
            52: [8],
            53: [5],
            54: [5],
            55: [5, 7],
            56: [7, 9],
            57: [7, 9],
            58: [7],
            60: [7, 9],
            62: [7, 9],
            64: [7, 9],
            65: [7, 9],
            66: [9],
            67: [9],
            68: [9],
            69: [9],
        },
    },
    "calc": {
        "digest": "639f5a958ed2c2c3",
        "tests": [
            "tests.test_parser.EvaluateTest.test_addition_and_subtraction",  # 0
            "tests.test_parser.EvaluateTest.test_errors",  # 1
            "tests.test_parser.EvaluateTest.test_parentheses",  # 2
            "tests.test_parser.EvaluateTest.test_precedence",  # 3
            "tests.test_parser.EvaluateTest.test_unary_minus",  # 4
            "tests.test_parser.TokenizeTest.test_bad_character",  # 5
            "tests.test_parser.TokenizeTest.test_numbers_and_symbols",  # 6
            "tests.test_parser.TokenizeTest.test_single_digit_at_end",  # 7
        ],
        "tasks": {
            0: [0, 2, 3, 4, 6],
            1: [0, 1, 2, 3, 4, 6, 7],
            2: [0, 1, 2, 3, 4, 6, 7],
            3: [0, 2, 3, 4, 6, 7],
            6: [0, 1, 2, 3, 4, 5, 6, 7],
            7: [0, 2, 3, 4, 6, 7],
            8: [0, 1, 2, 3, 4, 7],
            9: [0, 1, 2, 3, 4, 5, 6, 7],
            12: [2, 7],
            13: [0, 2, 3, 4, 5, 6, 7],
            16: [2, 4, 6, 7],
            17: [0, 1, 2, 3, 4, 6, 7],
            18: [0, 2, 3, 4],
            19: [0, 1, 2, 3, 4],
            20: [0, 2, 3, 4],
            21: [0, 1, 2, 3, 4],
            22: [0, 1, 2, 3, 4],
            23: [0, 1, 2, 3, 4],
            24: [0, 1, 2, 3, 4],
            25: [0, 2, 3, 4],
            26: [0, 2, 3, 4],
            27: [0, 2, 3, 4],
            28: [0, 2, 3, 4],
            29: [0, 2, 3],
            30: [0, 2, 3, 4],
            31: [2, 3, 4],
            32: [2, 3, 4],
            33: [2, 3, 4],
            34: [3],
            35: [0, 1, 2, 3, 4],
            36: [0, 1, 2, 3, 4],
            37: [0, 1, 2, 3, 4],
            38: [1, 2],
            39: [1, 2],
            40: [2],
            41: [0, 1, 2, 3, 4],
            42: [0, 1, 2, 3, 4],
            43: [0, 2, 3, 4],
            44: [0, 1, 2, 3, 4],
            45: [0, 1, 2, 3, 4],
            46: [0, 2, 3, 4],
        },
    },
    "vecmat": {
        "digest": "5aa6e596dd32c316",
        "tests": [
            "tests.test_linalg.MatrixTest.test_identity",  # 0
            "tests.test_linalg.MatrixTest.test_matmul",  # 1
            "tests.test_linalg.MatrixTest.test_matmul_shape_mismatch",  # 2
            "tests.test_linalg.MatrixTest.test_trace",  # 3
            "tests.test_linalg.MatrixTest.test_transpose",  # 4
            "tests.test_linalg.VectorTest.test_add_and_scale",  # 5
            "tests.test_linalg.VectorTest.test_dot",  # 6
            "tests.test_linalg.VectorTest.test_dot_length_mismatch",  # 7
        ],
        "tasks": {
            0: [0, 1, 6, 7],
            1: [0, 1, 6, 7],
            2: [0, 1, 6],
            3: [0, 1, 6],
            4: [0, 1, 6],
            5: [0, 1, 6],
            6: [0, 1, 6],
            7: [5],
            8: [5],
            9: [5],
            10: [5],
            11: [0, 1, 4],
            14: [0, 1],
            16: [1, 2],
            17: [0, 1],
            18: [0, 1],
            19: [0, 3],
            20: [0, 3],
            21: [0, 3],
            22: [0],
            23: [0],
            24: [3],
            25: [3],
            26: [3],
            27: [3],
        },
    },
    "bank": {
        "digest": "2e7983fe6d2d2ed8",
        "tests": [
            "tests.test_account.AccountTest.test_deposit_and_withdraw",  # 0
            "tests.test_account.AccountTest.test_overdraft",  # 1
            "tests.test_account.AccountTest.test_rejects_negative_opening_balance",  # 2
            "tests.test_account.AccountTest.test_rejects_non_positive_amounts",  # 3
            "tests.test_account.AccountTest.test_withdraw_all_without_overdraft",  # 4
            "tests.test_account.BankTest.test_failed_transfer_changes_nothing",  # 5
            "tests.test_account.BankTest.test_interest",  # 6
            "tests.test_account.BankTest.test_no_interest_on_small_or_negative_balance",  # 7
            "tests.test_account.BankTest.test_transfer",  # 8
        ],
        "tasks": {
            2: [0, 3, 4, 5, 6, 7, 8],
            3: [4, 5],
            4: [0, 1, 2, 3, 4, 5, 6, 7, 8],
            5: [5, 7],
            6: [2],
            7: [5, 7],
            8: [2],
            9: [0, 3, 4, 5, 6, 7, 8],
            10: [2],
            11: [0, 3, 4, 5, 6, 7, 8],
            12: [0, 3, 6, 8],
            13: [3],
            14: [3],
            16: [0, 6, 8],
            17: [1, 7],
            18: [0, 1, 3, 4, 5, 7, 8],
            19: [3],
            20: [3],
            21: [1, 4],
            22: [0, 1, 4, 5, 7, 8],
            23: [1, 4],
            24: [0, 1, 4, 7, 8],
            25: [7],
            26: [7],
            27: [6, 7],
            31: [6],
            32: [6, 7],
            33: [6],
            34: [6],
            35: [6, 7],
            36: [7],
            37: [7],
            39: [6, 7],
        },
    },
    "inventory": {
        "digest": "884f65d8adc6004d",
        "tests": [
            "tests.test_stock.InventoryTest.test_add_and_total",  # 0
            "tests.test_stock.InventoryTest.test_add_rejects_zero",  # 1
            "tests.test_stock.InventoryTest.test_remove",  # 2
            "tests.test_stock.InventoryTest.test_remove_respects_reservations",  # 3
            "tests.test_stock.InventoryTest.test_reserve_limits_available",  # 4
            "tests.test_stock.RestockTest.test_plan",  # 5
            "tests.test_stock.RestockTest.test_plan_counts_reservations",  # 6
            "tests.test_stock.RestockTest.test_plan_rejects_bad_target",  # 7
        ],
        "tasks": {
            0: [0, 2, 3, 4, 5, 6],
            1: [0, 2, 4, 6],
            2: [0, 1, 2, 3, 4, 5, 6],
            3: [0, 2, 3, 4, 5, 6],
            4: [1],
            5: [0, 2, 3, 4, 5, 6],
            6: [0, 2, 3, 4, 5, 6],
            7: [0, 2, 3, 4, 5, 6],
            8: [0, 2, 3, 4, 5, 6],
            11: [3, 4, 6],
            12: [5, 6],
            13: [2, 5, 6],
            14: [3, 4, 6],
            15: [4],
            16: [3, 4, 6],
            17: [3, 4, 6],
            18: [3, 4, 6],
            21: [2, 3],
            22: [3],
            23: [3],
            24: [3],
            25: [3],
            26: [2, 3],
            27: [2, 3],
            28: [2, 3],
            29: [2, 3],
            30: [2],
            31: [2, 3],
            32: [0],
            33: [0],
            34: [0],
            35: [0],
            36: [5, 6, 7],
            37: [7],
            38: [5, 6],
            39: [5, 6],
            40: [5, 6],
            41: [5, 6],
        },
    },
    "roman": {
        "digest": "0f0418afca8a3f31",
        "tests": [
            "tests.test_numerals.FromRomanTest.test_malformed",  # 0
            "tests.test_numerals.FromRomanTest.test_round_trip",  # 1
            "tests.test_numerals.FromRomanTest.test_values",  # 2
            "tests.test_numerals.ToRomanTest.test_large_numbers",  # 3
            "tests.test_numerals.ToRomanTest.test_out_of_range",  # 4
            "tests.test_numerals.ToRomanTest.test_small_numbers",  # 5
        ],
        "tasks": {
            0: [1, 2, 3, 4, 5],
            1: [1, 2, 5],
            2: [4],
            3: [1, 2, 5],
            4: [4],
            5: [1, 3],
            6: [1, 3],
            7: [4],
            8: [0, 1, 2, 3, 5],
            9: [0, 1, 2, 3, 5],
            10: [1, 2, 3, 5],
            11: [1, 2, 3, 5],
            12: [1, 2],
            13: [1, 2],
            14: [1, 2],
            17: [1, 2],
            18: [1, 2],
            19: [1, 2],
            20: [1, 2],
            21: [1, 2],
            22: [0, 1, 2],
            23: [0, 1, 2],
            24: [1, 2],
        },
    },
}
