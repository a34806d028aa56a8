from textutil.text import center, is_palindrome, slugify, truncate, word_count, wrap

__all__ = ["center", "is_palindrome", "slugify", "truncate", "word_count", "wrap"]
