"""What verification observes: processes, tests, diagnostics, stages and the verdict on a candidate.

These go into the trace unchanged."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

FAILING = frozenset({"failed", "error"})


@dataclass(frozen=True)
class TestResult:
    """One test's outcome; `frames` are (path, line, function) inside the repo, innermost last."""

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    duration_s: float = 0.0
    message: str = ""
    frames: tuple[tuple[str, int, str], ...] = ()

    @property
    def failing(self) -> bool:
        return self.outcome in FAILING


@dataclass(frozen=True)
class Diagnostic:
    """A lint or type diagnostic. Its `key` ignores the line, which moves when code above it changes."""

    tool: str
    path: str
    line: int
    code: str
    message: str
    fixable: bool = False

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.tool, self.path, self.code, self.message)


@dataclass(frozen=True)
class CheckResult:
    """A custom check command's result (exit 0 = pass)."""

    command: str
    passed: bool
    output: str = ""


@dataclass
class StageResult:
    """What one validation stage observed, over the scope it covered, and how long it took."""

    stage: str
    ok: bool
    duration_ms: float
    detail: str = ""
    tests: list[TestResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # The (tool, path) pairs whose diagnostics this stage fully re-checked.
    checked: list[tuple[str, str]] = field(default_factory=list)
    # A tool whose diagnostics this stage re-checked for every file of the project.
    complete_tool: str | None = None
    # The stage ran the whole suite: its tests replace the state's (the gate).
    complete_tests: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    syntax_errors: dict[str, str] = field(default_factory=dict)
    skipped: bool = False
    unaffected: int = 0  # failing tests not run because the change cannot reach them
    # Where a test run's time went (ms): start (the worker's fork or spare, pytest's configuration),
    # collection, tests, host (ralph's side: the request, reading the report). Decides nothing.
    phases: dict[str, float] = field(default_factory=dict)
    stopped_early: bool = False  # a test run stopped once its verdict was known
    # Set when the stage could not give a verdict (a tool that crashed, timed out, was killed or
    # reported something inconsistent): the candidate fails, whatever else the stage observed.
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The trace form: outcomes and diagnostics in full, long texts trimmed."""
        data = asdict(self)
        data["tests"] = [
            {
                "nodeid": t.nodeid,
                "outcome": t.outcome,
                "duration_s": t.duration_s,
                "message": t.message[:2000],
            }
            for t in self.tests
        ]
        data["checks"] = [
            {"command": c.command, "passed": c.passed, "output": c.output[-2000:]} for c in self.checks
        ]
        data["checked"] = [list(c) for c in self.checked]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        """A stage back from its trace form (to resume a run from its trace)."""
        return cls(
            stage=data["stage"],
            ok=data["ok"],
            duration_ms=data.get("duration_ms", 0.0),
            detail=data.get("detail", ""),
            tests=[
                TestResult(t["nodeid"], t["outcome"], t.get("duration_s", 0.0), t.get("message", ""))
                for t in data.get("tests", [])
            ],
            diagnostics=[Diagnostic(**d) for d in data.get("diagnostics", [])],
            checked=[(c[0], c[1]) for c in data.get("checked", [])],
            complete_tool=data.get("complete_tool"),
            complete_tests=data.get("complete_tests", False),
            checks=[
                CheckResult(c["command"], c["passed"], c.get("output", "")) for c in data.get("checks", [])
            ],
            syntax_errors=dict(data.get("syntax_errors", {})),
            skipped=data.get("skipped", False),
            unaffected=data.get("unaffected", 0),
            stopped_early=data.get("stopped_early", False),
            error=data.get("error"),
        )


@dataclass(frozen=True)
class ProcessResult:
    """What a finished (or killed) child process left behind."""

    returncode: int
    output: str  # stdout and stderr interleaved, head and tail kept when over the cap
    duration_s: float
    timed_out: bool = False
    error: str | None = None  # the run gives no verdict (its runner died, a resource cap was hit)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (a `time.perf_counter()` reading): a stage's `duration_ms`."""
    return (time.perf_counter() - start) * 1000


@dataclass(frozen=True)
class Scope:
    """What a validator should look at: some paths (None = all) and some tests (None = the suite)."""

    paths: tuple[str, ...] | None = None
    tests: tuple[str, ...] | None = None
    timeout_s: float = 300.0
    test_timeout_s: float | None = None  # one test's limit, when lower than the run's own


def findings_result(
    stage: str,
    found: list[Diagnostic],
    *,
    warn: bool,
    start: float,
    checked: list[tuple[str, str]],
    notes: Sequence[str] = (),
    nothing: str = "nothing new",
) -> StageResult:
    """A semantic stage's verdict on what it found: rejected naming each finding (its diagnostics,
    which the runner rejects as new), or, with `warn`, accepted with them said in the detail."""
    said = "; ".join(f"{d.path}:{d.line}: {d.message} ({d.code})" for d in found)
    detail = "; ".join([f"warning: {said}" if warn and said else said or nothing, *notes])
    if warn:
        return StageResult(stage, ok=True, duration_ms=elapsed_ms(start), detail=detail)
    return StageResult(
        stage, ok=not found, duration_ms=elapsed_ms(start), detail=detail, diagnostics=found, checked=checked
    )
