"""Stage 1: compile the changed Python files in process."""

from __future__ import annotations

import time

from ralph.protocols import Scope
from validators.report import StageResult
from validators.toolchain import Toolchain


class SyntaxValidator:
    name = "syntax"

    def __init__(self, toolchain: Toolchain) -> None:
        self.project = toolchain.project

    def check(self, scope: Scope) -> StageResult:
        start = time.perf_counter()
        paths = [p for p in scope.paths or () if p.endswith(".py")]
        errors: dict[str, str] = {}
        for path in paths:
            file = self.project / path
            if not file.exists():
                continue
            try:
                compile(file.read_bytes(), path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                line = getattr(exc, "lineno", None)
                errors[path] = f"{path}:{line}: {exc.__class__.__name__}: {getattr(exc, 'msg', exc)}"
        return StageResult(
            stage=self.name,
            ok=not errors,
            duration_ms=(time.perf_counter() - start) * 1000,
            detail="; ".join(errors.values()),
            checked=[("syntax", p) for p in paths],
            syntax_errors=errors,
        )
