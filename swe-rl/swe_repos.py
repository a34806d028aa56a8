"""The SWE setting's source repositories: small, correct Python packages with stdlib ``unittest`` suites.

Each repository is plain data, ``REPOS[name] = {relative path: text}``: one package (1-2 modules) and a
``tests/`` package that ``python3 -m unittest`` discovers from the repository root. Every suite passes on the
code as written here (``tests/test_env_swe.py`` checks it). Tasks are made by injecting one bug into a
module (see ``swe_mutations.py``); only the files outside ``tests/`` are ever mutated.

``TABLE`` at the end is generated, not hand-written: for each repository, a digest of its files, the ids of
its tests and, for every qualifying mutation site (by its index in the site enumeration), the tests that fail
once that mutation is applied. Regenerate it after changing a repository or the mutation rules:

    PYTHONPATH=swe-rl .venv/bin/python -c "from swe_table import write_table; write_table()"

Editing a repository without regenerating makes ``list_tasks("swe")`` raise (the digest no longer matches).
"""

from __future__ import annotations

import textwrap


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


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

REPOS: dict[str, dict[str, str]] = {}

# ----------------------------------------------------------------------------- stackq
REPOS["stackq"] = {
    "stackq/__init__.py": _src('''
        from stackq.structures import BoundedQueue, EmptyError, Stack

        __all__ = ["BoundedQueue", "EmptyError", "Stack"]
        '''),
    "stackq/structures.py": _src('''
        """A stack and a bounded first-in first-out queue."""


        class EmptyError(Exception):
            """Taking an item from an empty container."""


        class Stack:
            """Last in, first out."""

            def __init__(self):
                self._items = []

            def push(self, item):
                self._items.append(item)

            def pop(self):
                if len(self._items) == 0:
                    raise EmptyError("pop from an empty stack")
                return self._items.pop()

            def peek(self):
                if not self._items:
                    raise EmptyError("peek at an empty stack")
                return self._items[-1]

            def drain(self):
                """All items, top first; the stack is empty afterwards."""
                items = self._items[::-1]
                self._items = []
                return items

            def __len__(self):
                return len(self._items)


        class BoundedQueue:
            """First in, first out, holding at most `capacity` items."""

            def __init__(self, capacity):
                if capacity < 1:
                    raise ValueError("capacity must be at least 1")
                self.capacity = capacity
                self._items = []

            def is_full(self):
                return len(self._items) >= self.capacity

            def enqueue(self, item):
                if self.is_full():
                    raise OverflowError("the queue is full")
                self._items.append(item)

            def dequeue(self):
                if len(self._items) == 0:
                    raise EmptyError("dequeue from an empty queue")
                return self._items.pop(0)

            def free_slots(self):
                free = self.capacity - len(self._items)
                return free

            def __len__(self):
                return len(self._items)
        '''),
    "tests/__init__.py": "",
    "tests/test_structures.py": _src('''
        import unittest

        from stackq import BoundedQueue, EmptyError, Stack


        class StackTest(unittest.TestCase):
            def test_push_pop_is_lifo(self):
                s = Stack()
                for x in (1, 2, 3):
                    s.push(x)
                self.assertEqual([s.pop(), s.pop(), s.pop()], [3, 2, 1])
                self.assertEqual(len(s), 0)

            def test_pop_empty_raises(self):
                with self.assertRaises(EmptyError):
                    Stack().pop()

            def test_peek_does_not_remove(self):
                s = Stack()
                s.push("a")
                s.push("b")
                self.assertEqual(s.peek(), "b")
                self.assertEqual(len(s), 2)

            def test_peek_empty_raises(self):
                with self.assertRaises(EmptyError):
                    Stack().peek()

            def test_drain_top_first(self):
                s = Stack()
                for x in "abc":
                    s.push(x)
                self.assertEqual(s.drain(), ["c", "b", "a"])
                self.assertEqual(len(s), 0)


        class BoundedQueueTest(unittest.TestCase):
            def test_fifo_order(self):
                q = BoundedQueue(3)
                for x in (1, 2, 3):
                    q.enqueue(x)
                self.assertEqual([q.dequeue(), q.dequeue(), q.dequeue()], [1, 2, 3])

            def test_full_queue_rejects(self):
                q = BoundedQueue(2)
                q.enqueue("a")
                q.enqueue("b")
                self.assertTrue(q.is_full())
                with self.assertRaises(OverflowError):
                    q.enqueue("c")

            def test_free_slots(self):
                q = BoundedQueue(3)
                q.enqueue(1)
                q.enqueue(2)
                self.assertFalse(q.is_full())
                self.assertEqual(q.free_slots(), 1)

            def test_capacity_one(self):
                q = BoundedQueue(1)
                q.enqueue("x")
                self.assertEqual(q.dequeue(), "x")
                self.assertEqual(len(q), 0)
                with self.assertRaises(ValueError):
                    BoundedQueue(0)

            def test_dequeue_empty_raises(self):
                with self.assertRaises(EmptyError):
                    BoundedQueue(2).dequeue()
        '''),
}

