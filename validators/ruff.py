"""Stage 2: `ruff check` on the changed files (or the whole project for the baseline).

Which ruff: the project's own (installed in its interpreter's environment) when it has one, else the
one installed with ralph (pinned to a tested range). Which rules: the project's ruff configuration
when it has one (in the project or above it, up to the repository root); without one, ruff runs with
`--isolated` and ralph's documented rule set (`DEFAULT_RULES`, ruff's own defaults before 0.16), so
neither a newer ruff's wider defaults nor a `ruff.toml` in a parent directory such as /tmp decide.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ralph.domain.results import Diagnostic, ProcessResult, Scope, StageResult
from ralph.sandboxes.workspace import stat_and_read_beneath
from ralph.validators.ruff_server import Asked, ResidentRuff, cli_message, server_settings
from ralph.validators.toolchain import Toolchain, project_relative, ruff_bin

# ruff's default rule selection before 0.16 widened it (pyflakes and the error-level pycodestyle rules).
DEFAULT_RULES = ("E4", "E7", "E9", "F")
_CONFIGS = ("ruff.toml", ".ruff.toml")
# The end of a ruff stage's detail when its findings came from the resident server, not `ruff check`.
RESIDENT = " (ruff server)"


@dataclass(frozen=True)
class Accepted:
    """A changed file as the accepted state has it: its text, and what `ruff check` found there."""

    text: str
    diagnostics: tuple[Diagnostic, ...]


def ruff_config(project: Path, root: Path | None = None) -> Path | None:
    """The ruff configuration that applies to the project: the nearest `ruff.toml`, `.ruff.toml` or
    `pyproject.toml` with a `[tool.ruff]` table, from the project up to `root` (its repository)."""
    top = (root or project).resolve()
    here = project.resolve()
    while True:
        for name in _CONFIGS:
            if (here / name).is_file():
                return here / name
        pyproject = here / "pyproject.toml"
        if pyproject.is_file():
            try:
                if "ruff" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}):
                    return pyproject
            except (OSError, ValueError):
                pass
        if here == top or here.parent == here or not here.is_relative_to(top):
            return None
        here = here.parent


def config_args(config: Path | None) -> list[str]:
    """How ruff is told its configuration: the file found at the start, explicitly, or none at all.
    ruff never looks for one itself: a configuration planted in the workspace (a nested `ruff.toml`
    extending a file outside it, say) would decide what the host's ruff reads and prints."""
    return ["--isolated"] if config is None else [f"--config={config}"]


