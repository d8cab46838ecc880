"""The Protocols between the layers: what the loop depends on (a verifier, a workspace, a branch, a
trace, a view, drafters and a router), and what a sandbox and a validator are. Plugins implement
`Drafter` and `Router`; ralph/session.py wires the concrete classes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.events import IterationRecord
from ralph.domain.results import Diagnostic, ProcessResult, Scope, StageResult, TestResult
from ralph.domain.score import Observation, Score
from ralph.domain.verdict import GateJob, GateOutcome, VerifyReport


@dataclass(frozen=True)
class DraftContext:
    """What a drafter sees: the task, the failing checks, where the fault likely is, what was tried."""

    task: str
    project: Path  # a read-only view of the accepted state (never a candidate's files)
    state_id: int  # changes whenever the loop moves to another state (back to an older one too)
    failing_tests: tuple[TestResult, ...]
    diagnostics: tuple[Diagnostic, ...]
    failing_checks: tuple[str, ...]
    suspicious: tuple[tuple[str, int], ...]  # (path, line), most suspicious first
    suspicion: tuple[float, ...] = ()  # their scores (a traceback frame 2, Ochiai at most 1)
    rejected: frozenset[str] = frozenset()  # fingerprints of candidates rejected this run
    attempts: tuple[tuple[str, str], ...] = ()  # (diff, why rejected) of the latest rejections
    best_rejected: tuple[str, str] | None = None  # the closest rejected edit and its failure
    protected: tuple[str, ...] = ()  # glob patterns of paths drafters must not edit


@runtime_checkable
class Drafter(Protocol):
    """Proposes candidate edits. An empty list means it has nothing left to try for this state."""

    name: str

    def draft(self, context: DraftContext, n: int) -> list[Candidate]: ...


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
    kinds: tuple[str, ...] = ()  # each candidate's kind of edit, when its drafter said (`meta["operator"]`)


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


@dataclass(frozen=True)
class Evidence:
    """What a drafter may see of a state: what fails, and where the fault likely is."""

    failing_tests: tuple[TestResult, ...]
    diagnostics: tuple[Diagnostic, ...]
    failing_checks: tuple[str, ...]
    suspicious: tuple[tuple[str, int], ...]  # (path, line), most suspicious first
    suspicion: tuple[float, ...] = ()  # their scores (a traceback frame 2, Ochiai at most 1)


class Verification(Protocol):
    """Observes states and judges candidates (ralph.validators.pipeline.Verifier)."""

    def baseline(self, timeout_s: float = ...) -> tuple[Observation, list[StageResult]]: ...

    def score(self, obs: Observation) -> Score: ...

    def evidence(self, state: Observation) -> Evidence: ...

    def verify(
        self,
        candidate: Candidate,
        current: Observation,
        reset: Callable[[Sequence[FileChange]], object] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> VerifyReport:
        """Judge a candidate already applied to the workspace against the `current` state;
        `progress` hears the name of each step as it starts."""
        ...

    def restored(self, foreign: bool) -> None:
        """The workspace was put back (`foreign`: it undid writes outside the edit)."""
        ...

    def reverted(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` were taken out of the accepted state again (their gate failed)."""
        ...

    def adopt(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` (verified on another lane) are part of this verifier's state now."""
        ...


class Gate(Protocol):
    """Runs the full gate of provisionally accepted states beside the loop, one at a time, in the
    order submitted, each on its own copy of the state (ralph.validators.background.BackgroundGate)."""

    @property
    def status(self) -> str:
        """What it is doing now ("gating #3: tests 120/319 ..."), or ""."""
        ...

    def submit(self, job: GateJob) -> None: ...

    def finished(self, wait: bool = False, timeout: float | None = None) -> list[GateOutcome]:
        """The outcomes not yet returned, in submission order, up to the first still running; with
        `wait`, waiting for every gate submitted to end (for at most `timeout` seconds)."""
        ...

    def cancel(self) -> None:
        """Stop at once: what runs is killed, what waits is discarded."""
        ...


class Workspace(Protocol):
    """The copy of the project candidates are applied to (ralph.sandboxes.workspace.Workspace)."""

    @property
    def project(self) -> Path: ...

    @property
    def accepted_project(self) -> Path:
        """A read-only view of the accepted state, for drafters."""
        ...

    def read(self, path: str) -> str | None: ...

    def encode(self, path: str, text: str) -> bytes: ...

    def apply(self, changes: Sequence[FileChange]) -> None: ...

    def restore(self, changes: Sequence[FileChange] = ()) -> object: ...

    def accept(self, changes: Sequence[FileChange]) -> None: ...

    def rollback(self, changes: Sequence[FileChange]) -> None: ...

    def take_foreign(self) -> bool: ...

    def revert_accepted(self, changes: Sequence[FileChange]) -> None:
        """Take accepted `changes` out of the accepted state again (a background gate failed)."""
        ...


class Branch(Protocol):
    """Where accepted states are committed (ralph.branch.RalphBranch): `prepare` writes the commit,
    `advance` moves the branch to it once the trace holds it."""

    @property
    def tip(self) -> str | None: ...

    def prepare(
        self, changes: Sequence[FileChange], message: str, encode: Callable[[str, str], bytes]
    ) -> str: ...

    def advance(self, commit: str) -> None: ...


class Trace(Protocol):
    """Where every step of a run is recorded (ralph.trace.TraceWriter)."""

    def write(self, type_: str, **fields: Any) -> None: ...


class View(Protocol):
    """Whoever watches the run (the terminal, or nobody)."""

    def iteration(self, record: IterationRecord) -> None: ...

    def notice(self, text: str) -> None: ...

    def progress(self, text: str) -> None: ...