# ----------------------------------------------------------------------------- textutil
REPOS["textutil"] = {
    "textutil/__init__.py": _src('''
        from textutil.text import center, is_palindrome, slugify, truncate, word_count, wrap

        __all__ = ["center", "is_palindrome", "slugify", "truncate", "word_count", "wrap"]
        '''),
    "textutil/text.py": _src('''
        """Small string helpers."""

        import re


        def slugify(text):
            """Lower-case words joined by dashes: "Hello, World!" -> "hello-world"."""
            words = re.findall(r"[a-z0-9]+", text.lower())
            return "-".join(words)


        def truncate(text, width, suffix="..."):
            """`text` cut to at most `width` characters, ending with `suffix` when it was cut."""
            if width < len(suffix):
                raise ValueError("width is smaller than the suffix")
            if len(text) <= width:
                return text
            return text[: width - len(suffix)] + suffix


        def is_palindrome(text):
            """Whether the letters and digits of `text` read the same backwards (case ignored)."""
            chars = [c for c in text.lower() if c.isalnum()]
            return chars == chars[::-1]


        def word_count(text):
            """How often each word occurs (lower-cased, surrounding punctuation stripped)."""
            counts = {}
            for word in text.lower().split():
                word = word.strip(".,;:!?")
                if word:
                    counts[word] = counts.get(word, 0) + 1
            return counts


        def wrap(text, width):
            """The words of `text` greedily packed into lines of at most `width` characters."""
            lines = []
            current = ""
            for word in text.split():
                if current and len(current) + 1 + len(word) > width:
                    lines.append(current)
                    current = word
                elif current:
                    current = current + " " + word
                else:
                    current = word
            if current:
                lines.append(current)
            return lines


        def center(text, width, fill="*"):
            """`text` padded with `fill` to `width`; the extra character, if any, goes right."""
            if len(text) >= width:
                return text
            total = width - len(text)
            left = total // 2
            right = total - left
            return fill * left + text + fill * right
        '''),
    "tests/__init__.py": "",
    "tests/test_text.py": _src('''
        import unittest

        from textutil import center, is_palindrome, slugify, truncate, word_count, wrap


        class TextTest(unittest.TestCase):
            def test_slugify(self):
                self.assertEqual(slugify("Hello, World! 2024"), "hello-world-2024")
                self.assertEqual(slugify("  --  "), "")

            def test_truncate_cuts_long_text(self):
                self.assertEqual(truncate("hello world", 8), "hello...")

            def test_truncate_keeps_text_that_fits(self):
                self.assertEqual(truncate("short", 10), "short")
                self.assertEqual(truncate("exact", 5), "exact")

            def test_truncate_rejects_tiny_width(self):
                with self.assertRaises(ValueError):
                    truncate("abc", 2)
                self.assertEqual(truncate("abcdef", 3), "...")

            def test_palindrome(self):
                self.assertTrue(is_palindrome("A man, a plan, a canal: Panama"))
                self.assertFalse(is_palindrome("hello"))
                self.assertFalse(is_palindrome("ab"))

            def test_word_count(self):
                self.assertEqual(word_count("The cat. The dog! the END"), {"the": 3, "cat": 1, "dog": 1, "end": 1})
                self.assertEqual(word_count(" ... "), {})

            def test_wrap(self):
                self.assertEqual(wrap("the quick brown fox jumps", 10), ["the quick", "brown fox", "jumps"])
                self.assertEqual(wrap("a bb ccc", 4), ["a bb", "ccc"])
                self.assertEqual(wrap("", 5), [])

            def test_center(self):
                self.assertEqual(center("ab", 6), "**ab**")
                self.assertEqual(center("abc", 6, "-"), "-abc--")
                self.assertEqual(center("toolong", 3), "toolong")
                self.assertEqual(center("four", 4), "four")
        '''),
}

