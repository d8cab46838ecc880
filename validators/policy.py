"""What a candidate may not change, checked before anything runs (functions of its changes, and of
the project's settings read once).

A verdict is only as good as the configuration it was reached with: a candidate that edits how it is
verified (the ruff, mypy, pytest or ralph settings, a startup hook of the interpreter), what the tests
are (the project's pytest settings say where they lie; the files they read at the baseline count as
theirs), installed packages or files git ignores is refused, and so is one whose added lines reach
into the test harness (pytest's internals and hooks, our report plugin, `sys.modules` surgery,
`os._exit`), import the test framework into the code under test, add dynamic code (`exec`, imports
by name, frames, `getattr` on a module by a computed name) or silence a checker: no bug fix needs
them, and they are how a verdict gets forged. A project that needs one says so in `[tool.ralph]
allow` (the rules' names: `_RULES`).
"""

from __future__ import annotations

import ast
import atexit
import builtins
import codecs
import configparser
import doctest
import fnmatch
import functools
import glob
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
import types
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ralph.domain.candidate import (
    POLICY_RULES,
    PROTECTED_TESTS,
    FileChange,
    is_protected,
    line_edits,
    lines_of,
)
from ralph.domain.errors import GitError
from ralph.domain.pyast import parse
from ralph.domain.reparse import first_line, lines_as_python_numbers_them, reparsed

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
    "xdist",
    "execnet",
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


# What the project says its tests are: pytest's own settings, wherever pytest would read them.
_SETTINGS_SECTIONS = {
    "pytest.ini": "pytest",
    ".pytest.ini": "pytest",
    "tox.ini": "pytest",
    "setup.cfg": "tool:pytest",
}
_DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
_TOO_BROAD = frozenset({"*", "*.py"})  # python_files that take in every module: not read as tests


def project_tests(project: Path, root: Path | None = None, limit: int = 20000) -> tuple[str, ...]:
    """Globs (as PROTECTED_TESTS: project-relative, `*` crossing `/`) of what the project's pytest
    settings, in the project or a folder above it up to `root`, say its tests are: the `python_files`
    names under each of `testpaths` (anywhere, without them), and a testpath whole when every Python
    file in it is a test, a conftest or an `__init__.py` (one that holds other modules holds the
    project's code too, as pandas' `testpaths = ["pandas"]` does: its data files are the tests' only
    when the tests read them, see `read_by_tests`). A `python_files` of every module (`*.py`) is not
    taken for tests outside testpaths."""
    globs: list[str] = []
    for base, testpaths, python_files in _pytest_settings(project, root):
        names = [p for p in python_files or _DEFAULT_PYTHON_FILES if p]
        places = _places(project, base, testpaths) if testpaths else [""]
        for place in places:
            if (project / place).is_file():
                globs.append(literal_glob(place))
            elif place and _only_tests(project / place, names, limit):
                globs.append(literal_glob(place) + "/*")
            else:
                prefix = literal_glob(place) + "/" if place else ""
                for name in names:
                    if not place and name in _TOO_BROAD:
                        continue
                    globs += [f"{prefix}{name}", f"{prefix}*/{name}"]
    return tuple(dict.fromkeys(g for g in globs if g not in PROTECTED_TESTS))


def _pytest_settings(project: Path, root: Path | None) -> Iterator[tuple[Path, list[str], list[str]]]:
    """Each settings file's folder, `testpaths` and `python_files`, from the project up to `root`."""
    folder = project
    while True:
        for name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml"):
            yield from _toml_or_ini(folder, name)
        for name in ("tox.ini", "setup.cfg"):
            yield from _toml_or_ini(folder, name)
        if root is None or folder == root or folder.parent == folder or root not in folder.parents:
            return
        folder = folder.parent


def _toml_or_ini(folder: Path, name: str) -> Iterator[tuple[Path, list[str], list[str]]]:
    file = folder / name
    try:
        text = file.read_text(encoding="utf-8-sig") if file.is_file() else None  # (as pytest: a BOM)
    except (OSError, UnicodeDecodeError):
        return
    if text is None:
        return
    tables: list[Mapping[str, object]] = []
    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return
        pytest = _table(data, "tool", "pytest") if name == "pyproject.toml" else data.get("pytest")
        if isinstance(pytest, dict):
            tables = [t for t in (pytest.get("ini_options"), pytest) if isinstance(t, dict)]
    else:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(text)
        except configparser.Error:
            return
        if parser.has_section(_SETTINGS_SECTIONS[name]):
            tables = [dict(parser.items(_SETTINGS_SECTIONS[name]))]
    for table in tables:
        testpaths, python_files = _words(table.get("testpaths")), _words(table.get("python_files"))
        for name, value in _overrides(_words(table.get("addopts"))):  # `-o python_files=check_*.py`
            (testpaths if name == "testpaths" else python_files).extend(_words(value))
        if testpaths or python_files:
            yield folder, testpaths, python_files


def _overrides(addopts: Sequence[str]) -> Iterator[tuple[str, str]]:
    """The `testpaths` and `python_files` settings that `addopts` overrides (`-o`, `--override-ini`)."""
    for i, word in enumerate(addopts):
        if word in ("-o", "--override-ini"):
            setting = addopts[i + 1] if i + 1 < len(addopts) else ""
        elif word.startswith("--override-ini="):
            setting = word.partition("=")[2]
        elif word.startswith("-o"):
            setting = word[2:]
        else:
            continue
        name, _, value = setting.partition("=")
        if name.strip() in ("testpaths", "python_files"):
            yield name.strip(), value


