import unittest

from inventory import Inventory, restock_plan


def sample():
    inv = Inventory()
    inv.add("apple", 5)
    inv.add("pear", 2)
    inv.add("apple")
    return inv


class InventoryTest(unittest.TestCase):
    def test_add_and_total(self):
        inv = sample()
        self.assertEqual(inv.counts, {"apple": 6, "pear": 2})
        self.assertEqual(inv.total(), 8)

    def test_add_rejects_zero(self):
        with self.assertRaises(ValueError):
            Inventory().add("fig", 0)

    def test_reserve_limits_available(self):
        inv = sample()
        inv.reserve("apple", 4)
        self.assertEqual(inv.available("apple"), 2)
        inv.reserve("apple", 2)
        with self.assertRaises(ValueError):
            inv.reserve("apple", 1)

    def test_remove(self):
        inv = sample()
        inv.remove("apple", 2)
        self.assertEqual(inv.counts["apple"], 4)
        inv.remove("pear", 2)
        self.assertNotIn("pear", inv.counts)

    def test_remove_respects_reservations(self):
        inv = sample()
        inv.reserve("pear", 1)
        with self.assertRaises(ValueError):
            inv.remove("pear", 2)
        with self.assertRaises(ValueError):
            inv.remove("apple", 0)
        inv.remove("pear", 1)
        self.assertEqual(inv.counts["pear"], 1)


class RestockTest(unittest.TestCase):
    def test_plan(self):
        inv = sample()
        inv.add("kiwi", 3)
        self.assertEqual(restock_plan(inv, 3, 10), {"kiwi": 7, "pear": 8})

    def test_plan_counts_reservations(self):
        inv = sample()
        inv.reserve("apple", 4)
        self.assertEqual(restock_plan(inv, 2, 5), {"apple": 3, "pear": 3})

    def test_plan_rejects_bad_target(self):
        with self.assertRaises(ValueError):
            restock_plan(sample(), 5, 5)