# ----------------------------------------------------------------------------- spans
REPOS["spans"] = {
    "spans/__init__.py": _src('''
        from spans.dates import day_of_year, days_in_month, is_leap_year
        from spans.intervals import Interval, merge, total_covered

        __all__ = ["Interval", "day_of_year", "days_in_month", "is_leap_year", "merge", "total_covered"]
        '''),
    "spans/intervals.py": _src('''
        """Half-open intervals [start, end) of numbers."""


        class Interval:
            def __init__(self, start, end):
                if end < start:
                    raise ValueError("an interval cannot end before it starts")
                self.start = start
                self.end = end

            def length(self):
                return self.end - self.start

            def contains(self, point):
                return self.start <= point < self.end

            def overlaps(self, other):
                return self.start < other.end and other.start < self.end

            def intersection(self, other):
                """The common part, or None when the intervals do not overlap."""
                if not self.overlaps(other):
                    return None
                common = Interval(max(self.start, other.start), min(self.end, other.end))
                return common

            def __eq__(self, other):
                return (self.start, self.end) == (other.start, other.end)

            def __repr__(self):
                return f"Interval({self.start}, {self.end})"


        def merge(intervals):
            """The union of `intervals` as a sorted list of disjoint intervals (touching ones are joined)."""
            result = []
            for iv in sorted(intervals, key=lambda i: i.start):
                if result and iv.start <= result[-1].end:
                    last = result[-1]
                    result[-1] = Interval(last.start, max(last.end, iv.end))
                else:
                    result.append(iv)
            return result


        def total_covered(intervals):
            """The total length covered by the union of `intervals`."""
            total = 0
            for iv in merge(intervals):
                total += iv.length()
            return total
        '''),
    "spans/dates.py": _src('''
        """Calendar arithmetic for the Gregorian calendar."""

        DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


        def is_leap_year(year):
            return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


        def days_in_month(year, month):
            if month < 1 or month > 12:
                raise ValueError("month must be between 1 and 12")
            if month == 2 and is_leap_year(year):
                return 29
            return DAYS_IN_MONTH[month - 1]


        def day_of_year(year, month, day):
            """1 for January 1st, 365 (or 366) for December 31st."""
            if day < 1 or day > days_in_month(year, month):
                raise ValueError("no such day")
            total = day
            for m in range(1, month):
                total += days_in_month(year, m)
            return total
        '''),
    "tests/__init__.py": "",
    "tests/test_intervals.py": _src('''
        import unittest

        from spans import Interval, merge, total_covered


        class IntervalTest(unittest.TestCase):
            def test_length_and_bad_interval(self):
                self.assertEqual(Interval(2, 7).length(), 5)
                self.assertEqual(Interval(3, 3).length(), 0)
                with self.assertRaises(ValueError):
                    Interval(5, 4)

            def test_contains_is_half_open(self):
                iv = Interval(1, 4)
                self.assertTrue(iv.contains(1))
                self.assertTrue(iv.contains(3))
                self.assertFalse(iv.contains(4))
                self.assertFalse(iv.contains(0))

            def test_overlaps(self):
                self.assertTrue(Interval(0, 5).overlaps(Interval(4, 9)))
                self.assertFalse(Interval(0, 5).overlaps(Interval(5, 9)))
                self.assertFalse(Interval(6, 9).overlaps(Interval(0, 5)))

            def test_intersection(self):
                self.assertEqual(Interval(0, 5).intersection(Interval(3, 9)), Interval(3, 5))
                self.assertIsNone(Interval(0, 2).intersection(Interval(3, 4)))

            def test_merge(self):
                got = merge([Interval(5, 8), Interval(0, 2), Interval(1, 3), Interval(3, 4), Interval(10, 11)])
                self.assertEqual(got, [Interval(0, 4), Interval(5, 8), Interval(10, 11)])
                self.assertEqual(merge([Interval(0, 10), Interval(2, 3)]), [Interval(0, 10)])

            def test_total_covered(self):
                self.assertEqual(total_covered([Interval(0, 3), Interval(2, 5), Interval(7, 8)]), 6)
                self.assertEqual(total_covered([]), 0)
        '''),
    "tests/test_dates.py": _src('''
        import unittest

        from spans import day_of_year, days_in_month, is_leap_year


        class DatesTest(unittest.TestCase):
            def test_leap_years(self):
                self.assertTrue(is_leap_year(2024))
                self.assertTrue(is_leap_year(2000))
                self.assertFalse(is_leap_year(1900))
                self.assertFalse(is_leap_year(2023))

            def test_days_in_month(self):
                self.assertEqual(days_in_month(2023, 1), 31)
                self.assertEqual(days_in_month(2023, 2), 28)
                self.assertEqual(days_in_month(2024, 2), 29)
                self.assertEqual(days_in_month(2023, 12), 31)
                with self.assertRaises(ValueError):
                    days_in_month(2023, 13)
                with self.assertRaises(ValueError):
                    days_in_month(2023, 0)

            def test_day_of_year(self):
                self.assertEqual(day_of_year(2023, 1, 1), 1)
                self.assertEqual(day_of_year(2023, 3, 1), 60)
                self.assertEqual(day_of_year(2024, 3, 1), 61)
                self.assertEqual(day_of_year(2023, 12, 31), 365)

            def test_day_of_year_rejects_bad_days(self):
                with self.assertRaises(ValueError):
                    day_of_year(2023, 2, 29)
                with self.assertRaises(ValueError):
                    day_of_year(2023, 4, 0)
                self.assertEqual(day_of_year(2024, 2, 29), 60)
        '''),
}