def _table(data: Mapping[str, object], *keys: str) -> object:
    """`data[k1][k2]...`, or None where a level is missing or no table."""
    value: object = data
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _words(value: object) -> list[str]:
    """A setting's values: a TOML list, or an ini value's words (as pytest splits them)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if not isinstance(value, str):
        return []
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _places(project: Path, base: Path, testpaths: list[str]) -> list[str]:
    """The testpaths (relative to `base`, globs expanded as pytest does) relative to the project:
    "" for one that holds the whole project; those outside it are left out."""
    places = []
    for testpath in testpaths:
        pattern = os.path.join(base, testpath)
        found = glob.glob(pattern, recursive=True) if glob.has_magic(testpath) else [pattern]
        for path in found:
            rel = os.path.relpath(os.path.normpath(path), project)
            if rel == "." or (rel.startswith("..") and project.is_relative_to(os.path.normpath(path))):
                places.append("")
            elif not rel.startswith(".."):
                places.append(Path(rel).as_posix())
    return places


def _only_tests(folder: Path, names: Sequence[str], limit: int) -> bool:
    """Whether every Python file in `folder` is a test (by `names` or pytest's defaults), a
    conftest or an `__init__.py` (a large folder: no)."""
    patterns = [*names, *_DEFAULT_PYTHON_FILES]
    seen = 0
    for directory, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        seen += len(files)
        if seen > limit:
            return False
        for file in files:
            if not file.endswith(".py") or file in ("conftest.py", "__init__.py"):
                continue
            rel = Path(directory, file).relative_to(folder).as_posix()
            if not any(_named(rel, p) for p in patterns):
                return False
    return True


def _named(path: str, pattern: str) -> bool:
    """pytest's match of a `python_files` pattern: the file's name, or its path's end when the
    pattern has a `/` in it."""
    if "/" in pattern:
        return fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, f"*/{pattern}")
    return fnmatch.fnmatch(PurePosixPath(path).name, pattern)


def literal_glob(path: str) -> str:
    """A path as a glob that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def read_by_tests(opened: Mapping[str, object], project: Path, is_test: Callable[[str], bool]) -> list[str]:
    """The files the tests read at the baseline, from the report plugin's record of what its run
    opened for reading (`{file: [the project's file whose code opened it, project-relative, or ""
    for code outside the project: pytest or a plugin, for the tests]}`): those of them that are no
    Python, lie inside the project and exist, opened by a test's code or for it. The code under
    test's own data (a template its code reads) stays editable."""
    found = []
    for path, openers in opened.items():
        if path.startswith(("/", "../")) or path.endswith((".py", ".pyi", ".pyc")):
            continue
        if not isinstance(openers, list) or not (project / path).is_file():
            continue
        if any(o == "" or (isinstance(o, str) and is_test(o)) for o in openers):
            found.append(path)
    return sorted(found)


def broad_python_files(project: Path, root: Path | None = None) -> bool:
    """Whether the project's `python_files` take in every module (`*.py`): then a file pytest
    collected a test from may be the code under test too."""
    return any(set(names) & _TOO_BROAD for _, _, names in _pytest_settings(project, root))


def collected_files(tests: Collection[str], doctests: Collection[str], broad: bool = False) -> list[str]:
    """What the baseline's run says are tests (whatever setting, hook or option made pytest collect
    them), from our plugin's record: the files it collected test functions from (with `broad`,
    `broad_python_files`, none that is a Python module: the code under test may be one), and the
    text files it ran as doctests (a module's doctests are the code's own examples: `doctest_edits`
    judges those). Project-relative; those outside the project left out."""
    found = {f for f in tests if not (broad and f.endswith(".py"))}
    found |= {f for f in doctests if not f.endswith(".py")}
    return sorted(f for f in found if not f.startswith(("/", "../")))


_PATHLIKE = re.compile(r"^[\w.@+-]+(?:/[\w.@+-]+)*$")
_NOT_DATA = (".py", ".pyi", ".pyc", ".pyo", ".so", ".pyd")


def named_by_tests(project: Path, test_files: Collection[str]) -> list[str]:
    """The project's files (no Python) a test file names by their path, from the project or from
    the test's folder: a string, or the strings a path is built of (`HERE / "data" / "x.json"`,
    `os.path.join(HERE, "data", "x.json")`). What a test hands a subprocess or a helper to read,
    which the baseline's record of opened files does not see."""
    found: set[str] = set()
    for test in test_files:
        if not test.endswith(".py"):
            continue
        try:
            tree = _parse((project / test).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        folder = posixpath.dirname(test)
        for word in _path_strings(tree) if tree is not None else ():
            for path in {word, posixpath.normpath(posixpath.join(folder, word))}:
                if not path.startswith("../") and not path.endswith(_NOT_DATA) and (project / path).is_file():
                    found.add(path)
    return sorted(found)


def _path_strings(tree: ast.Module) -> Iterator[str]:
    """Every string constant in `tree` that reads as a relative path, and the paths joined of
    constants (the tail of a `/` chain, the string arguments of a `join` call)."""
    for node in ast.walk(tree):
        parts: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = [node.value]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            tail: ast.expr = node
            while isinstance(tail, ast.BinOp) and isinstance(tail.op, ast.Div):
                if not (isinstance(tail.right, ast.Constant) and isinstance(tail.right.value, str)):
                    break
                parts.insert(0, tail.right.value)
                tail = tail.left
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
            parts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        word = "/".join(p.strip().removeprefix("./") for p in parts)
        if 0 < len(word) < 300 and _PATHLIKE.match(word) and ("." in word.strip(".") or "/" in word):
            yield word


def doctest_edits(changes: Sequence[FileChange], doctests: Collection[str]) -> list[str]:
    """The modules the baseline ran doctests of (`doctests`) whose examples (the `>>>` lines of a
    docstring and the output they expect) an edit changes: the code's own tests. Only the statements
    the edit changed are read; a file that does not parse is left to the syntax stage."""
    edited = []
    for change in changes:
        if change.path not in doctests or change.before is None or ">>>" not in change.before:
            continue
        old = _parse(change.before)
        new = _edited(change.before, change.after or "") if old is not None else None
        if old is None or new is None:
            continue
        regions = [(b1, b2) for b1, b2, _, _ in _blocks(change.before, change.after or "")]
        inside = [n for n in old.body if any(b1 <= n.lineno <= b2 for b1, b2 in regions)]
        if _examples(inside) != _examples(new.body):
            edited.append(change.path)
    return edited


def _examples(statements: Sequence[ast.stmt]) -> list[tuple[str, str]]:
    """Every doctest example in the docstrings of these statements (a string standing alone among
    them, as a module's docstring does, too), in order."""
    parser = doctest.DocTestParser()
    found: list[tuple[str, str]] = []
    texts = [
        s.value.value
        for s in statements
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
    ]
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                texts.append(ast.get_docstring(node, clean=False) or "")
    for text in texts:
        if ">>>" in text:
            try:
                examples = parser.get_examples(text)
            except ValueError:
                examples = []
            found += [(e.source.strip(), e.want.strip()) for e in examples]
    return found


def interpreter_prefix(python: str, project: Path) -> tuple[str, ...]:
    """A glob of the interpreter's prefix (`.venv/*` for `.venv/bin/python`) when it lies inside
    the project (not the project itself)."""
    prefix = Path(os.path.abspath(python)).parent.parent
    try:
        rel = prefix.relative_to(os.path.abspath(project)).as_posix()
    except ValueError:
        return ()
    return (literal_glob(rel) + "/*",) if rel != "." else ()


def allowed_rules(project: Path) -> tuple[str, ...]:
    """The rules the project opts out of: `allow` of `[tool.ralph]` in pyproject.toml or of
    ralph.toml (as ralph/config.py reads them; a list of POLICY_RULES names there)."""
    allowed: list[str] = []
    for name in ("pyproject.toml", "ralph.toml"):
        try:
            data = tomllib.loads((project / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        table = _table(data, "tool", "ralph") if name == "pyproject.toml" else data
        value = table.get("allow") if isinstance(table, dict) else None
        if isinstance(value, list):
            allowed = [str(v) for v in value]  # ralph.toml's, when both say, as the config does
    return tuple(a for a in allowed if a in POLICY_RULES)


# What no fix needs and a forged verdict does, where an edit writes and in the lines it adds: each
# rule by the name a project allows it with (`[tool.ralph] allow`), with what the edit does and what
# to do instead, in the order they are said.
_RULES = {
    "installed-files": (
        "writes into installed packages or the interpreter",
        "fix the project's own files",
    ),
    "ignored-files": (
        "writes files git ignores (or git's own)",
        "fix files the repository tracks: what git ignores is no part of the project",
    ),
    "harness": (
        "reaches into the test harness (pytest's or ralph's internals and hooks, sys.modules, os._exit,"
        " builtins, tracing)",
        "change the code under test, not how it is tested",
    ),
    "test-framework": (
        "imports the test framework into code that is not a test",
        "fix the code itself: the tests import pytest, the code under test does not",
    ),
    "dynamic-code": ("adds dynamic code", "write the code directly"),
    "silencing": ("silences a checker", "fix what the checker reports instead"),
}
# Lexical rules, on every added line of a Python file, a test's too.
_LEXICAL = (
    ("ralph", re.compile(r"\bralph_\w+|\bRALPH_\w+")),  # ralph's own: reported as the harness
    (
        "harness",
        re.compile(
            r"\b_pytest\b|\bsys\s*\.\s*modules\b|\b(?:os|posix|nt)\._exit\b|\bpytest_\w+|\bPYTEST_\w+"
            r"|\bpluginmanager\b|\b__builtins__\b|\bimport\s+builtins\b|\bfrom\s+builtins\b"
            r"|\bset(?:trace|profile)(?:_all_threads)?\b|\bTestReport\b|\bCallInfo\b"
            r"|\bhook(?:impl|spec|wrapper)\b|\bHook(?:impl|spec)Marker\b"
            # Skipping, failing or ending a test from the code under test.
            r"|\bpytest\.(?:skip|xfail|exit|fail|importorskip)\b|\bSkipTest\b"
        ),
    ),
    (
        # Every spelling ruff, flake8, mypy, pyright, pylint, pyre, pytype, bandit and coverage take.
        "silencing",
        re.compile(
            # (with the codes or settings each names: a directive widened to more codes silences more)
            r"#\s*(?:noqa\b(?:\s*:\s*[\w\s,]*\w)?|type\s*:\s*ignore\b(?:\[[^\]]*\])?"
            r"|pyre-[\w-]+(?:\[[^\]]*\])?|nosec\b[^#]*|pragma\s*:\s*no\s*(?:cover|branch)\b"
            r"|(?:mypy|ruff|flake8|pyright|basedpyright|pylint|pytype|pyrefly|isort)\s*:[^#]*)"
            r"|\bno_type_check\w*|\btype_check_only\b",
            re.IGNORECASE,
        ),
    ),
)
# Where a Python file does not parse here (newer syntax than this interpreter's), its added lines
# are read for the words of the syntax rules instead.
_DYNAMIC_TEXT = re.compile(
    r"(?<![\w.])(?:exec|eval|compile|__import__|getattr|setattr|delattr|vars|globals)\s*\("
    r"|(?<![\w.])(?:exec|eval|__import__)\b"
    r"|\b(?:importlib|ctypes|marshal|runpy|pickle|_getframe|f_back|f_globals|f_locals|__code__|__globals__)\b"
)
_FRAMEWORK_TEXT = re.compile(
    r"^\s*(?:from\s+|import\s+(?:[\w.]+(?:\s+as\s+\w+)?\s*,\s*)*)(?:pytest|_pytest|pluggy|xdist|execnet|unittest|mock)\b"
)
_MAX_PARSED = MAX_READ = 2 << 20  # a larger file is read for those words too

# The builtins that run or import code given as data, and those that reach an attribute by a name.
_RUNS_CODE = frozenset({"exec", "eval", "compile", "__import__"})
_REFLECTION = frozenset({"getattr", "setattr", "delattr"})
# Calls that take an exception's traceback to show it, not to reach its frames.
_READS_TRACEBACKS = frozenset(
    {"with_traceback", "format_tb", "print_tb", "extract_tb", "format_exception", "print_exception"}
)
# getattr and calls by a name given as data (allowed with names written out: `attrgetter("x")`).
_BY_NAME = frozenset({"operator.attrgetter", "operator.methodcaller"})
# Modules whose use is dynamic code (importing by name, loading code or objects from bytes, calling C).
_DYNAMIC_MODULES = frozenset(
    {"importlib", "ctypes", "_ctypes", "cffi", "marshal", "runpy", "code", "codeop", "pickle", "_pickle"}
    | {"dill", "cloudpickle", "shelve", "zipimport", "pkgutil", "imp"}
)
_DYNAMIC_NAMES = frozenset(
    {"inspect.currentframe", "inspect.stack", "inspect.getouterframes", "inspect.getinnerframes"}
    | {"inspect.trace", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "types.CodeType"}
    | {"inspect.getargvalues", "inspect.getclosurevars", "inspect.getgeneratorlocals"}
    | {"inspect.getcoroutinelocals", "traceback.walk_stack", "traceback.walk_tb"}
    | {"importlib.metadata.entry_points"}  # (what loads plugins by name)
    | _BY_NAME
    | {"object.__getattribute__", "type.__getattribute__"}
    # Strings run or imported by name: `pydoc.locate("builtins.exec")`, an annotation evaluated,
    # a docstring's examples run.
    | {"pydoc.locate", "pydoc.importfile", "timeit.timeit", "timeit.repeat", "timeit.Timer"}
    | {"cProfile.run", "cProfile.runctx", "profile.run", "profile.runctx", "pdb.run", "pdb.runeval"}
    | {"pdb.runctx", "doctest.run_docstring_examples", "doctest.testmod", "doctest.testfile"}
    | {"doctest.debug_src"}
)
# Parts of those modules that read a distribution's data, no code: toolz's `version("toolz")`.
_READS_DATA = ("importlib.metadata", "importlib.resources")
# Frames, code objects and the objects behind them: how code reaches its callers' (pytest's) state.
_FRAME_ATTRS = frozenset(
    {"f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame"}
    | {"_getframe", "_current_frames", "__code__", "__globals__", "__subclasses__", "co_code"}
    # How an object leads to others it was never handed: a builtin's module (`print.__self__` is
    # builtins), a class's subclasses, a closure's cells, an exception's frames.
    | {"__self__", "__closure__", "cell_contents", "__traceback__", "co_filename"}
)
# (pytest-xdist's and execnet's: a worker's channel to the gate's controller carries its reports)
_TEST_FRAMEWORK = frozenset({"pytest", "_pytest", "pluggy", "xdist", "execnet", "unittest", "mock"})
# Names taken for modules wherever a file uses them without binding them otherwise.
_WELL_KNOWN = frozenset(
    {"sys", "os", "builtins", "gc", "inspect", "importlib", "types", "ctypes", "marshal", "pickle"}
    | {"io", "posix", "site", "runpy", "threading", "_thread", "atexit", "signal", "faulthandler"}
    | {"warnings", "logging", "pytest", "_pytest", "pluggy", "unittest", "operator"}
    | {"object", "type"}  # (builtin classes: what `object.__getattribute__` and `vars(type)` reach)
)
# Modules an attribute reaches whatever it hangs from (`path.sys` after `from os import path`).
_REACHED_MODULES = frozenset({"sys", "builtins", "_pytest", "pluggy", "gc", "importlib", "inspect"})
# Modules that are the harness's way in: held as a value (`m = sys`, `f(builtins)`), one leaves the
# policy's sight of what is done with it.
_HELD_MODULES = frozenset({"sys", "builtins", "gc", "inspect", "_pytest", "pluggy", "importlib", "types"})
# Source encodings whose text reads as the code it is (another, UTF-7 say, hides code in a comment).
_PLAIN_CODINGS = frozenset({"utf-8", "utf-8-sig", "ascii", "iso8859-1", "cp1252"})  # (codecs' names)
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_WRITES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})
# What takes a namespace's names away (rebinding one needs the builtin in hand, judged where spelled).
_DELETES = frozenset({"pop", "popitem", "clear", "__delitem__"})


@dataclass(frozen=True)
class Finding:
    """Something an edit does that the policy refuses: the rule (its `allow` key), where, and what."""

    rule: str
    path: str
    line: int  # 0: the file itself
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}" if self.line else f"{self.path} ({self.what})"


@dataclass(frozen=True)
class _Construct:
    rule: str
    what: str
    first: int  # the lines its node spans
    last: int


@functools.lru_cache(maxsize=8)  # (a candidate's, read by code_findings, _edited and _blocks)
def _text_hunks(before: str, after: str) -> tuple[tuple[int, int, int, int], ...]:
    """The regions an edit changed, `(i1, i2, j1, j2)`: before[i1:i2] became after[j1:j2] (lines;
    only the part between the lines both texts share at the start and the end is diffed)."""
    return tuple((i1, i2, j1, j2) for _, i1, i2, j1, j2 in line_edits(before, after, autojunk=True))


def code_findings(change: FileChange, test_file: bool) -> list[Finding]:
    """What the lines an edit adds to a Python file do that the policy refuses. A silencing comment
    counts only when the region it replaced had none like it (a mutant's fix of a line with a
    `# noqa: E501` keeps it); the harness's words and the constructs of the syntax rules only when
    the file had none like them anywhere (what a file already did, as boltons' namedutils reads
    `sys._getframe`, a fix may do again: a mutant that deleted that line is fixed by writing it
    back); ralph's own words always. The test framework and dynamic code are looked for outside the
    tests; ralph's words, the harness and silencing comments everywhere."""
    if not change.path.endswith((".py", ".pyi")) or change.after is None:
        return []
    before_text = change.before or ""
    before, after = lines_of(before_text), lines_of(change.after)
    hunks = [(0, 0, 0, len(after))] if change.before is None else _text_hunks(before_text, change.after)
    found = _lexical(change.path, before, after, hunks, _LEXICAL, _harness_words(before_text))
    coding = _coding(after)
    if coding is not None and coding != _coding(before):
        found.append(Finding("dynamic-code", change.path, coding[0], f"a source encoding of {coding[1]}"))
    if test_file or change.path.endswith(".pyi") or not hunks:
        return found
    old = _accepted(before_text) if change.before else None
    tree, whole = _read_edit(before_text, change.after) if old is not None else (_parse(change.after), True)
    if tree is None:
        rules = (("dynamic-code", _DYNAMIC_TEXT), ("test-framework", _FRAMEWORK_TEXT))
        found += _lexical(change.path, before, after, hunks, rules)
        if change.before is not None and not _same_strings(before, after, hunks):
            # (its unchanged lines may mean something else now, and nothing here can read them)
            found.append(Finding("dynamic-code", change.path, hunks[0][2] + 1, _UNREAD))
        return found
    spans: list[tuple[int, int]] | None = [(j1 + 1, j2) for _, _, j1, j2 in hunks if j2 > j1]
    had = old.kinds if old is not None else frozenset()
    already = old.imports if old is not None else _imported_words(before_text)
    context, stores = old, old.stores if old is not None else None
    if old is None:  # (a new file: all of it; an accepted one that did not parse: its changed lines)
        spans = None if change.before is None else spans
    elif whole or _rebinds(before, after, hunks) or not _numbered_alike(before_text, change.after):
        # What unchanged lines reach may have changed (an import, a builtin's name no longer bound
        # where it was), or a region did not parse alone: the whole new text, as itself.
        tree, spans, context = _parse(change.after) or tree, None, None
    elif not _same_strings(before, after, hunks):  # (a string's end moved: what it held may be code)
        spans = None
    # Otherwise only the statements the changed lines meet are read (a one-line edit of a large
    # module), each whole where the edit changed its own lines (a header, a decorator).
    reach = _Reach(tree, already, spans, after, context=context, stores=stores)
    if reach.needs_whole and (whole_tree := _parse(change.after)) is not None:
        reach = _Reach(whole_tree, already, None, after, context=None, stores=stores)
    for c in reach.found:
        if (c.rule, c.what) in had:
            continue
        if old is None and spans is not None and not any(c.first <= hi and c.last >= lo for lo, hi in spans):
            continue  # (what a file that did not parse had: its lines outside the edit)
        found.append(Finding(c.rule, change.path, c.first, c.what))
    return list(dict.fromkeys(found))


# Names whose binding decides what a call or an attribute reaches (`_Reach`): an edit that takes a
# binding of one away (a parameter, a def, an assignment) may make an unchanged line's call the
# builtin's; an import, `del`, `global` or `nonlocal` changes what names are anywhere.
_BOUND_WORDS = "|".join(sorted(_RUNS_CODE | _REFLECTION | _WELL_KNOWN | {"vars", "globals"}))
_UNBINDS = re.compile(
    rf"(?<![.\w])(?:{_BOUND_WORDS})"
    rf"(?=\s*(?:(?:[-+*/%&|^@]|<<|>>|\*\*|//)?=(?!=)|[,)\]}}:#\\]|$|(?:in|if)\b))"
    rf"|\b(?:def|class)\s+(?:{_BOUND_WORDS})\b",
    re.MULTILINE,
)
_SCOPING = re.compile(r"(?:^|[;:])\s*(?:import|from\b.*\bimport|del|global|nonlocal)\b", re.MULTILINE)
_UNREAD = "an edit that moves a string's end in a file this Python cannot parse"


def _rebinds(before: Sequence[str], after: Sequence[str], hunks: Sequence[tuple[int, int, int, int]]) -> bool:
    """Whether an edit may change what the lines it left reach: a line it removed names a builtin
    or a well-known module where a binding would (a target, a parameter, a def: `exec,` `exec)`
    `exec =` `exec:` `exec in`), or a statement it removed or added imports, deletes or declares a
    name `global` or `nonlocal` (read as words, its lines joined where a backslash continues them
    and their names as Python reads them, NFKC: a false alarm only reads the whole file)."""
    for i1, i2, j1, j2 in hunks:
        removed, added = _as_names(before[i1:i2]), _as_names(after[j1:j2])
        if _UNBINDS.search(removed) or _SCOPING.search(removed) or _SCOPING.search(added):
            return True
    return False


def _as_names(lines: Sequence[str]) -> str:
    text = "\n".join(lines)
    return unicodedata.normalize("NFKC", re.sub(r"\\[ \t\f]*(?:\r\n|\r|\n)", " ", text))


def _numbered_alike(before: str, after: str) -> bool:
    """Whether the regions, numbered by `str.splitlines`, are where Python's lines are (a form feed
    or a U+2028 ends a line for the one and not the other: the regions would be read off by lines)."""
    return lines_as_python_numbers_them(before) and lines_as_python_numbers_them(after)


# What decides where strings and comments begin and end: quotes (with the letters before them: an
# f-string's braces hold code), backslashes, `#`, braces and line ends; any other run is one "x".
_PREFIXED = r"(?<!\w)[bBrRuUfFtT]{1,2}['\"]|['\"]"  # (a string's prefix: the letters `rb'` may open with)
_STRING_SHAPE = re.compile(rf"{_PREFIXED}|[\\#{{}}\n]|[^'\"\\#{{}}\n]+?(?=(?:{_PREFIXED})|[\\#{{}}\n]|\Z)")


def _string_shape(lines: Sequence[str]) -> list[str]:
    """The tokens that decide where strings and comments begin and end, other runs one "x"; empty
    where there are none but line ends (such lines leave a string or code as they found it)."""
    shape: list[str] = []
    for token in _STRING_SHAPE.findall("\n".join(lines) + "\n"):
        if token[-1] in "'\"":
            shape.append(token.lower())
        elif token in ("\\", "#", "{", "}", "\n"):
            shape.append(token)
        elif not shape or shape[-1] != "x":
            shape.append("x")
    return shape if any(t not in ("x", "\n") for t in shape) else []


def _same_strings(
    before: Sequence[str], after: Sequence[str], hunks: Sequence[tuple[int, int, int, int]]
) -> bool:
    """Whether every changed region leaves strings and comments beginning and ending where they did:
    the same quotes, backslashes, `#`s, braces and line ends in the same order and adjacency. Then
    each unchanged line is read as code or as text as it was; otherwise a line a string held may be
    code now (a triple-quoted string's opening line made a comment)."""
    return all(_string_shape(before[i1:i2]) == _string_shape(after[j1:j2]) for i1, i2, j1, j2 in hunks)


def _tops(tree: ast.Module) -> list[tuple[int, int]]:
    """Each top-level statement's lines, its decorators included."""
    return [(first_line(node), node.end_lineno or node.lineno) for node in tree.body]


@functools.lru_cache(maxsize=8)  # (read by code_findings and doctest_edits)
def _blocks(before: str, after: str) -> list[tuple[int, int, int, int]]:
    """The regions of an edit as whole top-level statements: `(b1, b2, a1, a2)`, the lines (1-based,
    inclusive; empty where b2 < b1) of the accepted text's statements that a changed region meets or
    touches, and the lines they became. None of the rest of the file changed."""
    old = _accepted(before)
    assert old is not None
    hunks = _text_hunks(before, after)
    tops = old.tops
    blocks: list[list[int]] = []
    for i1, i2, _, _ in hunks:
        near = [(a, b) for a, b in tops if a <= i2 + 1 and b >= i1]  # (touching: a line added below)
        first, last = min([i1 + 1, *(a for a, _ in near)]), max([i2, *(b for _, b in near)])
        if blocks and first <= blocks[-1][1] + 1:
            blocks[-1][1] = max(blocks[-1][1], last)
        else:
            blocks.append([first, last])
    found = []
    for first, last in blocks:
        shift = sum((j2 - j1) - (i2 - i1) for i1, i2, j1, j2 in hunks if i1 < first - 1)
        inside = sum((j2 - j1) - (i2 - i1) for i1, i2, j1, j2 in hunks if first - 1 <= i1 <= last)
        found.append((first, last, first + shift, last + shift + inside))
    return found


def _edited(before: str, after: str) -> ast.Module | None:
    """The statements of `after` that an edit of `before` changed (`_read_edit`)."""
    return _read_edit(before, after)[0]


@functools.lru_cache(maxsize=8)  # (a candidate's text, read by code_findings and doctest_edits)
def _read_edit(before: str, after: str) -> tuple[ast.Module | None, bool]:
    """(The statements of `after` that an edit of `before` (which parses) changed, each region parsed
    alone with its lines numbered as in the whole (a one-line edit of a 100 KB module is not the
    whole module's parse), or only the innermost statement in it that the edit changed (`reparsed`:
    a method of a large class); the whole of `after` where a region does not parse alone, whether
    it is that)."""
    lines = lines_of(after)
    body: list[ast.stmt] = []
    old = _accepted(before)
    before_lines = lines_of(before)
    hunks = _text_hunks(before, after)
    same_lines = all(i2 - i1 == j2 - j1 for i1, i2, j1, j2 in hunks)  # (every line keeps its number)
    same_lines = same_lines and lines_as_python_numbers_them(before) and lines_as_python_numbers_them(after)
    spans = list(enumerate(old.tops)) if old else []
    for b1, b2, first, last in _blocks(before, after):
        if last < first:
            continue
        tops = [i for i, (a, b) in spans if b1 <= a and b <= b2]
        if same_lines and len(tops) == 1:  # (only the innermost statement the edit changed, parsed)
            changed = [(i1 + 1, i2) for i1, i2, _, _ in hunks if b1 <= i1 + 1 <= b2]
            top = _accepted_statement(before, tops[0])
            if top is not None and (statement := reparsed(top, before_lines, lines, changed)) is not None:
                body.append(statement)
                continue
        part = _parse("\n" * (first - 1) + "\n".join(lines[first - 1 : last]) + "\n")
        if part is None:
            return _parse(after), True
        body += part.body
    return ast.Module(body=body, type_ignores=[]), False


# How many of the accepted state's files the small facts of are kept (`read_ahead`).
READ_AHEAD = 512


def read_ahead(text: str) -> None:
    """Learn what the policy reads of an accepted file once for all its candidates (the rules and
    constructs it has anywhere: a walk of the whole tree, ~25 ms for pyflakes' checker), before the
    first candidate that edits it. Its tree is not kept: the few kept are those candidates edit."""
    _ahead.on = True
    try:
        _accepted(text)
        _harness_words(text)
    finally:
        _ahead.on = False


_ahead = threading.local()  # (`on` in the thread that reads ahead)


def _coding(lines: Sequence[str]) -> tuple[int, str] | None:
    """A source encoding the first two lines declare (PEP 263) whose text is not the code Python
    runs from it: its line and name (UTF-7 hides code in what reads as a comment: the text we read is
    not what runs). The plain ones (UTF-8, ASCII, Latin-1) are None."""
    for number, line in enumerate(lines[:2], start=1):
        match = _CODING.match(line)
        if match is None:
            continue
        try:
            name = codecs.lookup(match.group(1)).name
        except LookupError:
            name = match.group(1)  # (Python refuses to import it: not plain either)
        return None if name in _PLAIN_CODINGS else (number, name)
    return None


def _lexical(
    path: str,
    before: Sequence[str],
    after: Sequence[str],
    hunks: Sequence[tuple[int, int, int, int]],
    rules: Sequence[tuple[str, re.Pattern[str]]],
    known: frozenset[tuple[str, str]] = frozenset(),
) -> list[Finding]:
    """The words of `rules` the changed regions add: those the region replaced had none like,
    and that are not `known` (in the file already)."""
    found = []
    for i1, i2, j1, j2 in hunks:
        had = Counter(_keys(before[i1:i2], rules))
        for number in range(j1, j2):
            for rule, what in _keys(after[number : number + 1], rules):
                if (rule, what) in known:
                    continue
                if had[(rule, what)]:
                    had[(rule, what)] -= 1
                else:
                    found.append(Finding(rule, path, number + 1, what))
    return found


@functools.lru_cache(maxsize=READ_AHEAD)  # the accepted state's files, read again by every candidate
def _harness_words(text: str) -> frozenset[tuple[str, str]]:
    """The harness's words a text has anywhere (a file that manipulates `sys.modules` itself, as
    toolz's `_build_tlz` does, may get a line that does so back; ralph's own words never)."""
    return frozenset(_keys(lines_of(text), [r for r in _LEXICAL if r[0] == "harness"]))


def _keys(lines: Sequence[str], rules: Sequence[tuple[str, re.Pattern[str]]]) -> Iterator[tuple[str, str]]:
    for line in lines:
        if not line.isascii():  # (as Python reads a name: a full-width letter is the letter)
            line = unicodedata.normalize("NFKC", line)
        for rule, pattern in rules:
            for match in pattern.finditer(line):
                yield (
                    rule,
                    " ".join(match.group(0).split()).lower() if rule == "silencing" else match.group(0),
                )


@dataclass(frozen=True)
class _Accepted:
    """What the policy reads of an accepted file's whole tree, kept per text (`read_ahead`) where
    the tree is not: its top-level statements' lines, the rules and constructs it has anywhere,
    and what its module scope imports, binds and stores to."""

    tops: tuple[tuple[int, int], ...]  # each top-level statement's lines (`_tops`)
    kinds: frozenset[tuple[str, str]]
    imports: frozenset[str]  # the top-level modules it imports
    maps: tuple[dict[str, str], frozenset[str], dict[str, str]]  # `_import_maps`
    binds: frozenset[str]
    stores: frozenset[str]


@functools.lru_cache(maxsize=READ_AHEAD)  # the accepted state's files, read again by every candidate
def _accepted(text: str) -> _Accepted | None:
    """What the policy reads of an accepted `text` (None where it does not parse)."""
    tree = _parse.__wrapped__(text) if getattr(_ahead, "on", False) else _parse(text)
    if tree is None:
        return None
    maps = _import_maps(tree)
    reach = _Reach(tree, frozenset(), None, lines_of(text))
    return _Accepted(
        tops=tuple(_tops(tree)),
        kinds=frozenset((c.rule, c.what) for c in reach.found),
        imports=_top_modules(maps),
        maps=maps,
        binds=_binds(tree),
        stores=reach.module_stores,  # (no context: the whole tree's own)
    )


@functools.lru_cache(maxsize=16)  # (the statements candidates edit, read again by the next)
def _accepted_statement(text: str, index: int) -> ast.stmt | None:
    """The `index`th top-level statement of an accepted `text` that parses: its lines parsed alone,
    numbered as in the whole (a statement that owns its lines parses the same wherever it stands,
    as `reparse` argues), else the whole text's parse."""
    accepted = _accepted(text)
    tops = accepted.tops if accepted is not None else ()
    if not 0 <= index < len(tops):
        return None
    first, last = tops[index]
    owns = (index == 0 or tops[index - 1][1] < first) and (
        index + 1 == len(tops) or tops[index + 1][0] > last
    )
    if owns and lines_as_python_numbers_them(text):
        lines = lines_of(text)[first - 1 : last]
        part = _parse.__wrapped__("\n" * (first - 1) + "\n".join(lines) + "\n")
        alone = part.body[0] if part is not None and len(part.body) == 1 else None
        if alone is not None and (first_line(alone), alone.end_lineno) == (first, last):
            return alone
    whole = _parse(text)
    return whole.body[index] if whole is not None and index < len(whole.body) else None


@functools.lru_cache(maxsize=8)  # the accepted state's files, read again by every candidate
def _parse(text: str) -> ast.Module | None:
    if len(text) > _MAX_PARSED:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _imported_words(text: str) -> frozenset[str]:
    """The top-level modules a text that does not parse imports, read as words."""
    return frozenset(re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.MULTILINE))


