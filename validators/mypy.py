"""Stage 4: types through a warm `dmypy` daemon; only diagnostics new since the baseline count.

The daemon re-checks the whole configured project incrementally (changed modules and their
dependents), so a change that breaks a caller in another file is caught, at a fraction of a cold run.
"""

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
_FLAGS = [
    "--no-error-summary",
    "--show-error-codes",
    "--no-color-output",
    "--no-pretty",
    "--hide-error-context",
]


def _mypy_section(project: Path) -> dict[str, object] | None:
    """The project's mypy settings, or None when it does not configure mypy."""
    try:
        for name in ("mypy.ini", ".mypy.ini", "setup.cfg"):
            file = project / name
            if file.exists():
                parser = configparser.ConfigParser()
                parser.read(file)
                if parser.has_section("mypy"):
                    return dict(parser.items("mypy"))
        if (project / "pyproject.toml").exists():
            data = tomllib.loads((project / "pyproject.toml").read_text())
            section = data.get("tool", {}).get("mypy")
            return dict(section) if isinstance(section, dict) else None
    except (OSError, ValueError, configparser.Error):
        return None
    return None


def mypy_configured(project: Path) -> bool:
    """Whether the project asks for type checking (a mypy section in one of its config files)."""
    return _mypy_section(project) is not None


class MypyValidator:
    name = "mypy"

    def __init__(self, toolchain: Toolchain, cache_dir: Path) -> None:
        self.toolchain = toolchain
        self.cache_dir = cache_dir
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.status_file = cache_dir / "dmypy.json"
        section = _mypy_section(toolchain.project) or {}
        self.targets = [] if section.get("files") else ["."]

    def _dmypy(self, *args: str, timeout_s: float = 300.0) -> tuple[int, str, bool]:
        argv = [self.toolchain.python, "-m", "mypy.dmypy", "--status-file", str(self.status_file), *args]
        result = self.toolchain.run_tool(argv, env=self.toolchain.python_env(), timeout_s=timeout_s)
        return result.returncode, result.output, result.timed_out

    def check(self, scope: Scope) -> StageResult:
        """Type-check the project (incrementally after the first call); `scope.paths` only filters
        what is worth doing: a change without Python files is skipped."""
        start = time.perf_counter()
        if scope.paths is not None and not any(p.endswith((".py", ".pyi")) for p in scope.paths):
            return StageResult(self.name, ok=True, duration_ms=0.0, skipped=True, detail="no Python files")
        code, output, timed_out = self._dmypy(
            "run",
            "--",
            *_FLAGS,
            f"--cache-dir={self.cache_dir / 'cache'}",
            *self.targets,
            timeout_s=scope.timeout_s,
        )
        elapsed = (time.perf_counter() - start) * 1000
        if code not in (0, 1) or timed_out:
            return StageResult(
                self.name, ok=False, duration_ms=elapsed, detail=f"mypy failed: {output[-500:]}"
            )
        diagnostics = []
        for line in output.splitlines():
            if m := _LINE.match(line):
                path = Path(m["path"]).as_posix()
                diagnostics.append(Diagnostic("mypy", path, int(m["line"]), m["code"] or "error", m["msg"]))
        return StageResult(
            stage=self.name,
            ok=not diagnostics,
            duration_ms=elapsed,
            detail=f"{len(diagnostics)} diagnostics",
            diagnostics=diagnostics,
            checked=sorted({("mypy", d.path) for d in diagnostics}),
            complete_tool="mypy",
        )

    def close(self) -> None:
        """Stop the daemon."""
        if self.status_file.exists():
            self._dmypy("kill", timeout_s=30)