# ----------------------------------------------------------------------------- calc
REPOS["calc"] = {
    "calc/__init__.py": _src('''
        from calc.parser import Parser, evaluate, tokenize

        __all__ = ["Parser", "evaluate", "tokenize"]
        '''),
    "calc/parser.py": _src('''
        """Integer arithmetic: + - * and // (written /), unary minus and parentheses."""

        DIGITS = "0123456789"
        SYMBOLS = "+-*/()"


        def tokenize(text):
            """Integers and one-character symbols; spaces are skipped."""
            tokens = []
            i = 0
            while i < len(text):
                ch = text[i]
                if ch.isspace():
                    i += 1
                elif ch in DIGITS:
                    j = i
                    while j < len(text) and text[j] in DIGITS:
                        j += 1
                    tokens.append(int(text[i:j]))
                    i = j
                elif ch in SYMBOLS:
                    tokens.append(ch)
                    i += 1
                else:
                    raise ValueError(f"unexpected character {ch!r} at {i}")
            return tokens


        class Parser:
            def __init__(self, tokens):
                self.tokens = tokens
                self.pos = 0

            def peek(self):
                if self.pos < len(self.tokens):
                    return self.tokens[self.pos]
                return None

            def take(self):
                token = self.peek()
                self.pos += 1
                return token

            def expression(self):
                value = self.term()
                while self.peek() in ("+", "-"):
                    if self.take() == "+":
                        value = value + self.term()
                    else:
                        value = value - self.term()
                return value

            def term(self):
                value = self.factor()
                while self.peek() in ("*", "/"):
                    if self.take() == "*":
                        value = value * self.factor()
                    else:
                        value = value // self.factor()
                return value

            def factor(self):
                token = self.take()
                if token == "(":
                    value = self.expression()
                    if self.take() != ")":
                        raise ValueError("missing closing parenthesis")
                    return value
                if token == "-":
                    return -self.factor()
                if isinstance(token, int):
                    return token
                raise ValueError(f"unexpected token {token!r}")


        def evaluate(text):
            parser = Parser(tokenize(text))
            value = parser.expression()
            if parser.peek() is not None:
                raise ValueError("unexpected input after the expression")
            return value
        '''),
    "tests/__init__.py": "",
    "tests/test_parser.py": _src('''
        import unittest

        from calc import evaluate, tokenize


        class TokenizeTest(unittest.TestCase):
            def test_numbers_and_symbols(self):
                self.assertEqual(tokenize("12+3 * (45)"), [12, "+", 3, "*", "(", 45, ")"])

            def test_single_digit_at_end(self):
                self.assertEqual(tokenize("7"), [7])
                self.assertEqual(tokenize(" 1-2 "), [1, "-", 2])

            def test_bad_character(self):
                with self.assertRaises(ValueError):
                    tokenize("2 $ 3")


        class EvaluateTest(unittest.TestCase):
            def test_addition_and_subtraction(self):
                self.assertEqual(evaluate("1 + 2 + 3"), 6)
                self.assertEqual(evaluate("10 - 4 - 3"), 3)

            def test_precedence(self):
                self.assertEqual(evaluate("2 + 3 * 4"), 14)
                self.assertEqual(evaluate("20 / 3 - 1"), 5)

            def test_parentheses(self):
                self.assertEqual(evaluate("(2 + 3) * 4"), 20)
                self.assertEqual(evaluate("2 * (10 - (3 + 4))"), 6)

            def test_unary_minus(self):
                self.assertEqual(evaluate("-3 + 5"), 2)
                self.assertEqual(evaluate("4 * -2"), -8)

            def test_errors(self):
                for text in ("(1 + 2", "1 +", "1 2"):
                    with self.assertRaises(ValueError):
                        evaluate(text)
        '''),
}

