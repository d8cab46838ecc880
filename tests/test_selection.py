"""Test selection keeps pointing at the right lines after accepted edits move them."""

from __future__ import annotations

import fnmatch
import random

from ralph.domain.candidate import PROTECTED_TESTS, FileChange, is_protected, line_edits, lines_of
from ralph.validators.coverage import remap_coverage
from ralph.validators.selection import (
    COLLECTION,
    ImportGraph,
    change_words,
    imports_of,
    named_after,
    select_tests,
)


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


SOURCES = {
    "pkg/__init__.py": "from .core import area\n",
    "pkg/core.py": "from pkg import util\n\nSCALE = 2\n\n\ndef area(w, h):\n    return w * h\n\n\ndef unused():\n    return 0\n",
    "pkg/util.py": "def helper():\n    return 1\n",
    "tests/test_core.py": "from pkg.core import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n",
    "tests/test_util.py": "from pkg import util\n\n\ndef test_helper():\n    assert util.helper() == 1\n",
    "tests/test_other.py": "def test_nothing():\n    assert True\n",
}
COVERAGE = {
    "tests/test_core.py::test_area": {"pkg/core.py": [7]},
    "tests/test_util.py::test_helper": {"pkg/util.py": [2]},
    COLLECTION: {"pkg/core.py": [1, 3, 6, 10]},
}


def is_test(path: str) -> bool:
    return is_protected(path, PROTECTED_TESTS)


def edit(path: str, old: str, new: str) -> FileChange:
    return FileChange(path, SOURCES[path], SOURCES[path].replace(old, new))


def test_a_change_inside_a_function_selects_the_tests_that_ran_it():
    selection = select_tests([edit("pkg/core.py", "w * h", "w + h")], COVERAGE, ImportGraph(SOURCES), is_test)
    assert selection.tests == ["tests/test_core.py::test_area"]


def test_the_tests_that_ran_the_changed_line_come_first_the_narrowest_first():
    source = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    coverage = {
        "t::wide": {"m.py": [1, 2, 3], "n.py": [1, 2, 3, 4]},
        "t::other_branch": {"m.py": [1, 2, 4]},
        "t::narrow": {"m.py": [1, 2, 3]},
        COLLECTION: {"m.py": [1]},
    }
    change = FileChange("m.py", source, source.replace("return 1", "return 0"))
    selection = select_tests([change], coverage, ImportGraph({"m.py": source}), is_test)
    assert sorted(selection.tests) == ["t::narrow", "t::other_branch", "t::wide"]  # all entered f
    assert selection.near == ["t::narrow", "t::wide"]  # (t::other_branch never ran line 3)


def test_module_level_code_falls_back_to_every_test_module_importing_it():
    selection = select_tests(
        [edit("pkg/core.py", "SCALE = 2", "SCALE = 3")], COVERAGE, ImportGraph(SOURCES), is_test
    )
    # test_util imports `pkg`, whose __init__ imports pkg.core: it is affected too.
    assert sorted(selection.tests) == ["tests/test_core.py", "tests/test_util.py"]


def test_uncovered_functions_fall_back_to_the_import_graph():
    selection = select_tests(
        [edit("pkg/core.py", "return 0", "return 1")], COVERAGE, ImportGraph(SOURCES), is_test
    )
    assert "tests/test_other.py" not in selection.tests
    assert "tests/test_core.py" in selection.tests


def test_new_files_and_non_python_files():
    graph = ImportGraph(SOURCES)
    assert select_tests([FileChange("pkg/new.py", None, "X = 1\n")], COVERAGE, graph, is_test).tests == []
    assert select_tests([FileChange("data.json", "{}", "[]")], COVERAGE, graph, is_test).everything


def test_relative_imports_resolve_to_the_package():
    assert {"pkg", "pkg.core", "pkg.core.area"} <= imports_of("pkg/__init__.py", SOURCES["pkg/__init__.py"])
    assert "pkg.sibling" in imports_of("pkg/core.py", "from . import sibling\n")
    assert "pkg.x" in imports_of("pkg/sub/mod.py", "from ..x import y\n")


