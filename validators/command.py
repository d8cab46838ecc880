"""Custom check commands (`--check CMD`): exit status 0 means pass."""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ralph.domain.results import CheckResult, Scope, StageResult
from ralph.validators.toolchain import Toolchain


@functools.lru_cache(maxsize=256)
def glob_pattern(glob: str) -> re.Pattern[str]:
    """A path glob from the project root as a pattern: `*` matches anything (`/` too), `**/` also
    no folder at all, `?` one character but `/`, `[...]` a set; `./` in front is dropped and a trailing
    `/` means everything under that folder."""
    glob = glob.strip().removeprefix("./")
    if glob.endswith("/"):
        glob += "**"
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob[i] == "*":
            out.append(".*")
            i += 2 if glob.startswith("**", i) else 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out))


def _files(project: Path, limit: int = 50_000) -> list[str]:
    """The project's files (up to `limit`), the usual tool and environment folders left out."""
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ralph", ".mypy_cache", ".ruff_cache"}
    found: list[str] = []
    for root, dirs, names in os.walk(project):
        dirs[:] = [d for d in dirs if d not in skip]
        rel = Path(root).relative_to(project).as_posix()
        found += [n if rel == "." else f"{rel}/{n}" for n in names]
        if len(found) > limit:
            break
    return found


class CommandValidator:
    name = "checks"

    def __init__(
        self, toolchain: Toolchain, commands: list[str], paths: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.toolchain = toolchain
        self.commands = commands
        self.paths = dict(paths or {})  # command -> the globs of the files it looks at (the rest: all)

    def sees(self, command: str, changed: Sequence[str]) -> bool:
        """Whether `command` can judge an edit of `changed`: it declares no paths, or one matches."""
        globs = self.paths.get(command)
        return globs is None or any(glob_pattern(g).fullmatch(p) for p in changed for g in globs)

    def unmatched(self, project: Path) -> list[str]:
        """One line per declared glob that matches no file of the project (its check may never run)."""
        files = _files(project) if self.paths else []  # (no walk when no check declares paths)
        return [
            f"check `{command}`: paths {glob!r} match no file in the project (it runs only at the baseline)"
            for command, globs in self.paths.items()
            for glob in globs
            if not any(glob_pattern(glob).fullmatch(f) for f in files)
        ]

    def for_edit(self, changed: Sequence[str], commands: Sequence[str] | None = None) -> list[str]:
        """The checks (of `commands`, else all) an edit of `changed` needs run."""
        return [c for c in (self.commands if commands is None else commands) if self.sees(c, changed)]

    def check(self, scope: Scope, commands: list[str] | None = None) -> StageResult:
        start = time.perf_counter()
        results = []
        for command in self.commands if commands is None else commands:
            run = self.toolchain.run(
                ["sh", "-c", command], env=self.toolchain.python_env(), timeout_s=scope.timeout_s
            )
            results.append(CheckResult(command, run.ok, run.output[-4000:]))
        failed = [r.command for r in results if not r.passed]
        return StageResult(
            stage=self.name,
            ok=not failed,
            duration_ms=(time.perf_counter() - start) * 1000,
            detail=("failed: " + ", ".join(failed)) if failed else f"{len(results)} passed",
            checks=results,
        )
