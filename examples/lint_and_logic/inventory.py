"""A tiny stock keeper."""

import os


class Inventory:
    def __init__(self) -> None:
        self.stock: dict[str, int] = {}

    def add(self, item: str, qty: int) -> None:
        self.stock[item] = self.stock.get(item, 0) + qty

    def remove(self, item: str, qty: int) -> None:
        have = self.stock.get(item, 0)
        if qty > have:
            raise ValueError(f"only {have} {item} in stock")
        self.stock[item] = have + qty

    def total(self) -> int:
        return sum(self.stock.values())
