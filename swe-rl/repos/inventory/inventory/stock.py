"""Stock counts per item name, with reservations."""


class Inventory:
    def __init__(self):
        self.counts = {}
        self.reserved = {}

    def add(self, name, quantity=1):
        if quantity < 1:
            raise ValueError("quantity must be positive")
        self.counts[name] = self.counts.get(name, 0) + quantity

    def available(self, name):
        """In stock and not reserved."""
        return self.counts.get(name, 0) - self.reserved.get(name, 0)

    def reserve(self, name, quantity):
        if quantity > self.available(name):
            raise ValueError(f"only {self.available(name)} {name} available")
        self.reserved[name] = self.reserved.get(name, 0) + quantity

    def remove(self, name, quantity=1):
        """Take `quantity` unreserved items out of stock; an item whose count reaches 0 is forgotten."""
        if quantity < 1 or quantity > self.available(name):
            raise ValueError(f"cannot remove {quantity} {name}")
        left = self.counts[name] - quantity
        if left == 0:
            del self.counts[name]
        else:
            self.counts[name] = left

    def total(self):
        total = 0
        for quantity in self.counts.values():
            total += quantity
        return total


def restock_plan(inventory, threshold, target):
    """How many of each item to order so that items available at or below `threshold` reach `target`."""
    if target <= threshold:
        raise ValueError("target must be above threshold")
    plan = {}
    for name in sorted(inventory.counts):
        have = inventory.available(name)
        if have <= threshold:
            plan[name] = target - have
    return plan
