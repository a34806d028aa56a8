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
