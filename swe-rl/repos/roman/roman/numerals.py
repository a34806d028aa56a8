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
