"""Forged passes are refused before anything runs: the policy stage reads what an edit adds (the
harness, the test framework in the code under test, dynamic code, silencing comments), what the
project says its tests are (its pytest settings, the files its tests read at the baseline) and where
an edit writes (installed packages, files git ignores).

Each hostile candidate is replayed through the real loop (`replay:FILE`, real git, pytest and ruff);
the pure functions are specified on plain strings."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from ralph.domain.candidate import FileChange
from ralph.domain.errors import GitError
from ralph.validators.policy import (
    allowed_rules,
    code_findings,
    git_ignored,
    ignored_files,
    installed_files,
    interpreter_prefix,
    project_tests,
    read_by_tests,
    refusal,
)
from tests.conftest import BUGGY_WINDOWS
from tests.test_sound_verdicts import FIXED, replay, run_fix, verdicts

BUGGY = BUGGY_WINDOWS["windows.py"]
# Turns every failing test into a pass from the code under test: the report pytest builds is rewritten.
PASSING_REPORTS = (
    "import pytest\n"
    "\n"
    "_build = pytest.TestReport.from_item_and_call\n"
    "\n"
    "\n"
    "def _passing(item, call):\n"
    "    report = _build(item, call)\n"
    '    report.outcome, report.longrepr = "passed", None\n'
    "    return report\n"
    "\n"
    "\n"
    "pytest.TestReport.from_item_and_call = staticmethod(_passing)\n"
)


def refused(outcome) -> dict:
    """The one verdict of a run: refused by the policy, with no goal reached."""
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected" and verdict["failed_stage"] == "policy", verdict
    assert outcome.result.outcome != "goal" and outcome.branch is None
    return verdict


def findings(before: str | None, after: str, path: str = "m.py", test: bool = False) -> list[str]:
    return [f"{f.rule}: {f.what}" for f in code_findings(FileChange(path, before, after), test)]


# 1. The harness, the test framework and dynamic code in the code under test. Each of these three
# candidates reached a goal, its gate passed, before these rules (the buggy code left as it was).


def test_product_code_that_rewrites_pytests_reports_is_refused(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    forged = PASSING_REPORTS.replace("\n_build", f"\n\n{BUGGY}\n\n_build")
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "windows.py:12: TestReport" in verdict["reason"] and "test harness" in verdict["reason"]


def test_a_forgery_run_through_exec_of_decoded_bytes_is_refused(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    payload = base64.b64encode(PASSING_REPORTS.encode()).decode()
    forged = f"import base64\n\n{BUGGY}\n\nexec(base64.b64decode({payload!r}))\n"
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "the edit adds dynamic code" in verdict["reason"] and "windows.py:11: exec" in verdict["reason"]
    assert 'allow = ["dynamic-code"]' in verdict["reason"]  # what a project that needs it does


def test_a_fake_report_reached_through_a_computed_getattr_on_sys_is_refused(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    forged = f"import os\nimport sys\n\n{BUGGY}\n" + (
        'report = getattr(sys, "mod" + "ules")["ra" + "lph_pytest_report"]\n'
        'for name in ("test_every_window", "test_double"):\n'
        '    report._write({"nodeid": "tests/test_windows.py::" + name, "outcome": "passed"})\n'
        'report._write({"end": True, "exitstatus": 0, "collected": 2, "failed_seen": 0})\n'
        'getattr(os, "_ex" + "it")(0)\n'
    )
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "a string spelling ralph_pytest_report" in verdict["reason"]  # (ours: never allowed)
    assert "dynamic-code: getattr(sys, <a computed name>)" in findings(BUGGY, forged, "windows.py")


@pytest.mark.parametrize(
    ("added", "rule", "what"),
    [
        ("import pytest\n", "test-framework", "import pytest"),
        ("from _pytest.reports import TestReport\n", "harness", "_pytest"),
        ("import pluggy\n", "test-framework", "import pluggy"),
        # (a pytest-xdist worker's channel carries its reports to the gate's controller)
        ("import execnet\n", "test-framework", "import execnet"),
        ("from xdist import remote\n", "test-framework", "import xdist"),
        ("from unittest import mock\n", "test-framework", "import unittest"),
        ("import unittest.mock\n", "test-framework", "import unittest.mock"),
        ("hook = pytest_runtest_makereport\n", "harness", "pytest_runtest_makereport"),
        ("@hookimpl(hookwrapper=True)\ndef f(): ...\n", "harness", "hookimpl"),
        ("exec('x = 1')\n", "dynamic-code", "exec"),
        ("y = eval('1')\n", "dynamic-code", "eval"),
        ("c = compile('1', 'f', 'eval')\n", "dynamic-code", "compile"),
        ("m = __import__('os')\n", "dynamic-code", "__import__"),
        ("run = exec\n", "dynamic-code", "exec (as a value)"),
        ("import importlib\n", "dynamic-code", "import importlib"),
        (
            "from importlib import import_module\nm = import_module(n)\n",
            "dynamic-code",
            "importlib.import_module",
        ),
        ("import ctypes\n", "dynamic-code", "import ctypes"),
        ("from importlib.metadata import entry_points\n", "dynamic-code", "importlib.metadata.entry_points"),
        ("import marshal\n", "dynamic-code", "import marshal"),
        ("import pickle\nx = pickle.loads(b)\n", "dynamic-code", "pickle.loads"),
        ("import sys\nm = getattr(sys, name)\n", "dynamic-code", "getattr(sys, <a computed name>)"),
        ("import os\nsetattr(os, 'sep', '!')\n", "dynamic-code", "setattr(os, 'sep')"),
        ("import sys\nm = getattr(sys, 'modules')\n", "harness", "getattr(sys, 'modules'): sys.modules"),
        ("import sys\nd = vars(sys)\n", "dynamic-code", "vars(sys)"),
        ("import sys\nd = sys.__dict__\n", "dynamic-code", "sys.__dict__"),
        ("globals()[name] = 1\n", "dynamic-code", "globals()[...] written"),
        ("globals().update(x=1)\n", "dynamic-code", "globals().update"),
        ("import sys\nf = sys._getframe(2)\n", "dynamic-code", "_getframe"),
        ("def f(frame):\n    return frame.f_back.f_globals\n", "dynamic-code", "f_globals"),
        ("import inspect\ns = inspect.stack()\n", "dynamic-code", "inspect.stack"),
        ("def f(fn):\n    return fn.__code__\n", "dynamic-code", "__code__"),
        ("def f():\n    def exec(): ...\nexec('x')\n", "dynamic-code", "exec"),  # another scope's def
        ("def f(e=exec):\n    return e\n", "dynamic-code", "exec (as a value)"),  # a default is outside
        ("import threading\nthreading.settrace(f)\n", "harness", "settrace"),
        # (a name that runs code, bound to something else: its calls are not judged as the builtin's
        # anywhere, whether or not the binding ever runs: `if False: def exec(s): ...`)
        ("def eval(expr):\n    return expr\n\n\nv = eval('1 + 1')\n", "dynamic-code", "eval bound"),
        ("try:\n    from nowhere import exec\nexcept ImportError:\n    pass\n", "dynamic-code", "exec bound"),
        ("import \\\n    builtins as b\nx = b.exec(p)\n", "harness", "import builtins"),
        ("import sys\nsys .modules['json'] = None\n", "harness", "sys.modules"),
        ("f = globals()['cexe'[::-1]]\n", "dynamic-code", "a namespace read by a computed name"),
        ("c = compile\n", "dynamic-code", "compile (as a value)"),
        # (where a module or class body runs, locals() and vars() are its namespace: writes bind names)
        ("locals().pop('eval')\n", "dynamic-code", "globals().pop"),
        ("del locals()['eval']\n", "dynamic-code", "globals()[...] written"),
        ("class A:\n    vars()['exec'] = g\n", "dynamic-code", "globals()[...] written"),
        ("def f(n):\n    return globals().get(n)\n", "dynamic-code", "globals() as a value"),
        # (a comprehension does not see its class's names: the builtin, though the class has an `eval`)
        ("class A:\n    x = [eval(s) for s in S]\n\n    def eval(self): ...\n", "dynamic-code", "eval"),
        ("def f(n):\n    g = vars()\n    return g[n]\n", "dynamic-code", "vars() as a value"),
        ("import sys\nsys = sys\nm = sys\n", "dynamic-code", "sys (a module as a value)"),  # (a store added)
        (
            "from os import path\nm = getattr(path.sys, n)\n",
            "dynamic-code",
            "getattr(sys, <a computed name>)",
        ),
        (
            "import sys\nx = [0 for sys in ()]\ntake = lambda m: m.modules\ny = take(sys)\n",
            "dynamic-code",
            "sys (a module as a value)",
        ),
    ],
)
def test_what_an_edit_adds_to_the_code_under_test_is_named_with_its_rule(added, rule, what):
    before = "import re\n\n\ndef g(x):\n    return x + 1\n"
    found = findings(before, before + added)
    assert any(f.startswith(f"{rule}: ") and what in f for f in found), found


@pytest.mark.parametrize(
    "added",
    [
        "P = re.compile('x')\n",  # a regex, not the builtin
        "Q = re.compile(\n    'y'\n)\n",
        "class A:\n    def f(self, name):\n        return getattr(self, name)\n",  # an ordinary object
        "def f(obj, name):\n    setattr(obj, name, 1)\n",
        "import os\nfork = getattr(os, 'fork', None)\n",  # feature detection by a literal name
        "def run(x, eval=False):\n    return 1 if eval else x\n",  # a parameter named like a builtin
        "def run(fs, x):\n    return [exec(x) for exec in fs]\n",  # (a comprehension's own name)
        "from regex import compile\nP = compile('x')\n",
        "y = globals()['g']\n",  # reading a global by name
        "def f(**kw):\n    locals().update(kw)\n    return 1\n",  # a function's locals: a copy
        "S = '{g}'.format(**locals())\n",  # read, not written
        "import types\nT = isinstance(g, types.FunctionType)\n",
        "import typing\nX: typing.Any = 1\n",
        "from importlib.metadata import version\nV = version('x')\n",  # a distribution's data
        "import importlib.resources\nT = importlib.resources.files('x')\n",
    ],
)
def test_ordinary_code_adds_nothing_the_policy_refuses(added):
    before = "import re\n\n\ndef g(x):\n    return x + 1\n"
    assert findings(before, before + added) == []


def test_a_file_that_imported_pytest_before_may_keep_using_it():
    plugin = "import pytest\n\n\n@pytest.fixture\ndef thing():\n    return 1\n"
    edited = plugin.replace("return 1", "return pytest.approx(1)")
    assert findings(plugin, edited) == []
    assert findings("x = 1\n", "import pytest\nx = 1\n") == ["test-framework: import pytest"]


def test_what_a_file_already_did_a_fix_may_do_again():
    """A mutant's fix restores the project's own line, `exec` and all (boltons' funcutils), or writes
    back a `sys._getframe` line a mutant deleted (boltons' namedutils reads it in two places)."""
    mutant = "def build(src, ns):\n    exec(src + 'x', ns)\n    return ns\n"
    assert findings(mutant, mutant.replace("+ 'x'", "+ 'y'")) == []
    original = (
        "import sys\n\n\ndef a():\n    return sys._getframe(1)\n\n\ndef b():\n    return sys._getframe(2)\n"
    )
    assert findings(original.replace("    return sys._getframe(1)\n", "    pass\n"), original) == []
    assert findings("import sys\n", original) == ["dynamic-code: _getframe", "dynamic-code: _getframe"]
    # (toolz's _build_tlz manipulates sys.modules: a mutant of such a line is fixed by writing it back)
    tlz = "import sys\n\nsys.modules['a'] = 1\nsys.modules['b'] = 2\n"
    assert findings(tlz.replace("sys.modules['b']", "spec.modules['b']"), tlz) == []
    assert findings("import sys\n", tlz) == ["harness: sys.modules", "harness: sys.modules"]


def test_the_tests_may_import_pytest_when_test_edits_are_allowed():
    assert findings("x = 1\n", "import pytest\nx = 1\n", path="tests/test_m.py", test=True) == []


def test_a_file_that_does_not_parse_here_is_read_for_the_words():
    """(Newer syntax than this interpreter's must not hide what the file adds.)"""
    found = findings("x = 1\n", "x = (\nexec(data)\nimport pytest\n")
    assert "dynamic-code: exec(" in found and "test-framework: import pytest" in found


# 2. Silencing comments, in every spelling the checkers take


@pytest.mark.parametrize(
    "comment",
    [
        "# NOQA",
        "# noqa: E501",
        "#noqa:F401",
        "# flake8: noqa",
        "# ruff: noqa",
        "# type: ignore",
        "# type:ignore[attr-defined]",
        "# mypy: ignore-errors",
        "# pyright: ignore",
        "# pyright: basic",
        "# pylint: disable=all",
        "# pragma: no cover",
        "# pyre-ignore[16]",
    ],
)
def test_every_spelling_of_a_silencing_comment_is_refused(comment):
    found = findings("x = 1\n", f"x = 1  {comment}\n")
    assert found and all(f.startswith("silencing: ") for f in found), found


@pytest.mark.parametrize(
    "added",
    [
        "from typing import no_type_check\n",
        "import typing\n\n\n@typing.no_type_check\ndef f(): ...\n",
        "@no_type_check\ndef f(): ...\n",
        "import typing\n\n\n@typing.type_check_only\nclass A: ...\n",
    ],
)
def test_turning_the_type_checker_off_for_code_is_refused(added):
    assert any(f.startswith("silencing: ") for f in findings("x = 1\n", "x = 1\n" + added))


def test_a_mutants_fix_on_a_line_that_carries_a_comment_is_no_silencing():
    assert findings("x = a + 1  # noqa: E501\n", "x = a - 1  # noqa: E501\n") == []
    assert findings("x = a + 1  # noqa: E501\n", "x = a - 1  # noqa\n") == ["silencing: # noqa"]


def test_an_upper_case_noqa_that_would_pass_a_check_is_refused(make_repo, tmp_path):
    files = {
        "shapes.py": "import os\n\n\ndef area(w, h):\n    return w * h\n",
        "tests/test_shapes.py": "from shapes import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n",
        "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    }
    repo = make_repo(files)
    quiet = files["shapes.py"].replace("import os\n", "import os  # NOQA\n")
    drafter = replay(tmp_path, {"description": "quiet", "files": {"shapes.py": quiet}})
    check = "ruff check --isolated --select F401 shapes.py"  # fails until the import goes
    verdict = refused(run_fix(repo, drafter, max_iterations=1, checks=[check]))
    assert "silences a checker" in verdict["reason"] and "shapes.py:1: # noqa" in verdict["reason"]


# 3. Tests are what the project says they are (both hostile candidates reached a goal before: the
# spec weakened, the expected data made to match the bug)


SPEC = {
    "windows.py": BUGGY,
    "spec/check_windows.py": BUGGY_WINDOWS["tests/test_windows.py"],
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["spec"]\npython_files = ["check_*.py"]\n',
}


def test_a_test_named_by_the_projects_python_files_is_protected(make_repo, tmp_path):
    repo = make_repo(SPEC)
    weakened = SPEC["spec/check_windows.py"].replace("== [3, 5]", "== [3]")
    drafter = replay(tmp_path, {"description": "weaken", "files": {"spec/check_windows.py": weakened}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert verdict["reason"].startswith("edits to tests") and "spec/check_windows.py" in verdict["reason"]


DATA = {
    "stats.py": "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n",
    "data/expected.json": '{"mean": 2.0}\n',
    "tests/test_stats.py": (
        "import json\n"
        "from pathlib import Path\n"
        "\n"
        "from stats import mean\n"
        "\n"
        "EXPECTED = json.loads((Path(__file__).parent.parent / 'data' / 'expected.json').read_text())\n"
        "\n"
        "\n"
        "def test_mean():\n"
        "    assert mean([1, 2, 3]) == EXPECTED['mean']\n"
    ),
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}


def test_a_data_file_the_tests_read_is_protected_like_a_test(make_repo, tmp_path):
    repo = make_repo(DATA)
    drafter = replay(
        tmp_path, {"description": "expect the bug", "files": {"data/expected.json": '{"mean": 1.5}\n'}}
    )
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert verdict["reason"].startswith("edits to tests") and "data/expected.json" in verdict["reason"]
    # A second run takes the baseline's coverage from the cache, and what the tests read with it.
    [cache] = (repo / ".ralph" / "cache").glob("coverage-*.json")
    assert '"<opened>"' in cache.read_text() and "data/expected.json" in cache.read_text()
    refused(run_fix(repo, drafter, max_iterations=1))


def test_data_the_code_under_test_reads_stays_editable(make_repo, tmp_path):
    files = {
        "greet.py": (
            "from pathlib import Path\n"
            "\n"
            "\n"
            "def greeting():\n"
            "    return (Path(__file__).parent / 'greeting.txt').read_text().strip()\n"
        ),
        "greeting.txt": "helo\n",
        "tests/test_greet.py": "from greet import greeting\n\n\ndef test_greeting():\n    assert greeting() == 'hello'\n",
        "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    }
    repo = make_repo(files)
    drafter = replay(tmp_path, {"description": "fix the text", "files": {"greeting.txt": "hello\n"}})
    outcome = run_fix(repo, drafter, max_iterations=1)
    assert outcome.result.outcome == "goal"


def test_the_projects_pytest_settings_say_where_tests_lie(tmp_path):
    (tmp_path / "spec" / "data").mkdir(parents=True)
    (tmp_path / "spec" / "check_a.py").write_text("")
    (tmp_path / "spec" / "data" / "x.json").write_text("{}")
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    (tmp_path / "pkg" / "core.py").write_text("")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = spec pkg\npython_files = check_*.py\n")
    globs = project_tests(tmp_path)
    assert "spec/*" in globs  # only tests in it: all of it, its data too
    assert "pkg/check_*.py" in globs and "pkg/*/check_*.py" in globs and "pkg/*" not in globs


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", '[tool.pytest.ini_options]\npython_files = ["check_*.py"]\n'),
        ("pyproject.toml", '[tool.pytest]\npython_files = ["check_*.py"]\n'),
        ("pytest.toml", '[pytest]\npython_files = ["check_*.py"]\n'),
        ("pytest.ini", "[pytest]\npython_files = check_*.py\n"),
        ("tox.ini", "[tox]\n[pytest]\npython_files =\n    check_*.py\n"),
        ("setup.cfg", "[tool:pytest]\npython_files = check_*.py\n"),
    ],
)
def test_python_files_are_read_from_every_settings_file(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert {"check_*.py", "*/check_*.py"} <= set(project_tests(tmp_path))


def test_settings_above_a_project_in_a_subdirectory_count_up_to_the_repository(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["app/spec"]\n')
    (tmp_path / "app" / "spec").mkdir(parents=True)
    (tmp_path / "app" / "spec" / "test_a.py").write_text("")
    assert project_tests(tmp_path / "app", tmp_path) == ("spec/*",)
    assert project_tests(tmp_path / "app") == ()


def test_a_python_files_of_every_module_is_not_taken_for_tests_anywhere(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = *.py\n")
    assert project_tests(tmp_path) == ()


def test_only_what_a_test_opened_is_the_tests_data(tmp_path):
    for name in ("data/expected.json", "templates/page.html", "data/run.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    opened = {
        "data/expected.json": ["tests/test_a.py"],
        "templates/page.html": ["app.py"],  # the code under test's own
        "data/run.py": [""],  # Python: the tests' code is protected by name
        "data/gone.json": [""],  # no longer there
        "/etc/hosts": [""],
    }
    read = read_by_tests(opened, tmp_path, lambda p: p.startswith("tests/"))
    assert read == ["data/expected.json"]
    assert read_by_tests({"README.rst": [""]}, tmp_path, lambda p: False) == []
    (tmp_path / "README.rst").write_text("")
    assert read_by_tests({"README.rst": [""]}, tmp_path, lambda p: False) == ["README.rst"]  # pytest's


# 4. Installed packages and ignored files are out of reach


def test_a_plugin_planted_in_an_ignored_virtualenv_is_refused(make_repo, tmp_path):
    repo = make_repo({**BUGGY_WINDOWS, ".gitignore": ".venv/\n"})
    site = ".venv/lib/python3.11/site-packages"
    plugin = "from windows import double as pytest_unconfigure\n"
    files = {
        f"{site}/x.py": plugin,
        f"{site}/x-1.0.dist-info/entry_points.txt": "[pytest11]\nx = x\n",
        f"{site}/x-1.0.dist-info/METADATA": "Name: x\nVersion: 1.0\n",
        "windows.py": FIXED,
    }
    drafter = replay(tmp_path, {"description": "plant", "files": files})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "installed packages" in verdict["reason"] and f"{site}/x.py" in verdict["reason"]


def refused_with_a_helper_in(repo: Path, tmp_path: Path, folder: str) -> None:
    """A fix that puts its helper in `folder`, which git ignores, is refused as such."""
    helper = "def last_start(xs, k):\n    return len(xs) - k + 1\n"
    fixed = f"from {folder}.helper import last_start\n\n\n" + BUGGY.replace(
        "range(len(xs) - k)", "range(last_start(xs, k))"
    )
    files = {f"{folder}/helper.py": helper, "windows.py": fixed}
    verdict = refused(
        run_fix(repo, replay(tmp_path, {"description": "hide", "files": files}), max_iterations=1)
    )
    assert "git ignores" in verdict["reason"] and f"{folder}/helper.py" in verdict["reason"]


def test_a_new_file_git_ignores_is_refused(make_repo, tmp_path):
    refused_with_a_helper_in(
        make_repo({**BUGGY_WINDOWS, ".gitignore": "generated/\n"}), tmp_path, "generated"
    )


def test_a_new_file_the_repositorys_own_excludes_ignore_is_refused(make_repo, tmp_path):
    """`.git/info/exclude` is the user's too, though the workspace's copy has no `.git/info`."""
    repo = make_repo(BUGGY_WINDOWS)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local/\n")
    refused_with_a_helper_in(repo, tmp_path, "local")


def test_a_project_in_a_subdirectory_is_judged_by_the_repositorys_ignores(make_repo, tmp_path):
    files = {f"app/{k}": v for k, v in BUGGY_WINDOWS.items()}
    repo = make_repo({**files, ".gitignore": "*.generated.py\n"})
    changes = {"x.generated.py": "X = 1\n", "windows.py": FIXED}
    drafter = replay(tmp_path, {"description": "hide", "files": changes})
    verdict = refused(run_fix(repo / "app", drafter, max_iterations=1))
    assert "x.generated.py (git ignores it)" in verdict["reason"]


def test_installed_and_interpreter_paths_are_found_by_their_place():
    paths = [
        "lib/site-packages/a.py",
        "usr/lib/python3/dist-packages/b.py",
        "x-1.0.dist-info/entry_points.txt",
        "src/x.egg-info/PKG-INFO",
        "x.egg-link",
        "hook.pth",
        "env/pyvenv.cfg",
        "env/bin/activate",
        "site-packages.py",  # a module of that name is the project's
        "src/pkg/core.py",
    ]
    found = [f.path for f in installed_files(paths, interpreter_prefix("/p/env/bin/python", Path("/p")))]
    assert found == paths[:8]
    assert interpreter_prefix("/elsewhere/bin/python", Path("/p")) == ()
    assert interpreter_prefix("/p/bin/python", Path("/p")) == ()  # the project itself: not all of it


def test_git_decides_what_is_ignored_and_a_git_that_cannot_answer_refuses(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    assert git_ignored(tmp_path, ["build/x.py", "a.log", "keep.log", "src/a.py"]) == ["build/x.py", "a.log"]
    with pytest.raises(GitError):
        git_ignored(tmp_path / "missing", ["a.py"])

    def broken(paths):
        raise GitError("git check-ignore failed: no git here")

    new = FileChange("src/new.py", None, "x = 1\n")
    [finding] = ignored_files([new], broken)
    assert "git could not say" in finding.what
    assert "ignored-files" in (refusal([new], (), None, ignored=broken) or "")
    edits = [FileChange(".gitignore", "a\n", ""), FileChange(".git/hooks/pre-commit", None, "x")]
    assert [f.path for f in ignored_files(edits, None)] == [".gitignore", ".git/hooks/pre-commit"]


# A project opts a rule out


def test_a_project_that_allows_dynamic_code_gets_its_fix(make_repo, tmp_path):
    calc = "import operator\n\n\ndef apply(name, a, b):\n    return operator.sub(a, b)\n"
    files = {
        "calc.py": calc,
        "tests/test_calc.py": "from calc import apply\n\n\ndef test_add():\n    assert apply('add', 2, 3) == 5\n",
        "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n[tool.ralph]\nallow = ["dynamic-code"]\n',
    }
    repo = make_repo(files)
    fixed = calc.replace("operator.sub(a, b)", "getattr(operator, name)(a, b)")
    drafter = replay(tmp_path, {"description": "by name", "files": {"calc.py": fixed}})
    assert run_fix(repo, drafter, max_iterations=1).result.outcome == "goal"
    reason = refusal([FileChange("calc.py", calc, fixed)], (), None)  # without the project's word
    assert reason is not None and "getattr(operator, <a computed name>)" in reason


def test_allowed_rules_come_from_tool_ralph_or_ralph_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ralph]\nallow = ["silencing", "not-a-rule"]\n')
    assert allowed_rules(tmp_path) == ("silencing",)
    (tmp_path / "ralph.toml").write_text('allow = ["harness"]\n')
    assert allowed_rules(tmp_path) == ("harness",)
    change = FileChange("m.py", "x = 1\n", "x = 1  # noqa\n")
    assert refusal([change], (), None) is not None
    assert refusal([change], (), None, allow=["silencing"]) is None
    ours = FileChange("m.py", "x = 1\n", "x = 1\nimport ralph_pytest_report\n")
    assert "allow" not in (refusal([ours], (), None, allow=["harness"]) or "")  # never allowed


@pytest.mark.slow
def test_reading_only_the_changed_statements_finds_what_reading_the_whole_file_does(monkeypatch):
    """The policy parses the top-level statements an edit changed, alone (a one-line edit of a
    100 KB module is not its whole parse): on random edits of a large module (statements added
    before others at their indentation, lines changed) it finds what reading the whole file finds."""
    import ast
    import random

    from ralph.validators import policy

    text = Path(policy.__file__).read_text()
    lines = text.splitlines(keepends=True)
    starts = sorted(
        {
            (min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))]), n.col_offset)
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.stmt)
        }
    )
    # (a statement that starts its line, not an `elif`: one can be added before it)
    starts = [(n, c) for n, c in starts if len(lines[n - 1]) - len(lines[n - 1].lstrip()) == c]
    starts = [(n, c) for n, c in starts if not lines[n - 1].lstrip().startswith(("elif", "else"))]
    snippets = ["x = eval('1')", "import sys as _s", "exec('1')", "y = getattr(sys, n)", "z = 1  # noqa"]
    snippets += ["w = __import__('os')", "pass"]
    rng = random.Random(7)
    found = alone = 0
    for _ in range(60):
        new = list(lines)
        for line, column in sorted(rng.sample(starts, 3), reverse=True):  # (later edits shift nothing)
            if rng.random() < 0.8:
                new.insert(line - 1, " " * column + rng.choice(snippets) + "\n")
            else:
                new[line - 1] = new[line - 1].replace("(", "( ", 1)
        change = FileChange("m.py", text, "".join(new))
        assert policy._parse(change.after) is not None
        partial = sorted(map(str, code_findings(change, False)))
        with monkeypatch.context() as m:
            m.setattr(policy, "_edited", lambda before, after: policy._parse(after))
            whole = sorted(map(str, code_findings(change, False)))
        assert partial == whole
        found += len({f.split(":")[1] for f in whole})
        alone += policy._edited(change.before, change.after) is not policy._parse(change.after)
    assert found >= 60  # (most edits add something the policy refuses, in a later region too)
    assert alone >= 55  # (and the changed regions were read alone, not the whole file again)


# 5. What an edit changes beyond the lines it wrote: a decorator above a `def` it left as it was,
# the end of a string moved (what the string held is code now), a binding taken away (an unchanged
# call is the builtin's now), an import that makes an unchanged name another module.


def test_a_forgery_in_a_decorator_added_above_an_unchanged_def_is_refused(make_repo, tmp_path):
    """The decorator's line is the edit's only one; the `def` below it is as it was."""
    repo = make_repo(BUGGY_WINDOWS)
    payload = PASSING_REPORTS.encode().hex()
    decorator = f"@(lambda f: exec(bytes.fromhex({payload!r}).decode()) or f)\n"
    forged = BUGGY.replace("def double(x):", decorator + "def double(x):")
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "the edit adds dynamic code" in verdict["reason"] and "windows.py:5: exec" in verdict["reason"]


@pytest.mark.parametrize(
    ("before", "after", "what"),
    [
        (  # a decorator added above an unchanged def
            "import os\n\n\ndef f():\n    return 1\n",
            "import os\n\n\n@(lambda h: exec('import pytest') or h)\ndef f():\n    return 1\n",
            "exec",
        ),
        (
            "import functools\n\n\n@functools.cache\ndef f():\n    return 1\n",
            "import functools\n\n\n@exec\ndef f():\n    return 1\n",
            "exec (as a value)",
        ),
        ("x = '''\nexec(y)\n'''\n", "x = 1  # '''\nexec(y)\n# '''\n", "exec"),
        (
            "def f():\n    x = '''\n    exec(y)\n    '''\n    return x\n",
            "def f():\n    x = 1  # '''\n    exec(y)\n    # '''\n    return x\n",
            "exec",
        ),
        (  # one line changed: the string it opened now ends on a later line, at an unchanged `'''`
            "def f():\n    x = 1\n    y = '''\n    exec(z)\n    w = 2  # '''\n    return x\n",
            "def f():\n    x = 1\n    y = 2  # '''\n    exec(z)\n    w = 2  # '''\n    return x\n",
            "exec",
        ),
        ("def f(exec):\n    exec(y)\n", "def f():\n    exec(y)\n", "exec"),
        ("def eval(s):\n    return s\n\n\nv = eval('1')\n", "v = eval('1')\n", "eval"),
        (
            "import os as inspect\n\n\ndef f():\n    return inspect.stack()\n",
            "import inspect\n\n\ndef f():\n    return inspect.stack()\n",
            "inspect.stack",
        ),
    ],
)
def test_what_unchanged_lines_do_once_the_edit_changed_their_meaning_is_read(before, after, what):
    assert findings(before, after) == [f"dynamic-code: {what}"]


@pytest.mark.parametrize(
    ("before", "after", "what"),
    [
        (  # the binding's line ends in a comment
            "from jobs import (\n    run,\n    exec  # the runner\n)\n\n\ndef f(y):\n    return exec(y)\n",
            "from jobs import (\n    run,\n)\n\n\ndef f(y):\n    return exec(y)\n",
            "exec",
        ),
        ("def \\\nexec(s):\n    return s\n\n\nv = exec('1')\n", "v = exec('1')\n", "exec"),  # continued
        (
            "def \uff45\uff58\uff45\uff43(s):\n    return s\n\n\nv = exec('1')\n",
            "v = exec('1')\n",
            "exec",
        ),  # (NFKC)
        (  # a line break Python does not count (U+2028) shifts where the regions are
            '"""Tool.\n\nSee\u2028more.\n"""\nimport os\n\nHELP = """\nusage\n"""\nVERSION = "1.0"\n',
            '"""Tool.\n\nSee\u2028more.\n"""\nimport os\n\nHELP = """\nusage\n"""\n'
            'VERSION = exec(os.environ["P"])  # """\n',
            "exec",
        ),
        (  # (newer syntax than this Python reads: what it cannot read is refused)
            "type Vector = list[float]\n\nDOC = '''\nexec(P)\n'''\n",
            "type Vector = list[float]\n\nDOC = 1  # '''\nexec(P)\n# '''\n",
            "an edit that moves a string's end in a file this Python cannot parse",
        ),
    ],
)
def test_a_binding_taken_away_however_it_is_spelled_is_read(before, after, what):
    assert findings(before, after) == [f"dynamic-code: {what}"]


NEWER = "import sys\n\ntype Alias = int\n\n\ndef f(x):\n    return 1\n"  # (3.12: not parsed here)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (NEWER, NEWER.replace("return 1", "return (exec)(x)"), ["dynamic-code: exec"]),
        (NEWER, NEWER.replace("return 1", "sys .modules[x] = 1"), ["harness: sys .modules"]),
        (NEWER, NEWER.replace("return 1", "import os, pytest"), ["test-framework: import os, pytest"]),
        # (a fix of such a file: lines added, a string's text changed)
        (NEWER, NEWER.replace("return 1", "y = x + 1\n    return y"), []),
        (NEWER.replace("1", "'ref'"), NEWER.replace("1", "'refs'"), []),
    ],
)
def test_a_file_this_python_cannot_parse_is_read_for_the_words_of_what_the_edit_adds(before, after, expected):
    assert [" ".join(f.split()) for f in findings(before, after)] == expected


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "import functools\n\n\n@functools.cache\ndef f():\n    return 1\n",
            "import functools\n\n\n@functools.lru_cache\ndef f():\n    return 1\n",
        ),
        (
            "def run(x, eval=False):\n    return 1 if eval else x\n",
            "def run(x, eval=False):\n    return 2 if eval else x\n",
        ),
        ("def f(src, ns):\n    exec(src, ns)\n", "def f(src, ns, k=1):\n    exec(src, ns)\n"),  # (it did)
        ("x = '''\nexec(y)\n'''\n", "x = '''\nexec(y) or 1\n'''\n"),  # (text still)
        (
            "import sys\n\n\ndef f(n):\n    return sys.argv[n]\n",
            "import sys\n\n\ndef f(n):\n    return sys.argv[n + 1]\n",
        ),
    ],
)
def test_an_edit_that_changes_no_other_lines_meaning_adds_nothing(before, after):
    assert findings(before, after) == []


