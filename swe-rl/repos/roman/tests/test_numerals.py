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
