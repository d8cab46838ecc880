"""The public API and the project's format, with real griffe and real ruff on real repositories: a
candidate that breaks a public signature is rejected naming the break (unless API changes are
allowed), and a candidate on a project that formats with ruff is committed formatted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from ralph.config import RunConfig, check_config
from ralph.domain.candidate import FileChange
from ralph.domain.errors import RalphError
from ralph.sandboxes.local import LocalSandbox
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.api import ApiValidator, api_surface, public_module
from ralph.validators.command import glob_pattern
from ralph.validators.facts import VerifySettings
from ralph.validators.format import formats_with_ruff, within_edit
from ralph.validators.pipeline import Verifier
from ralph.validators.policy import check_scripts
from ralph.validators.toolchain import Toolchain
from ralph.view import QuietView
from tests.conftest import git, run_ralph

PACKAGE = '[project]\nname = "calc"\nversion = "0.1"\n'
CLAMP = "def clamp(value, low, high=10):\n    return max(low, min(value, low))\n"
TEST = "from calc import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0) == 5\n"
# Passes the test too, but every caller that passes `high` breaks.
DROPS_HIGH = "def clamp(value, low):\n    return max(low, min(value, 10))\n"
FIXED = "def clamp(value, low, high=10):\n    return max(low, min(value, high))\n"


def _edits(tmp_path: Path, *texts: str, path: str = "calc.py") -> str:
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps({"files": {path: text}}) + "\n" for text in texts))
    return f"replay:{file}"


def _iterations(outcome) -> list[dict]:
    return [r for r in read_trace(outcome.trace) if r["type"] == "iteration"]


def _run(repo: Path, drafter: str, **config: object):
    settings = RunConfig.model_validate({"drafter": drafter, "candidates": 1, "max_iterations": 3, **config})
    return fix(repo, settings, view=QuietView(notices=False))


def test_a_candidate_that_removes_a_public_parameter_is_rejected_naming_it(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": PACKAGE, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, DROPS_HIGH, FIXED))
    first, second = _iterations(outcome)
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "api"
    assert "removes parameter `high` of `clamp`" in rejected["reason"]
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:calc.py") == FIXED
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert start["semantic"]["api"] == "on"


def test_api_changes_allowed_accepts_the_break(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": PACKAGE, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, DROPS_HIGH), api_changes=True)
    [first] = _iterations(outcome)
    assert first["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:calc.py") == DROPS_HIGH


@pytest.mark.slow
def test_the_flag_allows_api_changes_from_the_command_line(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": PACKAGE, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    drafter = _edits(tmp_path, DROPS_HIGH)
    args = ("fix", str(repo), "--drafter", drafter, "--candidates", "1", "--max-iterations", "1", "--json")
    refused = run_ralph(*args)
    assert refused.returncode == 1, refused.stderr
    allowed = run_ralph(*args, "--allow-api-changes")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["outcome"] == "goal"


def test_a_project_that_publishes_no_package_keeps_no_api(make_repo, tmp_path):
    repo = make_repo({"calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, DROPS_HIGH))
    [first] = _iterations(outcome)
    assert first["candidates"][0]["verdict"] == "accepted"
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert start["semantic"]["api"].startswith("off: no public package")


def _api_checker(tmp_path: Path) -> ApiValidator:
    (tmp_path / "setup.py").write_text("")  # a published package: its API is kept
    return ApiValidator(tmp_path)


def _breaks(checker: ApiValidator, before: str, after: str) -> str:
    """What the API check says of an edit of pkg/mod.py: its breaks, "" when there are none."""
    result = checker.check([FileChange("pkg/mod.py", before, after)])
    return "" if result.ok else result.detail


def test_what_counts_as_a_break(tmp_path):
    checker = _api_checker(tmp_path)
    before = (
        "__all__ = ['f', 'C', 'X']\nX = 1\n\n"
        "class C:\n    def m(self, a, *, b=1):\n        return a\n\n"
        "def f(a, b, c=3):\n    return a\n\n"
        "def hidden(a):\n    return a\n"
    )

    def said(after: str) -> str:
        return _breaks(checker, before, after)

    assert said(before.replace("c=3", "c=4")) == ""  # a default's value: what fixes change
    assert said(before.replace("X = 1", "X = 2")) == ""
    assert said(before.replace("def hidden(a)", "def hidden()")) == ""  # not exported
    assert said(before.replace("c=3):", "c=3, d=None):")) == ""  # an optional parameter added
    assert said(before.replace("b, c=3", "c=3")) == "pkg/mod.py:8: removes parameter `b` of `f`"
    assert "makes parameter `c` of `f` required" in said(before.replace("c=3", "c"))
    assert "adds a required parameter `z` to `f`" in said(before.replace("(a, b,", "(a, z, b,"))
    assert "moves parameter" not in said(before.replace("(a, b,", "(a, z, b,"))
    assert "changes parameter `a` of `C.m`" in said(before.replace("(self, a, *,", "(self, *, a,"))
    assert "removes public `C.m`" in said(before.replace("def m(", "def n("))
    assert said(before.replace("class C:", "C = None\nclass D:")).startswith("pkg/mod.py:")
    assert "removes `pkg.mod`" in checker.check([FileChange("pkg/mod.py", before, None)]).detail
    assert checker.check([FileChange("pkg/new.py", None, "def f(): pass\n")]).ok  # nothing to break


def test_an_edit_inside_a_function_body_is_not_read_again_unless_it_can_change_the_api(tmp_path):
    checker = _api_checker(tmp_path)
    before = (
        "class C:\n    def __init__(self):\n        self.size = 1\n\n"
        "    def grow(self):\n        return self.size + 1\n\n"
        "def h(\n    a,\n): return a\n"
    )

    def said(after: str) -> str:
        return _breaks(checker, before, after)

    body = before.replace("self.size + 1", "self.size + 2")
    assert checker.check([FileChange("pkg/mod.py", before, body)]).detail == "nothing public changed"
    # griffe reads attributes from `__init__`: an edit there is read in full.
    assert "removes public `C.size`" in said(before.replace("self.size = 1", "pass"))
    # A body on the signature's last line: that line is the signature's too.
    assert "adds a required parameter `b` to `h`" in said(before.replace("): return a", "    b): return a"))


def test_which_modules_are_api(tmp_path):
    assert [public_module(p) for p in ("pkg/mod.py", "src/pkg/__init__.py", "six.py")] == [
        "pkg.mod",
        "pkg",
        "six",
    ]
    private = ("pkg/_impl.py", "_pkg/a.py", "tests/test_a.py", "docs/conf.py", "setup.py", "pkg/x.txt")
    assert [public_module(p) for p in private] == [None] * len(private)
    assert api_surface(tmp_path) is not None
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    assert api_surface(tmp_path) is not None  # configuration only: no package
    (tmp_path / "pyproject.toml").write_text('[tool.poetry]\nname = "x"\n')
    assert api_surface(tmp_path) is None


RUFF_FORMATTED = PACKAGE + '\n[tool.ruff.format]\nquote-style = "double"\n'
UNFORMATTED_FIX = "def clamp(value, low, high=10):\n    return max(low,min( value,high ))\n"


def test_a_candidate_on_a_ruff_formatted_project_is_committed_formatted(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": RUFF_FORMATTED, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, UNFORMATTED_FIX))
    [first] = _iterations(outcome)
    [accepted] = first["candidates"]
    assert accepted["verdict"] == "accepted"
    assert any(s["stage"] == "format-fix" for s in accepted["stages"])
    assert git(repo, "show", f"{outcome.branch}:calc.py") == FIXED
    assert git(repo, "status", "--porcelain") == ""  # the user's tree is untouched


def test_the_users_own_unformatted_lines_are_left_alone(make_repo, tmp_path):
    other = "\n\ndef other( x ):\n    return x\n"
    files = {"pyproject.toml": RUFF_FORMATTED, "calc.py": CLAMP + other, "tests/test_calc.py": TEST}
    repo = make_repo(files)
    outcome = _run(repo, _edits(tmp_path, UNFORMATTED_FIX + other))
    [first] = _iterations(outcome)
    assert first["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:calc.py") == UNFORMATTED_FIX + other


def test_a_project_that_does_not_format_is_committed_as_written(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": PACKAGE, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, UNFORMATTED_FIX))
    assert git(repo, "show", f"{outcome.branch}:calc.py") == UNFORMATTED_FIX
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert start["semantic"]["format"].startswith("off")


@pytest.mark.parametrize(
    ("files", "checks", "found"),
    [
        ({"pyproject.toml": "[tool.ruff.format]\n"}, [], "pyproject.toml: [tool.ruff.format]"),
        ({".ruff.toml": "[format]\nquote-style = 'single'\n"}, [], ".ruff.toml: [format]"),
        (
            {".pre-commit-config.yaml": "repos:\n- hooks:\n  - id: ruff-format\n"},
            [],
            ".pre-commit-config.yaml",
        ),
        (
            {"pyproject.toml": "[tool.ruff]\nline-length = 90\n"},
            ["ruff format --check ."],
            "check: ruff format",
        ),
        ({"pyproject.toml": "[tool.ruff]\nline-length = 90\n"}, [], None),
    ],
)
def test_how_a_project_says_it_formats_with_ruff(tmp_path, files, checks, found):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    said = formats_with_ruff(tmp_path, checks)
    assert said == found if found is None else said is not None and said.startswith(found)


def test_formatting_is_taken_only_inside_the_edit():
    before = "a = 1\n\n\ndef f(x):\n    return x\n"
    after = before.replace("return x", "return x+1")
    formatted = before.replace("return x", "return x + 1")
    assert within_edit(before, after, formatted) == 5
    assert within_edit(before, formatted, formatted) == 0
    assert within_edit(None, after, formatted) == 5  # a new file is all edit
    messy = "a=1\n" + after[6:]
    assert within_edit(messy, messy.replace("x+1", "x+2"), "a = 1\n" + formatted[6:].replace("1", "2")) == -1
    assert within_edit(before, after.rstrip("\n"), after) == 5  # the edit dropped the final newline
    assert within_edit(before.rstrip("\n"), after.rstrip("\n"), after) == -1  # the user's file had none


EXAMPLE = Path(__file__).parent.parent / "examples" / "config_schema"


@pytest.mark.slow
def test_a_declared_check_runs_only_for_the_files_it_declares_and_its_script_is_not_editable(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    git(repo, "init", "-q", "-b", "main")
    code = (repo / "retrying.py").read_text()
    fixed = code.replace("range(1, ", "range(")
    settings = (repo / "config" / "settings.json").read_text()
    records = [
        {"files": {"check_config.py": "pass\n"}},
        {
            "files": {
                "retrying.py": fixed,
                "config/settings.json": settings.replace('"retries": 3', '"retries": -1'),
            }
        },
        {"files": {"retrying.py": fixed}},
    ]
    (tmp_path / "edits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    drafter = f"replay:{tmp_path / 'edits.jsonl'}"
    args = ("--candidates", "1", "--max-iterations", "4", "--no-background-gate", "--json")
    proc = run_ralph("fix", str(repo), "--drafter", drafter, *args)  # the checks table: pyproject.toml
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    iterations = [r for r in read_trace(Path(summary["trace"])) if r["type"] == "iteration"]
    script, schema, accepted = (c for i in iterations for c in i["candidates"])
    assert script["failed_stage"] == "policy" and "check_config.py" in script["reason"]
    assert schema["verdict"] == "rejected" and "check python3 check_config.py" in schema["reason"]
    assert accepted["verdict"] == "accepted"
    assert not [s for s in accepted["stages"] if s["stage"] == "checks"]  # retrying.py only: not run
    assert git(repo, "show", f"{summary['branch']}:retrying.py") == fixed


def test_a_checks_table_is_read_and_checked():
    config = RunConfig.model_validate({"checks": {"python3 a.py": {"paths": ["x/*"]}, "make lint": {}}})
    assert config.checks == ["python3 a.py", "make lint"]
    assert config.check_paths == {"python3 a.py": ["x/*"]}
    with pytest.raises(ValidationError):
        RunConfig.model_validate({"checks": {"python3 a.py": {"path": ["x/*"]}}})


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("config/*", "config/a/settings.json", True),  # `*` crosses `/`
        ("config/**/*.json", "config/a.json", True),  # `**/` is also no folder
        ("**/*.toml", "settings.toml", True),
        ("./schemas/*", "schemas/s.json", True),
        ("data/", "data/x.csv", True),  # a folder: everything under it
        ("data/", "database.py", False),
        ("a?c", "a/c", False),
        ("x/[ab].py", "x/b.py", True),
        ("x/[!ab].py", "x/a.py", False),
    ],
)
def test_a_checks_paths_glob(glob, path, matches):
    assert bool(glob_pattern(glob).fullmatch(path)) is matches


def test_the_scripts_a_check_runs_are_found_and_what_it_examines_is_not(tmp_path):
    for name in ("tools/check.py", "pkg/__init__.py", "pkg/check.py", "sub/c.py", "lint.sh", "Makefile"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "link.py").symlink_to("tools/check.py")
    runs = {
        "python -m pkg.check": ["pkg/check.py"],
        "cd sub && python c.py": ["sub/c.py"],
        'bash -c "python3 tools/check.py"': ["tools/check.py"],
        "(X=1 python3 -u tools/check.py --strict)>out.txt": ["tools/check.py"],
        "./lint.sh": ["lint.sh"],
        "make check": ["Makefile"],
        "python link.py": ["link.py", "tools/check.py"],
        # What a check examines may be edited (fixing it is the point).
        "mypy --strict pkg/check.py": [],
        "python -m doctest pkg/check.py": [],
        "python -m json.tool sub/c.py": [],
    }
    for command, scripts in runs.items():
        assert check_scripts(tmp_path, [command]) == scripts, command


@pytest.mark.parametrize(
    ("checks", "said"),
    [
        ({"python3 a.py": {"paths": []}}, 'checks."python3 a.py".paths'),
        ({"python3 a.py": 0}, 'checks."python3 a.py": expected a table'),
        ({"python3 a.py": {"paths": "x/*"}}, 'checks."python3 a.py".paths'),
    ],
)
def test_a_bad_checks_table_is_one_line_naming_the_check(checks, said):
    with pytest.raises(RalphError) as caught:
        check_config({"checks": checks})
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_project_whose_format_settings_are_broken_is_not_formatted(make_repo, tmp_path):
    broken = PACKAGE + "\n[tool.ruff.format]\nquote-style = 'doubled'\n"
    repo = make_repo({"pyproject.toml": broken, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, UNFORMATTED_FIX))
    [first] = _iterations(outcome)
    assert first["candidates"][0]["verdict"] == "accepted"
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert "format" in start["disabled_stages"]


def test_a_syntax_error_is_the_syntax_stages_to_say_on_a_formatted_project(make_repo, tmp_path):
    repo = make_repo({"pyproject.toml": RUFF_FORMATTED, "calc.py": CLAMP, "tests/test_calc.py": TEST})
    outcome = _run(repo, _edits(tmp_path, "def clamp(value, low, high=10:\n    return 1\n", FIXED))
    first = _iterations(outcome)[0]["candidates"][0]
    assert first["failed_stage"] == "syntax" and "format" not in first["reason"]
    syntax = next(s for s in first["stages"] if s["stage"] == "syntax")
    assert "SyntaxError" in syntax["detail"]


def test_formatting_between_two_changed_places_is_not_taken():
    before = "def f(x):\n    return x\n\n\nUSER = {  'keep':1}\n\n\ndef g(y):\n    return y\n"
    after = before.replace("return x", "return x+1").replace("return y", "return y+1")
    formatted = after.replace("x+1", "x + 1").replace("y+1", "y + 1")
    assert within_edit(before, after, formatted) == 2
    assert within_edit(before, after, formatted.replace("{  'keep':1}", '{"keep": 1}')) == -1


def test_what_is_no_break_for_a_caller(tmp_path):
    checker = _api_checker(tmp_path)
    before = (
        "class C:\n    def m(self, a):\n        return a\n\n"
        "def f(a, /, b):\n    return a\n\n"
        "if __name__ == '__main__':\n    result = f(1, 2)\n    print(result)\n"
    )

    def said(after: str) -> str:
        return _breaks(checker, before, after)

    assert said(before.replace("    def m(self, a):", "    @staticmethod\n    def m(a):")) == ""
    assert said(before.replace("def f(a, /, b):\n    return a", "def f(x, /, b):\n    return x")) == ""
    assert said(before.replace("    result = f(1, 2)\n    print(result)", "    print(f(1, 2))")) == ""
    assert "removes parameter `b` of `f`" in said(before.replace("(a, /, b)", "(a, /)"))
    package = "from .core import run\n\n__all__ = ['run']\n"
    twice = "def g(a):\n    return a\n\n\nif X:\n\n    def g(a):\n        return a\n"
    assert said(before + "\n" + twice) == ""
    once = checker.check([FileChange("pkg/mod.py", before + "\n" + twice, before + "\n" + twice[:25])])
    assert once.ok, once.detail  # `g` is still defined: the part read first is confirmed on the whole
    # griffe cannot resolve the alias (nothing else is read): the break is said at the alias's line.
    removed = checker.check([FileChange("pkg/__init__.py", package, "__all__ = []\n")])
    assert removed.error is None and "removes public `run`" in removed.detail


def test_the_format_stage_can_be_turned_off_to_time_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ruff.format]\n")
    toolchain = Toolchain("python3", LocalSandbox(), tmp_path)
    on = Verifier(toolchain, VerifySettings(warm=False))
    off = Verifier(toolchain, VerifySettings(warm=False, formatting=False))
    assert on.tools.format.enabled and not off.tools.format.enabled
    assert on.sibling(toolchain).tools.format.enabled and not off.sibling(toolchain).tools.format.enabled