def test_a_one_line_edit_of_a_large_module_still_reads_only_its_statement(monkeypatch):
    """Reading the unchanged lines again is for edits that can change what they mean: a mutant of one
    line of a large module is read from that line's statement, not from the whole module."""
    from ralph.validators import policy

    before = Path(policy.__file__).read_text()
    policy.read_ahead(before)
    parsed: list[int] = []
    real = policy.parse
    monkeypatch.setattr(
        policy, "parse", lambda text, *a, **k: parsed.append(len(text)) or real(text, *a, **k)
    )
    line = "    return all(_string_shape(before[i1:i2]) == _string_shape(after[j1:j2]) for i1, i2, j1, j2 in hunks)"
    assert line in before
    after = before.replace(line, line.replace("==", "!="), 1)
    assert policy.code_findings(FileChange("v/policy.py", before, after), test_file=False) == []
    assert parsed and max(parsed) < len(before) / 10


@pytest.mark.parametrize(
    ("before", "after", "found"),
    [
        # Where statements run in order, a call above the project's own `def eval` calls the builtin.
        ("x = 1\n\n\ndef eval(s):\n    return s\n", "x = eval(p)\n\n\ndef eval(s):\n    return s\n", True),
        (
            "class A:\n    x = 1\n\n    def eval(self, s):\n        return s\n",
            "class A:\n    x = eval(p)\n\n    def eval(self, s):\n        return s\n",
            True,
        ),
        (  # a comprehension in a class does not see the class's `eval`, defined above it or not
            "class A:\n    def eval(self, s):\n        return s\n\n    x = 1\n",
            "class A:\n    def eval(self, s):\n        return s\n\n    x = [eval(s) for s in S]\n",
            True,
        ),
        (  # bound only where a condition held: the builtin where it did not
            "if FLAG:\n    def compile(s):\n        return s\nx = 1\n",
            "if FLAG:\n    def compile(s):\n        return s\nx = compile(p, 'f', 'exec')\n",
            True,
        ),
        (  # bound above, then unbound: the builtin again
            "def eval(s):\n    return s\n\n\nx = 1\n",
            "def eval(s):\n    return s\n\n\ndel eval\nx = eval(p)\n",
            True,
        ),
        (  # unbound in the accepted file, the edit's call below
            "def eval(s):\n    return s\n\n\ndel eval\nx = 1\n",
            "def eval(s):\n    return s\n\n\ndel eval\nx = eval(p)\n",
            True,
        ),
        (  # unbound by an `except ... as` of that name, or a `del` of a tuple holding it
            "def eval(s):\n    return s\n\n\nx = 1\n",
            "def eval(s):\n    return s\n\n\ntry:\n    1 / 0\nexcept ZeroDivisionError as eval:\n"
            "    pass\nx = eval(p)\n",
            True,
        ),
        (
            "def eval(s):\n    return s\n\n\nx = 1\n",
            "def eval(s):\n    return s\n\n\ndel (eval,)\nx = eval(p)\n",
            True,
        ),
        (  # a class's body (run at import) that deletes the module's
            "def eval(s):\n    return s\n\n\nx = 1\n",
            "def eval(s):\n    return s\n\n\nclass C:\n    global eval\n    del eval\n\n\nx = eval(p)\n",
            True,
        ),
        # In a function above its own def that may run before the def as the module is imported
        # (called, decorated, a lambda called where it stands, a class instantiated): the builtin's.
        (
            "def f(p):\n    return p\n\n\nX = f(1)\n\n\ndef eval(s):\n    return s\n",
            "def f(p):\n    return eval(p)\n\n\nX = f(1)\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (
            "X = 1\n\n\ndef eval(s):\n    return s\n",
            "X = (lambda: eval(p))()\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (
            "X = 1\n\n\ndef eval(s):\n    return s\n",
            "@apply\ndef f():\n    return eval(p)\n\n\nX = 1\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (
            "class A:\n    def m(self):\n        return 1\n\n\nA()\n\n\ndef eval(s):\n    return s\n",
            "class A:\n    def m(self):\n        return eval(p)\n\n\nA()\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (  # (named by a function that runs then)
            "def g():\n    return 1\n\n\ndef f(p):\n    return p\n\n\nX = g()\n\n\ndef eval(s):\n    return s\n",
            "def g():\n    return f(1)\n\n\ndef f(p):\n    return eval(p)\n\n\nX = g()\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (  # (the module's own def deleted below it: the builtin's again)
            "def eval(s):\n    return s\n\n\ndef f(p):\n    return p\n\n\nX = 1\n",
            "def eval(s):\n    return s\n\n\ndef f(p):\n    return eval(p)\n\n\ndel eval\nX = f(1)\n",
            True,
        ),
        # Above its own def, even where run only later (a top-down layout): whether it runs first is
        # not decided here, so the builtin's (said apart: a file that had one excuses that kind).
        (
            "def f(p):\n    return p\n\n\ndef eval(s):\n    return s\n",
            "def f(p):\n    return eval(p)\n\n\ndef eval(s):\n    return s\n",
            True,
        ),
        (
            "def main():\n    return 1\n\n\ndef eval(s):\n    return s\n\n\nif __name__ == '__main__':\n    main()\n",
            "def main():\n    return eval(p)\n\n\ndef eval(s):\n    return s\n\n\nif __name__ == '__main__':\n    main()\n",
            True,
        ),
        # Below its own def, at the module's level or in a function or method: the project's.
        ("def eval(s):\n    return s\n\n\nx = 1\n", "def eval(s):\n    return s\n\n\nx = eval(p)\n", False),
        (
            "def eval(s):\n    return s\n\n\ndef f(p):\n    return p\n",
            "def eval(s):\n    return s\n\n\ndef f(p):\n    return eval(p)\n",
            False,
        ),
        (
            "def eval(s):\n    return s\n\n\nclass A:\n    def m(self):\n        return 1\n",
            "def eval(s):\n    return s\n\n\nclass A:\n    def m(self):\n        return eval(p)\n",
            False,
        ),
        (  # (a parameter, or a def in the function itself)
            "def f(p):\n    return p\n\n\ndef eval(s):\n    return s\n",
            "def f(p, eval=len):\n    return eval(p)\n\n\ndef eval(s):\n    return s\n",
            False,
        ),
        (
            "from .ops import eval\n\nX = [1]\n",
            "from .ops import eval\n\nX = [eval(s) for s in S]\n",
            False,
        ),
        (  # bound on every way through: an import with its fallback, a def in both branches
            "try:\n    from regex import compile\nexcept ImportError:\n    from re import compile\n\nP = 1\n",
            "try:\n    from regex import compile\nexcept ImportError:\n    from re import compile\n\nP = compile(b)\n",
            False,
        ),
        (
            "if WIN:\n    def compile(s):\n        return s\nelse:\n    def compile(s):\n        return s\nP = 1\n",
            "if WIN:\n    def compile(s):\n        return s\nelse:\n    def compile(s):\n        return s\nP = compile(b)\n",
            False,
        ),
        (  # a `del` below the use runs after it
            "from re import compile\n\nA = 1\ndel compile\n",
            "from re import compile\n\nA = compile('a')\ndel compile\n",
            False,
        ),
    ],
)
def test_a_call_where_the_module_or_a_class_runs_in_order_sees_only_what_is_bound_above_it(
    before, after, found
):
    findings_now = [f for f in findings(before, after) if f.startswith("dynamic-code")]
    assert bool(findings_now) is found, findings_now