class RuffValidator:
    name = "ruff"

    def __init__(self, toolchain: Toolchain, *, resident: bool = False) -> None:
        self.toolchain = toolchain
        self.enabled = True
        self.config = ruff_config(toolchain.project, toolchain.root)
        self.binary = project_ruff(toolchain.python) or ruff_bin()
        rules = DEFAULT_RULES if self.config is None else None
        self.resident = (
            ResidentRuff(self.binary, toolchain.project, server_settings(self.config, rules))
            if resident
            else None
        )
        # (file, accepted text) -> the server's findings there, where they are `ruff check`'s; else None.
        self._vetted: dict[tuple[str, str], Counter[tuple[str | None, str]] | None] = {}

    def drift(self) -> str | None:
        """A notice when the project's pre-commit configuration pins another ruff than the one used."""
        pinned = pinned_ruff(self.toolchain.project, self.toolchain.root)
        used = ruff_version(self.binary) if pinned else None
        if pinned and used and pinned != used:
            return (
                f"ruff: the project pins {pinned} in .pre-commit-config.yaml, ralph runs {used} "
                f"({self.binary}); install ruff=={pinned} beside the project's interpreter to use it"
            )
        return None

    def _argv(self, *args: str, select: Sequence[str] | None = None) -> list[str]:
        """ruff's command line: the project's configuration, or `--isolated` and our rule set; with
        `select`, only those rules (from whichever of the two applies)."""
        argv = [self.binary, *args, "--no-cache", "--force-exclude", *config_args(self.config)]
        rules = select if select is not None else (DEFAULT_RULES if self.config is None else None)
        if rules is not None:
            argv.append(f"--select={','.join(rules)}")
        return argv

    def keeps_nothing(self) -> bool:
        """Whether asking now leaves nothing of the workspace's current configuration behind: no
        resident server, or one already running (it read its settings when it started, on a state
        the policy had passed; the first question would start it on the candidate's)."""
        return self.resident is None or self.resident.running

    def check(self, scope: Scope) -> StageResult:
        return self.start(scope)()

    def start(
        self, scope: Scope, accepted: Mapping[str, Accepted] | None = None
    ) -> Callable[[], StageResult]:
        """Start ruff and return at once; calling the result waits for ruff's findings. With
        `accepted` (the changed files' accepted texts and findings), the resident server may answer
        instead (`_from_server`)."""
        start = time.perf_counter()
        paths = [p for p in scope.paths if p.endswith((".py", ".pyi"))] if scope.paths is not None else None
        if paths == [] or not self.enabled:
            detail = "no Python files" if self.enabled else "off: it could not run at the baseline"
            return lambda: StageResult(self.name, ok=True, duration_ms=0.0, skipped=True, detail=detail)
        if paths and accepted is not None:
            served = self._ask_server(paths, accepted, start)
            if served is not None:
                return served
        argv = self._argv("check", "--output-format=json", "--exit-zero")
        # A few files gain nothing from ruff's thread pool (docs/measurements.md), and the
        # candidate's tests may be running beside it.
        env = {"RAYON_NUM_THREADS": "1"} if paths is not None else None
        # `--`: a file named like an option (`--config=...py`) is a file, never a setting.
        running = self.toolchain.start_tool([*argv, "--", *(paths or ["."])], env=env)
        return lambda: self._findings(running.wait(scope.timeout_s), paths, start)

    def _ask_server(
        self, paths: list[str], accepted: Mapping[str, Accepted], start: float
    ) -> Callable[[], StageResult] | None:
        """Ask the resident server about every changed file and return at once (it lints while the
        syntax stage compiles); None: run `ruff check` instead. Its answer stands for `ruff check`'s
        only where, on every file, the server agrees with `ruff check` on the accepted text and
        finds nothing there now that it did not find in the accepted text (a new finding, fixable or
        not, is `ruff check`'s to describe: `_from_server`). An accept is never decided on these:
        the settled step runs `ruff check` again (`LintStage(settled=True)`)."""
        if self.resident is None or self.resident.broken:
            return None
        asked = []
        for path in paths:
            known, text = accepted.get(path), self._text(path)
            before = self._vet(path, known) if known is not None else None
            if known is None or before is None or text is None:
                return None
            question = self.resident.ask(self.toolchain.project / path, text)
            if question is None:
                return None
            asked.append((path, known, before, question))

        def collect() -> StageResult:
            return self._from_server(asked, start) or self.start(Scope(paths=tuple(paths)))()

        return collect

    def _from_server(
        self, asked: list[tuple[str, Accepted, Counter[tuple[str | None, str]], Asked]], start: float
    ) -> StageResult | None:
        assert self.resident is not None
        diagnostics: list[Diagnostic] = []
        for path, known, before, question in asked:
            found = self.resident.answer(question)
            if found is None or Counter((code, message) for code, _, message in found) - before:
                return None
            fixable = {d.key for d in known.diagnostics if d.fixable}
            for code, line, message in found:
                d = Diagnostic("ruff", path, line, code or "syntax", cli_message(message))
                diagnostics.append(replace(d, fixable=d.key in fixable))
        return StageResult(
            stage=self.name,
            ok=not diagnostics,
            duration_ms=(time.perf_counter() - start) * 1000,
            detail=f"{len(diagnostics)} diagnostics{RESIDENT}",
            diagnostics=diagnostics,
            checked=[("ruff", path) for path, *_ in asked],
        )

    def _vet(self, path: str, known: Accepted) -> Counter[tuple[str | None, str]] | None:
        """The server's findings in `path`'s accepted text, when they are exactly `ruff check`'s
        there (same rules, messages and per-file settings); else None. Once per accepted text."""
        key = (path, known.text)
        if key not in self._vetted:
            assert self.resident is not None
            found = self.resident.lint(self.toolchain.project / path, known.text)
            if found is None:
                return None
            theirs = Counter((d.code, d.message) for d in known.diagnostics)
            ours = Counter((code or "syntax", cli_message(message)) for code, _, message in found)
            if len(self._vetted) >= 256:
                self._vetted.clear()
            self._vetted[key] = (
                Counter((code, message) for code, _, message in found) if ours == theirs else None
            )
        return self._vetted[key]

    def _text(self, path: str) -> str | None:
        """The file's text as `ruff check` would read it; None when it cannot be sent as is."""
        found = stat_and_read_beneath(self.toolchain.project, path)
        if found is None:
            return None
        try:
            text = found[1].decode("utf-8")
        except UnicodeDecodeError:
            return None
        return None if text.startswith("\ufeff") else text

    def close(self) -> None:
        if self.resident is not None:
            self.resident.close()

    def fix_only(self, paths: Sequence[str], codes: Sequence[str], timeout_s: float = 60.0) -> bool:
        """Apply ruff's safe fixes for these rule `codes` (only) to these files in place; whether
        ruff ran cleanly."""
        argv = self._argv(
            "check", "--fix-only", "--exit-zero", "--quiet", "--no-unsafe-fixes", select=sorted(codes)
        )
        result = self.toolchain.run_tool(
            [*argv, "--", *paths], env={"RAYON_NUM_THREADS": "1"}, timeout_s=timeout_s
        )
        return result.ok

    def _findings(self, result: ProcessResult, paths: list[str] | None, start: float) -> StageResult:
        elapsed = (time.perf_counter() - start) * 1000
        raw = None
        if result.ok:
            try:
                raw = json.loads(result.output[result.output.index("[") :])
            except ValueError:
                raw = None
        if not isinstance(raw, list):
            why = (
                "timed out"
                if result.timed_out
                else f"exit {result.returncode}: {result.output.strip()[-300:]}"
            )
            return StageResult(
                self.name,
                ok=False,
                duration_ms=elapsed,
                detail=f"ruff failed: {why}",
                error=f"ruff failed: {why}",
            )
        project = self.toolchain.project.resolve()
        relative = functools.cache(lambda name: project_relative(name, project))  # one per file
        diagnostics = [
            Diagnostic(
                tool="ruff",
                path=relative(d["filename"]),
                line=(d.get("location") or {}).get("row", 0),
                code=d.get("code") or "syntax",
                message=d.get("message", ""),
                fixable=bool(d.get("fix")) and (d["fix"].get("applicability") == "safe"),
            )
            for d in raw
        ]
        checked = paths if paths is not None else sorted({d.path for d in diagnostics})
        return StageResult(
            stage=self.name,
            ok=not diagnostics,
            duration_ms=elapsed,
            detail=f"{len(diagnostics)} diagnostics",
            diagnostics=diagnostics,
            checked=[("ruff", p) for p in checked],
        )


_PINNED = re.compile(r"ruff-pre-commit\s*\n\s*rev:\s*['\"]?v?([0-9][\w.]*)")


def pinned_ruff(project: Path, root: Path | None = None) -> str | None:
    """The ruff version the project's `.pre-commit-config.yaml` pins (astral-sh/ruff-pre-commit)."""
    for base in dict.fromkeys([project, root or project]):
        try:
            text = (base / ".pre-commit-config.yaml").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if match := _PINNED.search(text):
            return match.group(1)
    return None


def ruff_version(binary: str) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else None


@functools.cache
def project_ruff(python: str) -> str | None:
    """The ruff installed beside the project's interpreter (its virtual environment), if any."""
    candidate = Path(python).parent / "ruff"
    return str(candidate) if candidate.is_file() else None