def _top_modules(maps: tuple[dict[str, str], frozenset[str], dict[str, str]]) -> frozenset[str]:
    """The top-level modules of what `_import_maps` found bound."""
    modules, _, imported = maps
    return frozenset(m.split(".")[0] for m in [*modules.values(), *imported.values()])


def _import_maps(tree: ast.Module) -> tuple[dict[str, str], frozenset[str], dict[str, str]]:
    """What a module's imports bind: a name an `import` binds -> its module; the dotted modules
    `import a.b` names; a name a `from` import binds -> module.name."""
    modules: dict[str, str] = {}
    dotted: set[str] = set()
    imported: dict[str, str] = {}
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                modules[alias.asname or top] = alias.name if alias.asname else top
                dotted.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.ImportFrom):  # (relative: `from . import windows`)
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{'.' * node.level}{node.module or ''}.{alias.name}"
    return modules, frozenset(dotted), imported


def _statements(node: ast.AST, into: Callable[[ast.stmt], bool] = lambda s: True) -> Iterator[ast.stmt]:
    """The statements in `node`, at any depth (those in the statements `into` says no to, not)."""
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        children = getattr(node, name, None)
        for child in children if isinstance(children, list) else ():
            if isinstance(child, ast.stmt):
                yield child
                if not into(child):
                    continue
            yield from _statements(child, into)  # (an except clause, a case: not statements)