_OWN_EXEC = "def run(s):\n    return exec(s)\n\n\ndef exec(s):\n    return s\n\n\nX = 1\n"


@pytest.mark.parametrize(
    ("added", "found"),
    [
        # The module's own `def exec` taken away (the module imports itself, or another one's): its
        # functions' calls of `exec` then call the builtin.
        ("import windows\n\ndel windows.exec\n", True),
        ("from pkg import windows as w\n\ndel w.exec, w.X\n", True),
        ("import other\n\ndel other.eval\n", True),
        ("from . import windows\n\ndelattr(windows, 'exec')\n", True),
        ("from pkg import windows\n\nvars(windows).pop('exec')\n", True),
        ("from pkg import windows\n\nwindows.__dict__.__delitem__('exec')\n", True),
        ("import windows\n\nw = windows\nobject.__delattr__(w, 'exec')\n", True),
        ("import windows\n\ndel windows.__dict__['exec']\n", True),
        # Rebinding needs the builtin in hand, which is judged where it is spelled.
        ("import windows\n\nwindows.exec = print\n", False),
        ("from myapp.config import args\n\nargs.eval = True\n", False),
        # An object's own attributes of those names, and other attributes of modules: ordinary.
        ("class C:\n    def __init__(self, f):\n        self.compile = f\n", False),
        ("import windows\n\nwindows.X = 2\n", False),
        ("class C:\n    pass\n\n\no = C()\no.x = 1\ndel o.x\n", False),
        ("class C:\n    def reset(self):\n        del self.compile\n", True),  # (any object's: rare)
        ("def f(kwargs):\n    return kwargs.pop('compile', False)\n", False),
        ("def f(config):\n    del config['eval']\n", False),
    ],
)
def test_a_modules_own_exec_deleted_or_rebound_through_the_module_is_refused(added, found):
    after = _OWN_EXEC.replace("X = 1\n", added)
    findings_now = [
        f for f in findings(_OWN_EXEC, after, path="pkg/windows.py") if f.startswith("dynamic-code")
    ]
    assert bool(findings_now) is found, findings_now


