"""The gate on more cores: whether its whole-suite run may go across pytest-xdist workers (`-n N`).

Only where the project's interpreter has pytest-xdist 3.6 or later (its workers run tests in their
main thread, where our per-test limit's alarm arrives) and the project's own pytest settings say
nothing about xdist: a project that sets `-n` or turns xdist off (`-p no:xdist`) has decided, and
ours would clash with it (`-n` with xdist off is a usage error, a gate that never passes).
"""

from __future__ import annotations

import configparser
import shlex
import tomllib
from collections.abc import Sequence
from pathlib import Path

from ralph.domain.errors import RalphError
from ralph.validators.toolchain import Toolchain

# xdist's options that decide how (or whether) tests are spread: a project's settings holding one
# decide for it. (`-n` takes its value joined too: `-n4`, `-nauto`.)
_XDIST_OPTIONS = (
    "--numprocesses",
    "--dist",
    "--tx",
    "--maxprocesses",
    "--max-worker-restart",
    "--looponfail",
)
_PROBE = "import sys, xdist; sys.exit(tuple(int(p) for p in xdist.__version__.split('.')[:2]) < (3, 6))"


def xdist_option(addopts: Sequence[str]) -> str | None:
    """The first of `addopts` (pytest's settings' `addopts`, split) that decides about xdist: one of
    its options, `-n...`, `-d`, `-f`, or a plugin named with xdist in it (`-p no:xdist`)."""
    for i, word in enumerate(addopts):
        if word == "-p" and i + 1 < len(addopts):
            word = f"-p {addopts[i + 1]}"
        short = word.startswith("-n") and not word.startswith("--")
        if "xdist" in word or short or word in ("-d", "-f") or word.startswith(_XDIST_OPTIONS):
            return word
    return None


def project_addopts(project: Path) -> dict[str, list[str]]:
    """The `addopts` of every pytest settings file at the project's root, split, by file name (each
    file pytest could read, not only the one it does: this only decides against using xdist)."""
    found: dict[str, list[str]] = {}
    for name in ("pytest.toml", ".pytest.toml", "pyproject.toml"):
        try:
            data = tomllib.loads((project / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        tables = [data.get("pytest")] if name != "pyproject.toml" else []
        pytest_table = data.get("tool", {}).get("pytest") if isinstance(data.get("tool"), dict) else None
        if isinstance(pytest_table, dict):
            tables += [pytest_table, pytest_table.get("ini_options")]
        words = [w for t in tables if isinstance(t, dict) for w in _split(t.get("addopts"))]
        if words:
            found[name] = words
    for name, sections in (
        ("pytest.ini", ("pytest",)),
        (".pytest.ini", ("pytest",)),
        ("tox.ini", ("pytest",)),
    ):
        _ini_addopts(project / name, sections, found)
    _ini_addopts(project / "setup.cfg", ("tool:pytest", "pytest"), found)
    return found


def _ini_addopts(file: Path, sections: Sequence[str], found: dict[str, list[str]]) -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return
    words = [
        w for s in sections if parser.has_section(s) for w in _split(parser.get(s, "addopts", fallback=""))
    ]
    if words:
        found[file.name] = words


def _split(value: object) -> list[str]:
    """`addopts` as words: a string as a shell splits it, a list's items each so."""
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    words = []
    for text in texts:
        try:
            words += shlex.split(str(text))
        except ValueError:
            words += str(text).split()
    return words


def project_decides_xdist(project: Path) -> str | None:
    """Where the project's own pytest settings decide about xdist ("pyproject.toml's addopts: -n
    auto"), or None."""
    for name, words in project_addopts(project).items():
        if (option := xdist_option(words)) is not None:
            return f"the project's pytest settings decide about xdist ({name}'s addopts: {option})"
    return None


def gate_workers(toolchain: Toolchain, wanted: int, *, asked: bool) -> int:
    """`wanted` pytest-xdist workers for the gate's whole-suite run, or 0 where it cannot have them
    (`project_decides_xdist`, or no pytest-xdist 3.6+ in the project's interpreter). Where the user
    asked for them (`gate_workers = N`, not auto), that is bad input, said in one line."""
    if wanted <= 0:
        return 0
    why = project_decides_xdist(toolchain.project)
    if why is None and not toolchain.run([toolchain.python, "-c", _PROBE], env=toolchain.python_env()).ok:
        why = f"pytest-xdist 3.6 or later is not importable by {toolchain.python}"
    if why is None:
        return wanted
    if asked:
        raise RalphError(f"gate_workers = {wanted}, but {why}: set gate_workers = 0, or change that")
    return 0