def test_conftest_importing_the_module_selects_its_directory():
    sources = {**SOURCES, "tests/conftest.py": "import pkg.util\n"}
    change = FileChange("pkg/util.py", SOURCES["pkg/util.py"], "X = 1\n" + SOURCES["pkg/util.py"])
    assert "tests" in select_tests([change], COVERAGE, ImportGraph(sources), is_test).tests


def test_tests_that_run_the_package_in_a_subprocess_are_selected():
    sources = {
        **SOURCES,
        "tests/test_cli.py": "import subprocess, sys\n\n\ndef test_cli():\n    subprocess.run([sys.executable, '-m', 'pkg'])\n",
    }
    selection = select_tests([edit("pkg/core.py", "w * h", "w + h")], COVERAGE, ImportGraph(sources), is_test)
    assert selection.tests == ["tests/test_core.py::test_area", "tests/test_cli.py"]


def test_the_words_of_a_change_are_its_names_and_its_functions():
    before = "def parse_date(text):\n    return strptime(text, '%Y')\n\n\nTABLE = ['quiz', 'ox']\n"
    after = before.replace("'%Y'", "'%y'").replace("'ox'", "'oxen'") + "six_moves_urllib_parse = 1\n"
    words = change_words(FileChange("lib.py", before, after))
    assert words[0] == "parse_date"  # the enclosing function first
    assert {"strptime", "text", "TABLE", "quiz", "oxen"} <= set(words)
    assert {"six_moves_urllib_parse", "urllib_parse", "six_moves"} <= set(words)
    assert not {"return", "def", "Y", "y"} & set(words)


def test_a_line_outside_functions_is_named_after_the_entry_and_the_name_it_belongs_to():
    before = (
        "FORMATS = {\n"
        '    "plain": Format(line="", pad=0),\n'
        '    "rst": Format(\n'
        '        line="=",\n'
        "        pad=1,\n"
        "    ),\n"
        "}\n"
    )
    words = change_words(FileChange("lib.py", before, before.replace('line="="', 'line="-"')))
    assert words[:3] == ["line", "rst", "FORMATS"]  # the keyword, its dict entry, the table's name
    assert "plain" not in words
    # (a label that every test's name holds is no word: `test=` names no test)
    setup = 'setup(\n    test="old",\n)\n'
    assert "test" not in change_words(FileChange("setup.py", setup, setup.replace("old", "new")))
    # (inside a function, the function names the change, as before)
    inside = "def formats():\n    return {'rst': 1}\n"
    assert change_words(FileChange("lib.py", inside, inside.replace("1", "2")))[0] == "formats"


def test_a_comment_and_the_languages_dunder_names_are_no_words_of_a_change():
    # pyasn1's `__all__` gave `all`, a comment `basic`: a guess by them ran the wrong tests first.
    before = "__all__ = ['Integer']  # basic types\nSEP = '#'  # the 'hash' sign\n"
    after = before.replace("'Integer'", "'Real'").replace("'#'", "'# sharp'")
    words = change_words(FileChange("lib.py", before, after))
    assert {"Integer", "Real", "SEP", "sharp"} <= set(words)
    assert not {"all", "basic", "types", "hash", "sign"} & set(words)
    # (a function named like one still names it)
    init = "class A:\n    def __init__(self):\n        self.x = 1\n"
    assert change_words(FileChange("lib.py", init, init.replace("1", "2")))[0] == "init"


def test_tests_named_after_a_change_rarest_word_first_in_pytest_order():
    tests = [
        "t.py::test_rst_a",
        "t.py::test_plain_rst",
        "t.py::test_plain",
        "u.py::test_grid",
        "u.py::TestRst::x",
    ]
    # "plain": 2 names hold it; "rst": 3 (the class's too, whatever its case); pytest's order within
    assert named_after(["plain", "rst"], tests) == [
        "t.py::test_plain_rst",
        "t.py::test_plain",
        "t.py::test_rst_a",
        "u.py::TestRst::x",
    ]
    assert named_after(["rst", "plain"], tests, limit=1) == ["t.py::test_plain_rst"]
    assert named_after(["html"], tests) == []


