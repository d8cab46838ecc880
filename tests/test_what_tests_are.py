"""Tests are what the project's run says they are, not only what its settings spell: a file pytest
collected a test from at the baseline (named in `addopts`, collected by a hook), a doctest's examples
in the code, a module of the project's that pytest loads as a plugin, and a file a test names for a
subprocess or a helper to read. A candidate that rewrites any of them to match the bug is refused
before anything runs, replayed through the real loop; each reached a goal before these rules.

Also where our own plugins load from when ralph runs from the repository it fixes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ralph.validators import toolchain as toolchain_module
from ralph.validators.policy import collected_files, doctest_edits, named_by_tests, project_tests
from ralph.validators.toolchain import PLUGIN_DIR, Toolchain
from tests.test_forgery_policy import BUGGY
from tests.test_sound_verdicts import FIXED, replay, run_fix, verdicts

SUMS_TEST = "from windows import sliding_sums\n\n\ndef test_every_window():\n    assert sliding_sums([1, 2, 3], 2) == {}\n"


def refused_as_a_test_edit(outcome) -> str:
    [verdict] = verdicts(outcome)
    assert verdict["failed_stage"] == "policy", verdict
    assert "edits to tests" in verdict["reason"], verdict["reason"]
    assert outcome.result.outcome != "goal" and outcome.branch is None
    return verdict["reason"]


def test_a_file_pytest_collected_because_addopts_names_it_is_a_test(make_repo, tmp_path):
    repo = make_repo(
        {
            "windows.py": BUGGY,
            "spec/check_windows.py": SUMS_TEST.format("[3, 5]"),
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "spec/check_windows.py"\n',
        }
    )
    forged = {"spec/check_windows.py": SUMS_TEST.format("[3]")}  # the expected value, bent to the bug
    drafter = replay(tmp_path, {"description": "bend the test", "files": forged})
    assert "spec/check_windows.py" in refused_as_a_test_edit(run_fix(repo, drafter, max_iterations=1))


@pytest.mark.slow
def test_a_doctests_examples_are_tests(make_repo, tmp_path):
    documented = BUGGY.replace(
        "def sliding_sums(xs, k):\n",
        'def sliding_sums(xs, k):\n    """Sums of each window.\n\n    >>> sliding_sums([1, 2, 3], 2)\n    [3, 5]\n    """\n',
    )
    repo = make_repo(
        {
            "windows.py": documented,
            "tests/test_windows.py": "def test_nothing():\n    pass\n",
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\n',
        }
    )
    forged = {"windows.py": documented.replace("    [3, 5]\n", "    [3]\n")}
    drafter = replay(tmp_path, {"description": "bend the example", "files": forged})
    reason = refused_as_a_test_edit(run_fix(repo, drafter, max_iterations=1))
    assert "doctest examples in windows.py" in reason
    fixed = {"windows.py": documented.replace("len(xs) - k)", "len(xs) - k + 1)")}
    drafter = replay(tmp_path, {"description": "fix", "files": fixed})
    repo2 = repo.parent / "again"
    shutil.copytree(repo, repo2)
    assert run_fix(repo2, drafter, max_iterations=1).result.outcome == "goal"  # the code stays editable


def test_a_module_the_project_loads_as_a_pytest_plugin_is_a_test(make_repo, tmp_path):
    repo = make_repo(
        {
            "windows.py": BUGGY,
            "helpers/__init__.py": "",
            "helpers/expected.py": "import pytest\n\n\n@pytest.fixture\ndef expected():\n    return [3, 5]\n",
            "conftest.py": 'pytest_plugins = ["helpers.expected"]\n',
            "tests/test_windows.py": (
                "from windows import sliding_sums\n\n\n"
                "def test_every_window(expected):\n    assert sliding_sums([1, 2, 3], 2) == expected\n"
            ),
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        }
    )
    forged = {"helpers/expected.py": "import pytest\n\n\n@pytest.fixture\ndef expected():\n    return [3]\n"}
    drafter = replay(tmp_path, {"description": "bend the fixture", "files": forged})
    assert "helpers/expected.py" in refused_as_a_test_edit(run_fix(repo, drafter, max_iterations=1))


def test_a_file_a_test_hands_a_subprocess_is_a_test(make_repo, tmp_path):
    repo = make_repo(
        {
            "windows.py": BUGGY,
            "expect/sums.txt": "[3, 5]\n",
            "tests/test_windows.py": (
                "import subprocess\nimport sys\n\nfrom windows import sliding_sums\n\n\n"
                "def test_every_window():\n"
                "    code = 'import sys; print(open(sys.argv[1]).read().strip())'\n"
                "    out = subprocess.run([sys.executable, '-c', code, 'expect/sums.txt'],"
                " capture_output=True, text=True).stdout.strip()\n"
                "    assert str(sliding_sums([1, 2, 3], 2)) == out\n"
            ),
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        }
    )
    drafter = replay(tmp_path, {"description": "bend the data", "files": {"expect/sums.txt": "[3]\n"}})
    assert "expect/sums.txt" in refused_as_a_test_edit(run_fix(repo, drafter, max_iterations=1))


def test_what_the_run_collected_is_read_from_its_record():
    tests = ["spec/check_a.py", "pkg/mod_test.py", "/elsewhere/test_b.py"]
    doctests = ["pkg/mod.py", "README.rst"]  # a module's doctests are the code's own examples
    assert collected_files(tests, doctests) == ["README.rst", "pkg/mod_test.py", "spec/check_a.py"]
    assert collected_files(tests, doctests, broad=True) == ["README.rst"]


def test_a_module_whose_docstring_has_doctests_stays_editable(make_repo, tmp_path):
    """pytest names a top-level module's own doctest `windows.py::windows`: no test function."""
    documented = '"""Windows.\n\n>>> double(2)\n4\n"""\n\n\n' + BUGGY
    repo = make_repo(
        {
            "windows.py": documented,
            "tests/test_windows.py": SUMS_TEST.format("[3, 5]"),
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\n',
        }
    )
    fixed = {"windows.py": documented.replace("len(xs) - k)", "len(xs) - k + 1)")}
    drafter = replay(tmp_path, {"description": "fix", "files": fixed})
    assert run_fix(repo, drafter, max_iterations=1).result.outcome == "goal"


