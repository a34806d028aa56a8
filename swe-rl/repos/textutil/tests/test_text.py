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
