from spans.dates import day_of_year, days_in_month, is_leap_year
from spans.intervals import Interval, merge, total_covered

__all__ = ["Interval", "day_of_year", "days_in_month", "is_leap_year", "merge", "total_covered"]
