"""What a candidate may not change, checked before anything runs (pure functions of its changes).

A verdict is only as good as the configuration it was reached with: a candidate that edits how it is
verified (the ruff, mypy, pytest or ralph settings, a startup hook of the interpreter) is refused, and
so is one whose added lines reach into the test harness (pytest's internals, our report plugin,
`sys.modules` surgery, `os._exit`): no bug fix needs them, and they are how a verdict gets forged.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
import tomllib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ralph.domain.candidate import FileChange, is_protected

# Where pytest's configuration can come from (pyproject.toml: its [tool.pytest...] tables).
PYTEST_CONFIG_FILES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    }
)
# Files whose contents decide how ralph's tools judge a candidate (or run before any of its code);
# pyproject.toml is judged by its [tool] tables alone (`config_edits`).
CONFIG_FILES = (PYTEST_CONFIG_FILES - {"pyproject.toml"}) | {
    "ruff.toml",
    ".ruff.toml",
    "mypy.ini",
    ".mypy.ini",
    "ralph.toml",
    ".coveragerc",
    ".pre-commit-config.yaml",
    "sitecustomize.py",
    "usercustomize.py",
}

_HARNESS = re.compile(
    r"\b_pytest\b|\bralph_\w+|\bRALPH_\w+|\bsys\.modules\b|\bos\._exit\b|\bdef\s+pytest_\w+"
    r"|\bpluginmanager\b|\b__builtins__\b|\bimport\s+builtins\b|\bfrom\s+builtins\b"
    r"|\bsys\.set(?:trace|profile)\b|\bPYTEST_\w+|\bpytest_plugins\b"
    # Skipping or ending a test from the code under test, and comments that silence a checker.
    r"|\bpytest\.(?:skip|xfail|exit|importorskip)\b|\bSkipTest\b"
    r"|#\s*(?:noqa|type:\s*ignore|mypy:|ruff:|pragma:\s*no\s*cover)"
)


_INTERPRETERS = re.compile(r"^(?:python[\d.]*w?|pypy[\d.]*|sh|bash|dash|zsh|ksh|node|ruby|perl|Rscript)$")
# Tools whose own file in the project says what they run.
_TOOL_FILES = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "nox": ("noxfile.py",),
    "just": ("justfile", "Justfile", ".justfile"),
    "invoke": ("tasks.py",),
    "inv": ("tasks.py",),
}
_OPERATORS = {";", "&", "&&", "|", "||", "(", ")", "<", ">", ">>", "<<", ">&", "&>", "|&"}


def check_scripts(project: Path, commands: Sequence[str]) -> list[str]:
    """The project's files that the check commands run: the script an interpreter is given (`python
    tools/check.py`, `python -m tools.check`, `bash ./lint.sh`), a command that is a project file
    (`./check.sh`), the file of a task runner (`make` -> Makefile, `nox`, `just`, `invoke`), also
    inside `sh -c "..."` and after `cd DIR &&`, with a symlink's target. They decide the check's
    verdict, so a candidate may not edit them; the files a check only reads or examines may be. What
    such a script imports is not followed: keep a check's logic in the file it runs."""
    found: set[str] = set()
    for command in commands:
        _scripts_of(project, command, "", found, depth=0)
    return sorted(found)


def _scripts_of(project: Path, command: str, cwd: str, found: set[str], depth: int) -> None:
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = command.split()
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _OPERATORS:
            segment.append(word)
            continue
        while segment and re.match(r"^\w+=", segment[0]):  # VAR=value before the command
            segment.pop(0)
        if len(segment) >= 2 and segment[0] == "cd":
            cwd = posixpath.normpath(posixpath.join(cwd, segment[1]))
        elif segment:
            _scripts_of_segment(project, segment, cwd, found, depth)
        segment = []


def _scripts_of_segment(project: Path, words: list[str], cwd: str, found: set[str], depth: int) -> None:
    head = posixpath.basename(words[0])
    _add(project, posixpath.join(cwd, words[0]), found)  # the command itself is a project file
    for name in _TOOL_FILES.get(head, ()):
        _add(project, posixpath.join(cwd, name), found)
    if head in ("make", "nox", "just") and "-f" in words[:-1]:
        _add(project, posixpath.join(cwd, words[words.index("-f") + 1]), found)
    if not _INTERPRETERS.match(head):
        return
    rest = words[1:]
    while rest:
        word = rest.pop(0)
        if word == "-c" and rest:  # the code is the command line: for a shell, read it too
            if depth < 3 and not head.startswith(("python", "pypy")):
                _scripts_of(project, rest[0], cwd, found, depth + 1)
            return
        if word == "-m" and rest:
            module = rest[0].replace(".", "/")
            for root in ("", "src/"):
                for candidate in (f"{module}.py", f"{module}/__main__.py"):
                    _add(project, posixpath.join(cwd, root + candidate), found)
            return
        if not word.startswith("-"):
            _add(project, posixpath.join(cwd, word), found)
            return


def _add(project: Path, path: str, found: set[str]) -> None:
    """`path` (and the file it links to) when it is a file inside the project."""
    path = posixpath.normpath(path)
    if path.startswith(("/", "../")) or path in (".", ".."):
        return
    file = project / path
    if not file.is_file():
        return
    found.add(path)
    if file.is_symlink():
        try:
            target = file.resolve().relative_to(project.resolve())
        except (OSError, ValueError):
            return
        found.add(target.as_posix())


def config_edits(changes: Sequence[FileChange], extra: Sequence[str] = ()) -> list[str]:
    """The changed files that configure verification (and the `extra` ones, such as the type
    checker's plugins); for `pyproject.toml`, only its `[tool]` tables (dependencies may change)."""
    found = []
    for change in changes:
        name = PurePosixPath(change.path).name
        if name in CONFIG_FILES or name.endswith(".pth") or change.path in extra:
            found.append(change.path)
        elif name == "pyproject.toml" and tool_tables(change.before) != tool_tables(change.after):
            found.append(f"{change.path} [tool]")
    return found


def tool_tables(text: str | None) -> object:
    """A pyproject.toml text's `[tool]` tables; None when it has none (or there is no text), a
    string when it does not parse."""
    if text is None:
        return None
    try:
        return tomllib.loads(text).get("tool")
    except tomllib.TOMLDecodeError:
        return "<does not parse>"


# Modules the test harness itself imports (and the standard library): a new top-level file of one of
# these names would run in its place, and could write a consistent, forged report.
_HARNESS_MODULES = frozenset(sys.stdlib_module_names) | {
    "pytest",
    "_pytest",
    "pluggy",
    "py",
    "iniconfig",
    "packaging",
    "coverage",
    "mypy",
    "mypy_extensions",
    "typing_extensions",
    "setuptools",
    "_distutils_hack",
    "pip",
    "ralph_pytest_report",
    "ralph_worker",
    "ralph_types",
}


def shadowing(changes: Sequence[FileChange]) -> list[str]:
    """New top-level modules (at the project's root or under `src/`) named like a module of the
    standard library or the test harness."""
    found = []
    for change in changes:
        if change.before is not None or change.after is None:
            continue
        parts = PurePosixPath(change.path).parts
        if len(parts) > 1 and parts[0] == "src":
            parts = parts[1:]
        top = parts[0]
        name = top[: -len(PurePosixPath(top).suffix)] if len(parts) == 1 else top
        if (len(parts) > 1 or top.endswith((".py", ".pyi", ".so"))) and name in _HARNESS_MODULES:
            found.append(change.path)
    return found


def harness_reach(changes: Sequence[FileChange]) -> list[str]:
    """Added lines that reach into the test harness, as `path:line: text`."""
    found = []
    for change in changes:
        if not change.path.endswith((".py", ".pyi")) or change.after is None:
            continue
        # Lines the edit added (as a multiset: linear in the file, whatever its size).
        after = change.after.splitlines()
        added = Counter(after) - Counter((change.before or "").splitlines())
        for number, line in enumerate(after, 1):
            if added[line] and (match := _HARNESS.search(line)):
                found.append(f"{change.path}:{number}: {match.group(0)}")
    return found


def refusal(
    changes: Sequence[FileChange],
    protected: Sequence[str],
    only: Sequence[str] | None,
    plugin_files: Sequence[str] = (),
) -> str | None:
    """Why an edit may not be verified at all, before anything runs, or None: it edits tests,
    verification settings or type-checker plugins, files outside `only`, or reaches into the harness."""
    paths = [c.path for c in changes]
    if edited := [p for p in paths if is_protected(p, protected)]:
        return f"edits to tests are not allowed: {', '.join(edited)}"
    if configs := config_edits(changes, plugin_files):
        return f"edits to how the project is checked are not allowed: {', '.join(configs)}"
    if only is not None and any(p not in only for p in paths):
        return f"only {', '.join(only)} may be edited"
    if shadows := shadowing(changes):
        return (
            "new modules named like the standard library or the test harness are not allowed: "
            + ", ".join(shadows)
        )
    if reach := harness_reach(changes):
        more = f" (+{len(reach) - 3} more)" if len(reach) > 3 else ""
        return (
            "the edit reaches into the test harness (pytest's or ralph's internals), which no fix "
            f"needs: {'; '.join(reach[:3])}{more}"
        )
    return None