def _binds(scope: ast.AST) -> frozenset[str]:
    """The names a scope defines itself (a def, a class, an import, a parameter): a call of one of
    them there is not the builtin's. An assignment does not count: `exec = exec` keeps the builtin."""
    names: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        names.update(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x)
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in _statements(scope, into=lambda s: not isinstance(s, definitions)):
        names |= _binds_alone(node)
    return frozenset(names)


def _bound_above(scope: ast.AST, name: str, line: int) -> bool:
    """Whether `name` is bound in `scope`'s own body when `line` runs, its statements run in order:
    a def, class or import that binds it on every way through (both branches of an `if`, a `try`
    and each of its handlers) ends before it, and nothing since unbinds it (a `del`, an `except ...
    as` of that name), nor could anything anywhere (`global` of it in a nested scope)."""
    if any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(scope)):
        return False
    bound = False
    for statement in getattr(scope, "body", []):
        if (statement.end_lineno or statement.lineno) >= line:
            break
        bound = (bound or _binds_surely(statement, name)) and not _unbinds(statement, name)
    return bound


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _not_a_definition(statement: ast.stmt) -> bool:
    return not isinstance(statement, _DEFINITIONS)


def _unbound_anywhere(tree: ast.Module, name: str) -> bool:
    """Whether the module's own level may unbind `name` anywhere (a `del`, an `except ... as`), or a
    function anywhere declares it `global` (and may)."""
    if any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(tree)):
        return True
    return any(_unbinds(s, name) for s in tree.body)


