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
