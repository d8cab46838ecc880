"""Staged verification on real projects: what each stage catches, and (through verify()) that the gate
is the last word."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.score import Observation
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.facts import VerifySettings
from ralph.validators.impact import TestImpact
from ralph.validators.pipeline import Verifier
from ralph.validators.selection import Selection
from ralph.validators.toolchain import Toolchain
from tests.conftest import write_files

TYPED = {
    "pyproject.toml": "[tool.mypy]\nstrict_optional = true\n",
    "shapes.py": "def area(w: int, h: int) -> int:\n    return w * h\n",
    "report.py": "from shapes import area\n\n\ndef describe() -> str:\n    return 'area ' + str(area(2, 3) + 0)\n",
    "tests/test_shapes.py": (
        "from report import describe\nfrom shapes import area\n\n\n"
        "def test_area():\n    assert area(2, 3) == 6\n\n\n"
        "def test_describe():\n    assert describe() == 'area 6'\n"
    ),
}


@pytest.fixture
def verifier(tmp_path: Path):
    def make(files: dict[str, str], types: bool = False) -> tuple[Verifier, Workspace, Observation]:
        write_files(tmp_path / "ws", files)
        ws = Workspace(tmp_path / "ws")
        toolchain = Toolchain(sys.executable, LocalSandbox(), ws.project)
        v = Verifier(toolchain, VerifySettings(types=types))
        made.append(v)
        state, _ = v.baseline()
        return v, ws, state

    made: list[Verifier] = []
    yield make
    for v in made:
        v.close()


def candidate(ws: Workspace, path: str, old: str, new: str) -> Candidate:
    before = ws.read(path)
    assert before is not None and old in before
    change = FileChange(path, before, before.replace(old, new))
    ws.apply([change])
    return Candidate("test", f"{old} -> {new}", (change,))


def test_a_type_error_in_another_module_is_caught_by_the_daemon(verifier):
    v, ws, state = verifier(TYPED, types=True)
    report = v.detect(candidate(ws, "shapes.py", "-> int:", "-> int | None:"), state)
    assert report.failed_stage == "mypy"
    assert "report.py" in report.reason  # the caller, a file the edit did not touch


def test_the_type_checker_is_stopped_when_the_verifier_closes(verifier):
    v, ws, state = verifier(TYPED, types=True)
    v.detect(candidate(ws, "shapes.py", "w * h", "h * w"), state)
    assert v.tools.mypy is not None and v.tools.mypy._proc is not None
    pid = v.tools.mypy._proc.pid
    assert alive(pid)
    v.close()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_regression_is_caught_by_the_selected_tests_before_the_gate(verifier):
    v, ws, state = verifier(TYPED)
    report = v.detect(candidate(ws, "shapes.py", "w * h", "w + h"), state)
    assert report.failed_stage == "tests"
    assert not any(s.stage == "gate" for s in report.stages)


def test_an_unrelated_edit_runs_no_tests(verifier):
    files = {**TYPED, "unused.py": "def f():\n    return 1\n"}
    v, ws, state = verifier(files)
    report = v.detect(candidate(ws, "unused.py", "return 1", "return 2"), state)
    assert not report.failed_stage
    assert [s.stage for s in report.stages] == ["syntax", "ruff", "tests"]
    assert report.stages[-1].skipped


def test_a_new_lint_diagnostic_is_a_regression(verifier):
    v, ws, state = verifier(TYPED)
    report = v.detect(
        candidate(ws, "shapes.py", "    return w * h", "    unused = 1\n    return w * h"), state
    )
    assert report.failed_stage == "ruff"
    assert "F841" in report.reason


def test_after_the_first_check_types_come_from_the_same_resident_checker(verifier):
    v, ws, state = verifier(TYPED, types=True)
    assert v.tools.mypy is not None and v.tools.mypy._proc is not None
    first = v.tools.mypy._proc.pid
    assert not v.detect(candidate(ws, "shapes.py", "w * h", "h * w"), state).failed_stage
    report = v.detect(candidate(ws, "shapes.py", "-> int:", "-> int | None:"), state)
    assert report.failed_stage == "mypy" and "report.py" in report.reason
    assert v.tools.mypy._proc is not None and v.tools.mypy._proc.pid == first


@pytest.mark.slow
def test_a_type_checker_that_died_is_started_again(verifier):
    v, ws, state = verifier(TYPED, types=True)
    assert v.tools.mypy is not None and v.tools.mypy._proc is not None
    v.tools.mypy._proc.kill()
    v.tools.mypy._proc.wait()
    report = v.detect(candidate(ws, "shapes.py", "-> int:", "-> int | None:"), state)
    assert report.failed_stage == "mypy" and "report.py" in report.reason


def test_the_syntax_stage_leaves_bytecode_that_imports_use_and_edits_invalidate(tmp_path):
    import subprocess

    from ralph.domain.results import Scope
    from ralph.validators.syntax import SyntaxValidator

    write_files(tmp_path, {"mod.py": "VALUE = 1\n"})
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    assert toolchain.reads_our_bytecode
    assert SyntaxValidator(toolchain, write_bytecode=True).check(Scope(paths=("mod.py",))).ok
    cached = tmp_path / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    written = cached.stat().st_mtime_ns
    run = [sys.executable, "-c", "import mod; print(mod.VALUE)"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    assert subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True).stdout == "1\n"
    assert cached.stat().st_mtime_ns == written  # the import used it (a stale one is rewritten)
    # An edit of the same size within the same second still wins: the workspace bumps mtimes.
    stamp = (tmp_path / "mod.py").stat().st_mtime + 2
    (tmp_path / "mod.py").write_text("VALUE = 2\n")
    os.utime(tmp_path / "mod.py", (stamp, stamp))
    assert subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True).stdout == "2\n"


def test_what_a_mypy_plugin_prints_never_shifts_the_daemons_verdicts(tmp_path):
    from ralph.domain.results import Scope
    from ralph.validators.mypy import MypyValidator

    plugin = (
        "from mypy.plugin import Plugin\n\n\nclass Loud(Plugin):\n"
        "    def get_function_hook(self, fullname):\n        print('hook', fullname)\n        return None\n\n\n"
        "def plugin(version):\n    return Loud\n"
    )
    project = tmp_path / "p"
    write_files(project, {"pyproject.toml": "[tool.mypy]\nplugins = ['loud.py']\n", "loud.py": plugin})
    toolchain = Toolchain(sys.executable, LocalSandbox(), project, env={"PYTHONPATH": str(project)})
    mypy = MypyValidator(toolchain)
    head = "def noisy() -> int:\n    return 1\n\n\nx: int = noisy()\n"
    verdicts = []
    try:
        for step, extra in enumerate(["", "y: str = 1\n", "", "z: str = 2\n", ""]):
            file = project / "mod.py"
            file.write_text(head + extra)
            os.utime(file, (time.time() + 2 * step, time.time() + 2 * step))
            verdicts.append(mypy.check(Scope(paths=("mod.py",), timeout_s=120)).ok)
    finally:
        mypy.close()
    assert verdicts == [True, False, True, False, True]


# The whole sequence, gate included: verify() on an applied candidate, the workspace put back
# before the gate as the loop does.

BUGGY = {
    "shapes.py": "# shapes\nSIZES = [1, 2]\n\n\ndef area(w, h):\n    return w + h\n",
    "tests/test_shapes.py": (
        "import pytest\n\nfrom shapes import SIZES, area\n\n\n"
        "def test_area():\n    assert area(2, 3) == 6\n\n\n"
        "@pytest.mark.parametrize('n', SIZES)\ndef test_square(n):\n    assert area(n, n) >= n\n"
    ),
    # Reads the source as text: no coverage and no import sees it, so no selection can pick it.
    "tests/test_text.py": (
        "from pathlib import Path\n\nimport pytest\n\n"
        "SOURCE = (Path(__file__).parent.parent / 'shapes.py').read_text()\n\n\n"
        "@pytest.mark.parametrize('line', [x for x in SOURCE.splitlines() if x.startswith('#')])\n"
        "def test_comment(line):\n    assert line.strip()\n\n\n"
        "def test_single_return():\n    assert SOURCE.count('return') == 1\n"
    ),
}


def verify(v: Verifier, ws: Workspace, state: Observation, cand: Candidate):
    ws.capture()
    return v.verify(cand, state, reset=ws.restore)


def test_verify_accepts_a_fix_after_the_gate_ran_the_whole_suite(verifier):
    v, ws, state = verifier(BUGGY)
    report = verify(v, ws, state, candidate(ws, "shapes.py", "w + h", "w * h"))
    assert report.accepted, report.reason
    assert report.reason == "remaining error 1 -> 0"
    gate = next(s for s in report.stages if s.stage == "gate")
    assert len(gate.tests) == 5 and all(t.outcome == "passed" for t in gate.tests)


def test_the_gate_catches_what_no_selection_could_see(verifier):
    v, ws, state = verifier(BUGGY)
    fix = candidate(
        ws, "shapes.py", "    return w + h\n", "    if w < 0:\n        return 0\n    return w * h\n"
    )
    report = verify(v, ws, state, fix)
    assert not report.accepted
    assert report.failed_stage == "gate", report.reason
    assert "tests/test_text.py::test_single_return" in report.reason
    selected = [s for s in report.stages if s.stage == "tests"][-1]
    assert "test_text" not in " ".join(t.nodeid for t in selected.tests)  # the selection missed it


def test_a_test_that_disappears_from_the_suite_fails_the_gate(verifier):
    v, ws, state = verifier(BUGGY)
    before = ws.read("shapes.py")
    assert before is not None
    after = before.replace("# shapes\n", "").replace("w + h", "w * h")
    change = FileChange("shapes.py", before, after)
    ws.apply([change])
    report = verify(v, ws, state, Candidate("test", "fix, and drop a case", (change,)))
    assert not report.accepted
    assert report.failed_stage == "gate", report.reason
    assert "tests/test_text.py::test_comment[# shapes]" in report.reason
    gate = next(s for s in report.stages if s.stage == "gate")
    gone = [t for t in gate.tests if t.message == "disappeared from the suite"]
    assert [t.nodeid for t in gone] == ["tests/test_text.py::test_comment[# shapes]"]


def test_a_candidate_that_improves_nothing_never_reaches_the_gate(verifier):
    v, ws, state = verifier(BUGGY)
    report = verify(v, ws, state, candidate(ws, "shapes.py", "w + h", "h + w"))
    assert not report.accepted and report.reason == "no improvement on the targeted checks"
    assert "gate" not in [s.stage for s in report.stages]


def test_the_gate_stops_at_the_first_regression_running_what_can_see_the_change_first(verifier):
    v, ws, state = verifier(BUGGY)
    broken = candidate(ws, "shapes.py", "    return w + h\n", "    return -5 if w == 1 else w * h\n")
    report = verify(v, ws, state, broken)
    assert not report.accepted and report.failed_stage == "gate"
    assert "tests/test_shapes.py::test_square[1]" in report.reason
    gate = next(s for s in report.stages if s.stage == "gate")
    assert gate.stopped_early and "stopped at the first regression" in gate.detail
    assert not any("test_text" in t.nodeid for t in gate.tests)  # never reached: the verdict was known
    assert not any(t.message == "disappeared from the suite" for t in gate.tests)


TWO_FUNCTIONS = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n",
    "tests/test_calc.py": (
        "from calc import add, mul\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_add_zero():\n    assert add(0, 3) == 3\n\n\n"
        "def test_mul():\n    assert mul(2, 3) == 6\n"
    ),
}


def test_the_targeted_stage_runs_only_failing_tests_that_can_see_the_change_until_one_passes(verifier):
    v, ws, state = verifier(TWO_FUNCTIONS)
    assert state.failing_tests() == [f"tests/test_calc.py::test_{n}" for n in ("add", "add_zero", "mul")]
    report = verify(v, ws, state, candidate(ws, "calc.py", "a - b", "a + b"))
    assert report.accepted, report.reason
    probe = report.stages[2]  # after syntax and ruff
    assert probe.stage == "tests" and probe.unaffected == 1  # test_mul never entered add()
    assert [t.nodeid for t in probe.tests] == ["tests/test_calc.py::test_add"]  # one fix is proof enough
    assert "stopped at the first pass" in probe.detail
    gate = next(s for s in report.stages if s.stage == "gate")
    assert {t.nodeid: t.outcome for t in gate.tests}["tests/test_calc.py::test_add_zero"] == "passed"
    assert report.tests_run == 1 + 3  # the probe's one test, then the suite once


def test_a_change_no_failing_test_can_see_is_rejected_without_running_them(verifier):
    files = {
        "calc.py": TWO_FUNCTIONS["calc.py"] + "\n\ndef sub(a, b):\n    return -(b - a)\n",
        "tests/test_calc.py": TWO_FUNCTIONS["tests/test_calc.py"],
        "tests/test_sub.py": "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 2) == 1\n",
    }
    v, ws, state = verifier(files)
    report = verify(v, ws, state, candidate(ws, "calc.py", "-(b - a)", "-(b - a) + 0"))
    assert not report.accepted and report.reason == "no improvement on the targeted checks"
    probe = report.stages[2]
    assert probe.skipped and probe.unaffected == 3 and probe.tests == []


BUGGY_TYPED = {
    **TYPED,
    "shapes.py": "def area(w: int, h: int) -> int:\n    return w + h\n",
}


@pytest.mark.slow
def test_the_type_check_waits_for_an_improvement_unless_the_state_has_type_errors(verifier):
    """A candidate that improves nothing is rejected without a type check; one that fixes a test
    but breaks the types is rejected by it; a state whose error includes a type error has its
    candidates type-checked beside the tests, since fixing that error alone is progress."""
    v, ws, state = verifier(BUGGY_TYPED, types=True)
    ws.capture()
    useless = v.verify(candidate(ws, "shapes.py", "w + h", "h + w"), state, ws.restore)
    assert not useless.accepted and "mypy" not in [s.stage for s in useless.stages if not s.skipped]
    ws.restore()
    ill_typed = candidate(
        ws, "shapes.py", "    return w + h", "    product: str = w * h\n    return w * h if product else 0"
    )
    typed_wrong = v.verify(ill_typed, state, ws.restore)
    assert not typed_wrong.accepted and typed_wrong.failed_stage == "mypy", typed_wrong.reason
    ws.restore()
    fixed = v.verify(candidate(ws, "shapes.py", "w + h", "w * h"), state, ws.restore)
    assert fixed.accepted and [s.stage for s in fixed.stages].count("mypy") == 1, fixed.reason


def test_a_fix_of_a_type_error_alone_is_progress(verifier):
    broken = {**TYPED, "report.py": TYPED["report.py"].replace("str(area(2, 3) + 0)", "area(2, 3)")}
    v, ws, state = verifier(broken, types=True)
    assert any(tool == "mypy" for tool, _ in state.diagnostics)
    fixed = v.verify(
        candidate(ws, "report.py", "'area ' + area(2, 3)", "'area ' + str(area(2, 3))"), state, ws.restore
    )
    assert fixed.accepted, fixed.reason


# A function every test enters, one line of which only the first few tests run; 40 tests in two
# modules, so a selection is large enough for two rounds. Six of them also run `twice`: they ran
# more lines, so they come last among the tests that ran a line of `calc`.
ROUNDS = {
    "calc.py": (
        "def calc(x):\n"
        "    if x < 0:\n"
        "        return -x\n"
        "    return x\n\n\n"
        "def twice(x):\n"
        "    return 2 * calc(x)\n"
    ),
    "tests/test_neg.py": (
        "from calc import calc\n\n\n"
        + "".join(f"def test_neg_{i}():\n    assert calc(-{i + 1}) == {i + 1}\n\n\n" for i in range(4))
    ),
    "tests/test_pos.py": (
        "from calc import calc, twice\n\n\n"
        + "".join(f"def test_pos_{i}():\n    assert calc({i}) == {i}\n\n\n" for i in range(30))
        + "".join(
            f"def test_big_{i}():\n    assert twice({100 + i}) == {200 + 2 * i}\n\n\n" for i in range(6)
        )
    ),
}


def test_a_large_selection_fails_in_its_first_round_or_runs_the_rest_in_a_second(verifier):
    v, ws, state = verifier(ROUNDS)
    # Broken on the line only test_neg ran: its four tests, the first round, show it alone.
    cand = candidate(ws, "calc.py", "return -x", "return x")
    assert v.impact.first_round(v.impact.select(cand), v.facts.durations) == tuple(
        f"tests/test_neg.py::test_neg_{i}" for i in range(4)
    )
    broken = v.detect(cand, state)
    tests = next(s for s in broken.stages if s.stage == "tests")
    assert broken.failed_stage == "tests"
    assert {t.nodeid.split("::")[0] for t in tests.tests} == {"tests/test_neg.py"}
    ws.revert(cand.changes)
    # Broken on a line every test ran, for the positive numbers only: the first round passes and
    # the second finds it.
    cand = candidate(ws, "calc.py", "    return x\n", "    return x if x < 100 else 0\n")
    late = v.detect(cand, state)
    tests = next(s for s in late.stages if s.stage == "tests")
    assert late.failed_stage == "tests" and "after a first round" in tests.detail
    assert [t.nodeid.split("::")[1] for t in tests.tests if t.failing] == ["test_big_0"]
    assert sum(not t.failing for t in tests.tests) >= 16


# A table of formats at module level: a change to one entry selects every test module importing
# it, and the tests named after the entry run first, alone.
TABLE = {
    "fmt.py": (
        'FORMATS = {\n    "plain": ("", ""),\n    "rst": ("=", "="),\n}\n\n\n'
        "def render(fmt, x):\n    left, right = FORMATS[fmt]\n    return left + str(x) + right\n"
    ),
    "tests/test_plain.py": (
        "from fmt import render\n\n\n"
        + "".join(f"def test_plain_{i}():\n    assert render('plain', {i}) == '{i}'\n\n\n" for i in range(20))
    ),
    "tests/test_table.py": (
        "from fmt import render\n\n\n"
        "def test_whole_row():\n    assert render('rst', 1) == '=1='\n\n\n"
        + "".join(
            f"def test_rst_{i}():\n    assert render('rst', {i}).startswith('=')\n\n\n" for i in range(4)
        )
    ),
}


def test_a_module_level_entry_runs_the_tests_named_after_it_first_then_the_modules_whole(verifier):
    v, ws, state = verifier(TABLE)
    cand = candidate(ws, "fmt.py", '"rst": ("=", "=")', '"rst": ("-", "=")')
    selection = v.impact.select(cand)
    assert selection.by_imports and set(selection.tests) == {"tests/test_plain.py", "tests/test_table.py"}
    assert v.impact.first_round(selection, v.facts.durations) == tuple(
        f"tests/test_table.py::test_rst_{i}" for i in range(4)
    )
    early = v.detect(cand, state)
    tests = next(s for s in early.stages if s.stage == "tests")
    assert early.failed_stage == "tests" and "after a first round" not in tests.detail
    assert {t.nodeid for t in tests.tests} <= {f"tests/test_table.py::test_rst_{i}" for i in range(4)}
    ws.revert(cand.changes)
    # The tests named after it pass; the second round runs both modules whole and finds the row
    # broken; a test both rounds ran is reported once.
    cand = candidate(ws, "fmt.py", '"rst": ("=", "=")', '"rst": ("=", "-")')
    late = v.detect(cand, state)
    tests = next(s for s in late.stages if s.stage == "tests")
    assert late.failed_stage == "tests" and "after a first round of 4 passing" in tests.detail
    assert [t.nodeid for t in tests.tests if t.failing] == ["tests/test_table.py::test_whole_row"]
    nodeids = [t.nodeid for t in tests.tests]
    assert len(nodeids) == len(set(nodeids))


def test_a_first_round_that_guesses_by_name_keeps_to_one_module_and_to_quick_tests():
    impact = TestImpact(cast(Toolchain, None), lambda path: path.startswith("tests/"))
    selection = Selection(tests=["tests/test_a.py", "tests/test_b.py"], words=["rst"], by_imports=True)
    durations = {
        "tests/test_a.py::test_rst_slow": 0.5,  # (a slow test is a poor probe)
        "tests/test_a.py::test_rst": 0.01,
        "tests/test_b.py::test_rst_b": 0.01,  # (another module: collecting it too costs more)
        "tests/test_a.py::test_other": 0.01,
        "tests/test_c.py::test_rst_c": 0.01,  # (not selected)
    }
    assert impact.first_round(selection, durations) == ("tests/test_a.py::test_rst",)
    # Nothing named after the change, and no test ran a changed line: one round.
    assert impact.first_round(replace(selection, words=["html"]), durations) == ()
    # A few named tests alone: one round, as before.
    assert impact.first_round(replace(selection, tests=["tests/test_a.py::test_rst"]), durations) == ()
    # One module: a first round would only collect it twice.
    assert impact.first_round(replace(selection, tests=["tests/test_a.py"]), durations) == ()
    # Modules chosen for another reason (test files that start Python processes): the change was
    # covered, and the tests that ran its line are the first round; no guess by name.
    late = replace(selection, tests=["tests/test_a.py::test_other", "tests/test_b.py"], by_imports=False)
    assert impact.first_round(late, durations) == ()
    assert impact.first_round(replace(late, near=["tests/test_a.py::test_other"]), durations) == (
        "tests/test_a.py::test_other",
    )
    # An id pytest would split at its `::` (before pytest 8.1) is no guess to make.
    odd = {"tests/test_b.py::test_rst[a::b]": 0.01, **durations}
    assert impact.first_round(selection, odd) == ("tests/test_a.py::test_rst",)


# A parameter id that changes from run to run: the baseline's id is not found again.
DRIFTING = {
    "fmt.py": TABLE["fmt.py"],
    "tests/test_plain.py": TABLE["tests/test_plain.py"],
    "tests/test_table.py": (
        "import time\n\nimport pytest\n\nfrom fmt import render\n\n\n"
        "def test_whole_row():\n    assert render('rst', 1) == '=1='\n\n\n"
        "@pytest.mark.parametrize('x', [1], ids=[str(time.time_ns())])\n"
        "def test_rst(x):\n    assert render('rst', x).startswith('=')\n"
    ),
}


def test_a_first_round_pytest_refuses_gives_way_to_one_round(verifier):
    v, ws, state = verifier(DRIFTING)
    cand = candidate(ws, "fmt.py", '"rst": ("=", "=")', '"rst": ("=", "-")')
    first = v.impact.first_round(v.impact.select(cand), v.facts.durations)
    assert len(first) == 1 and first[0].startswith("tests/test_table.py::test_rst[")
    report = v.detect(cand, state)
    tests = next(s for s in report.stages if s.stage == "tests")
    assert report.failed_stage == "tests" and tests.error is None, tests.detail
    assert [t.nodeid for t in tests.tests if t.failing] == ["tests/test_table.py::test_whole_row"]