# ----------------------------------------------------------------------------- vecmat
REPOS["vecmat"] = {
    "vecmat/__init__.py": _src('''
        from vecmat.linalg import add, dot, identity, matmul, scale, trace, transpose

        __all__ = ["add", "dot", "identity", "matmul", "scale", "trace", "transpose"]
        '''),
    "vecmat/linalg.py": _src('''
        """Vectors are lists of numbers; matrices are lists of rows."""


        def dot(a, b):
            if len(a) != len(b):
                raise ValueError("vectors of different lengths")
            total = 0
            for x, y in zip(a, b):
                total += x * y
            return total


        def add(a, b):
            if len(a) != len(b):
                raise ValueError("vectors of different lengths")
            return [x + y for x, y in zip(a, b)]


        def scale(v, k):
            return [k * x for x in v]


        def transpose(m):
            if not m:
                return []
            return [[row[j] for row in m] for j in range(len(m[0]))]


        def matmul(a, b):
            if len(a[0]) != len(b):
                raise ValueError("the shapes do not match")
            columns = transpose(b)
            product = [[dot(row, col) for col in columns] for row in a]
            return product


        def identity(n):
            return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


        def trace(m):
            total = 0
            for i in range(len(m)):
                total += m[i][i]
            return total
        '''),
    "tests/__init__.py": "",
    "tests/test_linalg.py": _src('''
        import unittest

        from vecmat import add, dot, identity, matmul, scale, trace, transpose


        class VectorTest(unittest.TestCase):
            def test_dot(self):
                self.assertEqual(dot([1, 2, 3], [4, 5, 6]), 32)
                self.assertEqual(dot([], []), 0)

            def test_dot_length_mismatch(self):
                with self.assertRaises(ValueError):
                    dot([1, 2], [1])

            def test_add_and_scale(self):
                self.assertEqual(add([1, 2], [10, 20]), [11, 22])
                self.assertEqual(scale([1, -2], 3), [3, -6])
                with self.assertRaises(ValueError):
                    add([1], [1, 2])


        class MatrixTest(unittest.TestCase):
            def test_transpose(self):
                self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])
                self.assertEqual(transpose([]), [])

            def test_matmul(self):
                a = [[1, 2], [3, 4]]
                b = [[5, 6], [7, 8]]
                self.assertEqual(matmul(a, b), [[19, 22], [43, 50]])
                self.assertEqual(matmul([[1, 2, 3]], [[1], [2], [3]]), [[14]])

            def test_matmul_shape_mismatch(self):
                with self.assertRaises(ValueError):
                    matmul([[1, 2]], [[1, 2]])

            def test_identity(self):
                self.assertEqual(identity(2), [[1, 0], [0, 1]])
                m = [[2, 3], [4, 5]]
                self.assertEqual(matmul(identity(2), m), m)

            def test_trace(self):
                self.assertEqual(trace([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), 15)
                self.assertEqual(trace(identity(4)), 4)
        '''),
}

