import pytest

from grading import letter, summary


def test_clear_grades():
    assert letter(95) == "A"
    assert letter(85) == "B"
    assert letter(10) == "F"


def test_boundaries_are_inclusive():
    assert letter(90) == "A"
    assert letter(60) == "D"


def test_summary_counts_letters():
    assert summary([95, 91, 50]) == {"A": 2, "F": 1}


def test_out_of_range():
    with pytest.raises(ValueError):
        letter(101)
