"""Small real repositories built in tmp_path: real git, real pytest, real ruff."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "user",
    "GIT_AUTHOR_EMAIL": "user@example.com",
    "GIT_COMMITTER_NAME": "user",
    "GIT_COMMITTER_EMAIL": "user@example.com",
}

BUGGY_WINDOWS = {
    "windows.py": (
        "def sliding_sums(xs, k):\n"
        "    return [sum(xs[i : i + k]) for i in range(len(xs) - k)]\n"
        "\n"
        "\n"
        "def double(x):\n"
        "    return x * 2\n"
    ),
    "tests/test_windows.py": (
        "from windows import double, sliding_sums\n"
        "\n"
        "\n"
        "def test_every_window():\n"
        "    assert sliding_sums([1, 2, 3], 2) == [3, 5]\n"
        "\n"
        "\n"
        "def test_double():\n"
        "    assert double(4) == 8\n"
    ),
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True, capture_output=True, text=True
    ).stdout


def write_files(root: Path, files: dict[str, str]) -> None:
    for path, content in files.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content)


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., Path]:
    """A git repository with `files` committed on main."""

    def make(files: dict[str, str], name: str = "repo", commit: bool = True) -> Path:
        repo = tmp_path / name
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        write_files(repo, files)
        if commit:
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "initial")
        return repo

    return make


def run_ralph(
    *args: str, cwd: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process (`env`: variables set for it, over ours)."""
    return subprocess.run(
        [sys.executable, "-m", "ralph", *args],
        cwd=cwd,
        env={**os.environ, **env} if env else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def model_recipes() -> dict[str, tuple[str, str]]:
    """docs/models.md's "Serving a model locally": each recipe's title, shell block and TOML block."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    section = page.split("## Serving a model locally\n", 1)[1].split("\n## ", 1)[0]
    recipes = {}
    for part in section.split("\n### ")[1:]:
        blocks = dict(re.findall(r"```(bash|toml)\n(.*?)```", part, re.S))
        recipes[part.split("\n", 1)[0]] = (blocks["bash"], blocks["toml"])
    return recipes


def pytest_configure(config: pytest.Config) -> None:
    """Where bubblewrap cannot run, the end-to-end tests run unisolated (as `--no-sandbox` would) and
    the isolation tests skip with the reason; CI installs bubblewrap so everything runs there."""
    from ralph.sandboxes.bwrap import available

    if not hasattr(config, "workerinput"):  # once, before any xdist worker starts
        compile_sources()

    if available() is not None:
        os.environ["RALPH_NO_SANDBOX"] = "1"


def compile_sources() -> None:
    """ralph's own modules (and the tests' helpers) compiled to bytecode, where the environment says
    not to write it (PYTHONDONTWRITEBYTECODE): an editable install gets none from pip, and every
    `ralph` the tests start (hundreds) would compile them again, about 0.15 s a start here. A file
    that cannot be written (a read-only checkout) is left to compile in memory as before."""
    if not sys.dont_write_bytecode:
        return  # Python writes them itself on first import
    import compileall

    root = Path(__file__).resolve().parent.parent
    # validators, router and sandboxes by their own folders: compileall skips the links to them in ralph/
    for folder in ("ralph", "validators", "router", "sandboxes", "tests"):
        compileall.compile_dir(root / folder, quiet=2)


@pytest.fixture(scope="session")
def smol_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real model (SmolLM2-135M) behind `transformers serve`, for the whole session: its api_base.
    Skipped, with the install command, where the model or the serving extra is missing."""
    from tests import realmodel

    why = realmodel.missing()
    if why is not None:
        pytest.skip(why)
    folder = realmodel.converted()
    log = tmp_path_factory.mktemp("smol") / "serve.log"
    with realmodel.serve(folder, log=log) as base:
        yield base
