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
