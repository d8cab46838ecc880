"""`reparsed`: the innermost statement an edit changed, parsed alone, is what the whole text parses to."""

from __future__ import annotations

import ast
import difflib
import random
import sysconfig
from pathlib import Path

import pytest

import ralph
from ralph.domain.reparse import first_line, reparsed
from ralph.drafters.mutation_ops import generate_mutants
from ralph.validators import policy

STDLIB = Path(sysconfig.get_paths()["stdlib"])
CORPUS = [
    STDLIB / "argparse.py",
    STDLIB / "dataclasses.py",
    STDLIB / "email" / "_header_value_parser.py",
    STDLIB / "asyncio" / "base_events.py",
    Path(ralph.__file__).parent / "validators" / "policy.py",
    Path(ralph.__file__).parent / "sandboxes" / "bwrap.py",
]


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=True)


def _statement_parsed_whole(
    old: ast.Module, before: str, after: str
) -> tuple[ast.stmt, ast.stmt | None] | None:
    """The top-level statement of `before` (parsed: `old`) that the edit changed (one, each region
    kept its number of lines) and what `reparsed` made of it; None for an edit of another shape."""
    old_lines, new_lines = before.splitlines(), after.splitlines()
    opcodes = difflib.SequenceMatcher(None, old_lines, new_lines).get_opcodes()
    hunks = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in opcodes if tag != "equal"]
    if not hunks or any(i2 - i1 != j2 - j1 for i1, i2, j1, j2 in hunks):
        return None
    changed = [(i1 + 1, i2) for i1, i2, _, _ in hunks]
    tops = [
        n for n in old.body if all(first_line(n) <= lo and hi <= (n.end_lineno or 0) for lo, hi in changed)
    ]
    if len(tops) != 1:
        return None
    return tops[0], reparsed(tops[0], old_lines, new_lines, changed)


@pytest.mark.slow
def test_the_innermost_statement_parsed_alone_is_the_whole_texts_statement_on_real_modules():
    used = tried = 0
    rng = random.Random(7)
    for file in CORPUS:
        source = file.read_text(encoding="utf-8")
        old = ast.parse(source)
        kept = _dump(old)
        lines = rng.sample(range(1, source.count("\n") + 1), 40)
        mutants = generate_mutants(source, lines)
        for mutant in rng.sample(mutants, min(25, len(mutants))):
            found = _statement_parsed_whole(old, source, mutant.source)
            if found is None:
                continue
            top, statement = found
            tried += 1
            try:
                whole = ast.parse(mutant.source)
            except SyntaxError:
                assert statement is None, mutant.description  # (what does not parse is never read alone)
                continue
            if statement is None:
                continue
            used += 1
            same = [s for s in whole.body if first_line(s) == first_line(top)]
            assert len(same) == 1 and _dump(statement) == _dump(same[0]), (file, mutant.description)
        assert _dump(old) == kept  # (the accepted tree, shared by every mutant, is never changed)
    assert tried > 100 and used > 0.8 * tried, (used, tried)


CLASS = """\
import os


class C:
    x = 1

    @property
    def f(self):
        if self.x:
            return os.sep
        return [
            1,
            2,
        ]

    def g(self): return 1

    def h(self):
        a = 1; b = 2
        return a + b
"""


@pytest.mark.parametrize(
    ("old_line", "new_line", "read_alone"),
    [
        ("            return os.sep", "            return os.system", True),  # (inside an `if`)
        ("    x = 1", "    x = 2", True),  # (a class's own statement)
        ("    @property", "    @staticmethod", True),  # (a decorator: the definition)
        ("            return os.sep", "        return os.sep", False),  # (out of the `if`: a dedent)
        ("            return os.sep", "            return (os.sep", False),  # (an open bracket)
        ("            return os.sep", 'return """', False),  # (a string that never ends)
        ("    def g(self): return 1", "    def g(self): return 2", False),  # (the line's `def`)
        ("        a = 1; b = 2", "        a = 1; b = 3", False),  # (two statements on the line)
        ("            1,", "            1, 3,", True),
    ],
)
def test_an_edit_is_read_alone_only_where_that_is_the_whole_texts_reading(old_line, new_line, read_alone):
    before = CLASS
    old = ast.parse(before)
    kept = _dump(old)
    after = before.replace(old_line + "\n", new_line + "\n", 1)
    assert after != before
    number = before.splitlines().index(old_line) + 1
    statement = reparsed(old.body[1], before.splitlines(), after.splitlines(), [(number, number)])
    assert (statement is not None) == read_alone
    assert _dump(old) == kept  # (the accepted tree is shared: never changed)
    if statement is not None:
        assert _dump(statement) == _dump(ast.parse(after).body[1])


