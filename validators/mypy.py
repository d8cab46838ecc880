"""Stage 4: types through a warm `dmypy` daemon; only diagnostics new since the baseline count.

The daemon re-checks the whole configured project incrementally (changed modules and their
dependents), so a change that breaks a caller in another file is caught, at a fraction of a cold run.
"""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import time
import tomllib
from pathlib import Path

from ralph.protocols import Scope
from sandboxes.local import child_env, kill_group, read_line
from validators.report import Diagnostic, StageResult
from validators.toolchain import PLUGIN_DIR, Toolchain

CLIENT = PLUGIN_DIR / "ralph_dmypy.py"

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
        self._client: subprocess.Popen[str] | None = None
        self._resident_ok = True

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
        flags = [*_FLAGS, f"--cache-dir={self.cache_dir / 'cache'}", *self.targets]
        resident = self._resident(flags, scope.timeout_s)
        if resident is not None:
            code, output, timed_out = resident
        else:  # starts (or restarts) the daemon
            code, output, timed_out = self._dmypy("run", "--", *flags, timeout_s=scope.timeout_s)
        if code not in (0, 1) and not timed_out:  # a daemon dying or gone bad: once more, afresh
            self._stop_client()
            self._dmypy("stop", timeout_s=30)
            self.status_file.unlink(missing_ok=True)
            code, output, timed_out = self._dmypy("run", "--", *flags, timeout_s=scope.timeout_s)
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

    def _resident(self, flags: list[str], timeout_s: float) -> tuple[int, str, bool] | None:
        """The check through our resident client (None: run the `dmypy` command instead)."""
        if not self.status_file.exists() or not self._resident_ok:
            return None  # no daemon yet (the command starts it), or a client that cannot start
        if self._client is None or self._client.poll() is not None:
            argv = [self.toolchain.python, str(CLIENT), str(self.status_file)]
            self._client = subprocess.Popen(
                argv,
                cwd=self.toolchain.project,
                env=child_env(self.toolchain.python_env()),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            if not read_line(self._client, 60):  # this mypy's client cannot run ours: never again
                self._stop_client()
                self._resident_ok = False
                return None
        client = self._client
        assert client.stdin is not None
        try:
            client.stdin.write(json.dumps({"args": flags}) + "\n")
            client.stdin.flush()
        except OSError:
            self._stop_client()
            return None
        line = read_line(client, timeout_s)
        if line is None:
            hung = client.poll() is None
            self._stop_client()  # the next check starts afresh
            return (-9, "", True) if hung else None  # a client that died: the command instead
        try:
            reply = json.loads(line)
        except ValueError:  # not ours: this client's replies can no longer be trusted
            self._stop_client()
            return None
        if "fallback" in reply:  # the daemon needs the command (not running, a restart)
            return None
        return int(reply["status"]), f"{reply['out']}{reply['err']}", False

    def _stop_client(self) -> None:
        if self._client is not None:
            kill_group(self._client)
            self._client = None

    def close(self) -> None:
        """Stop the client and the daemon."""
        self._stop_client()
        if self.status_file.exists():
            self._dmypy("kill", timeout_s=30)