# ----------------------------------------------------------------------------- bank
REPOS["bank"] = {
    "bank/__init__.py": _src('''
        from bank.account import Account, InsufficientFunds, apply_interest, transfer

        __all__ = ["Account", "InsufficientFunds", "apply_interest", "transfer"]
        '''),
    "bank/account.py": _src('''
        """Bank accounts holding whole cents, with an optional overdraft limit."""


        class InsufficientFunds(Exception):
            pass


        class Account:
            def __init__(self, owner, balance=0, overdraft=0):
                if balance < 0 or overdraft < 0:
                    raise ValueError("the opening balance and the overdraft must not be negative")
                self.owner = owner
                self.balance = balance
                self.overdraft = overdraft
                self.history = []

            def deposit(self, amount):
                if amount <= 0:
                    raise ValueError("a deposit must be positive")
                self.balance += amount
                self.history.append(("deposit", amount))
                return self.balance

            def available(self):
                """What can still be withdrawn: the balance plus the overdraft."""
                return self.balance + self.overdraft

            def withdraw(self, amount):
                if amount <= 0:
                    raise ValueError("a withdrawal must be positive")
                if amount > self.available():
                    raise InsufficientFunds(f"{self.owner} cannot withdraw {amount}")
                self.balance -= amount
                self.history.append(("withdraw", amount))
                return self.balance


        def transfer(source, target, amount):
            """Move `amount` from `source` to `target`; nothing changes if `source` cannot pay."""
            source.withdraw(amount)
            target.deposit(amount)


        def apply_interest(account, rate_percent):
            """Credit interest (rounded down to whole cents) on a positive balance; return the interest."""
            interest = 0
            if account.balance > 0:
                interest = account.balance * rate_percent // 100
            if interest > 0:
                account.deposit(interest)
            return interest
        '''),
    "tests/__init__.py": "",
    "tests/test_account.py": _src('''
        import unittest

        from bank import Account, InsufficientFunds, apply_interest, transfer


        class AccountTest(unittest.TestCase):
            def test_deposit_and_withdraw(self):
                acc = Account("ann", 100)
                self.assertEqual(acc.deposit(50), 150)
                self.assertEqual(acc.withdraw(30), 120)
                self.assertEqual(acc.history, [("deposit", 50), ("withdraw", 30)])

            def test_rejects_non_positive_amounts(self):
                acc = Account("ann", 100)
                for bad in (0, -5):
                    with self.assertRaises(ValueError):
                        acc.deposit(bad)
                    with self.assertRaises(ValueError):
                        acc.withdraw(bad)
                self.assertEqual(acc.balance, 100)

            def test_rejects_negative_opening_balance(self):
                with self.assertRaises(ValueError):
                    Account("ann", -1)
                with self.assertRaises(ValueError):
                    Account("ann", 0, overdraft=-1)

            def test_overdraft(self):
                acc = Account("bob", 10, overdraft=20)
                self.assertEqual(acc.available(), 30)
                self.assertEqual(acc.withdraw(30), -20)
                with self.assertRaises(InsufficientFunds):
                    acc.withdraw(1)

            def test_withdraw_all_without_overdraft(self):
                acc = Account("cy", 40)
                self.assertEqual(acc.withdraw(40), 0)
                with self.assertRaises(InsufficientFunds):
                    acc.withdraw(1)


        class BankTest(unittest.TestCase):
            def test_transfer(self):
                a, b = Account("a", 100), Account("b", 5)
                transfer(a, b, 60)
                self.assertEqual((a.balance, b.balance), (40, 65))

            def test_failed_transfer_changes_nothing(self):
                a, b = Account("a", 10), Account("b", 0)
                with self.assertRaises(InsufficientFunds):
                    transfer(a, b, 11)
                self.assertEqual((a.balance, b.balance), (10, 0))

            def test_interest(self):
                acc = Account("d", 1050)
                self.assertEqual(apply_interest(acc, 10), 105)
                self.assertEqual(acc.balance, 1155)

            def test_no_interest_on_small_or_negative_balance(self):
                self.assertEqual(apply_interest(Account("e", 9), 10), 0)
                acc = Account("f", 0, overdraft=100)
                acc.withdraw(50)
                self.assertEqual(apply_interest(acc, 10), 0)
                self.assertEqual(acc.balance, -50)
        '''),
}

