"""Test selection keeps pointing at the right lines after accepted edits move them."""

from __future__ import annotations

from ralph.candidate import FileChange
from validators.pipeline import remap_coverage


def test_lines_below_a_removed_import_move_up():
    before = "import os\n\n\ndef f(x):\n    return x + 1\n"
    after = "\n\ndef f(x):\n    return x + 1\n"
    coverage = {"t::f": {"m.py": [4, 5]}, "t::other": {"n.py": [1]}}
    remapped = remap_coverage(coverage, (FileChange("m.py", before, after),))
    assert remapped == {"t::f": {"m.py": [3, 4]}, "t::other": {"n.py": [1]}}


def test_a_covered_line_that_was_rewritten_covers_its_replacement():
    before = "def f(x):\n    return x + 1\n"
    after = "def f(x):\n    y = x - 1\n    return y\n"
    remapped = remap_coverage({"t::f": {"m.py": [1, 2]}}, (FileChange("m.py", before, after),))
    assert remapped == {"t::f": {"m.py": [1, 2, 3]}}
