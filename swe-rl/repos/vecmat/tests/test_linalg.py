import unittest

from vecmat import add, dot, identity, matmul, scale, trace, transpose


class VectorTest(unittest.TestCase):
    def test_dot(self):
        self.assertEqual(dot([1, 2, 3], [4, 5, 6]), 32)
        self.assertEqual(dot([], []), 0)

    def test_dot_length_mismatch(self):
        with self.assertRaises(ValueError):
            dot([1, 2], [1])

    def test_add_and_scale(self):
        self.assertEqual(add([1, 2], [10, 20]), [11, 22])
        self.assertEqual(scale([1, -2], 3), [3, -6])
        with self.assertRaises(ValueError):
            add([1], [1, 2])


class MatrixTest(unittest.TestCase):
    def test_transpose(self):
        self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])
        self.assertEqual(transpose([]), [])

    def test_matmul(self):
        a = [[1, 2], [3, 4]]
        b = [[5, 6], [7, 8]]
        self.assertEqual(matmul(a, b), [[19, 22], [43, 50]])
        self.assertEqual(matmul([[1, 2, 3]], [[1], [2], [3]]), [[14]])

    def test_matmul_shape_mismatch(self):
        with self.assertRaises(ValueError):
            matmul([[1, 2]], [[1, 2]])

    def test_identity(self):
        self.assertEqual(identity(2), [[1, 0], [0, 1]])
        m = [[2, 3], [4, 5]]
        self.assertEqual(matmul(identity(2), m), m)

    def test_trace(self):
        self.assertEqual(trace([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), 15)
        self.assertEqual(trace(identity(4)), 4)
