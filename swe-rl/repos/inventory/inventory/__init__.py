from inventory.stock import Inventory, restock_plan

__all__ = ["Inventory", "restock_plan"]