def test_settings_with_a_byte_order_mark_or_in_addopts_still_say_where_tests_lie(tmp_path):
    (tmp_path / "pytest.ini").write_text("\ufeff[pytest]\npython_files = check_*.py\n", encoding="utf-8")
    assert "check_*.py" in project_tests(tmp_path)
    (tmp_path / "pytest.ini").write_text('[pytest]\naddopts = -q -o "python_files=spec_*.py"\n')
    assert "spec_*.py" in project_tests(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --override-ini=testpaths=spec\n")
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "test_x.py").write_text("")
    assert "spec/*" in project_tests(tmp_path)


def test_files_named_in_a_tests_strings_are_found_where_they_lie(tmp_path):
    files = ("tests/test_a.py", "tests/data/expected.json", "data/other.csv", "src/m.py", "pkg/greeting.txt")
    for path in (*files, "tests/joined/x.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "tests/test_a.py").write_text(
        "import os\nfrom pathlib import Path\nHERE = Path(__file__).parent\n"
        "a = HERE / 'data' / 'expected.json'\nb = 'data/other.csv'\nc = 'src/m.py'\nd = 'hello world'\n"
        "e = os.path.join(HERE, 'joined', 'x.txt')\n"
        "f = 'greeting.txt'  # a name the code under test looks up in its own folder: not the tests'\n"
    )
    assert named_by_tests(tmp_path, ["tests/test_a.py"]) == [
        "data/other.csv",
        "tests/data/expected.json",
        "tests/joined/x.txt",
    ]


