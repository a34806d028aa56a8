"""Calendar arithmetic for the Gregorian calendar."""

DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap_year(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month < 1 or month > 12:
        raise ValueError("month must be between 1 and 12")
    if month == 2 and is_leap_year(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st, 365 (or 366) for December 31st."""
    if day < 1 or day > days_in_month(year, month):
        raise ValueError("no such day")
    total = day
    for m in range(1, month):
        total += days_in_month(year, m)
    return total
