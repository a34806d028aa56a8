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