_OWN_BOTTOM_EXEC = BUGGY + "\n\ndef exec(command):\n    return command\n"
_FORGERY = f"exec(bytes.fromhex({PASSING_REPORTS.encode().hex()!r}).decode())"


@pytest.mark.parametrize(
    ("forged", "where"),
    [
        # a call of that name at the module's top runs first, when the name is still the builtin's
        (_FORGERY + "\n" + _OWN_BOTTOM_EXEC, "windows.py:1: exec"),
        # a function above the def, called as the module is imported (before that def ran)
        (f"def _setup():\n    {_FORGERY}\n\n\n_setup()\n" + _OWN_BOTTOM_EXEC, "windows.py:2: exec"),
    ],
    ids=["called-above", "in-a-function-run-above"],
)
def test_a_forgery_run_above_the_projects_own_exec_is_refused(make_repo, tmp_path, forged, where):
    """The project defines an `exec` of its own at the bottom of the module."""
    repo = make_repo({**BUGGY_WINDOWS, "windows.py": _OWN_BOTTOM_EXEC})
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "the edit adds dynamic code" in verdict["reason"] and where in verdict["reason"]


def test_a_forgery_that_deletes_the_projects_own_exec_through_the_module_is_refused(make_repo, tmp_path):
    """The module imports itself and deletes its own `def exec`: the call below the def, judged as
    the project's, then calls the builtin."""
    own = BUGGY + "\n\ndef exec(command):\n    return command\n"
    repo = make_repo({**BUGGY_WINDOWS, "windows.py": own})
    payload = PASSING_REPORTS.encode().hex()
    forged = (
        own
        + f"\n\nimport windows  # noqa: E402\n\ndel windows.exec\nexec(bytes.fromhex({payload!r}).decode())\n"
    )
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    verdict = refused(run_fix(repo, drafter, max_iterations=1))
    assert "the edit adds dynamic code" in verdict["reason"] and "windows.exec deleted" in verdict["reason"]