def test_a_doctests_examples_are_compared_and_the_rest_of_its_docstring_is_not():
    before = 'def f():\n    """Double.\n\n    >>> f()\n    2\n    """\n    return 2\n'
    from ralph.domain.candidate import FileChange

    ran = {"m.py"}
    assert doctest_edits([FileChange("m.py", before, before.replace("    2\n", "    3\n"))], ran) == ["m.py"]
    assert doctest_edits([FileChange("m.py", before, before.replace("Double.", "Twice."))], ran) == []
    assert doctest_edits([FileChange("m.py", before, before.replace("return 2", "return 3"))], ran) == []
    # Where the project never runs its doctests, an example is documentation a fix may correct.
    assert doctest_edits([FileChange("m.py", before, before.replace("    2\n", "    3\n"))], set()) == []
    # A file that does not parse is the syntax stage's to refuse.
    assert doctest_edits([FileChange("m.py", before, before + "def (:\n")], ran) == []


def test_our_plugins_load_from_a_private_copy_when_they_lie_in_the_users_repository(tmp_path):
    repo = PLUGIN_DIR.resolve().parents[1]
    inside = Toolchain(python="python3", sandbox=None, project=repo, user_root=repo)  # type: ignore[arg-type]
    copy = inside.plugin_dir
    assert not copy.resolve().is_relative_to(repo)
    assert sorted(p.name for p in copy.glob("*.py")) == sorted(p.name for p in PLUGIN_DIR.glob("*.py"))
    assert (copy / "ralph_pytest_report.py").read_bytes() == (
        PLUGIN_DIR / "ralph_pytest_report.py"
    ).read_bytes()
    elsewhere = Toolchain(python="python3", sandbox=None, project=tmp_path, user_root=tmp_path)  # type: ignore[arg-type]
    assert elsewhere.plugin_dir == PLUGIN_DIR


@pytest.mark.slow
def test_the_gate_never_runs_a_candidates_copy_of_our_plugin(make_repo, tmp_path, monkeypatch):
    """ralph run from the repository it fixes (an editable install): the gate shows the workspace at
    the repository's path, where the plugin the candidate rewrote to report passes lies."""
    plugin = "vendor/ralph/_plugin"
    files = {"windows.py": BUGGY.replace("    return x * 2", "    return x * 2"), f"{plugin}/__init__.py": ""}
    for source in PLUGIN_DIR.glob("*.py"):
        files[f"{plugin}/{source.name}"] = source.read_text()
    files["tests/test_windows.py"] = (
        "from windows import double, sliding_sums\n\n\ndef test_every_window():\n"
        "    assert sliding_sums([1, 2, 3], 2) == [3, 5]\n\n\ndef test_double():\n    assert double(4) == 8\n"
    )
    files["pyproject.toml"] = (
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n[tool.ralph]\nallow = ["harness"]\n'
    )
    repo = make_repo(files)  # (a project that works on pytest's internals allows the harness rule)
    monkeypatch.setattr(toolchain_module, "PLUGIN_DIR", repo / plugin)
    toolchain_module._private_plugins.cache_clear()
    report = files[f"{plugin}/ralph_pytest_report.py"]
    # The fix of the failing test breaks test_double, and the plugin reports every test passed.
    bent = report.replace(
        '    _report_file.write(_dumps(record) + "\\n")\n    _report_file.flush()\n',
        '    record = {**record, "outcome": "passed"} if "outcome" in record else record\n'
        '    end = record.get("end") is True\n'
        '    record = {**record, "exitstatus": 0, "failed_seen": 0} if end else record\n'
        '    _report_file.write(_dumps(record) + "\\n")\n    _report_file.flush()\n'
        "    if end:\n        os._exit(0)\n",
    )
    assert bent != report
    broken = FIXED.replace("return x * 2", "return x * 3")
    drafter = replay(
        tmp_path,
        {
            "description": "fix and hide",
            "files": {"windows.py": broken, f"{plugin}/ralph_pytest_report.py": bent},
        },
    )
    try:
        outcome = run_fix(repo, drafter, max_iterations=1)
    finally:
        toolchain_module._private_plugins.cache_clear()
    [verdict] = verdicts(outcome)
    assert verdict["failed_stage"] == "gate" and "test_double" in verdict["reason"], verdict["reason"]
    assert outcome.result.outcome != "goal" and outcome.branch is None
    assert Path(repo / plugin / "ralph_pytest_report.py").read_text() == report