# ----------------------------------------------------------------------------- inventory
REPOS["inventory"] = {
    "inventory/__init__.py": _src('''
        from inventory.stock import Inventory, restock_plan

        __all__ = ["Inventory", "restock_plan"]
        '''),
    "inventory/stock.py": _src('''
        """Stock counts per item name, with reservations."""


        class Inventory:
            def __init__(self):
                self.counts = {}
                self.reserved = {}

            def add(self, name, quantity=1):
                if quantity < 1:
                    raise ValueError("quantity must be positive")
                self.counts[name] = self.counts.get(name, 0) + quantity

            def available(self, name):
                """In stock and not reserved."""
                return self.counts.get(name, 0) - self.reserved.get(name, 0)

            def reserve(self, name, quantity):
                if quantity > self.available(name):
                    raise ValueError(f"only {self.available(name)} {name} available")
                self.reserved[name] = self.reserved.get(name, 0) + quantity

            def remove(self, name, quantity=1):
                """Take `quantity` unreserved items out of stock; an item whose count reaches 0 is forgotten."""
                if quantity < 1 or quantity > self.available(name):
                    raise ValueError(f"cannot remove {quantity} {name}")
                left = self.counts[name] - quantity
                if left == 0:
                    del self.counts[name]
                else:
                    self.counts[name] = left

            def total(self):
                total = 0
                for quantity in self.counts.values():
                    total += quantity
                return total


        def restock_plan(inventory, threshold, target):
            """How many of each item to order so that items available at or below `threshold` reach `target`."""
            if target <= threshold:
                raise ValueError("target must be above threshold")
            plan = {}
            for name in sorted(inventory.counts):
                have = inventory.available(name)
                if have <= threshold:
                    plan[name] = target - have
            return plan
        '''),
    "tests/__init__.py": "",
    "tests/test_stock.py": _src('''
        import unittest

        from inventory import Inventory, restock_plan


        def sample():
            inv = Inventory()
            inv.add("apple", 5)
            inv.add("pear", 2)
            inv.add("apple")
            return inv


        class InventoryTest(unittest.TestCase):
            def test_add_and_total(self):
                inv = sample()
                self.assertEqual(inv.counts, {"apple": 6, "pear": 2})
                self.assertEqual(inv.total(), 8)

            def test_add_rejects_zero(self):
                with self.assertRaises(ValueError):
                    Inventory().add("fig", 0)

            def test_reserve_limits_available(self):
                inv = sample()
                inv.reserve("apple", 4)
                self.assertEqual(inv.available("apple"), 2)
                inv.reserve("apple", 2)
                with self.assertRaises(ValueError):
                    inv.reserve("apple", 1)

            def test_remove(self):
                inv = sample()
                inv.remove("apple", 2)
                self.assertEqual(inv.counts["apple"], 4)
                inv.remove("pear", 2)
                self.assertNotIn("pear", inv.counts)

            def test_remove_respects_reservations(self):
                inv = sample()
                inv.reserve("pear", 1)
                with self.assertRaises(ValueError):
                    inv.remove("pear", 2)
                with self.assertRaises(ValueError):
                    inv.remove("apple", 0)
                inv.remove("pear", 1)
                self.assertEqual(inv.counts["pear"], 1)


        class RestockTest(unittest.TestCase):
            def test_plan(self):
                inv = sample()
                inv.add("kiwi", 3)
                self.assertEqual(restock_plan(inv, 3, 10), {"kiwi": 7, "pear": 8})

            def test_plan_counts_reservations(self):
                inv = sample()
                inv.reserve("apple", 4)
                self.assertEqual(restock_plan(inv, 2, 5), {"apple": 3, "pear": 3})

            def test_plan_rejects_bad_target(self):
                with self.assertRaises(ValueError):
                    restock_plan(sample(), 5, 5)
        '''),
}

