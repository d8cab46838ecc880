"""Bad input: one clear line on stderr, exit 2, never a traceback, nothing of the user's touched."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import BUGGY_WINDOWS, git, run_ralph


def assert_one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ralph: error:")
    for needle in needles:
        assert needle in lines[0]


def test_not_a_git_repository(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert False\n")
    assert_one_line_error(run_ralph("fix", str(tmp_path)), "not a git repository")


def test_missing_directory(tmp_path):
    assert_one_line_error(run_ralph("fix", str(tmp_path / "nope")), "no such directory")


@pytest.mark.slow
def test_no_tests_found_names_the_users_directory(make_repo):
    repo = make_repo({"lib.py": "X = 1\n", "sub/lib.py": "Y = 2\n"})
    proc = run_ralph("fix", str(repo))
    assert_one_line_error(proc, f"no tests found in {repo} ")
    assert " ws " not in proc.stderr and "ralph-" not in proc.stderr  # never ralph's own copy
    assert_one_line_error(run_ralph("fix", str(repo / "sub")), f"no tests found in {repo / 'sub'} ")
    empty = make_repo({}, name="empty", commit=False)  # a repository with no commit yet
    assert_one_line_error(run_ralph("fix", str(empty)), f"no tests found in {empty} ")


def test_a_suite_that_cannot_start_names_the_users_files(make_repo):
    repo = make_repo({**BUGGY_WINDOWS, "tests/conftest.py": "import nonexistent_module_xyz\n"})
    proc = run_ralph("fix", str(repo))
    assert_one_line_error(proc, "could not run", f"{repo}/tests/conftest.py", "nonexistent_module_xyz")
    assert "/ws/" not in proc.stderr and "/tmp/ralph-" not in proc.stderr


def test_unknown_drafter(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    assert_one_line_error(
        run_ralph("fix", str(repo), "--drafter", "telepathy"), "unknown drafter 'telepathy'"
    )


@pytest.mark.parametrize(
    "pyproject, needle",
    [
        ("[tool.ralph\ndrafter = 1\n", "unreadable config"),
        ("[tool.ralph]\nmax_iterations = 'many'\n", "invalid configuration: max_iterations"),
        ("[tool.ralph]\nno_such_option = true\n", "invalid configuration: no_such_option"),
        ("[tool.ralph]\nfresh_start_after = -1\n", "invalid configuration: fresh_start_after"),
    ],
)
def test_unreadable_or_invalid_config(make_repo, pyproject, needle):
    repo = make_repo({**BUGGY_WINDOWS, "pyproject.toml": pyproject})
    assert_one_line_error(run_ralph("fix", str(repo)), needle)


def test_invalid_or_existing_branch_name(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    assert_one_line_error(run_ralph("fix", str(repo), "--branch", "bad..name"), "not a valid branch name")
    assert_one_line_error(run_ralph("fix", str(repo), "--branch", "main"), "already exists")


def test_suite_that_cannot_be_collected(make_repo):
    repo = make_repo({"tests/test_broken.py": "import nonexistent_module_xyz\n\ndef test_a():\n    pass\n"})
    proc = run_ralph("fix", str(repo), "--max-iterations", "1")
    # A collection error is a failing check the loop can work on, not bad input; it must not crash.
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr


LIB = {"lib.py": "def f():\n    return 1\n"}
TEST_F = "from lib import f\n\n\ndef test_f():\n    assert f() == 1\n"


@pytest.mark.parametrize(
    "files, named",
    [
        (
            {"tests/test_f.py": "from lib import f\n\ndef test_f(:\n    assert f() == 1\n"},
            "tests/test_f.py:3",
        ),
        ({"tests/test_f.py": TEST_F, "tests/conftest.py": "import os\nx = (\n"}, "tests/conftest.py:2"),
    ],
)
def test_a_test_file_that_does_not_parse_at_the_baseline_is_bad_input(make_repo, files, named):
    """Tests are protected: no candidate could fix one that does not parse, so the run never starts."""
    repo = make_repo({**LIB, **files})
    status = git(repo, "status", "--porcelain")
    proc = run_ralph("fix", str(repo))
    assert_one_line_error(proc, f"{repo}/{named}: SyntaxError", "ralph edits no tests", "--allow-test-edits")
    assert git(repo, "branch", "--list", "ralph/*") == ""
    assert git(repo, "status", "--porcelain") == status


def test_a_source_file_that_does_not_parse_is_the_loops_to_fix(make_repo):
    repo = make_repo({"lib.py": "def f():\n    return 1 +\n", "tests/test_f.py": TEST_F})
    proc = run_ralph("fix", str(repo), "--max-iterations", "1")
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_input_leaves_the_repository_untouched(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    status = git(repo, "status", "--porcelain")
    run_ralph("fix", str(repo), "--drafter", "telepathy")
    assert git(repo, "status", "--porcelain") == status
    assert git(repo, "branch", "--list", "ralph/*") == ""


def test_without_bubblewrap_ralph_refuses_unless_told_otherwise(make_repo, monkeypatch):
    import ralph.sandboxes.bwrap
    from ralph.config import RunConfig
    from ralph.domain.errors import RalphError
    from ralph.session import fix
    from ralph.view import QuietView

    monkeypatch.setattr(ralph.sandboxes.bwrap, "available", lambda: "bwrap is not installed")
    repo = make_repo(BUGGY_WINDOWS)
    with pytest.raises(RalphError, match=r"refusing to run untrusted code.*--no-sandbox"):
        fix(repo, RunConfig(sandbox=True), view=QuietView())
    assert fix(repo, RunConfig(sandbox=False), view=QuietView(notices=False)).result.outcome == "goal"


def test_a_test_file_only_our_python_cannot_parse_is_not_called_unparsable(tmp_path):
    """ralph's Python may be older than the project's: a test module in newer syntax that pytest could
    not collect (a syntax error in what it imports) is the loop's to fix, not bad input."""
    import stat

    from ralph.domain.results import StageResult, TestResult
    from ralph.validators.pytest_run import unparsable_tests

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_new.py").write_text("type Pair = tuple[int, int]\n\ndef test_pair(:\n")
    result = StageResult(
        "tests", False, 1.0, tests=[TestResult("tests/test_new.py", "error", message="E   SyntaxError")]
    )
    found = unparsable_tests(result, ["tests/*"], tmp_path, python=sys.executable)
    assert found is not None and found.filename == "tests/test_new.py"
    newer = tmp_path / "python3.99"  # an interpreter that parses it
    newer.write_text("#!/bin/sh\nexit 0\n")
    newer.chmod(newer.stat().st_mode | stat.S_IEXEC)
    assert unparsable_tests(result, ["tests/*"], tmp_path, python=str(newer)) is None


def test_a_list_of_counts_that_is_not_numbers(make_repo):
    repo = make_repo({"tests/test_ok.py": "def test_ok():\n    pass\n"})
    gate = run_ralph("bench", "gate", str(repo), "--workers", "0,two")
    assert_one_line_error(gate, "--workers 0,two: worker counts such as 0,1,2")
    drafts = run_ralph("bench", "drafter", "--drafter", "openai/x", "--concurrency", "1,,4")
    assert_one_line_error(drafts, "--concurrency 1,,4: give numbers, e.g. 1,2,4")
