"""A stack and a bounded first-in first-out queue."""


class EmptyError(Exception):
    """Taking an item from an empty container."""


class Stack:
    """Last in, first out."""

    def __init__(self):
        self._items = []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if len(self._items) == 0:
            raise EmptyError("pop from an empty stack")
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise EmptyError("peek at an empty stack")
        return self._items[-1]

    def drain(self):
        """All items, top first; the stack is empty afterwards."""
        items = self._items[::-1]
        self._items = []
        return items

    def __len__(self):
        return len(self._items)


class BoundedQueue:
    """First in, first out, holding at most `capacity` items."""

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items = []

    def is_full(self):
        return len(self._items) >= self.capacity

    def enqueue(self, item):
        if self.is_full():
            raise OverflowError("the queue is full")
        self._items.append(item)

    def dequeue(self):
        if len(self._items) == 0:
            raise EmptyError("dequeue from an empty queue")
        return self._items.pop(0)

    def free_slots(self):
        free = self.capacity - len(self._items)
        return free

    def __len__(self):
        return len(self._items)