def _builtin_function(name: str) -> bool:
    """A builtin function's name (`print`, `len`: its `__self__` is the builtins module)."""
    return isinstance(getattr(builtins, name, None), types.BuiltinFunctionType)


def _a_namespace(node: ast.expr) -> bool:
    """`x.__dict__` or `vars(x)`: an object's (a module's) namespace, whatever `x` is."""
    if isinstance(node, ast.Attribute):
        return node.attr == "__dict__"
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"


def _taken_by_name(call: ast.Call) -> str | None:
    """The name of exec, eval, compile, __import__ or a reflection builtin that `call` deletes from
    whatever it holds by that literal name (`delattr(x, "exec")`, `x.__delattr__("exec")`,
    `object.__delattr__(x, "exec")`, `vars(x).pop("exec")`, `x.__dict__.__delitem__("exec")`)."""
    func, args = call.func, call.args
    if isinstance(func, ast.Name) and func.id == "delattr":
        named = args[1:2]
    elif isinstance(func, ast.Attribute) and func.attr == "__delattr__":
        named = args[:2]
    elif isinstance(func, ast.Attribute) and func.attr in ("pop", "__delitem__") and _a_namespace(func.value):
        named = args[:1]
    else:
        return None
    for arg in named:
        if isinstance(arg, ast.Constant) and arg.value in _RUNS_CODE | _REFLECTION:
            return str(arg.value)
    return None


def _binds_surely(statement: ast.stmt, name: str) -> bool:
    """Whether `statement` binds `name` by a def, class or import on every way through it."""
    if name in _binds_alone(statement):
        return True

    def any_binds(body: list[ast.stmt]) -> bool:
        return any(_binds_surely(s, name) for s in body)

    if isinstance(statement, ast.If):
        return any_binds(statement.body) and any_binds(statement.orelse)
    if isinstance(statement, ast.Try):
        # (a handler that raises, or sets the name to a constant: `except ImportError: compile = None`)
        handled = all(
            any_binds(h.body)
            or bool(h.body and isinstance(h.body[-1], ast.Raise))
            or any(_sets_constant(s, name) for s in h.body)
            for h in statement.handlers
        )
        return (any_binds(statement.body) and handled) or any_binds(statement.finalbody)
    return False


def _sets_constant(statement: ast.stmt, name: str) -> bool:
    """`name = None` (a constant: never the builtin)."""
    return (
        isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
        and isinstance(statement.value, ast.Constant)
    )


def _unbinds(statement: ast.stmt, name: str) -> bool:
    """Whether `statement` may unbind `name` where it runs (a `del` of it, an `except ... as` it;
    not in the functions or classes it defines)."""
    todo: list[ast.AST] = [statement]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Delete) and any(
            isinstance(t, ast.Name) and t.id == name for target in node.targets for t in ast.walk(target)
        ):
            return True
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return True
        todo.extend(
            child
            for child in ast.iter_child_nodes(node)
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        )
    return False


