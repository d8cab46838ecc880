"""What the policy cannot read, the run catches: our report plugin records what decides a test's
outcome (pytest's report and call machinery, pluggy's call loop, our own hooks) before any of the
project's code runs, and a run in which product code replaced one gives no verdict. Each hostile
candidate here is one a project that opts the policy's rules out (`[tool.ralph] allow`) lets through
to the tests, replayed through the real loop; without the check each reached a goal with the bug
still in the code.

Also the ways round the policy's reading found in review: aliases of the harness's modules, a name
imported from one, an object's way to another it was never handed, a source encoding that hides
code in a comment."""

from __future__ import annotations

import pytest

from tests.conftest import BUGGY_WINDOWS
from tests.test_forgery_policy import BUGGY, PASSING_REPORTS, findings
from tests.test_sound_verdicts import FIXED, replay, run_fix, verdicts

# A project that turned the policy's reading of code off: only the run's own check stands.
PERMISSIVE = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n[tool.ralph]\nallow = ["harness", "test-framework", "dynamic-code"]\n'

# Each rewrites what pytest reports from the code under test, in a different part of the machinery.
FORGERIES = {
    "the report's constructor": PASSING_REPORTS,
    "pluggy's call loop": (
        "import pluggy._callers\n"
        "\n"
        "_loop = pluggy._callers._multicall\n"
        "\n"
        "\n"
        "def _passing(name, impls, kwargs, firstresult):\n"
        "    result = _loop(name, impls, kwargs, firstresult)\n"
        '    if name == "pytest_runtest_makereport" and result is not None:\n'
        '        result.outcome, result.longrepr = "passed", None\n'
        "    return result\n"
        "\n"
        "\n"
        "pluggy._callers._multicall = _passing\n"
    ),
    "a name the runner holds": (
        "import _pytest.runner\n"
        "\n"
        "\n"
        "class _Passing(_pytest.runner.TestReport):\n"
        "    @classmethod\n"
        "    def from_item_and_call(cls, item, call):\n"
        "        report = super().from_item_and_call(item, call)\n"
        '        report.outcome, report.longrepr = "passed", None\n'
        "        return report\n"
        "\n"
        "\n"
        "_pytest.runner.TestReport = _Passing\n"
    ),
}


@pytest.mark.parametrize("part", sorted(FORGERIES))
def test_product_code_that_rewrites_the_harness_gives_no_verdict(make_repo, tmp_path, part):
    repo = make_repo({**BUGGY_WINDOWS, "pyproject.toml": PERMISSIVE})
    forged = FORGERIES[part].replace("\n\n\n", f"\n\n\n{BUGGY}\n\n\n", 1)
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    outcome = run_fix(repo, drafter, max_iterations=1)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected", verdict
    assert "pytest's harness was changed" in verdict["reason"], verdict["reason"]
    assert outcome.result.outcome != "goal" and outcome.branch is None


def test_a_report_rewritten_after_pytest_made_it_gives_no_verdict(make_repo, tmp_path):
    """The report object itself, not the machinery: a failing call made to read as a pass by a hook
    the project's code sneaks in (a project that allows the harness rule)."""
    repo = make_repo({**BUGGY_WINDOWS, "pyproject.toml": PERMISSIVE})
    forged = (
        "import gc\n"
        "\n"
        "import pytest\n"
        "\n"
        "\n"
        f"{BUGGY}\n"
        "\n"
        "\n"
        "class _Passing:\n"
        "    @pytest.hookimpl(trylast=True)\n"
        "    def pytest_runtest_logreport(self, report):\n"
        "        pass\n"
        "\n"
        "    @pytest.hookimpl(hookwrapper=True)\n"
        "    def pytest_runtest_makereport(self, item, call):\n"
        "        outcome = yield\n"
        "        report = outcome.get_result()\n"
        '        report.outcome, report.longrepr = "passed", None\n'
        "\n"
        "\n"
        "for _o in gc.get_objects():\n"
        '    if type(_o).__name__ == "PytestPluginManager":\n'
        '        _o.register(_Passing(), "passing")\n'
        "        break\n"
    )
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    outcome = run_fix(repo, drafter, max_iterations=1)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected", verdict
    assert "harness was changed" in verdict["reason"] and "raised but its report says" in verdict["reason"]


def test_the_check_leaves_a_true_fix_alone(make_repo, tmp_path):
    repo = make_repo({**BUGGY_WINDOWS, "pyproject.toml": PERMISSIVE})
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    assert run_fix(repo, drafter, max_iterations=1).result.outcome == "goal"


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        ("import sys as _s\nm = _s.modules\n", "harness: _s.modules: sys.modules"),
        ("from sys import modules\n", "harness: from sys import modules: sys.modules"),
        ("from sys import modules as loaded\n", "harness: from sys import modules: sys.modules"),
        ("from os import _exit\n", "harness: from os import _exit: os._exit"),
        ("import os as o\no._exit(0)\n", "harness: o._exit: os._exit"),
        ("from sys import _getframe\n", "dynamic-code: sys._getframe"),
        ("import sys\nm = sys\n", "dynamic-code: sys (a module as a value)"),
        ("import builtins as b\nrun(b)\n", "dynamic-code: builtins (a module as a value)"),
        ("x = vars(type)['__subclasses__'](object)\n", "dynamic-code: vars(type)"),
        ("x = t['__subclasses__']\n", "dynamic-code: '__subclasses__' (an attribute named by a string)"),
        ("print.__self__.exec('1')\n", "dynamic-code: __self__"),
        ("len.__self__.__import__('os')\n", "dynamic-code: __self__"),
        ("x = int.__bases__[0]\n", "dynamic-code: __bases__"),
        ("import operator\nget = operator.attrgetter(name)\n", "dynamic-code: operator.attrgetter"),
        ("y = object.__getattribute__(a, name)\n", "dynamic-code: object.__getattribute__"),
    ],
)
def test_the_harness_reached_another_way_is_named(added, expected):
    before = "import re\n\n\ndef g(x):\n    return x + 1\n"
    assert expected in findings(before, before + added)


@pytest.mark.parametrize(
    "added",
    [
        "import sys\nprint('x', file=sys.stderr)\n",
        "import os\np = os.path.join('a', 'b')\n",
        "import sys\nsys.exit(1)\n",
        "name = 'modules'\n",
        "import types\nns = types.SimpleNamespace(a=1)\n",
    ],
)
def test_ordinary_uses_of_those_modules_are_not_refused(added):
    before = "import re\n\n\ndef g(x):\n    return x + 1\n"
    assert findings(before, before + added) == []


def test_a_source_encoding_that_hides_code_is_refused(make_repo, tmp_path):
    """In UTF-7, `+AAo-` is a newline: what reads as a comment is a statement when Python runs it."""
    before = "def g(x):\n    return x + 1\n"
    hidden = "# coding: utf-7\n" + before + "# harmless +AAo-import os\n"
    assert findings(before, hidden) == ["dynamic-code: a source encoding of utf-7"]
    assert findings(before, "# -*- coding: utf-8 -*-\n" + before) == []
    assert findings(before, "# vim: set fileencoding=latin-1 :\n" + before) == []
    assert findings(hidden, hidden.replace("x + 1", "x + 2")) == []  # the file's own, kept
    repo = make_repo(BUGGY_WINDOWS)
    forged = "# coding: utf-7\n" + FIXED.replace(
        "def double", "# +AAo-import os+AAo-os.system('true')\ndef double"
    )
    drafter = replay(tmp_path, {"description": "hide", "files": {"windows.py": forged}})
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["failed_stage"] == "policy" and "source encoding of utf-7" in verdict["reason"]
