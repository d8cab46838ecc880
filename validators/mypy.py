"""Stage 4: mypy on the changed files (the configured files for the baseline), new diagnostics only."""

from __future__ import annotations

import configparser
import re
import time
import tomllib
from pathlib import Path

from ralph.protocols import Scope
from validators.report import Diagnostic, StageResult
from validators.toolchain import Toolchain

_LINE = re.compile(
    r"^(?P<path>[^:\n]+):(?P<line>\d+)(?::\d+)?: error: (?P<msg>.*?)(?:  \[(?P<code>[\w-]+)\])?$"
)


def mypy_configured(project: Path) -> bool:
    """Whether the project asks for type checking (a mypy section in one of its config files)."""
    if (project / "mypy.ini").exists() or (project / ".mypy.ini").exists():
        return True
    try:
        if (project / "pyproject.toml").exists():
            data = tomllib.loads((project / "pyproject.toml").read_text())
            if "mypy" in data.get("tool", {}):
                return True
        if (project / "setup.cfg").exists():
            parser = configparser.ConfigParser()
            parser.read(project / "setup.cfg")
            return parser.has_section("mypy")
    except (OSError, ValueError, configparser.Error):
        return False
    return False


class MypyValidator:
    name = "mypy"

    def __init__(self, toolchain: Toolchain, cache_dir: Path) -> None:
        self.toolchain = toolchain
        self.cache_dir = cache_dir

    def check(self, scope: Scope) -> StageResult:
        start = time.perf_counter()
        paths = [p for p in scope.paths if p.endswith((".py", ".pyi"))] if scope.paths is not None else None
        if paths == []:
            return StageResult(self.name, ok=True, duration_ms=0.0, skipped=True, detail="no Python files")
        argv = [
            self.toolchain.python,
            "-m",
            "mypy",
            "--no-error-summary",
            "--show-error-codes",
            "--no-color-output",
            "--no-pretty",
            f"--cache-dir={self.cache_dir}",
        ]
        if paths is not None:
            argv += ["--follow-imports=silent", *paths]
        result = self.toolchain.run(argv, env=self.toolchain.python_env(), timeout_s=scope.timeout_s)
        elapsed = (time.perf_counter() - start) * 1000
        if result.returncode not in (0, 1) or result.timed_out:
            return StageResult(
                self.name, ok=False, duration_ms=elapsed, detail=f"mypy failed: {result.output[-500:]}"
            )
        diagnostics = []
        for line in result.output.splitlines():
            if m := _LINE.match(line):
                path = Path(m["path"]).as_posix()
                diagnostics.append(Diagnostic("mypy", path, int(m["line"]), m["code"] or "error", m["msg"]))
        checked = paths if paths is not None else sorted({d.path for d in diagnostics})
        return StageResult(
            stage=self.name,
            ok=not diagnostics,
            duration_ms=elapsed,
            detail=f"{len(diagnostics)} diagnostics",
            diagnostics=diagnostics,
            checked=[("mypy", p) for p in checked],
        )