def _binds_alone(statement: ast.stmt) -> frozenset[str]:
    """The names a def, class or import statement binds unconditionally where it stands."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return frozenset({statement.name})
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return frozenset((a.asname or a.name).split(".")[0] for a in statement.names)
    return frozenset()


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class _Reach(ast.NodeVisitor):
    """A module's dynamic code and its imports of the test framework (modules the file imported
    before the edit, `already`, excepted). What a module is: a name an `import` binds, a dotted
    module an `import` names, or a well-known module's name the file binds to nothing else."""

    def __init__(
        self,
        tree: ast.Module,
        already: frozenset[str],
        spans: Sequence[tuple[int, int]] | None,
        lines: Sequence[str] = (),
        context: _Accepted | None = None,
        stores: frozenset[str] | None = None,
    ) -> None:
        """`tree`: the statements to read (those `spans` meet); `context`: the accepted file they
        are part of, whose imports and names count too; `lines`: the source's lines; `stores`: what
        the accepted file's module level stores to (with no `context`, `tree` is the whole new text:
        a store counts where both have it; None: what `tree`'s does)."""
        self.found: list[_Construct] = []
        self.tree, self.lines = tree, lines  # (the source: what a string spells there, the lines saw)
        self.already = already
        self.spans = spans  # the lines read (None: all): statements that meet none are passed over
        self.modules: dict[str, str] = {}  # a name an `import` binds -> its module
        self.dotted: set[str] = set()  # the dotted modules `import a.b` names
        self.imported: dict[str, str] = {}  # a name a `from` import binds -> module.name
        for modules, dotted, imported in [*([context.maps] if context else []), _import_maps(tree)]:
            self.modules.update(modules)
            self.dotted.update(dotted)
            self.imported.update(imported)
        names = _binds(tree) | (context.binds if context is not None else frozenset())
        self.accepted_binds = context.binds if context is not None else frozenset()
        self.partial = context is not None  # (the statements read are some of the file's)
        # A name only the accepted file binds, used where statements run in order (`_defined`): what
        # these statements cannot tell is read again on the whole new text.
        self.needs_whole = False
        # (the accepted file's, where there is one: a store the edit adds, `sys = sys`, hides nothing)
        self.stores_read = _stores(tree, keep=False)
        if stores is None:
            self.module_stores = self.stores_read
        else:
            self.module_stores = stores if context is not None else stores & self.stores_read
        self.scopes: list[tuple[bool, frozenset[str]]] = [(False, names)]  # (a class's?, names)
        self.judged: set[int] = set()  # names already judged as the function a call calls
        self.scope_nodes: list[ast.AST] = []  # the functions and classes around what is visited
        self.whole = False  # (inside a statement read whole: nothing in it is passed over)
        self.early = False  # (the last `_defined` said the builtin of a function above the def)
        self._uses_cache: dict[str, frozenset[str]] | None = None
        self.annotating = False  # (in an annotation: what it names is not run)
        self.visit(tree)

    def _rebound(self, name: str) -> bool:
        """Whether `name` is stored to (assigned, a loop's or a comprehension's target, `except ...
        as`, a parameter) where it is used: in a function around it, or at the module's level (by the
        accepted file where there is one; by what is read only for a name no import binds: `for gc
        in xs` names a value, `sys = sys` after `import sys` hides the module)."""
        functions = [n for n in self.scope_nodes if not isinstance(n, ast.ClassDef)]
        module = name in self.module_stores or (name not in self.modules and name in self.stores_read)
        return module or any(name in _stores(n) for n in functions)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt) and self.spans is not None and not self.whole:
            first, last = first_line(node), node.end_lineno or node.lineno  # (its decorators too)
            met = [(lo, hi) for lo, hi in self.spans if first <= hi and last >= lo]
            if not met:
                return
            if _changes_itself(node, first, last, met):  # (`def f(exec):` made `def f():`: what its
                self.whole = True  # unchanged body reaches is not what it was)
                try:
                    super().visit(node)
                finally:
                    self.whole = False
                return
        super().visit(node)

    def _add(self, rule: str, what: str, node: ast.AST) -> None:
        first = getattr(node, "lineno", 0)
        self.found.append(_Construct(rule, what, first, getattr(node, "end_lineno", None) or first))

    def _in_order(self) -> bool:
        """Whether what is visited runs as the module or a class body runs (no function around it)."""
        return all(isinstance(n, ast.ClassDef) for n in self.scope_nodes)

    def _defined(self, name: str, node: ast.AST | None = None) -> bool:
        """Whether `name` is defined where it is used (class scopes are not seen from methods). Where
        `node` runs as the module or a class body runs (no function around it), in order: only a def,
        class or import of the statements read that binds it unconditionally and ends before `node`
        (or a comprehension's target) counts; a call above `def eval` calls the builtin. In a function
        the module defines (or a lambda), a name only the module binds counts only where the module
        binds it above that function: the function may run before the binding (called, decorated, a
        lambda called where it stands, as the module is imported), and a call there is the builtin's."""
        last = len(self.scopes) - 1
        if node is None:
            return any(
                name in names for i, (is_class, names) in enumerate(self.scopes) if i == last or not is_class
            )
        if not self._in_order():
            innermost = self.scope_nodes[-1]
            in_class = isinstance(innermost, ast.ClassDef) and self.scopes[last][0]
            if in_class and (name in self.scopes[last][1] or name in _stores(innermost, keep=False)):
                # A class body runs in order, and reads a name it stores from itself, the module or
                # the builtins (never the functions around it).
                if _bound_above(innermost, name, getattr(node, "lineno", 0)):
                    return True
            elif name in self.scopes[last][1]:
                return True  # (its own scope's def or import, or a parameter)
            elif not self._global_there(name) and any(
                name in names for i, (is_class, names) in enumerate(self.scopes) if i and not is_class
            ):
                return True  # (a parameter, a def or an import of a function around it)
            if name not in self.scopes[0][1]:
                return False
            return self._modules_own(name)
        comprehensions = [names for is_class, names in self.scopes[1:] if not is_class]
        if any(name in names for names in comprehensions):
            return True  # (a comprehension's target)
        classes = [n for n in self.scope_nodes if isinstance(n, ast.ClassDef)]
        # (a comprehension does not see the class around it)
        scopes: list[ast.AST] = [classes[-1], self.tree] if classes and not comprehensions else [self.tree]
        bound = self._bound_in_order(name, scopes, getattr(node, "lineno", 0))
        if bound and len(self.scopes) > len(classes) + 1:  # (in a comprehension: a generator runs later,
            if self.partial:  # maybe after the module's `del eval`)
                self.needs_whole = True
            elif _unbound_anywhere(self.tree, name):
                return False
        return bound

    def _runs_before_def(self, node: ast.Name, own: frozenset[str]) -> None:
        """Code the module runs as it is imported, above (or on) its own `def exec`, naming one of
        its functions or classes whose code, or the code of those it names, uses `exec`: that call
        may run the builtin (the whole new text decides)."""
        if self.partial:
            self.needs_whole = True
            return
        uses = self._uses()
        for name in sorted(own):
            binding = next((s for s in self.tree.body if _binds_surely(s, name)), None)
            if binding is not None and node.lineno > (binding.end_lineno or binding.lineno):
                continue
            if name in uses.get(node.id, ()):
                self._add("dynamic-code", f"{name} (in {node.id}, run before the module's own def)", node)

    def _uses(self) -> dict[str, frozenset[str]]:
        """For each of the module's functions and classes (at its level, in any block), the names
        its code uses, and the code of those of them it names, and so on (once per reading)."""
        if self._uses_cache is None:
            defined = {
                s.name: s for s in _statements(self.tree, _not_a_definition) if isinstance(s, _DEFINITIONS)
            }
            direct = {
                name: frozenset(n.id for n in ast.walk(s) if isinstance(n, ast.Name))
                for name, s in defined.items()
            }
            uses = dict(direct)
            changed = True
            while changed:
                changed = False
                for name in uses:
                    more = uses[name].union(*(uses[g] for g in uses[name] if g in uses and g != name))
                    if more != uses[name]:
                        uses[name], changed = more, True
            self._uses_cache = uses
        return self._uses_cache

    def _early(self) -> str:
        """What a finding of `_defined` adds where it came of a function that may run before the
        module's own def (`_modules_own`): said apart from the builtin called where it stands, so a
        file that had one excuses only that."""
        early, self.early = self.early, False
        return " (in a function that may run before the module's own def)" if early else ""

    def _global_there(self, name: str) -> bool:
        """Whether a function around the use declares `name` global (its own binding and those of
        the functions around it do not count then)."""
        return any(
            isinstance(s, ast.Global) and name in s.names
            for node in self.scope_nodes
            if not isinstance(node, ast.ClassDef)
            for s in _statements(node, _not_a_definition)
        )

    def _modules_own(self, name: str) -> bool:
        """For a use in a function (or a class or a lambda) the module defines, of a name only the
        module binds: whether it is the module's own when that code runs. Only where the function
        stands below the module's binding: above it, it may run first (called, decorated, a class
        body calling its method, a lambda called where it stands, reached through the module or by
        another module imported above the def: none of it decidable here), and its finding is said
        apart from a call of the builtin where it stands (`_early`), so a file that had one excuses
        only that kind. And nothing at the module's level may unbind it (`del eval`, an `except ...
        as eval`, a `global eval`). Decided on the whole new text: read in part, the whole text is
        read again (`needs_whole`)."""
        if self.partial:
            self.needs_whole = True
            return False  # (the whole text decides; where it cannot be read, the builtin)
        if _unbound_anywhere(self.tree, name):
            return False
        binding = next((s for s in self.tree.body if _binds_surely(s, name)), None)
        if binding is None:
            return False
        outer = self.scope_nodes[0]
        line = first_line(outer) if isinstance(outer, ast.stmt) else getattr(outer, "lineno", 0)
        if line > (binding.end_lineno or binding.lineno):
            return True
        # (a lambda where the module runs is likely called there: the builtin, said as such)
        self.early = not isinstance(outer, ast.Lambda)
        return False

    def _bound_in_order(self, name: str, scopes: Sequence[ast.AST], line: int) -> bool:
        """Whether one of `scopes` binds `name` surely above `line` (`_bound_above`)."""
        bound = any(_bound_above(scope, name, line) for scope in scopes)
        if self.partial and (bound or name in self.accepted_binds):
            # (statements not read here may bind or unbind it: the whole new text decides; where it
            # cannot be read, what is read here says the builtin)
            self.needs_whole = True
        return bound

    def _module(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in self.modules:
                return self.modules[node.id]
            return node.id if node.id in _WELL_KNOWN and not self._defined(node.id) else None
        dotted = _dotted(node)
        if dotted is not None and (dotted in self.dotted or dotted == "os.path"):
            return dotted
        if isinstance(node, ast.Attribute) and node.attr in _WELL_KNOWN and self._module(node.value):
            return node.attr  # (`os.sys`: a module's module, as itself)
        if isinstance(node, ast.Attribute) and node.attr in _REACHED_MODULES:
            return node.attr  # (`path.sys` after `from os import path`: whatever it hangs from)
        return None

    def _scope(
        self, node: ast.AST, outer: Sequence[ast.AST | None], inner: Sequence[ast.AST], is_class: bool
    ) -> None:
        for child in outer:
            if child is not None:
                self.visit(child)
        self.scopes.append((is_class, _binds(node)))
        self.scope_nodes.append(node)
        for child in inner:
            self.visit(child)
        self.scopes.pop()
        self.scope_nodes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        a = node.args
        outer: list[ast.AST | None] = [*a.defaults, *a.kw_defaults]
        if not isinstance(node, ast.Lambda):
            outer += node.decorator_list
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            self._annotations([node.returns, *(x.annotation for x in args if x)])
        inner = node.body if isinstance(node.body, list) else [node.body]
        if not isinstance(node, ast.Lambda):
            self._shadowing(node.name, node)
        self._scope(node, outer, inner, is_class=False)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _annotations(self, annotations: Sequence[ast.AST | None]) -> None:
        """Read as any code, but what they name is not run for that (`_runs_before_def`)."""
        self.annotating = True
        try:
            for annotation in annotations:
                if annotation is not None:
                    self.visit(annotation)
        finally:
            self.annotating = False

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._annotations([node.annotation])
        if node.value is not None:
            self.visit(node.value)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        """A comprehension is a scope of its own: a class's names are not seen from it (`[eval(s)
        for s in xs]` in a class that defines `eval` calls the builtin). Its first iterable is read
        where it stands."""
        first, *rest = node.generators
        self.visit(first.iter)
        targets = frozenset(
            n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        )
        self.scopes.append((False, targets))
        try:
            for child in [first.target, *first.ifs, *rest]:
                self.visit(child)
            for child in [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]:
                self.visit(child)
        finally:
            self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._shadowing(node.name, node)
        outer = [*node.decorator_list, *node.bases, *node.keywords]
        self._scope(node, outer, node.body, is_class=True)

    def _shadowing(self, name: str, node: ast.AST) -> None:
        """A def, a class or an import named like a builtin that runs code: a call of that name is
        then not judged as the builtin's anywhere in its scope, whether or not the binding ever
        runs (`if False: def exec(s): ...`, or deleted again). Not `compile`, which regex modules
        and template engines name a function of their own (`from re import compile`)."""
        if name in _RUNS_CODE - {"compile"}:
            self._add("dynamic-code", f"{name} bound to something else", node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        """`except ... as exec` binds the name, and unbinds it once the handler ends: the module's
        other calls of it may then call the builtin (the whole text decides)."""
        if node.name in _RUNS_CODE | _REFLECTION:
            self._shadowing(node.name, node)
            self.needs_whole = self.needs_whole or self.partial
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(node, alias.name)
            if alias.asname:
                self._shadowing(alias.asname, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        self._import(node, node.module)
        if node.module == "builtins":
            for alias in node.names:
                if alias.name == "*" or alias.name in _RUNS_CODE | _REFLECTION:
                    # (the builtin itself, under its own name: the module's calls of its own
                    # `def exec` below it call this one)
                    self._add("dynamic-code", f"from builtins import {alias.name}", node)
        for alias in node.names:
            self._shadowing(alias.asname or alias.name, node)
            qualified = f"{node.module}.{alias.name}"
            # (the module: `_import`; attrgetter and methodcaller: where they are called)
            if (qualified in _DYNAMIC_NAMES - _BY_NAME) or alias.name in _FRAME_ATTRS:
                self._add("dynamic-code", qualified, node)
            if node.module.split(".")[0] not in _TEST_FRAMEWORK:  # (those: the rules above)
                for rule, what in _keys([qualified], _LEXICAL[:2]):  # `from sys import modules`
                    self._add(rule, f"from {node.module} import {alias.name}: {what}", node)

    def _import(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top in self.already:
            return
        if top in _TEST_FRAMEWORK:
            self._add("test-framework", f"import {module}", node)
        elif top == "builtins":  # (the lines' words find `import builtins` on one line)
            self._add("harness", f"import {module}", node)
        elif _dynamic(module):
            self._add("dynamic-code", f"import {module}", node)

    def _by_computed_names(self, node: ast.Call) -> None:
        """A module's (or a builtin function's) names deleted or looked up by a computed name, or a
        string the standard library runs as code (`breakpoint` with arguments, `source_to_code`)."""
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id == "delattr"
            and len(node.args) >= 2
            and self._imported(node.args[0])
        ) or (isinstance(func, ast.Attribute) and func.attr == "__delattr__" and self._imported(func.value)):
            named = node.args[1:2] if isinstance(func, ast.Name) else node.args[:1]
            if not (named and isinstance(named[0], ast.Constant) and isinstance(named[0].value, str)):
                self._add("dynamic-code", "a module's name deleted by a computed name", node)
        if isinstance(func, ast.Attribute) and func.attr == "__getattribute__" and node.args:
            # (`print.__getattribute__("__fles__"[::-1])`: as `getattr`, on a builtin function or a
            # module by a computed name; a frame's way named by a string is `visit_Constant`'s)
            attribute, held = node.args[-1], func.value
            reaches = self._imported(held) or (
                isinstance(held, ast.Name) and _builtin_function(held.id) and not self._defined(held.id)
            )
            if reaches and not (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)):
                self._add("dynamic-code", "__getattribute__ by a computed name", node)
        if isinstance(func, ast.Attribute) and func.attr == "source_to_code":
            self._add("dynamic-code", "source_to_code", node)  # (a string compiled: `__loader__`'s)
        if isinstance(func, ast.Name) and func.id == "breakpoint" and (node.args or node.keywords):
            # (`PYTHONBREAKPOINT=builtins.exec`: its arguments go to whatever the hook names)
            self._add("dynamic-code", "breakpoint with arguments", node)
        if (taken := _taken_by_name(node)) is not None:
            # (`delattr(mod, "exec")`, `vars(mod).pop("exec")`, `object.__delattr__(mod, "exec")`:
            # a module's own `def exec` taken away by name, whatever holds the module)
            self._add("dynamic-code", f"{taken!r} deleted by name", node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        # (`f(**locals())` where the module runs: every name read, none written)
        for value in [k.value for k in node.keywords if k.arg is None]:
            name = value.func.id if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) else ""
            if name in ("locals", "vars") and isinstance(value, ast.Call) and not value.args:
                self.judged.add(id(value))
        if (
            isinstance(func, ast.Name)
            and (func.id != "locals" or self._in_order())  # (where the module runs, its globals())
            and _is_namespace(node)
            and id(node) not in self.judged
        ):
            # (`globals().get(n)`, `g = globals()`: every name, reached by one the source need not spell)
            self._add("dynamic-code", f"{func.id}() as a value", node)
        if isinstance(func, ast.Attribute) and func.attr == "join" and (text := _folded(node)) is not None:
            self._spelled(text, node)
        if (
            isinstance(func, ast.Attribute) and func.attr in _READS_TRACEBACKS
        ):  # `.with_traceback(e.__traceback__)`
            for arg in node.args:
                if isinstance(arg, ast.Attribute) and arg.attr == "__traceback__":
                    self.judged.add(id(arg))
        for keyword in node.keywords:  # `code.replace(co_filename=...)`
            if keyword.arg in _FRAME_ATTRS:
                self._add("dynamic-code", keyword.arg, node)
        by_name = self._by_a_given_name(func)
        if by_name and _plain_names(node, every=by_name.endswith("attrgetter")):  # attrgetter("x")
            self.judged.add(id(func))
        self._by_computed_names(node)
        if isinstance(func, ast.Name):
            if func.id in _RUNS_CODE and not self._defined(func.id, node):
                self._add("dynamic-code", func.id + self._early(), node)
                self.judged.add(id(func))
            elif func.id in _REFLECTION:
                self._reflection(node, func.id)
                self.judged.add(id(func))
            elif func.id == "vars" and node.args and (module := self._module(node.args[0])):
                self._add("dynamic-code", f"vars({module})", node)
                self.judged.add(id(node.args[0]))
        elif isinstance(func, ast.Attribute) and func.attr in ("CodeType", "FunctionType"):
            self._add("dynamic-code", f"{func.attr}(...)", node)
        self.generic_visit(node)

    def _by_a_given_name(self, func: ast.expr) -> str:
        """`operator.attrgetter` or `operator.methodcaller` where `func` names one, else ""."""
        if isinstance(func, ast.Name):
            qualified = self.imported.get(func.id, "")
        elif isinstance(func, ast.Attribute):
            qualified = f"{self._module(func.value)}.{func.attr}"
        else:
            return ""
        return qualified if qualified in _BY_NAME else ""

    def _reflection(self, node: ast.Call, name: str) -> None:
        """getattr, setattr or delattr on a module: by a computed name, or setting one at all, is
        dynamic code; getattr by a literal name is judged as the attribute written out would be. On a
        builtin function by a computed name too (`getattr(print, "__SELF__".lower())` is the
        builtins module)."""
        target = node.args[0] if node.args else None
        if (
            isinstance(target, ast.Name)
            and _builtin_function(target.id)
            and not self._defined(target.id)
            and not self._rebound(target.id)
        ):
            named = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(named, ast.Constant) and isinstance(named.value, str)):
                self._add("dynamic-code", f"{name}({target.id}, <a computed name>)", node)
        module = self._module(node.args[0]) if node.args else None
        if module is None:
            return
        self.judged.add(id(node.args[0]))
        attr = node.args[1] if len(node.args) > 1 else None
        if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
            self._add("dynamic-code", f"{name}({module}, <a computed name>)", node)
        elif name != "getattr":
            self._add("dynamic-code", f"{name}({module}, {attr.value!r})", node)
        else:
            spelled = f"{module}.{attr.value}"
            for rule, what in _keys([spelled], _LEXICAL[:2]):
                self._add(rule, f"getattr({module}, {attr.value!r}): {what}", node)
            if attr.value in _FRAME_ATTRS or _dynamic(spelled):
                self._add("dynamic-code", f"getattr({module}, {attr.value!r})", node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        own = self.scopes[0][1] & _RUNS_CODE  # (the module's own exec, eval, compile, __import__)
        # (where the module runs, a lambda's body too: likely called where it stands)
        runs_here = all(isinstance(n, (ast.ClassDef, ast.Lambda)) for n in self.scope_nodes)
        if own and node.id in self.scopes[0][1] and node.id not in own and not self.annotating and runs_here:
            self._runs_before_def(node, own)
        if id(node) in self.judged:
            return
        if node.id in _RUNS_CODE | _REFLECTION and not self._defined(node.id, node):
            self._add("dynamic-code", f"{node.id} (as a value){self._early()}", node)
        qualified = self.imported.get(node.id)
        if qualified and _dynamic(qualified):
            self._add("dynamic-code", qualified, node)
        module = self._module(node)
        if module in _HELD_MODULES and not self._rebound(node.id):  # (`sys.x`: judged where read)
            self._add("dynamic-code", f"{module} (a module as a value)", node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in _FRAME_ATTRS:  # `vars(t)["__subclasses__"]`
            self._add("dynamic-code", f"{node.value!r} (an attribute named by a string)", node)
        if isinstance(node.value, str):
            self._spelled(node.value, node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Add) and (text := _folded(node)) is not None:
            self._spelled(text, node)
            return
        self.generic_visit(node)

    def _spelled(self, text: str, node: ast.AST) -> None:
        """The harness's words a string spells where the source does not (`"plugin" "manager"`,
        `"pytest_" + "runtest"`, `"_".join(["pytest", "runtest"])`): the lines' words are read as
        text already."""
        source = self._source(node)
        for rule, what in _keys([text], _LEXICAL[:2]):
            if what not in source:
                self._add(rule, f"a string spelling {what}", node)
        if text in _FRAME_ATTRS and text not in source:  # `"_get" + "frame"`
            self._add("dynamic-code", f"a string spelling {text}", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS and id(node) not in self.judged:
            self._add("dynamic-code", node.attr, node)
        module = self._module(node.value)
        if module is not None:
            self.judged.add(id(node.value))
            spelled = f"{module}.{node.attr}"
            if node.attr == "__dict__" or (_dynamic(spelled) and id(node) not in self.judged):
                self._add("dynamic-code", spelled, node)
            # An alias's (`import sys as s; s.modules`), or spaced (`sys .modules`): as if spelled.
            if spelled != _dotted(node) or spelled not in self._source(node):
                for rule, what in _keys([spelled], _LEXICAL[:2]):
                    self._add(rule, f"{_dotted(node) or node.attr}: {what}", node)
        if node.attr in _WRITES and _is_globals(node.value, self._in_order()):
            self._add("dynamic-code", f"globals().{node.attr}", node)
            self.judged.add(id(node.value))
        if node.attr in _RUNS_CODE | _REFLECTION and isinstance(node.ctx, ast.Del):
            # `del mod.exec` (the module imported by itself, another, or an alias of either: so any
            # object's, which no fix needs): the module's calls of its own `def exec` call the builtin
            self._add("dynamic-code", f"{_dotted(node) or node.attr} deleted", node)
        if node.attr in _DELETES and self._namespace_of_import(node.value):
            held = (
                _dotted(node.value)
                or f"vars({_dotted(node.value.args[0]) if isinstance(node.value, ast.Call) else ''})"
            )
            self._add("dynamic-code", f"{held}.{node.attr}", node)
        self.generic_visit(node)

    def _imported(self, node: ast.expr) -> bool:
        """Whether `node` is a name an import binds (a module, or what a `from` import gives)."""
        return isinstance(node, ast.Name) and (node.id in self.modules or node.id in self.imported)

    def _namespace_of_import(self, node: ast.expr) -> bool:
        """`mod.__dict__` or `vars(mod)`, `mod` a name an import binds."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self._imported(node.value)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "vars"
            and len(node.args) == 1
            and self._imported(node.args[0])
        )

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if (
            isinstance(node.ctx, ast.Del)
            and isinstance(key, ast.Constant)
            and key.value in _RUNS_CODE | _REFLECTION
            and _a_namespace(node.value)
        ):
            self._add("dynamic-code", f"{key.value!r} deleted by name", node)  # (`del mod.__dict__["exec"]`)
        if not isinstance(node.ctx, ast.Load) and _is_globals(node.value, self._in_order()):
            self._add("dynamic-code", "globals()[...] written", node)
            self.judged.add(id(node.value))
        elif _is_namespace(node.value):
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                self._add("dynamic-code", "a namespace read by a computed name", node)  # (`[n[::-1]]`)
            self.judged.add(id(node.value))  # (`globals()["name"]`: a name the source spells)
        self.generic_visit(node)

    def _source(self, node: ast.AST) -> str:
        first, last = getattr(node, "lineno", 1), getattr(node, "end_lineno", None) or 1
        return " ".join(self.lines[first - 1 : last])


def _changes_itself(node: ast.stmt, first: int, last: int, changed: Sequence[tuple[int, int]]) -> bool:
    """Whether a changed line is one of the statement's own (all of a simple statement's; a compound
    one's header, decorators, `else:` or `except ...:` lines), not inside a block it holds."""
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(node, "handlers", None) or ()]
    blocks += [c.body for c in getattr(node, "cases", None) or ()]
    held = [(first_line(b[0]), b[-1].end_lineno or b[-1].lineno) for b in blocks if isinstance(b, list) and b]
    return not held or any(
        not any(a <= line <= b for a, b in held)
        for lo, hi in changed
        for line in range(max(lo, first), min(hi, last) + 1)
    )


def _stores(scope: ast.AST, keep: bool = True) -> frozenset[str]:
    """The names a function (its parameters too) or a module stores to itself, in its own body
    (kept for the next call on the same node, unless not `keep`: a module's whole tree)."""
    found = _STORES.get(id(scope))
    if found is not None and found[0] is scope:
        return found[1]
    names: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        names.update(a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg))
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.arguments)):
            continue  # (their own scope; a def's name: `_binds`)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.comprehension):  # (its target is the comprehension's own)
            pending.extend([node.iter, *node.ifs])
            continue
        pending.extend(ast.iter_child_nodes(node))
    if len(_STORES) > 256:
        _STORES.clear()
    stores = frozenset(names)
    if not keep:
        return stores
    _STORES[id(scope)] = (scope, stores)  # (another thread may clear it meanwhile: read ahead)
    return stores