# ----------------------------------------------------------------------------- roman
REPOS["roman"] = {
    "roman/__init__.py": _src('''
        from roman.numerals import from_roman, to_roman

        __all__ = ["from_roman", "to_roman"]
        '''),
    "roman/numerals.py": _src('''
        """Roman numerals for 1..3999."""

        NUMERALS = (
            (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
        )
        VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


        def to_roman(number):
            if number < 1 or number > 3999:
                raise ValueError("only 1..3999 can be written in Roman numerals")
            parts = []
            for value, letters in NUMERALS:
                count = number // value
                parts.append(letters * count)
                number = number - count * value
            return "".join(parts)


        def from_roman(text):
            """The value of a Roman numeral; ValueError for an empty or malformed one."""
            if not text:
                raise ValueError("empty numeral")
            total = 0
            previous = 0
            for ch in reversed(text.upper()):
                if ch not in VALUES:
                    raise ValueError(f"not a Roman digit: {ch!r}")
                value = VALUES[ch]
                if value < previous:
                    total -= value
                else:
                    total += value
                    previous = value
            if to_roman(total) != text.upper():
                raise ValueError(f"malformed numeral {text!r}")
            return total
        '''),
    "tests/__init__.py": "",
    "tests/test_numerals.py": _src('''
        import unittest

        from roman import from_roman, to_roman


        class ToRomanTest(unittest.TestCase):
            def test_small_numbers(self):
                self.assertEqual([to_roman(n) for n in range(1, 11)],
                                 ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"])

            def test_large_numbers(self):
                self.assertEqual(to_roman(1994), "MCMXCIV")
                self.assertEqual(to_roman(3999), "MMMCMXCIX")
                self.assertEqual(to_roman(444), "CDXLIV")

            def test_out_of_range(self):
                for n in (0, -3, 4000):
                    with self.assertRaises(ValueError):
                        to_roman(n)


        class FromRomanTest(unittest.TestCase):
            def test_values(self):
                self.assertEqual(from_roman("MCMXCIV"), 1994)
                self.assertEqual(from_roman("xlii"), 42)
                self.assertEqual(from_roman("I"), 1)

            def test_round_trip(self):
                for n in (1, 4, 9, 14, 40, 90, 400, 1666, 2024, 3999):
                    self.assertEqual(from_roman(to_roman(n)), n)

            def test_malformed(self):
                for text in ("", "IIII", "VX", "IC", "ABC"):
                    with self.assertRaises(ValueError):
                        from_roman(text)
        '''),
}


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
