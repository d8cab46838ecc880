"""Deleted behaviour: code a passing test ran at the baseline that an edit deletes with nothing in its
place. The pure reading (`deleted.deletions`) on plain strings, and the stage on real repositories:
the deleting fix rejected naming what it deleted and the right one accepted, a warning instead with
`warn`, the rule off with `semantic_off`, and no verdict asked of it where coverage cannot vouch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.candidate import Candidate, FileChange
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.deleted import deletions
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.toolchain import Toolchain
from ralph.view import QuietView
from tests.conftest import git, write_files

TOTAL = """def total(xs):
    result = 0
    for x in xs:
        if x < 0:
            raise ValueError("negative")
        elif x == 0:
            continue
        else:
            result += x
    record(result)
    return result
"""
# Which passing tests ran each line: `test_zero` alone entered the `elif`, none the `raise`.
RAN = {n: ["test_sum"] for n in (2, 3, 4, 6, 9, 10, 11)} | {7: ["test_zero"], 10: ["test_sum", "test_zero"]}


def _found(after: str, before: str = TOTAL) -> list[str]:
    return [d.message() for d in deletions(before, after, RAN)]


def test_a_deleted_statement_a_passing_test_ran_is_found_naming_it():
    assert _found(TOTAL.replace("    record(result)\n", "")) == [
        "the edit deletes `record(result)` (line 10) that test_sum and 1 other passing test ran at the "
        "baseline, with nothing in its place"
    ]
    # Turned into a comment, or into `pass`, it is deleted all the same.
    assert _found(TOTAL.replace("    record(result)\n", "    # record(result)\n")) != []
    assert "`result += x` (line 9) that test_sum" in _found(TOTAL.replace("result += x", "pass"))[0]


def test_a_function_deleted_whole_reflowed_moves_and_form_feeds_are_read_right():
    """The second review's cases: an override dropped so the base's method applies deletes no
    behaviour inside a function; a statement moved with a comment added or reflowed is moved; a
    deleted statement is found though an identical line stays between two hunks; a form feed is
    no line break to Python or to coverage."""
    square = (
        "class Base:\n    def area(self):\n        return self.w * self.h\n\n\n"
        "class Square(Base):\n    def area(self):\n        return self.w ** 2\n"
    )
    dropped = square.replace("    def area(self):\n        return self.w ** 2\n", "    pass\n")
    assert deletions(square, dropped, {3: ["t"], 8: ["t"]}) == []
    commented = TOTAL.replace("    record(result)\n", "").replace(
        "    result = 0\n", "    result = 0\n    record(result)  # first\n"
    )
    assert _found(commented) == []
    twice = "def f(x):\n    validate(x)\n    y = x + 1\n    validate(x)\n    return y\n"
    two_hunks = twice.replace("    validate(x)\n    y", "    y", 1).replace("return y", "return y * 2")
    found = [d.message() for d in deletions(twice, two_hunks, {2: ["t"], 3: ["t"], 4: ["t"], 5: ["t"]})]
    assert found == [
        "the edit deletes `validate(x)` (line 2) that t ran at the baseline, with nothing in its place"
    ]
    paged = "\x0c\ndef f(x):\n    if x < 0:\n        warn(x)\n    return x\n"
    assert (
        deletions(paged, paged.replace("warn(x)", "pass"), {3: ["t"], 5: ["t"]}) == []
    )  # (no test ran warn)


def test_a_replaced_or_moved_statement_is_no_deletion():
    assert _found(TOTAL.replace("    record(result)\n", "    print(result)\n")) == []
    moved = TOTAL.replace("    record(result)\n", "").replace(
        "    result = 0\n", "    result = 0\n    record(result)\n"
    )
    assert _found(moved) == []


def test_code_no_passing_test_ran_is_no_finding():
    # Only the failing tests raised there: the passing ones never entered the branch.
    assert _found(TOTAL.replace('            raise ValueError("negative")\n', "            pass\n")) == []
    # An `if` whose condition alone ran: its branch is not behaviour the passing tests had.
    unentered = {**RAN, 5: []}
    guard = TOTAL.replace(
        '        if x < 0:\n            raise ValueError("negative")\n        elif', "        if"
    )
    assert deletions(TOTAL, guard, unentered) == []


def test_a_deleted_branch_is_named_as_a_branch():
    without_elif = TOTAL.replace("        elif x == 0:\n            continue\n", "")
    assert _found(without_elif) == [
        "the edit deletes the `elif x == 0:` branch (line 6) that test_zero ran at the baseline, with "
        "nothing in its place"
    ]
    without_else = TOTAL.replace("        else:\n            result += x\n", "")
    assert "the `else` branch of `elif x == 0:` (line 8) that test_sum" in _found(without_else)[0]
    # The first branch of a chain, its `elif` becoming the `if`.
    ran = {**RAN, 5: ["test_negative"]}
    first = TOTAL.replace(
        '        if x < 0:\n            raise ValueError("negative")\n        elif', "        if"
    )
    assert [d.what for d in deletions(TOTAL, first, ran)] == ["the `if x < 0:` branch"]
    read = (
        "def read(path):\n    try:\n        return load(path)\n    except OSError:\n        return None\n"
        "    except ValueError:\n        return ''\n"
    )
    without = read.replace("    except ValueError:\n        return ''\n", "")
    assert [d.what for d in deletions(read, without, {7: ["test_garbled"]})] == [
        "the `except ValueError` handler"
    ]


def test_taking_out_a_jump_that_made_code_unreachable_is_no_deletion():
    """The true fix of a return a bug put early in a function brings the rest back to life."""
    early = TOTAL.replace("    result = 0\n", "    result = 0\n    return result\n")
    ran = {n + 1: tests for n, tests in RAN.items()} | {3: ["test_sum"]}
    assert deletions(early, TOTAL, ran) == []
    # A last return, nothing after it: its result is gone.
    assert [d.what for d in deletions(TOTAL, TOTAL.replace("    return result\n", ""), RAN)] == [
        "`return result`"
    ]


def test_module_level_code_and_unparsable_text_are_not_read():
    module = "import os\nDEBUG = os.environ.get('DEBUG')\n\n\ndef f():\n    return 1\n"
    assert deletions(module, module.replace("DEBUG = os.environ.get('DEBUG')\n", ""), {2: ["t"]}) == []
    assert deletions("def broken(:\n", "", {1: ["t"]}) == []


# A real repository: `slugify` strips a trailing "s" too; the fix that deletes the stripping passes
# the suite, which never checks what it is for, and `test_spaces_become_dashes` ran that line.
SLUG = 'def slugify(title):\n    slug = title.lower().replace(" ", "-")\n    slug = slug.strip("-s")\n    return slug\n'
DELETES = SLUG.replace('    slug = slug.strip("-s")\n', "")
FIXED = SLUG.replace('strip("-s")', 'strip("-")')
REPO = {
    "slug.py": SLUG,
    "tests/test_slug.py": "from slug import slugify\n\n\n"
    "def test_spaces_become_dashes():\n    assert slugify('Hello World') == 'hello-world'\n\n\n"
    "def test_a_plural_keeps_its_s():\n    assert slugify('Apples') == 'apples'\n",
}
FINDING = (
    'the edit deletes `slug = slug.strip("-s")` (line 3) that '
    "tests/test_slug.py::test_spaces_become_dashes ran at the baseline, with nothing in its place"
)


def _fix(repo: Path, tmp_path: Path, **config: object):
    file = tmp_path / "edits.jsonl"
    records = [
        {"description": "delete the strip", "files": {"slug.py": DELETES}},
        {"files": {"slug.py": FIXED}},
    ]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = RunConfig(drafter=f"replay:{file}", candidates=1, **config)
    return fix(repo, settings, view=QuietView(notices=False))


@pytest.mark.slow
def test_a_fix_that_deletes_what_a_passing_test_ran_is_rejected_and_the_right_one_accepted(
    make_repo, tmp_path
):
    repo = make_repo(REPO)
    outcome = _fix(repo, tmp_path)
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "deleted-behaviour"
    assert FINDING in rejected["reason"]
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:slug.py") == FIXED


@pytest.mark.slow
def test_with_warn_the_deletion_is_said_in_the_trace_and_accepted(make_repo, tmp_path):
    repo = make_repo(REPO)
    outcome = _fix(repo, tmp_path, plausibility="warn")
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [accepted] = first["candidates"]
    assert accepted["verdict"] == "accepted"
    stage = next(s for s in accepted["stages"] if s["stage"] == "deleted-behaviour")
    assert f"warning: slug.py:3: {FINDING} (deleted-behaviour)" in stage["detail"]


def _verify(tmp_path: Path, settings: VerifySettings, before_verify=None):
    """The deleting candidate verified on a real copy of REPO after its baseline (with coverage)."""
    write_files(tmp_path / "ws", REPO)
    workspace = Workspace(tmp_path / "ws")
    verifier = Verifier(Toolchain(sys.executable, LocalSandbox(), workspace.project), settings)
    try:
        state, _ = verifier.baseline()
        if before_verify is not None:
            before_verify(verifier)
        change = FileChange("slug.py", SLUG, DELETES)
        workspace.apply([change])
        return verifier.verify(Candidate("test", "delete", (change,)), state, reset=workspace.restore)
    finally:
        verifier.close()


def test_a_project_can_turn_the_rule_off(tmp_path):
    report = _verify(tmp_path, VerifySettings(semantic_off=frozenset({"deleted-behaviour"})))
    assert report.accepted, report.reason
    assert not any(s.stage == "deleted-behaviour" for s in report.stages)


def test_without_coverage_the_rule_says_it_did_not_look_and_never_rejects(tmp_path):
    def no_coverage(verifier: Verifier) -> None:
        verifier.impact.coverage = {}

    report = _verify(tmp_path, VerifySettings(), no_coverage)
    assert report.accepted, report.reason
    stage = next(s for s in report.stages if s.stage == "deleted-behaviour")
    assert stage.ok and stage.skipped and "no per-test coverage" in stage.detail


def test_a_file_an_accepted_edit_changed_is_not_read(tmp_path):
    """The coverage's lines are the baseline's: once an accepted edit changed the file they say
    nothing of its text."""

    def accepted_before(verifier: Verifier) -> None:
        verifier.adopt([FileChange("slug.py", SLUG, SLUG)])

    report = _verify(tmp_path, VerifySettings(), accepted_before)
    assert report.accepted, report.reason
    stage = next(s for s in report.stages if s.stage == "deleted-behaviour")
    assert stage.skipped and "not read: slug.py" in stage.detail
