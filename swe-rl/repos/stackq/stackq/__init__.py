from stackq.structures import BoundedQueue, EmptyError, Stack

__all__ = ["BoundedQueue", "EmptyError", "Stack"]
