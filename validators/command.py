"""Custom check commands (`--check CMD`): exit status 0 means pass."""

from __future__ import annotations

import time

from ralph.domain.results import CheckResult, Scope, StageResult
from validators.toolchain import Toolchain


class CommandValidator:
    name = "checks"

    def __init__(self, toolchain: Toolchain, commands: list[str]) -> None:
        self.toolchain = toolchain
        self.commands = commands

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
