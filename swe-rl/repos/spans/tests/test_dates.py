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
