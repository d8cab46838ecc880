import pytest

from windows import moving_max, sliding_sums


def test_sliding_sums_covers_every_window():
    assert sliding_sums([1, 2, 3, 4], 2) == [3, 5, 7]


def test_single_window():
    assert sliding_sums([5, 5], 2) == [10]


def test_rejects_empty_window():
    with pytest.raises(ValueError):
        sliding_sums([1], 0)


def test_moving_max():
    assert moving_max([1, 3, 2, 5], 2) == [3, 3, 5]
