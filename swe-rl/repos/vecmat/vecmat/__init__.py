from vecmat.linalg import add, dot, identity, matmul, scale, trace, transpose

__all__ = ["add", "dot", "identity", "matmul", "scale", "trace", "transpose"]
