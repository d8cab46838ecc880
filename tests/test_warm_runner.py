"""The warm test runner: fork-per-request pytest that survives hangs, crashes and its own death."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from ralph.domain.results import Scope
from ralph.sandboxes.local import LocalSandbox
from ralph.validators.pytest_run import PytestValidator, compact_node_ids, gate_tests
from ralph.validators.toolchain import Toolchain
from ralph.validators.warm import WarmRunner, third_party_imports
from tests.conftest import write_files


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_files(
        tmp_path,
        {
            "lib.py": "import json\n\n\ndef answer():\n    return 42\n",
            "tests/test_lib.py": (
                "import os, signal, time\n\nfrom lib import answer\n\n\n"
                "def test_ok():\n    assert answer() == 42\n\n\n"
                "def test_wrong():\n    assert answer() == 41\n\n\n"
                "def test_hangs():\n    time.sleep(600)\n\n\n"
                "def test_crashes():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
            ),
        },
    )
    return tmp_path


@pytest.fixture
def validator(project: Path):
    toolchain = Toolchain(sys.executable, LocalSandbox(), project)
    warm = WarmRunner(toolchain, third_party_imports(project))
    yield PytestValidator(toolchain, warm=warm)
    warm.close()


def outcomes(result) -> dict[str, str]:
    return {t.nodeid.split("::")[-1]: t.outcome for t in result.tests}


def test_outcomes_match_a_fresh_pytest_run(validator, project):
    scope = Scope(tests=("tests/test_lib.py::test_ok", "tests/test_lib.py::test_wrong"))
    warm = validator.check(scope)
    validator.warm = None
    cold = validator.check(scope)
    assert outcomes(warm) == outcomes(cold) == {"test_ok": "passed", "test_wrong": "failed"}
    assert "assert 42 == 41" in next(t.message for t in warm.tests if t.failing)


def test_a_hanging_test_is_killed_and_the_worker_survives(validator):
    result = validator.check(Scope(tests=("tests/test_lib.py::test_hangs",), timeout_s=1.5))
    assert outcomes(result) == {"test_hangs": "error"}
    assert "timed out" in result.detail
    again = validator.check(Scope(tests=("tests/test_lib.py::test_ok",)))
    assert outcomes(again) == {"test_ok": "passed"}
    assert validator.warm.starts == 1


def test_a_test_that_crashes_the_interpreter_fails_with_a_reason(validator):
    result = validator.check(Scope(tests=("tests/test_lib.py::test_crashes",)))
    assert outcomes(result) == {"test_crashes": "error"}
    assert "died (signal 11)" in result.tests[0].message


def test_a_worker_that_dies_is_restarted(validator):
    validator.check(Scope(tests=("tests/test_lib.py::test_ok",)))
    os.killpg(validator.warm._proc.pid, signal.SIGKILL)
    validator.warm._proc.wait()
    result = validator.check(Scope(tests=("tests/test_lib.py::test_ok",)))
    assert outcomes(result) == {"test_ok": "passed"}
    assert validator.warm.starts == 2


def test_the_projects_own_modules_are_never_preloaded(project):
    write_files(project, {"src/pkg/__init__.py": "import requests_like_dep\n"})
    preload = third_party_imports(project)
    assert "json" in preload and "requests_like_dep" in preload
    assert not {"lib", "pkg", "tests"} & set(preload)


def test_the_standard_librarys_submodules_the_project_imports_are_preloaded_and_no_package_s(tmp_path):
    # unittest.mock (asyncio with it) costs a child ~10 ms to import; a package's submodule is left
    # to the child, after the conftest (matplotlib.pyplot picks its backend when imported).
    write_files(
        tmp_path,
        {
            "tools/run.py": "import unittest.__main__\nimport venv.__main__\n",
            "tests/test_seen.py": (
                "import sys\n\nAHEAD = 'unittest.mock' in sys.modules, 'rich.console' in sys.modules\n"
                "from unittest import mock\nfrom rich.console import Console\nimport xml.dom.minidom\n\n\n"
                "def test_what_was_there_first():\n    assert AHEAD == (True, False)\n"
            ),
        },
    )
    preload = third_party_imports(tmp_path)
    assert {"unittest", "unittest.mock", "rich", "rich.console", "xml.dom.minidom"} <= set(preload)
    assert "unittest.mock.mock" not in preload and "rich.console.Console" in preload  # (a guess)
    assert not {"unittest.__main__", "venv.__main__"} & set(preload)  # (importing one runs it)
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    warm = WarmRunner(toolchain, preload)
    try:
        result = PytestValidator(toolchain, warm=warm).check(
            Scope(tests=("tests/test_seen.py::test_what_was_there_first",))
        )
    finally:
        warm.close()
    assert outcomes(result) == {"test_what_was_there_first": "passed"}


def test_a_test_past_the_per_test_limit_fails_and_the_others_still_run(project):
    toolchain = Toolchain(sys.executable, LocalSandbox(), project)
    validator = PytestValidator(toolchain, test_timeout_s=1.0)
    result = validator.check(
        Scope(tests=("tests/test_lib.py::test_hangs", "tests/test_lib.py::test_ok"), timeout_s=60)
    )
    assert outcomes(result) == {"test_hangs": "failed", "test_ok": "passed"}
    assert "per-test limit" in next(t.message for t in result.tests if t.failing)
    assert result.duration_ms < 30_000


def test_killing_ralph_kills_the_worker_and_a_test_it_runs(project, tmp_path):
    import subprocess
    import textwrap
    import time

    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
            from pathlib import Path
            from ralph.domain.results import Scope
            from ralph.sandboxes.local import LocalSandbox
            from ralph.validators.pytest_run import PytestValidator
            from ralph.validators.toolchain import Toolchain
            from ralph.validators.warm import WarmRunner
            toolchain = Toolchain(sys.executable, LocalSandbox(), Path({str(project)!r}))
            PytestValidator(toolchain, warm=WarmRunner(toolchain)).check(
                Scope(tests=("tests/test_lib.py::test_hangs",), timeout_s=600)
            )
            """
        )
    )
    host = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 30
    family: list[int] = []
    while time.monotonic() < deadline and len(family) < 2:
        family = [
            int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _worker_of(p, host.pid)
        ]
        time.sleep(0.1)
    assert len(family) >= 2, "the worker and its test child should be running"
    host.kill()
    host.wait()
    time.sleep(1.0)
    assert not [pid for pid in family if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"]


def _worker_of(proc: Path, host: int) -> bool:
    """A ralph_worker process descending from `host`."""
    try:
        if "ralph_worker" not in (proc / "cmdline").read_text():
            return False
        pid = int(proc.name)
        for _ in range(5):
            pid = int((Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if pid == host:
                return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_project_inside_a_hidden_folder_still_has_its_imports_found(tmp_path):
    project = tmp_path / ".cache" / "checkout"
    write_files(project, {"lib.py": "import json\n", ".hidden/skip.py": "import secret_dep\n"})
    preload = third_party_imports(project)
    assert "json" in preload and "secret_dep" not in preload


def _rewrite(project: Path, path: str, text: str) -> None:
    """Write a file as the workspace does: with a later mtime, so no stale bytecode is reused."""
    file = project / path
    stamp = file.stat().st_mtime + 2
    file.write_text(text)
    os.utime(file, (stamp, stamp))


def test_a_child_readied_ahead_runs_the_code_written_after_it_was_forked(validator, project):
    quick = Scope(tests=("tests/test_lib.py::test_ok",))
    assert outcomes(validator.check(quick, exitfirst=True)) == {"test_ok": "passed"}
    validator.warm.restored(clean=True)  # (as the loop says once the workspace is put back)
    _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
    again = validator.check(quick, exitfirst=True)
    assert outcomes(again) == {"test_ok": "failed"}
    assert "assert 41 == 42" in again.tests[0].message
    assert validator.warm.readied == 1


def test_the_code_a_readied_child_read_ahead_serves_only_imports_of_the_same_bytes(validator, project):
    # The spare unmarshals the project's cached code while it waits; an import that then reads other
    # bytes (the candidate's module, compiled anew) unmarshals those: the tests see the new code.
    import py_compile
    import time

    write_files(
        project,
        {
            "tests/test_ahead.py": (
                "import sys\n\nLOADS = sys.modules['_frozen_importlib_external'].marshal.loads.__name__\n\n\n"
                "def test_read_ahead():\n    assert LOADS == '_loads'  # (while collecting: off once that ends)\n"
                "    assert sys.modules['_frozen_importlib_external'].marshal.loads.__name__ == 'loads'\n"
            )
        },
    )
    for path in ("lib.py", "tests/test_ahead.py"):
        py_compile.compile(str(project / path), doraise=True)
    ahead = Scope(tests=("tests/test_lib.py::test_ok", "tests/test_ahead.py::test_read_ahead"))
    first = outcomes(validator.check(ahead, exitfirst=True))
    assert first == {"test_ok": "passed", "test_read_ahead": "failed"}  # (a fresh child: none)
    validator.warm.restored(clean=True)
    time.sleep(1.0)  # (it reads ahead now: lib's cached code, as it is)
    _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
    py_compile.compile(str(project / "lib.py"), doraise=True)
    again = validator.check(Scope(tests=ahead.tests[::-1]), exitfirst=True)
    assert outcomes(again) == {"test_read_ahead": "passed", "test_ok": "failed"}
    assert "assert 41 == 42" in next(t.message for t in again.tests if t.failing)
    assert validator.warm.readied == 1


def test_no_child_is_readied_ahead_where_configuring_runs_project_code(validator, project):
    # A conftest is the project's code, and pytest loads it while configuring, before the candidate.
    write_files(project, {"tests/conftest.py": "import lib\n"})
    quick = Scope(tests=("tests/test_lib.py::test_ok",))
    validator.check(quick, exitfirst=True)
    validator.warm.restored(clean=True)  # (as the loop says once the workspace is put back)
    _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
    assert outcomes(validator.check(quick, exitfirst=True)) == {"test_ok": "failed"}
    assert validator.warm.readied == 0


def test_a_child_is_readied_ahead_where_a_conftest_loads_no_project_code(validator, project):
    """No candidate may edit a conftest, so one that imports nothing of the project configures a
    readied child exactly as a fresh one (tomlkit's, boltons')."""
    conftest = "import pytest\n\n\n@pytest.fixture\ndef unit():\n    return 1\n"
    write_files(project, {"tests/conftest.py": conftest})
    quick = Scope(tests=("tests/test_lib.py::test_ok",))
    validator.check(quick, exitfirst=True)
    validator.warm.restored(clean=True)  # (as the loop says once the workspace is put back)
    _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
    assert outcomes(validator.check(quick, exitfirst=True)) == {"test_ok": "failed"}
    assert validator.warm.readied == 1


@pytest.mark.parametrize(
    ("package", "readied"),
    [("tests", 1), ("testkit", 0)],  # a protected test package; an editable one pytest loads early
)
def test_a_conftests_package_taints_a_readied_child_unless_no_candidate_may_edit_it(
    project, package, readied
):
    """Importing `tests.conftest` imports the `tests` package first (tomlkit's): its `__init__.py`,
    under the protected test files, configures the child as a fresh run would. `testkit` is the
    project's own, editable code, whose conftest pytest loads while configuring (as it loads every
    `test*/conftest.py`): a child it configured is not used."""
    from ralph.domain.candidate import PROTECTED_TESTS
    from ralph.validators.warm import candidates_runner

    write_files(project, {f"{package}/__init__.py": "", f"{package}/conftest.py": "import pytest\n"})
    toolchain = Toolchain(sys.executable, LocalSandbox(), project)
    runner = candidates_runner(toolchain, PROTECTED_TESTS)
    validator = PytestValidator(toolchain, warm=runner)
    try:
        quick = Scope(tests=("tests/test_lib.py::test_ok",))
        validator.check(quick, exitfirst=True)
        runner.restored(clean=True)
        _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
        assert outcomes(validator.check(quick, exitfirst=True)) == {"test_ok": "failed"}
        assert runner.readied == readied
    finally:
        runner.close()


def test_a_readied_child_that_configuring_tainted_is_never_used(validator, project):
    # No conftest, but the settings load a plugin from the project: caught by the spare itself.
    write_files(
        project,
        {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p lib'\n"},
    )
    quick = Scope(tests=("tests/test_lib.py::test_ok",))
    validator.check(quick, exitfirst=True)
    validator.warm.restored(clean=True)  # (as the loop says once the workspace is put back)
    _rewrite(project, "lib.py", "import json\n\n\ndef answer():\n    return 41\n")
    assert outcomes(validator.check(quick, exitfirst=True)) == {"test_ok": "failed"}
    assert validator.warm.readied == 0


def test_a_failure_message_names_the_projects_frames_and_the_assertion(validator):
    result = validator.check(Scope(tests=("tests/test_lib.py::test_wrong",)))
    message = result.tests[0].message
    assert 'File "tests/test_lib.py", line 11, in test_wrong' in message
    assert "assert answer() == 41" in message and "assert 42 == 41" in message


@pytest.mark.slow
def test_tests_that_failed_lately_then_tests_named_after_the_change_run_first(tmp_path):
    write_files(
        tmp_path,
        {
            "lib.py": "def answer():\n    return 42\n",
            "tests/test_many.py": "from lib import answer\n\n\n"
            + "".join(f"def test_{n}():\n    assert answer() == 42\n\n\n" for n in "abcdef")
            + "def test_parse_answer():\n    assert answer() == 41\n\n\n"
            + "def test_recent():\n    assert answer() == 40\n",
        },
    )
    validator = PytestValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    whole = Scope(tests=("tests/test_many.py",))

    def run(**order: list[str]) -> tuple[int, list[str]]:
        result = validator.check(whole, exitfirst=True, **order)
        failing = [t.nodeid.split("::")[1] for t in result.tests if t.failing]
        return sum(not t.failing for t in result.tests), failing

    assert run() == (6, ["test_parse_answer"])  # pytest's order
    assert run(words=["parse", "answer"]) == (0, ["test_parse_answer"])  # the rarer word wins
    assert run(failed_first=["tests/test_many.py::test_recent"], words=["parse"]) == (0, ["test_recent"])
    # Tests that ran the changed line come before those named after it, in the order given.
    near = ["tests/test_many.py::test_d", "tests/test_many.py::test_recent", "tests/test_many.py::test_b"]
    assert run(words=["parse"], near=near) == (1, ["test_recent"])


def test_a_readied_child_caps_what_a_test_prints(validator, project):
    write_files(project, {"tests/test_loud.py": "def test_loud():\n    print('x' * (3 << 20))\n"})
    warm = validator.warm
    args = ["-p", "ralph_pytest_report", "-p", "no:cacheprovider", "-s", "-x"]
    for _ in range(2):
        result = warm.run(args, ["tests/test_loud.py::test_loud"], env={}, timeout_s=60, spare=True)
        warm.restored(clean=True)
    assert warm.readied == 1 and result.returncode == 0
    assert "bytes of output dropped" in result.output and len(result.output) < 3 << 20


def test_a_request_larger_than_a_pipe_reaches_a_readied_child(validator):
    tests = ["tests/test_lib.py::test_ok"] * 6000  # ~160 KiB of JSON; pytest drops the repeats
    for _ in range(2):
        result = validator.check(Scope(tests=tuple(tests)), exitfirst=True)
        validator.warm.restored(clean=True)
    assert validator.warm.readied == 1 and outcomes(result) == {"test_ok": "passed"}


def test_a_readied_child_that_ends_abruptly_still_leaves_its_output(validator, project):
    write_files(
        project,
        {
            "tests/test_exit.py": "import os\n\n\ndef test_exit():\n    print('last words', flush=True)\n    os._exit(7)\n"
        },
    )
    args = ["-p", "ralph_pytest_report", "-p", "no:cacheprovider", "-s", "-x"]
    for _ in range(2):
        result = validator.warm.run(args, ["tests/test_exit.py::test_exit"], env={}, timeout_s=60, spare=True)
        validator.warm.restored(clean=True)
    assert validator.warm.readied == 1
    assert result.returncode == 7 and "last words" in result.output


def test_a_readied_child_reports_a_missing_test_as_pytest_does(validator):
    args = ["-p", "ralph_pytest_report", "-p", "no:cacheprovider", "-x"]
    codes = []
    for _ in range(2):
        result = validator.warm.run(args, ["tests/test_lib.py::test_gone"], env={}, timeout_s=60, spare=True)
        validator.warm.restored(clean=True)
        codes.append(result.returncode)
    assert validator.warm.readied == 1 and codes == [4, 4]


def test_a_test_module_read_back_from_pytests_cache_keeps_its_rewritten_asserts(validator, project):
    # The worker's children read pytest's cached code in one call (`_whole_file_cache_reads`).
    write_files(
        project,
        {
            "tests/test_reads.py": (
                "import io, marshal, sys\n\n\n"
                "class Counting(io.BytesIO):\n"
                "    calls = 0\n\n"
                "    def read(self, *args):\n"
                "        Counting.calls += 1\n        return super().read(*args)\n\n"
                "    def readinto(self, buffer):\n"
                "        Counting.calls += 1\n        return super().readinto(buffer)\n\n\n"
                "def test_one_read():\n"
                "    data = marshal.dumps(compile('x = [1, (2, 3), \"four\"]', 'f', 'exec'))\n"
                "    rewrite = sys.modules['_pytest.assertion.rewrite']\n"
                "    assert rewrite.marshal.load(Counting(data)) == marshal.loads(data)\n"
                "    assert Counting.calls == 1\n"
            ),
        },
    )
    scope = Scope(tests=("tests/test_lib.py::test_wrong", "tests/test_reads.py::test_one_read"))
    for _ in range(2):  # the second run imports both modules from the cache the first one wrote
        result = validator.check(scope)
        assert outcomes(result) == {"test_wrong": "failed", "test_one_read": "passed"}, result.detail
        assert "assert 42 == 41" in next(t.message for t in result.tests if t.failing)
    assert list((project / "tests" / "__pycache__").glob("test_lib.*-pytest-*.pyc"))


def test_a_run_naming_tests_asks_about_no_file_beside_the_ones_it_names(tmp_path: Path):
    # The conftest logs each file pytest asks its plugins to collect.
    write_files(
        tmp_path,
        {
            "tests/conftest.py": (
                "def pytest_collect_file(file_path, parent):\n"
                "    with open('asked.log', 'a') as f:\n"
                "        f.write(file_path.name + '\\n')\n"
            ),
            "tests/test_a.py": "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n",
            "tests/test_b.py": "def test_b():\n    pass\n",
            "tests/data.txt": "",
            "tests/sub/test_c.py": "def test_c():\n    pass\n",
            "tests/sub/test_d.py": "def test_d():\n    pass\n",
            "other/test_e.py": "def test_e():\n    pass\n",
        },
    )
    validator = PytestValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    log = tmp_path / "asked.log"
    result = validator.check(Scope(tests=("tests/test_a.py::test_one",)))
    assert outcomes(result) == {"test_one": "passed"}
    assert log.read_text().split() == ["test_a.py"]
    # A directory named is collected whole, as pytest would; files beside it are not asked about.
    log.unlink()
    result = validator.check(Scope(tests=("tests/sub", "tests/test_a.py::test_two")))
    assert outcomes(result) == {"test_two": "passed", "test_c": "passed", "test_d": "passed"}
    assert sorted(log.read_text().split()) == ["test_a.py", "test_c.py", "test_d.py"]
    # And a run naming nothing collects everything.
    log.unlink()
    result = validator.check(Scope(tests=()))
    assert len(result.tests) == 6, result.detail
    assert {"test_b.py", "data.txt"} <= set(log.read_text().split())  # (the conftest is in tests/)
    # So does a warm child, and one readied before it knew the tests (the second).
    validator.warm = WarmRunner(validator.toolchain)
    try:
        for _ in range(2):
            log.unlink()
            result = validator.check(Scope(tests=("tests/test_a.py::test_one",)), exitfirst=True)
            validator.warm.restored(clean=True)
            assert outcomes(result) == {"test_one": "passed"}
            assert log.read_text().split() == ["test_a.py"]
        assert validator.warm.readied == 1
    finally:
        validator.warm.close()


@pytest.mark.slow
def test_a_run_naming_its_tests_builds_items_for_those_alone(tmp_path: Path):
    # Each function the run builds items for is parametrized through the hook, which logs its name.
    write_files(
        tmp_path,
        {
            "tests/test_many.py": (
                "import pytest\n\n\n"
                "def pytest_generate_tests(metafunc):\n"
                "    with open('built.log', 'a') as f:\n"
                "        f.write(metafunc.function.__name__ + '\\n')\n\n\n"
                "def test_a():\n    pass\n\n\n"
                "def test_b():\n    pass\n\n\n"
                "@pytest.mark.parametrize('n', [1, 2])\n"
                "def test_p(n):\n    assert n == 1\n\n\n"
                "class TestC:\n"
                "    def test_x(self):\n        pass\n\n"
                "    def test_y(self):\n        pass\n"
            ),
            "tests/test_other.py": "def test_o():\n    pass\n",
        },
    )
    validator = PytestValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    log = tmp_path / "built.log"
    named = (
        "tests/test_many.py::test_a",
        "tests/test_many.py::TestC::test_x",
        "tests/test_many.py::test_p[2]",
    )
    result = validator.check(Scope(tests=named))
    assert outcomes(result) == {"test_a": "passed", "test_x": "passed", "test_p[2]": "failed"}
    assert sorted(log.read_text().split()) == ["test_a", "test_p", "test_x"]
    # A file also named whole is collected whole (and one named only whole is untouched).
    log.unlink()
    result = validator.check(Scope(tests=("tests/test_many.py::test_a", "tests/test_many.py")))
    assert len(result.tests) == 6
    assert sorted(log.read_text().split()) == ["test_a", "test_b", "test_p", "test_x", "test_y"]
    # So is a file under a directory named, and all of a class named by its id.
    for whole in (".", "tests"):
        log.unlink()
        result = validator.check(Scope(tests=("tests/test_many.py::test_a", whole)))
        assert len(result.tests) == 7 and result.error is None, result.detail
    log.unlink()
    result = validator.check(Scope(tests=("tests/test_many.py::TestC",)))
    assert outcomes(result) == {"test_x": "passed", "test_y": "passed"}
    # So does a child the warm runner readied before it knew the tests (its second request).
    warm = WarmRunner(validator.toolchain)
    validator.warm = warm
    try:
        for _ in range(2):
            log.unlink()
            result = validator.check(Scope(tests=named[:2]), exitfirst=True)
            warm.restored(clean=True)
            assert outcomes(result) == {"test_a": "passed", "test_x": "passed"}
            assert sorted(log.read_text().split()) == ["test_a", "test_x"]
        assert warm.readied == 1
    finally:
        warm.close()


@pytest.mark.slow
def test_a_unittest_class_named_by_some_of_its_tests_builds_items_for_those_alone(tmp_path: Path):
    # A conftest logs the items built in the class; a test checks unittest's loader is put back.
    write_files(
        tmp_path,
        {
            "conftest.py": (
                "import pytest\n\n\n"
                "@pytest.hookimpl(wrapper=True)\n"
                "def pytest_make_collect_report(collector):\n"
                "    report = yield\n"
                "    if collector.nodeid.endswith('::T'):\n"
                "        with open('built.log', 'a') as f:\n"
                "            f.write(''.join(item.name + '\\n' for item in report.result))\n"
                "    return report\n"
            ),
            "tests/test_unit.py": (
                "import unittest\n\n\n"
                "class T(unittest.TestCase):\n"
                "    def test_x(self):\n"
                "        assert unittest.TestLoader.getTestCaseNames.__module__ == 'unittest.loader'\n\n"
                "    def test_y(self):\n        pass\n\n"
                "    def test_z(self):\n        self.fail('z')\n\n"
                "    def test_off(self):\n        pass\n\n"
                "    test_off.__test__ = False\n\n"
                "    def runTest(self):\n        pass\n"
            ),
        },
    )
    validator = PytestValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    log = tmp_path / "built.log"

    def built(*tests: str) -> tuple[dict[str, str], list[str], str | None]:
        log.unlink(missing_ok=True)
        result = validator.check(Scope(tests=tests))
        return outcomes(result), sorted(log.read_text().split()) if log.exists() else [], result.error

    named = built("tests/test_unit.py::T::test_x", "tests/test_unit.py::T::test_z")
    assert named == ({"test_x": "passed", "test_z": "failed"}, ["test_x", "test_z"], None)
    assert built("tests/test_unit.py::T")[1] == ["test_x", "test_y", "test_z"]
    # What pytest would not find it still does not: each is built as pytest builds it, and reported.
    for gone in ("test_gone", "test_off", "runTest"):
        outcome, items, _ = built(f"tests/test_unit.py::T::{gone}")
        assert items == ["test_x", "test_y", "test_z"] and outcome == {gone: "error"}, gone


def test_a_warm_child_finds_a_unittest_classs_fixtures_scanning_none_of_testcases_own_names(tmp_path: Path):
    # The last test counts the names pytest's fixture scan reads off an instance of a bare TestCase.
    write_files(
        tmp_path,
        {
            "tests/test_fix.py": (
                "import sys, unittest\n\nimport pytest\n\n\n"
                "class Mixin:\n"
                "    @pytest.fixture(autouse=True)\n"
                "    def mixed(self):\n        self.mixed_in = True\n\n\n"
                "class T(unittest.TestCase, Mixin):\n"
                "    @pytest.fixture(autouse=True)\n"
                "    def own(self):\n        self.owned = True\n\n"
                "    def test_fixtures(self):\n"
                "        assert self.owned and self.mixed_in\n"
                "        assert '__dir__' not in vars(unittest.TestCase) and 'assertEqual' in dir(self)\n\n\n"
                "class Listed(unittest.TestCase):\n"
                "    def __dir__(self):\n        return [*super().__dir__(), 'extra']\n\n"
                "    @pytest.fixture(autouse=True)\n"
                "    def listed(self):\n        self.seen = True\n\n"
                "    def test_listed(self):\n        assert self.seen and 'extra' in dir(self)\n\n\n"
                "class Meta(type):\n"
                "    run = property(lambda cls: None)  # (a class lookup finds this one)\n\n\n"
                "def scanned(request, holder):\n"
                "    fixtures, seen = sys.modules['_pytest.fixtures'], []\n"
                "    original = fixtures.safe_getattr\n\n"
                "    def counting(obj, name, *default):\n"
                "        seen.append(name)\n        return original(obj, name, *default)\n\n"
                "    fixtures.safe_getattr = counting\n"
                "    try:\n"
                "        request.session._fixturemanager.parsefactories(holder=holder, node=request.node)\n"
                "    except TypeError:  # (pytest 8's signature)\n"
                "        request.session._fixturemanager.parsefactories(holder, request.node.nodeid)\n"
                "    finally:\n"
                "        fixtures.safe_getattr = original\n"
                "    return seen\n\n\n"
                "def test_scan(request):\n"
                "    class Probe(unittest.TestCase):\n"
                "        def runTest(self):\n            pass\n\n"
                "    class MetaProbe(unittest.TestCase, metaclass=Meta):\n"
                "        def runTest(self):\n            pass\n\n"
                "    seen = scanned(request, Probe())\n"
                "    assert 'runTest' in seen and 'assertEqual' not in seen and '__eq__' not in seen\n"
                "    seen = scanned(request, MetaProbe())\n"
                "    assert 'run' in seen and 'assertEqual' not in seen\n"
            ),
        },
    )
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    validator = PytestValidator(toolchain)
    tests = ("tests/test_fix.py::T::test_fixtures", "tests/test_fix.py::Listed::test_listed")
    cold = outcomes(validator.check(Scope(tests=tests)))
    assert cold == {"test_fixtures": "passed", "test_listed": "passed"}
    validator.warm = WarmRunner(toolchain)
    try:
        for _ in range(2):  # a child forked on request, then one readied ahead
            result = validator.check(Scope(tests=(*tests, "tests/test_fix.py::test_scan")), exitfirst=True)
            validator.warm.restored(clean=True)
            assert outcomes(result) == {**cold, "test_scan": "passed"}, result.detail
        assert validator.warm.readied == 1
    finally:
        validator.warm.close()


def test_a_warm_childs_imports_find_the_projects_literal_regexes_compiled(tmp_path: Path):
    # The test module reads `re`'s cache before it imports the module that compiles them; a pattern
    # that warns when compiled must still warn there. Beside them: a FIFO, a link to it and flags
    # too deep to read, none of which may stop the worker from starting.
    write_files(
        tmp_path,
        {
            "lib.py": (
                "import re\n\n"
                "STAMP = re.compile(\n    r'^(?P<year>\\d{4})-ralph'  # joined\n    r'-(?P<n>\\d+)$',\n    re.I | re.M,\n)\n"
                "PART = 'ralph-dynamic'\nDYNAMIC = re.compile(PART + '$')\n"
                "WORD = re.compile(r'[[:alpha:]]+')\n\n\n"
                "def spaced(text):\n    return re.sub(r'ralph\\s+', ' ', text, 0, re.X)\n"
            ),
            "zz_deep.py": "import re\n\nre.compile('x', " + " | ".join(["re.I"] * 1500) + ")\n",
            "tests/test_re.py": (
                "import re\n\nimport pytest\n\n"
                "CACHED = {key[1] for key in getattr(re, '_cache', {})}\n\n"
                "with pytest.warns(FutureWarning, match='nested set'):\n"
                "    import lib\n\n\n"
                "def test_cached():\n"
                "    if not hasattr(re, '_cache'):\n        pytest.skip('no re._cache in this Python')\n"
                "    assert lib.STAMP.pattern in CACHED and 'ralph\\\\s+' in CACHED\n"
                "    assert lib.DYNAMIC.pattern not in CACHED and lib.WORD.pattern not in CACHED\n"
                "    assert lib.STAMP.match('2026-RALPH-3')\n"
            ),
        },
    )
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "linked.py").symlink_to("pipe.py")
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    warm = WarmRunner(toolchain)
    try:
        result = PytestValidator(toolchain, warm=warm).check(Scope(tests=("tests/test_re.py::test_cached",)))
        assert outcomes(result) == {"test_cached": "passed"}, result.detail
    finally:
        warm.close()


def test_the_gates_worker_imports_nothing_of_the_projects_before_its_conftest(tmp_path: Path):
    # What the conftest sees is what a fresh `python -m pytest` shows it: the project's third-party
    # imports not yet loaded (a conftest may set them up first), pytest's own command line.
    write_files(
        tmp_path,
        {
            "lib.py": "import fractions\n",
            "conftest.py": "import sys\n\nSEEN = 'fractions' in sys.modules\nARGV0 = sys.argv[0]\n",
            "tests/test_fresh.py": (
                "import conftest\n\n\n"
                "def test_fresh():\n"
                "    assert not conftest.SEEN\n"
                "    assert conftest.ARGV0.endswith('pytest/__main__.py'), conftest.ARGV0\n"
            ),
        },
    )
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    gate = gate_tests(toolchain, warm=True, test_timeout_s=60)
    candidates = PytestValidator(toolchain, warm=WarmRunner(toolchain, third_party_imports(tmp_path)))
    try:
        for _ in range(2):  # the worker's first child and a later one
            assert outcomes(gate.check(Scope())) == {"test_fresh": "passed"}
        assert gate.warm is not None and gate.warm.starts == 1
        # (The candidates' runner has preloaded it: the gate must not be a fork of that one.)
        assert outcomes(candidates.check(Scope())) == {"test_fresh": "failed"}
    finally:
        for runner in (gate.warm, candidates.warm):
            assert runner is not None
            runner.close()


def test_cancel_kills_the_run_in_flight_and_starts_nothing_more(validator):
    import threading
    import time

    results = []
    scope = Scope(tests=("tests/test_lib.py::test_hangs",), timeout_s=60)
    thread = threading.Thread(target=lambda: results.append(validator.check(scope)))
    began = time.monotonic()
    thread.start()
    time.sleep(1.0)
    validator.warm.cancel()
    thread.join(30)
    assert time.monotonic() - began < 10 and results and results[0].error is not None
    again = validator.check(Scope(tests=("tests/test_lib.py::test_ok",)))
    assert again.error is not None and validator.warm.starts == 1


@pytest.mark.parametrize(
    ("name", "text", "safe"),
    [
        ("pyproject.toml", "[project]\nname = 'sample'\n", True),  # a TOML sample (tomlkit's corpus)
        ("pyproject.toml", "[tool.black]\nline-length = 88\n", True),
        ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-x'\n", False),
        ("pyproject.toml", "[tool.pytest]\naddopts = ['-x']\n", False),
        ("pyproject.toml", "not = [toml\n", False),  # unreadable: taken as settings
        ("setup.cfg", "[metadata]\nname = x\n", True),
        ("setup.cfg", "[tool:pytest]\naddopts = -x\n", False),
        ("tox.ini", "[tox]\nenvlist = py311\n", True),
        ("tox.ini", "[pytest]\naddopts = -x\n", False),
        ("tox.ini", "[pytest] # ours\naddopts = -x\n", False),
        ("pytest.ini", "", False),
    ],
)
def test_a_child_is_readied_ahead_unless_nested_files_hold_pytest_settings(tmp_path, name, text, safe):
    from ralph.validators.warm import spare_safe

    write_files(tmp_path, {"pyproject.toml": "[tool.pytest.ini_options]\n", f"tests/data/{name}": text})
    assert spare_safe(tmp_path) is safe


def test_with_no_settings_at_the_root_a_nested_pyproject_above_tests_counts(tmp_path):
    """pytest 8.1 on takes the first `pyproject.toml` above the tests when no file holds settings:
    a settings-less one matters then, where Python files lie below it."""
    from ralph.validators.warm import spare_safe

    write_files(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\n", "tests/data/pyproject.toml": ""})
    assert spare_safe(tmp_path)
    write_files(tmp_path, {"tests/data/test_more.py": "def test_it():\n    pass\n"})
    assert not spare_safe(tmp_path)


def test_neither_worker_imports_the_projects_own_pytest_plugin_ahead(tmp_path: Path):
    """An editable install's plugin is the workspace's code: imported by the worker, it would run as
    the workspace was when the worker started (a candidate's state perhaps), with effects no child
    undoes. The gate's worker imports no installed plugin ahead at all: each child loads them as a
    fresh run does."""
    marker = tmp_path.parent / f"{tmp_path.name}-imports.log"
    write_files(
        tmp_path,
        {
            "fakeplug.py": f"import os\n\nwith open({str(marker)!r}, 'a') as f:\n    f.write('x\\n')\n",
            "fakeplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n",
            "fakeplug-1.0.dist-info/entry_points.txt": "[pytest11]\nfakeplug = fakeplug\n",
            "tests/test_it.py": "import sys\n\n\ndef test_loaded():\n    assert 'fakeplug' in sys.modules\n",
        },
    )
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    gate = gate_tests(toolchain, warm=True, test_timeout_s=60)
    candidates = PytestValidator(toolchain, warm=WarmRunner(toolchain, third_party_imports(tmp_path)))
    try:
        for validator in (gate, candidates):
            marker.unlink(missing_ok=True)
            for _ in range(2):
                assert outcomes(validator.check(Scope())) == {"test_loaded": "passed"}
            assert marker.read_text().count("x") == 2  # once in each child, never in the worker
    finally:
        for runner in (gate.warm, candidates.warm):
            assert runner is not None
            runner.close()
        marker.unlink(missing_ok=True)


@pytest.mark.parametrize("warm", [True, False])
def test_a_fail_fast_run_ends_at_its_closing_record_once_a_test_failed(project, warm):
    """A fail-fast run that found a failure is a rejection, known once the closing record is written:
    the process ends there (no terminal summary, no unconfigure). Any other run goes on to the end,
    where an error at unconfigure still counts."""
    unconfigured = project / "unconfigured.log"
    hook = f"def pytest_unconfigure(config):\n    open({str(unconfigured)!r}, 'a').write('x')\n"
    write_files(project, {"tests/conftest.py": hook})
    toolchain = Toolchain(sys.executable, LocalSandbox(), project)
    runner = WarmRunner(toolchain) if warm else None
    validator = PytestValidator(toolchain, warm=runner)
    both = ("tests/test_lib.py::test_ok", "tests/test_lib.py::test_wrong")
    try:
        failed = validator.check(Scope(tests=both), exitfirst=True)
        assert outcomes(failed) == {"test_ok": "passed", "test_wrong": "failed"}
        assert failed.error is None and not failed.ok and "assert 42 == 41" in failed.tests[1].message
        assert not unconfigured.exists()
        for run in ({"scope": Scope(tests=both[:1]), "exitfirst": True}, {"scope": Scope(tests=both)}):
            validator.check(**run)  # (passing fail-fast; failing, not fail-fast)
            assert unconfigured.read_text() == "x"
            unconfigured.unlink()
    finally:
        if runner is not None:
            runner.close()


def test_a_class_asked_for_whole_is_named_by_the_class_and_nothing_else_is():
    known = [
        "t.py::A::test_1",
        "t.py::A::test_2[x::y]",  # (a parametrization may hold "::")
        "t.py::A::Inner::test_3",
        "t.py::B::test_1",
        "t.py::B::test_2",
        "t.py::C::test_1",
        "t.py::test_f[a::b]",
        "t.py::test_f[a::c]",
    ]
    asked = [
        "t.py::B::test_2",
        "t.py::A::test_1",
        "t.py::test_f[a::b]",
        "t.py::test_f[a::c]",
        "t.py::A::Inner::test_3",
        "t.py::C::test_1",
        "t.py::B::test_1",
        "u.py",
    ]
    # A lacks a test (its parametrization): kept; B whole: named once, where its first test was; C
    # holds one test; functions of the module and files are kept.
    assert compact_node_ids(asked, known) == [
        "t.py::B",
        "t.py::A::test_1",
        "t.py::test_f[a::b]",
        "t.py::test_f[a::c]",
        "t.py::A::Inner::test_3",
        "t.py::C::test_1",
        "u.py",
    ]
    everything = compact_node_ids([*asked, "t.py::A::test_2[x::y]"], known)
    # (A's nested class is A's: its tests are built with A, `test_a_run_naming_whole_classes_...`)
    assert everything[:2] == ["t.py::B", "t.py::A"] and "t.py::A::Inner::test_3" not in everything
    assert compact_node_ids(asked, ()) == asked  # (nothing known: nothing is whole)


def test_a_run_naming_whole_classes_by_their_tests_runs_and_ranks_exactly_those(tmp_path: Path):
    write_files(
        tmp_path,
        {
            "lib.py": "def answer():\n    return 42\n",
            "tests/test_c.py": (
                "import unittest\n\nfrom lib import answer\n\n\n"
                "class Whole(unittest.TestCase):\n"
                + "".join(f"    def test_{n}(self):\n        assert answer() == 42\n\n" for n in "abc")
                + "\n\nclass TestPart:\n"
                + "".join(f"    def test_{n}(self):\n        assert answer() == 42\n\n" for n in "xyz")
                + "    def test_parse(self):\n        assert answer() == 41\n\n\n"
                "class TestOuter:\n    def test_o(self):\n        pass\n\n"
                "    class TestNested:\n        def test_n(self):\n            assert answer() == 42\n"
            ),
        },
    )
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    known = [f"tests/test_c.py::Whole::test_{n}" for n in "abc"]
    known += [f"tests/test_c.py::TestPart::test_{n}" for n in ("x", "y", "z", "parse")]
    asked = (*known[:3], "tests/test_c.py::TestPart::test_x", "tests/test_c.py::TestPart::test_parse")
    warm = WarmRunner(toolchain, third_party_imports(tmp_path))
    try:
        validator = PytestValidator(toolchain, warm=warm)
        result = validator.check(Scope(tests=asked), known=known)
        assert sorted(t.nodeid for t in result.tests) == sorted(asked) and result.error is None
        # Ranked as asked by id (all of them: a word that names none asks for ranking), though Whole
        # was named as its class: pytest's order, not Whole's tests after those named by id.
        ranked = validator.check(Scope(tests=asked), exitfirst=True, words=["zzz"], known=known)
        assert [t.nodeid.split("::")[-1] for t in ranked.tests] == [
            "test_a",
            "test_b",
            "test_c",
            "test_x",
            "test_parse",
        ]
        # A class named whole builds the classes nested in it too: each test of them is run.
        outer = ("tests/test_c.py::TestOuter::test_o", "tests/test_c.py::TestOuter::TestNested::test_n")
        assert compact_node_ids(outer, [*known, *outer]) == ["tests/test_c.py::TestOuter"]
        nested = validator.check(Scope(tests=(*asked, *outer)), known=[*known, *outer])
        assert sorted(t.nodeid for t in nested.tests) == sorted((*asked, *outer)) and nested.error is None
        assert {t.outcome for t in nested.tests if "Outer" in t.nodeid} == {"passed"}
        gone = validator.check(Scope(tests=(*asked[:3], "tests/test_c.py::Whole::test_gone")), known=known)
        assert {t.nodeid.split("::")[-1]: t.outcome for t in gone.tests}["test_gone"] == "error"
    finally:
        warm.close()


# What a test leaves running or unreaped is killed before the reply, and the verdict stands.

_LEFT_BEHIND = """\
import os, signal, subprocess, sys, time


def test_leaves_a_zombie_and_a_sleeper():
    subprocess.Popen([sys.executable, "-c", "pass"])  # exits at once, never waited for
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(0.5)
"""


def test_what_a_test_leaves_running_or_unreaped_is_killed_and_the_verdict_stands(validator, project):
    write_files(project, {"tests/test_left.py": _LEFT_BEHIND})
    import time

    for _ in range(2):
        began = time.monotonic()
        result = validator.check(
            Scope(tests=("tests/test_left.py::test_leaves_a_zombie_and_a_sleeper",)), exitfirst=True
        )
        validator.warm.restored(clean=True)
        assert result.error is None, result.error
        assert outcomes(result) == {"test_leaves_a_zombie_and_a_sleeper": "passed"}
        assert time.monotonic() - began < 5
    assert validator.warm.readied == 1 and validator.warm.starts == 1


def test_a_readied_child_whose_configuration_fails_is_seen_at_once(validator, project):
    # A spare that ends while it configures is seen at once (its status pipe closes), not at the 30 s
    # limit of a spare's readiness.
    import time

    write_files(project, {"pytest.ini": "[pytest]\nrequired_plugins = ralph-no-such-plugin\n"})
    args = ["-p", "ralph_pytest_report", "-p", "no:cacheprovider", "-x"]
    began = time.monotonic()
    codes = []
    for _ in range(2):
        result = validator.warm.run(args, ["tests/test_lib.py::test_ok"], env={}, timeout_s=60, spare=True)
        validator.warm.restored(clean=True)
        codes.append(result.returncode)
    assert codes == [4, 4] and result.error is None
    assert time.monotonic() - began < 10