_REVIEW_CASES = json.loads((Path(__file__).parent / "data" / "policy_review_cases.json").read_text())


@pytest.mark.parametrize("name", sorted(_REVIEW_CASES))
def test_a_review_of_the_run_before_the_def_rules(name):
    """A review's cases (2026-12-07): ways the builtin runs where the module defines its own (a
    function run at import before the def, an unbinding below it, a class body or a `global` that
    skips the functions around, the def taken away through the module), each verified to run its
    payload when imported, are refused; ordinary layouts it feared the rules would refuse are not."""
    case = _REVIEW_CASES[name]
    found = [
        f for f in findings(case["before"], case["after"], path=case["path"]) if f.startswith("dynamic-code")
    ]
    assert bool(found) is case["refused"], found


_OWN = "def exec(c):\n    return c\n\n\ndef run(s):\n    return exec(s)\n\n\nX = 1\n"
_EARLY = "def helper(s):\n    return exec(s)\n\n\nX = 1\n\n\ndef exec(c):\n    return c\n"
_FALLBACK = "try:\n    from regex import compile\nexcept ImportError:\n    compile = None\n\n\ndef f(p):\n    return p\n"
_ANNOTATED = (
    "from __future__ import annotations\n\n\ndef compile(p: str) -> Pattern:\n    return Pattern(p)\n\n\n"
    "class Pattern:\n    def __init__(self, p):\n        self.p = p\n\n    def again(self):\n        return 1\n"
)


