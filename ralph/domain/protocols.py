"""The Protocols between the layers: what the loop depends on (a verifier, a workspace, a branch, a
trace, a view, drafters and a router), and what a sandbox and a validator are. Plugins implement
`Drafter` and `Router`; ralph/session.py wires the concrete classes."""

from __future__ import annotations

import contextlib
import os
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
    """Proposes candidate edits. An empty list means it has nothing left to try for this state.

    `remote` and `priced` may be class attributes or properties. A plugin (`--drafter
    module:Class`) that declares only `name` and `draft` is given `DRAFTER_DEFAULTS` on its
    instance when loaded (ralph.drafters.create_drafter): a drafter running here, at no cost."""

    name: str

    @property
    def remote(self) -> bool:
        """A model behind an API: the loop asks it for one candidate per request, all at once, and
        verifies each as it arrives."""
        ...

    @property
    def priced(self) -> bool:
        """Whether its cost is known (False: `--max-cost` cannot be enforced for it)."""
        ...

    def draft(self, context: DraftContext, n: int) -> list[Candidate]: ...


DRAFTER_DEFAULTS: dict[str, bool] = {"remote": False, "priced": True}
"""What a plugin drafter that does not declare them is given."""


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


class Command(list[str]):
    """A command line a sandbox's `wrap` built, with the descriptors it needs passed on: spawn it
    with ``pass_fds=command.pass_fds`` and `close` them once it has started."""

    pass_fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()


@runtime_checkable
class Sandbox(Protocol):
    """Runs a command on the workspace, isolated as far as the mechanism allows.

    Every member is required, and none is looked up optionally: a plugin (`isolation =
    "module:Class"`, called as ``Class(workspace, writable=[...], workspace_writable=...)``) that
    lacks one is refused before it runs anything, never used with less isolation than it gives.
    A mechanism with nothing to map or release says so: identity `inside`/`outside`, a `close`
    that does nothing."""

    name: str

    @property
    def mount_at(self) -> Path | None:
        """Where its commands see the workspace (the user's repository); None: at its own path."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        stdin: str | None = None,
    ) -> ProcessResult:
        """Run `argv` in `cwd` with an allowlisted environment plus `env`; past `timeout_s`, kill
        everything it started. After `cancel`, return at once with error "cancelled"."""
        ...

    def wrap(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None) -> Command:
        """The command line running `argv` inside the sandbox's isolation, for a caller that
        spawns it itself (the warm worker, the type checker): spawn it with its `pass_fds`,
        then `close` it. Killing the spawned process's group must kill all it started."""
        ...

    def cancel(self) -> None:
        """Kill what `run` runs now (from another thread), and run nothing more."""
        ...

    def close(self) -> None:
        """Release what commands `wrap` built left behind (cgroups); the run's end calls it once."""
        ...

    def mounted_at(self, path: Path) -> Sandbox | None:
        """This sandbox showing the workspace at `path` (sharing its running commands, cancellation
        and what `close` releases); None when the mechanism cannot."""
        ...

    def prepare(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[Path]:
        """Make in the workspace the mount points that commands like `argv` need (called before its
        state is captured); the ones made."""
        ...

    def inside(self, text: str) -> str:
        """`text` (a path, an option, node ids) as its commands see it."""
        ...

    def outside(self, text: str) -> str:
        """What a command said (a path, a node id) as the host names it: `inside` undone."""
        ...


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
