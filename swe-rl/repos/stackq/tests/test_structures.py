import unittest

from stackq import BoundedQueue, EmptyError, Stack


class StackTest(unittest.TestCase):
    def test_push_pop_is_lifo(self):
        s = Stack()
        for x in (1, 2, 3):
            s.push(x)
        self.assertEqual([s.pop(), s.pop(), s.pop()], [3, 2, 1])
        self.assertEqual(len(s), 0)

    def test_pop_empty_raises(self):
        with self.assertRaises(EmptyError):
            Stack().pop()

    def test_peek_does_not_remove(self):
        s = Stack()
        s.push("a")
        s.push("b")
        self.assertEqual(s.peek(), "b")
        self.assertEqual(len(s), 2)

    def test_peek_empty_raises(self):
        with self.assertRaises(EmptyError):
            Stack().peek()

    def test_drain_top_first(self):
        s = Stack()
        for x in "abc":
            s.push(x)
        self.assertEqual(s.drain(), ["c", "b", "a"])
        self.assertEqual(len(s), 0)


class BoundedQueueTest(unittest.TestCase):
    def test_fifo_order(self):
        q = BoundedQueue(3)
        for x in (1, 2, 3):
            q.enqueue(x)
        self.assertEqual([q.dequeue(), q.dequeue(), q.dequeue()], [1, 2, 3])

    def test_full_queue_rejects(self):
        q = BoundedQueue(2)
        q.enqueue("a")
        q.enqueue("b")
        self.assertTrue(q.is_full())
        with self.assertRaises(OverflowError):
            q.enqueue("c")

    def test_free_slots(self):
        q = BoundedQueue(3)
        q.enqueue(1)
        q.enqueue(2)
        self.assertFalse(q.is_full())
        self.assertEqual(q.free_slots(), 1)

    def test_capacity_one(self):
        q = BoundedQueue(1)
        q.enqueue("x")
        self.assertEqual(q.dequeue(), "x")
        self.assertEqual(len(q), 0)
        with self.assertRaises(ValueError):
            BoundedQueue(0)

    def test_dequeue_empty_raises(self):
        with self.assertRaises(EmptyError):
            BoundedQueue(2).dequeue()