_STORES: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _folded(node: ast.expr) -> str | None:
    """The string an expression of string constants makes (`"a" + "b"`, `"_".join(["a", "b"])`),
    or None."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        return left + right if left is not None and right is not None else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
        and (sep := _folded(node.func.value)) is not None
    ):
        parts = [_folded(e) for e in node.args[0].elts]
        return sep.join(p for p in parts if p is not None) if None not in parts else None
    return None


def _plain_names(call: ast.Call, every: bool) -> bool:
    """Whether the names a call takes (`every` argument, an attrgetter's; else the first, a
    methodcaller's) are written out, none private."""
    names = call.args if every else call.args[:1]
    return bool(names) and all(
        isinstance(a, ast.Constant)
        and isinstance(a.value, str)
        and not any(part.startswith("_") for part in a.value.split("."))
        for a in names
    )


def _dynamic(qualified: str) -> bool:
    """Whether a module or a name in one (`importlib.import_module`) is dynamic code."""
    if qualified in _DYNAMIC_NAMES:
        return True
    if any(qualified == m or qualified.startswith(m + ".") for m in _READS_DATA):
        return False
    return qualified.split(".")[0] in _DYNAMIC_MODULES


_NAMESPACES = ("globals", "locals", "vars")


def _is_globals(node: ast.expr, in_order: bool = False) -> bool:
    """`globals()`; where a module or class body runs (`in_order`), `locals()` or `vars()` too: there
    they are its namespace itself, and a write to them binds or unbinds its names."""
    return _is_namespace(node, _NAMESPACES if in_order else ("globals",))


def _is_namespace(node: ast.expr, names: Sequence[str] = _NAMESPACES) -> bool:
    """`globals()`, `locals()` or `vars()` (of `names`): a scope's names as a dict."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in names
        and not node.args
    )


def installed_files(paths: Sequence[str], prefixes: Sequence[str] = ()) -> list[Finding]:
    """Paths inside installed packages (`site-packages`, `dist-packages`, `*.dist-info`,
    `*.egg-info`), interpreter settings (`*.pth`, `*.egg-link`, `pyvenv.cfg`) or the project's
    interpreter (`prefixes`: globs of its prefix, when it lies inside the project)."""
    found = []
    for path in paths:
        parts = PurePosixPath(path).parts
        if {"site-packages", "dist-packages"} & set(parts[:-1]):
            found.append(Finding("installed-files", path, 0, "an installed package"))
        elif any(p.endswith((".dist-info", ".egg-info")) for p in parts):
            found.append(Finding("installed-files", path, 0, "an installed package's metadata"))
        elif path.endswith((".pth", ".egg-link")) or parts[-1] == "pyvenv.cfg":
            found.append(Finding("installed-files", path, 0, "the interpreter's settings"))
        elif is_protected(path, prefixes):
            found.append(Finding("installed-files", path, 0, "the project's interpreter"))
    return found


def ignored_files(
    changes: Sequence[FileChange], ignored: Callable[[Sequence[str]], Sequence[str]] | None
) -> list[Finding]:
    """Files of git's own, a `.gitignore` (which decides what git ignores), and new files git
    ignores (`ignored` says which; a GitError from it refuses them all: fail closed)."""
    found, created = [], []
    for change in changes:
        parts = PurePosixPath(change.path).parts
        if ".git" in parts:
            found.append(Finding("ignored-files", change.path, 0, "git's own files"))
        elif parts[-1] == ".gitignore":
            found.append(Finding("ignored-files", change.path, 0, "it decides what git ignores"))
        elif change.before is None and change.after is not None:
            created.append(change.path)
    if not created or ignored is None:
        return found
    try:
        names = set(ignored(created))
    except GitError as exc:
        return found + [
            Finding("ignored-files", p, 0, f"git could not say whether it ignores it: {exc}") for p in created
        ]
    return found + [Finding("ignored-files", p, 0, "git ignores it") for p in created if p in names]


def git_ignored(root: Path, paths: Sequence[str], excludes: str = "") -> list[str]:
    """Which of `paths` (relative to `root`, a work tree without `.git`) git ignores: the
    `.gitignore` files under `root`, the user's own excludes and `excludes` (the text of the user's
    repository's `.git/info/exclude`), asked of git itself through an empty repository of ours.
    Raises GitError when git cannot answer."""
    argv = [
        "git",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
        f"--git-dir={_empty_git_dir(excludes)}",
        f"--work-tree={root}",
        "check-ignore",
        "--no-index",
        "-z",
        "--stdin",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    data = b"\0".join(os.fsencode(p) for p in paths)
    try:
        proc = subprocess.run(
            argv, cwd=root, env=env, input=data, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git check-ignore could not run: {exc}") from None
    if proc.returncode not in (0, 1):  # 1: none of them is ignored
        said = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git check-ignore failed: {said[0] if said else proc.returncode}")
    return [os.fsdecode(p) for p in proc.stdout.split(b"\0") if p]


def info_exclude(repository: Path | None) -> str:
    """The text of a repository's `.git/info/exclude` (a worktree's: its common directory's), or ""."""
    git = (repository or Path("/nonexistent")) / ".git"
    try:
        if git.is_file():  # a worktree's or a submodule's: `gitdir: PATH`, then its common directory
            folder = (git.parent / git.read_text().partition("gitdir:")[2].strip()).resolve()
            common = folder / "commondir"
            git = (folder / common.read_text().strip()).resolve() if common.is_file() else folder
        return (git / "info" / "exclude").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@functools.cache
def _empty_git_dir(excludes: str = "") -> str:
    """A bare repository with nothing in it (but `excludes` as its `info/exclude`), for questions
    about a work tree that has no `.git`."""
    path = tempfile.mkdtemp(prefix="ralph-ignores-")
    atexit.register(shutil.rmtree, path, True)
    try:
        proc = subprocess.run(
            ["git", "init", "--bare", "-q", path], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git init could not run: {exc}") from None
    if proc.returncode != 0:
        raise GitError(f"git init failed: {proc.stderr.decode(errors='replace').strip()}")
    Path(path, "info").mkdir(exist_ok=True)
    Path(path, "info", "exclude").write_text(excludes, encoding="utf-8")
    return path


def refusal(
    changes: Sequence[FileChange],
    protected: Sequence[str],
    only: Sequence[str] | None,
    plugin_files: Sequence[str] = (),
    *,
    tests: Sequence[str] = PROTECTED_TESTS,
    allow: Collection[str] = (),
    installed: Sequence[str] = (),
    ignored: Callable[[Sequence[str]], Sequence[str]] | None = None,
    doctests: Collection[str] = (),
) -> str | None:
    """Why an edit may not be verified at all, before anything runs, or None: it edits tests
    (`protected`), verification settings or type-checker plugins, files outside `only`, shadows a
    harness module, or breaks a rule of `_RULES` that the project does not `allow`. `tests`: what
    the project's tests are (the test framework and dynamic code are looked for outside them);
    `installed`: globs of the interpreter's prefix; `ignored`: which new paths git ignores;
    `doctests`: the modules whose doctests the baseline ran."""
    paths = [c.path for c in changes]
    if edited := [p for p in paths if is_protected(p, protected)]:
        return f"edits to tests (and the files they read) are not allowed: {', '.join(edited)}"
    if protected and (edited := doctest_edits(changes, doctests)):
        return f"edits to tests are not allowed: the doctest examples in {', '.join(edited)}"
    if configs := config_edits(changes, plugin_files):
        return f"edits to how the project is checked are not allowed: {', '.join(configs)}"
    if only is not None and any(p not in only for p in paths):
        return f"only {', '.join(only)} may be edited"
    if shadows := shadowing(changes):
        return (
            "new modules named like the standard library or the test harness are not allowed: "
            + ", ".join(shadows)
        )
    found = installed_files(paths, installed)
    if "ignored-files" not in allow:
        found += ignored_files(changes, ignored)
    for change in changes:
        found += code_findings(change, is_protected(change.path, tests))
    for rule, (what, instead) in _RULES.items():
        # ralph's own names are the harness's, and no project may allow them
        hits = [f for f in found if f.rule == rule or (rule == "harness" and f.rule == "ralph")]
        hits = [f for f in hits if f.rule not in allow]
        if hits:
            said = [str(f) for f in sorted(hits, key=lambda f: (f.path, f.line))]
            more = f" (+{len(said) - 3} more)" if len(said) > 3 else ""
            ours = any(f.rule == "ralph" for f in hits)
            hint = "" if ours else f' (a project can allow it with [tool.ralph] allow = ["{rule}"])'
            return f"the edit {what}, which no fix needs: {'; '.join(said[:3])}{more}; {instead}{hint}"
    return None
