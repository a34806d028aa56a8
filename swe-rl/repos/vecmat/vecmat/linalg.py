"""Vectors are lists of numbers; matrices are lists of rows."""


def dot(a, b):
    if len(a) != len(b):
        raise ValueError("vectors of different lengths")
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return total


def add(a, b):
    if len(a) != len(b):
        raise ValueError("vectors of different lengths")
    return [x + y for x, y in zip(a, b)]


def scale(v, k):
    return [k * x for x in v]


def transpose(m):
    if not m:
        return []
    return [[row[j] for row in m] for j in range(len(m[0]))]


def matmul(a, b):
    if len(a[0]) != len(b):
        raise ValueError("the shapes do not match")
    columns = transpose(b)
    product = [[dot(row, col) for col in columns] for row in a]
    return product


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def trace(m):
    total = 0
    for i in range(len(m)):
        total += m[i][i]
    return total
