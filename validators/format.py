"""Format the edit as the project formats. When the project formats with ruff (`formats_with_ruff`),
each changed Python file's new text goes through `ruff format` (through stdin, with the project's own
settings: nothing is written, nothing of the candidate runs). Where that changes only lines the
candidate changed, the stage reports the file as a fixable `format` diagnostic, and the static step's
repair takes the formatted text as the candidate (verified, then committed, formatted). Where it would
change lines the candidate did not touch (the file was not formatted to begin with), the file is left
as it is: formatting the user's own lines is not the fix's business.
"""

from __future__ import annotations

import difflib
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from ralph.domain.candidate import FileChange, shared_ends
from ralph.domain.pyast import parse
from ralph.domain.results import Diagnostic, StageResult, elapsed_ms
from ralph.sandboxes.local import Started
from ralph.validators.ruff import config_args, ruff_config
from ralph.validators.toolchain import Toolchain

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
        self.config = ruff_config(toolchain.project, toolchain.root)  # as found at the start

    @property
    def enabled(self) -> bool:
        return self.how is not None

    def start(self, changes: Sequence[FileChange], timeout_s: float = 30.0) -> Callable[[], StageResult]:
        start = time.perf_counter()
        self.formatted = {}
        files = [c for c in changes if c.path.endswith(".py") and c.after is not None and _small(c.after)]
        running = [(c, self._start(c.path, c.after or "")) for c in files]

        def collect() -> StageResult:
            found, kept = [], []
            for change, process in running:
                result = process.wait(timeout_s)
                if not result.ok and not _parses(change.after or ""):
                    continue  # the syntax stage rejects it, saying why
                if not result.ok:
                    why = (
                        "timed out"
                        if result.timed_out
                        else f"exit {result.returncode}: {result.output[-300:]}"
                    )
                    error = f"ruff format failed on {change.path}: {why}"
                    return StageResult(
                        self.name, ok=False, duration_ms=elapsed_ms(start), detail=error, error=error
                    )
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
                duration_ms=elapsed_ms(start),
                detail=detail or "formatted",
                diagnostics=found,
                checked=[(self.name, c.path) for c in files],
            )

        return collect

    def probe(self, timeout_s: float = 30.0) -> str | None:
        """Why `ruff format` cannot run with the project's settings (a broken config), or None."""
        if not self.enabled:
            return None
        result = self._start("ralph_probe.py", "x = 1\n").wait(timeout_s)
        if result.ok:
            return None
        return (
            "timed out"
            if result.timed_out
            else f"ruff format: exit {result.returncode}: {result.output[-300:]}"
        )

    def _start(self, path: str, text: str) -> Started:
        # --force-exclude: a file the project's settings exclude comes back as it went in.
        argv = [
            self.binary,
            "format",
            "--quiet",
            "--no-cache",
            "--force-exclude",
            *config_args(self.config),
            f"--stdin-filename={path}",
            "-",
        ]
        return self.toolchain.tools.start(
            argv, cwd=str(self.toolchain.project), env={"RAYON_NUM_THREADS": "1"}, stdin=text
        )


def within_edit(before: str | None, after: str, formatted: str) -> int:
    """0 when `after` is formatted; else the first line formatting changes (1-based) when every line it
    changes is one the edit changed (all of a new file), or -1 when it would change a line of `before`
    that the edit left alone (between two changed places, too)."""
    if formatted == after:
        return 0
    new, out = after.splitlines(), formatted.splitlines()
    if new == out:  # the lines are the same: the end of the file differs
        ends_before = before is None or before.endswith("\n")
        return max(1, len(new)) if ends_before and not after.endswith("\n") else -1
    reformatted = _changed(new, out, side=0)  # the lines of `after` formatting changes
    if before is None:
        return reformatted[0][0] + 1
    edited = _changed(before.splitlines(), new, side=1)  # the lines of `after` the edit wrote
    # Each block formatting changes lies within a block the edit wrote (a deletion: the gap it left).
    if all(any(low <= first and last <= high for low, high in edited) for first, last in reformatted):
        return reformatted[0][0] + 1
    return -1


def _changed(a: list[str], b: list[str], side: int) -> list[tuple[int, int]]:
    """The blocks that differ between `a` and `b`, as line spans (0-based, end exclusive) of `a`
    (side 0) or `b` (side 1); a block that is only on the other side is an empty span."""
    head, tail = shared_ends(a, b)
    matcher = difflib.SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail], autojunk=False)
    blocks = [
        (j1, j2) if side else (i1, i2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    ]
    return [(head + low, head + high) for low, high in blocks]


def _parses(text: str) -> bool:
    try:
        parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _small(text: str) -> bool:
    """Small enough that its formatted text comes back whole (the output cap is in bytes)."""
    return len(text) <= _MAX_TEXT and len(text.encode("utf-8", "replace")) <= _MAX_TEXT
