"""Stage 4: types through a resident mypy in the sandbox; only diagnostics new since the baseline count.

mypy's fine-grained incremental checker (what `dmypy` runs) lives in one long-lived process inside
the sandbox (`_plugin/ralph_types.py`), with the workspace read-only and nothing writable: it re-checks
the whole configured project incrementally (changed modules and their dependents), so a change that
breaks a caller in another file is caught, at a fraction of a cold run. A check that crashes, times
out or cannot read its configuration gives no verdict (the candidate fails).
"""

from __future__ import annotations

import configparser
import json
import posixpath
import re
import subprocess
import time
import tomllib
from pathlib import Path

from ralph.domain.results import Diagnostic, Scope, StageResult
from ralph.sandboxes.local import child_env, kill_group, read_line
from ralph.validators.toolchain import PLUGIN_DIR, Toolchain

CHECKER = PLUGIN_DIR / "ralph_types.py"

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


def plugin_files(project: Path) -> list[str]:
    """Plugins the mypy configuration names by file: they run inside the type checker, so a candidate
    may not edit them (plugins named as modules load from the environment, never the project)."""
    plugins = (_mypy_section(project) or {}).get("plugins") or []
    names = plugins.split(",") if isinstance(plugins, str) else plugins if isinstance(plugins, list) else []
    return [posixpath.normpath(str(n).strip()) for n in names if str(n).strip().endswith(".py")]


def mypy_configured(project: Path) -> bool:
    """Whether the project asks for type checking (a mypy section in one of its config files)."""
    return _mypy_section(project) is not None


class MypyValidator:
    name = "mypy"

    def __init__(self, toolchain: Toolchain) -> None:
        self.toolchain = toolchain
        section = _mypy_section(toolchain.project) or {}
        self.targets = [] if section.get("files") else ["."]
        self._proc: subprocess.Popen[str] | None = None

    def check(self, scope: Scope) -> StageResult:
        """Type-check the project (incrementally after the first call); `scope.paths` only filters
        what is worth doing: a change without Python files is skipped."""
        start = time.perf_counter()
        if scope.paths is not None and not any(p.endswith((".py", ".pyi")) for p in scope.paths):
            return StageResult(self.name, ok=True, duration_ms=0.0, skipped=True, detail="no Python files")
        reply, error = self._request([*_FLAGS, *self.targets], scope.timeout_s)
        elapsed = (time.perf_counter() - start) * 1000
        if error is None and reply.get("status") not in (0, 1):
            error = f"mypy exited {reply.get('status')}: {(str(reply.get('err')) + str(reply.get('out'))).strip()[-300:]}"
        if error is not None:
            return StageResult(
                self.name, ok=False, duration_ms=elapsed, detail=f"mypy failed: {error}", error=error
            )
        diagnostics = []
        for line in f"{reply.get('out', '')}".splitlines():
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

    def _start(self) -> subprocess.Popen[str] | None:
        # Inside the sandbox (the workspace read-only): it reads the candidate's files, executes none.
        env = child_env(self.toolchain.python_env({"PYTHONPATH": ""}))
        argv = [self.toolchain.python, "-I", str(self.toolchain.plugin_dir / CHECKER.name)]
        return self.toolchain.start_resident(argv, env, self.toolchain.checker)

    def _request(self, args: list[str], timeout_s: float) -> tuple[dict[str, object], str | None]:
        """One check by the resident checker (started or restarted as needed): its reply, or why
        there is none."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
            if self._proc is None:
                return {}, f"the type checker did not start ({self.toolchain.python} -m mypy importable?)"
        proc = self._proc
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"args": args}) + "\n")
            proc.stdin.flush()
        except OSError:
            self.close()
            return {}, "the type checker died"
        line = read_line(proc, timeout_s)
        if line is None:
            hung = proc.poll() is None
            self.close()  # the next check starts afresh
            return {}, f"timed out after {timeout_s:.0f}s" if hung else "the type checker died"
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.close()
            return {}, "the type checker's reply is unreadable"
        if "error" in reply:
            return {}, str(reply["error"])[:500]
        return reply, None

    def close(self) -> None:
        """Stop the resident checker."""
        if self._proc is not None:
            kill_group(self._proc)
            self._proc = None