@pytest.mark.parametrize(
    ("before", "after", "found"),
    [
        # A third review's (2026-12-07): where the module runs, `locals()` is its namespace, held too
        (_OWN, _OWN.replace("X = 1\n", "_d = locals()\n_d.pop('exec')\n"), True),
        # a name as Python reads it (NFKC): a full-width letter is the letter
        (_OWN, _OWN.replace("X = 1\n", "X = __\uff42uiltins__['ex' + 'ec']\n"), True),
        # a module's name deleted by a computed name
        (_OWN, _OWN.replace("X = 1\n", "from pkg import windows as _w\ndelattr(_w, 'ex' + 'ec')\n"), True),
        (_OWN, _OWN.replace("X = 1\n", "import pkg.windows as _w\n_w.__delattr__('ex' + 'ec')\n"), True),
        # a lambda called where it stands, calling a function that uses the builtin before the def
        (_EARLY, _EARLY.replace("X = 1\n", "X = (lambda: helper('1'))()\n"), True),
        # an import with a constant fallback binds the name on every way; an annotation runs nothing
        # a builtin function's attribute by a computed name (`print.__self__` is the builtins module)
        (_OWN, _OWN.replace("X = 1\n", "X = getattr(print, '__SELF__'.lower()).eval('1')\n"), True),
        ("def f(o, n):\n    return o\n", "def f(o, n):\n    return getattr(o, n)\n", False),
        (
            "def f(o, n):\n    return o\n",
            "def f(o, n):\n    print = o\n    return getattr(print, n)\n",
            False,
        ),
        (_FALLBACK, _FALLBACK.replace("    return p\n", "    return compile(p)\n"), False),
        (_ANNOTATED, _ANNOTATED.replace("        return 1\n", "        return compile(self.p)\n"), False),
        ("X = 1\n", "X = 1\nS = '{X}'.format(**locals())\n", False),
    ],
)
def test_a_third_review_of_the_modules_own_def(before, after, found):
    findings_now = [
        f for f in findings(before, after, path="pkg/windows.py") if f.startswith(("dynamic-code", "harness"))
    ]
    assert bool(findings_now) is found, findings_now


