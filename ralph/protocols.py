"""The extension surface: the loop depends only on these Protocols."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ralph.candidate import Candidate
from sandboxes.local import ProcessResult
from validators.report import Diagnostic, StageResult, TestResult


@dataclass(frozen=True)
class DraftContext:
    """What a drafter sees: the task, the failing checks, where the fault likely is, what was tried."""

    task: str
    project: Path  # read-only view of the current state
    state_id: int  # changes whenever a candidate is accepted
    failing_tests: tuple[TestResult, ...]
    diagnostics: tuple[Diagnostic, ...]
    failing_checks: tuple[str, ...]
    suspicious: tuple[tuple[str, int], ...]  # (path, line), most suspicious first
    rejected: frozenset[str] = frozenset()  # fingerprints of candidates rejected this run
    attempts: tuple[tuple[str, str], ...] = ()  # (diff, why rejected) of the latest rejections
    best_rejected: tuple[str, str] | None = None  # the closest rejected edit and its failure
    protected: tuple[str, ...] = ()  # glob patterns of paths drafters must not edit
    notes: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class Drafter(Protocol):
    """Proposes candidate edits. An empty list means it has nothing left to try for this state."""

    name: str

    def draft(self, context: DraftContext, n: int) -> list[Candidate]: ...


@dataclass(frozen=True)
class Scope:
    """What a validator should look at: some paths (None = all) and some tests (None = the suite)."""

    paths: tuple[str, ...] | None = None
    tests: tuple[str, ...] | None = None
    timeout_s: float = 300.0


class Validator(Protocol):
    """One verification stage."""

    name: str

    def check(self, scope: Scope) -> StageResult: ...


@dataclass(frozen=True)
class IterationSummary:
    """What a router may know of one past iteration."""

    i: int
    drafter: str
    remaining_before: int
    remaining_after: int
    accepted: bool
    candidates: int
    exhausted: bool  # the drafter proposed nothing
    draft_ms: float
    verify_ms: float
    cost_usd: float = 0.0


@dataclass(frozen=True)
class RouteDecision:
    """Which drafter to ask next, for how many candidates, and why (goes into the trace)."""

    drafter: str
    n: int
    reason: str


class Router(Protocol):
    """A routing policy: a function of the run's history."""

    name: str

    def route(self, history: Sequence[IterationSummary], drafters: Sequence[str]) -> RouteDecision | None:
        """The next decision, or None when no drafter has anything left to try."""
        ...


class Sandbox(Protocol):
    """Runs a command on the workspace, isolated as far as the mechanism allows."""

    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult: ...
