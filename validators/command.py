"""Custom check commands (`--check CMD`): exit status 0 means pass."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping, Sequence

from ralph.domain.results import CheckResult, Scope, StageResult
from validators.toolchain import Toolchain


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
        return globs is None or any(fnmatch.fnmatchcase(p, g) for p in changed for g in globs)

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