def test_remapping_coverage_after_an_edit_in_a_huge_module_takes_time_proportional_to_the_change():
    import time

    before = "".join(f"x{i} = {i}\n" for i in range(120_000))
    after = before.replace("x60000 = 60000\n", "x60000 = 60000\nnew = 1\n")
    coverage = {"t::a": {"m.py": [1, 60000, 60001, 119_999]}}
    start = time.perf_counter()
    remapped = remap_coverage(coverage, (FileChange("m.py", before, after),))
    assert time.perf_counter() - start < 2.0  # a whole-file diff took more than ten minutes
    assert remapped["t::a"]["m.py"] == [1, 60000, 60001, 120_000]


def test_remapping_matches_a_whole_file_diff_on_a_multi_region_edit():
    before = "".join(f"l{i}\n" for i in range(1, 21))
    after = before.replace("l3\n", "l3a\nl3b\n").replace("l15\n", "")
    remapped = remap_coverage({"t": {"m.py": list(range(1, 21))}}, (FileChange("m.py", before, after),))
    assert remapped["t"]["m.py"] == list(range(1, 21))  # every new line covered, none beyond the file


def _reference_edits(before: list[str], after: list[str]) -> list[tuple[str, int, int, int, int]]:
    """The head and tail shared line by line, then difflib on the middle (what selection did)."""
    import difflib

    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(
        None, before[head : len(before) - tail], after[head : len(after) - tail], autojunk=False
    )
    return [
        (t, i1 + head, i2 + head, j1 + head, j2 + head)
        for t, i1, i2, j1, j2 in middle.get_opcodes()
        if t != "equal"
    ]


def test_line_edits_are_a_diff_of_the_two_texts_lines():
    import random

    rng = random.Random(7)
    for _ in range(300):
        before = [rng.choice("abc") for _ in range(rng.randint(0, 12))]
        after = list(before)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(after))
            if after and rng.random() < 0.5:
                del after[min(at, len(after) - 1)]
            else:
                after.insert(at, rng.choice("abd"))
        old, new = "".join(f"{x}\n" for x in before), "".join(f"{x}\n" for x in after)
        got = line_edits(old, new)
        assert list(got) == _reference_edits(before, after)
        changed = {i for _, i1, i2, _, _ in got for i in range(i1, i2)}
        added = {j for _, _, _, j1, j2 in got for j in range(j1, j2)}
        kept = [x for i, x in enumerate(before) if i not in changed]
        assert kept == [x for j, x in enumerate(after) if j not in added]  # (the rest is the same)
        assert lines_of(new) == tuple(after)


def test_protected_paths_are_those_fnmatch_matches_with_any_of_the_patterns():
    # One expression of all the patterns: the same answer as fnmatch with each, on globs with
    # classes, negations, unclosed brackets, separators and regular-expression characters.
    rnd = random.Random(7)
    fixed = ["test_*.py", "*/test_*.py", "[!a]*.py", "q[]]z", "*[*", "weird(|)+.py", "*.{a,b}", "d/**"]
    names = ["test_x.py", "a/test_b.py", "bcd.py", "q]z", "a[b", "weird(|)+.py", "x.{a,b}", "d/e/f", "a\nb"]
    for name in names:
        for k in range(len(fixed) + 1):
            assert is_protected(name, fixed[:k]) == any(fnmatch.fnmatch(name, p) for p in fixed[:k])
    for _ in range(5000):
        patterns = ["".join(rnd.choice("ab/*?[]!.-\n") for _ in range(rnd.randint(0, 6))) for _ in range(3)]
        name = "".join(rnd.choice("ab/.[]!-*?\n") for _ in range(rnd.randint(0, 6)))
        assert is_protected(name, patterns) == any(fnmatch.fnmatch(name, p) for p in patterns), (
            name,
            patterns,
        )
    assert is_protected("tests/data/x.toml", (p for p in ["tests/data/*.toml"]))  # (any iterable)