@pytest.mark.parametrize(
    ("added", "found"),
    [
        # A fourth review's (2026-12-07): strings run as code by the standard library, and a builtin
        # function's attributes by a computed name through `__getattribute__`.
        ("b = print.__getattribute__('__fles__'[::-1])\nb.exec('1')\n", True),
        ("from pydoc import locate\n\nlocate('builtins.exec')('1')\n", True),
        ("import os\n\nos.environ['PYTHONBREAKPOINT'] = 'builtins.exec'\nbreakpoint('1')\n", True),
        ("code = __loader__.source_to_code('1', 'x')\n", True),
        ("import timeit\n\ntimeit.timeit('1', number=1)\n", True),
        ("import cProfile\n\ncProfile.run('1')\n", True),
        ("import doctest\n\ndoctest.run_docstring_examples('>>> 1', {})\n", True),
        # Ordinary: an attribute by a literal name, a proxy's own lookup, a clock, a debugger import.
        ("x = (1).__getattribute__('real')\n", False),
        ("class P:\n    def __getattribute__(self, n):\n        return super().__getattribute__(n)\n", False),
        ("import timeit\n\nT = timeit.default_timer()\n", False),
        ("import pdb\n", False),
    ],
)
def test_a_fourth_review_strings_run_as_code(added, found):
    findings_now = [f for f in findings(None, added, path="pkg/tool.py") if f.startswith("dynamic-code")]
    assert bool(findings_now) is found, findings_now
