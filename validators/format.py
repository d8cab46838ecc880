"""Format the edit as the project formats. When the project formats with ruff (`formats_with_ruff`),
each changed Python file's new text goes through `ruff format` (through stdin, with the project's own
settings: nothing is written, nothing of the candidate runs). Where that changes only lines the
candidate changed, the stage reports the file as a fixable `format` diagnostic, and the static step's
repair takes the formatted text as the candidate (verified, then committed, formatted). Where it would
change lines the candidate did not touch (the file was not formatted to begin with), the file is left
as it is: formatting the user's own lines is not the fix's business.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from ralph.domain.candidate import FileChange, shared_ends
from ralph.domain.results import Diagnostic, StageResult
from sandboxes.local import Started
from validators.toolchain import Toolchain

_MAX_TEXT = 512 << 10  # its formatted text comes back whole (the output cap is 1 MiB)
MESSAGE = "not formatted as the project formats it (ruff format)"


def formats_with_ruff(project: Path, checks: Sequence[str] = ()) -> str | None:
    """Where the project says it formats with ruff, or None: a `[tool.ruff.format]` section (or
    `[format]` in ruff.toml), the `ruff-format` pre-commit hook, or `ruff format` among its checks."""
    for name, table in (("pyproject.toml", ("tool", "ruff", "format")), ("ruff.toml", ("format",))):
        for file in (project / name, project / f".{name}"):
            if file.is_file() and _has(file, table):
                return f"{file.name}: [{'.'.join(table)}]"
    hooks = project / ".pre-commit-config.yaml"
    try:
        if hooks.is_file() and "ruff-format" in hooks.read_text(encoding="utf-8"):
            return ".pre-commit-config.yaml: ruff-format"
    except (OSError, UnicodeDecodeError):
        pass
    for check in checks:
        if "ruff format" in check:
            return f"check: {check}"
    return None


def _has(file: Path, table: tuple[str, ...]) -> bool:
    try:
        data: object = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    for key in table:
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


class FormatValidator:
    """`ruff format` on the changed files' new texts; `formatted` keeps what it made of each."""

    name = "format"

    def __init__(self, toolchain: Toolchain, binary: str, how: str | None) -> None:
        self.toolchain = toolchain
        self.binary = binary
        self.how = how  # why the project counts as formatted with ruff; None: it does not
        self.formatted: dict[tuple[str, str], str] = {}  # (path, text) -> its formatted text

    @property
    def enabled(self) -> bool:
        return self.how is not None

    def start(self, changes: Sequence[FileChange], timeout_s: float = 30.0) -> Callable[[], StageResult]:
        start = time.perf_counter()
        self.formatted = {}
        files = [
            c for c in changes if c.path.endswith(".py") and c.after is not None and len(c.after) <= _MAX_TEXT
        ]
        running = [(c, self._start(c.path, c.after or "")) for c in files]

        def collect() -> StageResult:
            found, kept = [], []
            for change, process in running:
                result = process.wait(timeout_s)
                if not result.ok:  # (a file that does not parse: the syntax stage says so)
                    why = (
                        "timed out"
                        if result.timed_out
                        else f"exit {result.returncode}: {result.output[-300:]}"
                    )
                    error = f"ruff format failed on {change.path}: {why}"
                    return StageResult(self.name, ok=False, duration_ms=_ms(start), detail=error, error=error)
                text = result.output.replace("\r\n", "\n")
                line = within_edit(change.before, change.after or "", text)
                if line == 0:
                    continue
                if line < 0:
                    kept.append(change.path)
                    continue
                self.formatted[(change.path, change.after or "")] = text
                found.append(Diagnostic(self.name, change.path, line, "format", MESSAGE, fixable=True))
            detail = "; ".join(f"{d.path}:{d.line}: {d.message}" for d in found)
            if kept:
                detail += (
                    ("; " if detail else "") + "not formatted before the edit, left as is: " + ", ".join(kept)
                )
            return StageResult(
                self.name,
                ok=not found,
                duration_ms=_ms(start),
                detail=detail or "formatted",
                diagnostics=found,
                checked=[(self.name, c.path) for c in files],
            )

        return collect

    def _start(self, path: str, text: str) -> Started:
        argv = [self.binary, "format", "--quiet", "--no-cache", f"--stdin-filename={path}", "-"]
        return self.toolchain.tools.start(
            argv, cwd=str(self.toolchain.project), env={"RAYON_NUM_THREADS": "1"}, stdin=text
        )


def within_edit(before: str | None, after: str, formatted: str) -> int:
    """0 when `after` is formatted; else the first line formatting changes (1-based) when it changes
    only lines the edit changed (all of a new file), or -1 when it would change lines of `before`
    that the edit left alone."""
    if formatted == after:
        return 0
    new, out = after.splitlines(), formatted.splitlines()
    f_head, f_tail = shared_ends(new, out)  # what formatting changes: new[f_head : len(new) - f_tail]
    if before is None:
        return f_head + 1
    head, tail = shared_ends(before.splitlines(), new)  # the edit: new[head : len(new) - tail]
    if f_head == len(new) == len(out):  # the lines are the same: the end of the file differs
        return max(1, len(new)) if before.endswith("\n") and not after.endswith("\n") else -1
    return f_head + 1 if f_head >= head and f_tail >= tail else -1


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
