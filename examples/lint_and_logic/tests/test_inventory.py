import pytest

from inventory import Inventory


def test_add_then_remove():
    inv = Inventory()
    inv.add("bolt", 5)
    inv.remove("bolt", 2)
    assert inv.stock["bolt"] == 3


def test_cannot_remove_more_than_stock():
    inv = Inventory()
    inv.add("nut", 1)
    with pytest.raises(ValueError):
        inv.remove("nut", 2)


def test_total():
    inv = Inventory()
    inv.add("a", 2)
    inv.add("b", 3)
    assert inv.total() == 5