def test_the_policy_reads_a_methods_edit_as_the_whole_text_reads_it():
    before = CLASS
    after = before.replace("return os.sep", "return __import__('os').system", 1)
    edited = policy._edited(before, after)
    assert [_dump(s) for s in edited.body] == [_dump(ast.parse(after).body[1])]
    findings = policy.code_findings(policy.FileChange("m.py", before, after), test_file=False)
    assert [f.rule for f in findings] == ["dynamic-code"]


def test_a_text_whose_lines_python_numbers_otherwise_is_read_whole():
    # A form feed ends a line for `str.splitlines` but not for Python: the line numbers would part.
    before = CLASS.replace("    x = 1\n", "    x = 1\n\x0c\n")
    after = before.replace("return os.sep", "return __import__('os').system", 1)
    edited = policy._edited(before, after)
    assert [s.lineno for s in edited.body] == [4]
    assert [f.rule for f in policy.code_findings(policy.FileChange("m.py", before, after), False)] == [
        "dynamic-code"
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # What shared the changed line with the statement is not kept as it was: a sibling after a
        # `;` that bound the name, the header of a one-line definition or loop that bound it.
        ("def g(s):\n    print(s); import math as exec\n", "def g(s):\n    exec(s)\n"),
        ("def g(s):\n    def h(exec): print(s)\n", "def g(s):\n" + " " * 17 + "exec(s)\n"),
        (
            "import sys\ndef g(x):\n    for sys in x: y = sys\n",
            "import sys\ndef g(x):\n" + " " * 18 + "y = sys\n",
        ),
    ],
)
def test_an_edit_of_a_line_the_statement_shares_is_read_as_the_new_text_has_it(before, after):
    assert policy._edited(before, after).body[-1].body[-1].lineno == len(after.splitlines())
    assert [_dump(s) for s in policy._edited(before, after).body] == [_dump(ast.parse(after).body[-1])]
    assert [f.rule for f in policy.code_findings(policy.FileChange("m.py", before, after), False)] == [
        "dynamic-code"
    ]


EDGES = [
    "import os; x = 1\ndef f():\n    return x\n",  # (two statements share a line)
    "@decorate\nclass C:\n    y = 2\n\ndef g(): return 3\n",
    "x = (\n    1,\n)\nif x:\n    pass\nelse:\n    y = 1\n",
    "a = 1 \\\n    + 2\nb = 3\n",
    "from __future__ import annotations\ndef f(a: Undefined) -> None:\n    pass\n",
]


@pytest.mark.parametrize("text", [*EDGES, *(p.read_text() for p in CORPUS)])
def test_an_accepted_top_level_statement_read_alone_is_the_whole_texts_statement(text):
    """The policy keeps an accepted file's outline, not its tree, and parses only the top-level
    statement an edit changed: it must be what the whole text parses to, lines and columns too."""
    whole = ast.parse(text)
    for index, node in enumerate(whole.body):
        assert _dump(policy._accepted_statement(text, index)) == _dump(node)
    assert policy._accepted_statement(text, len(whole.body)) is None


def test_a_candidate_of_a_learnt_file_is_read_without_parsing_the_whole_file(monkeypatch):
    before = (Path(ralph.__file__).parent / "validators" / "policy.py").read_text()
    policy.read_ahead(before)  # (as the read-ahead thread learns the accepted state's files)
    parsed = []
    real = policy.parse
    monkeypatch.setattr(
        policy, "parse", lambda text, *a, **k: parsed.append(len(text)) or real(text, *a, **k)
    )
    line = '    return f"{self.path}:{self.line}: {self.what}" if self.line else'
    assert line in before
    after = before.replace(line, "    return exec(self.path) if self.line else", 1)
    findings = policy.code_findings(policy.FileChange("v/policy.py", before, after), test_file=False)
    assert [f.rule for f in findings] == ["dynamic-code"]
    # (the class around the edit, and the edited method alone: never the whole module)
    assert parsed and max(parsed) < len(before) / 10
