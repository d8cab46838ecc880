"""What a verifier is told and what it learns once: the run's settings, the baseline's facts (frozen:
measured once, shared by every lane and the background gate), and the time budgets they imply."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ralph.domain.candidate import PROTECTED_TESTS
from ralph.domain.score import Observation


@dataclass(frozen=True)
class VerifySettings:
    """How candidates are to be judged, as the user configured it."""

    checks: tuple[str, ...] = ()
    """The project's own check commands (each must pass, or keep failing no worse)."""
    check_paths: dict[str, list[str]] | None = None
    """For each check, the files it looks at (an edit elsewhere keeps its verdict)."""
    targets: frozenset[str] | None = None
    """The tests named by --tests: the goal is these passing, nothing else regressing."""
    types: bool = False
    """Run the type checker (mypy) on each candidate."""
    coverage_cache: Path | None = None
    """Where the baseline's per-test coverage is kept between runs."""
    protected: tuple[str, ...] = PROTECTED_TESTS
    """Globs no candidate may edit (empty: test edits are allowed)."""
    warm: bool = True
    """Run the targeted tests in a warm worker (a fork per candidate) rather than a fresh pytest."""
    only: tuple[str, ...] | None = None
    """When set, edits outside these files are refused (a pre-commit hook's files)."""
    test_timeout_s: float = 60.0
    """One test's limit in the gate."""
    gate_workers: int = 0
    """pytest-xdist workers for the gate's whole-suite run (0: one process): `gate_workers.gate_workers`."""
    background: bool = False
    """The gate runs beside the loop: a verification ends after the targeted stages."""
    plausibility: str = "reject"
    """reject, warn or off."""
    api_changes: bool = False
    """Whether an edit may change the project's public API."""
    formatting: bool = True
    """Hold edits to the project's own format (when it formats with ruff)."""
    run_budget_s: float | None = None
    """--max-seconds: a candidate that hangs takes a tenth of it at most."""
    allow: Collection[str] | None = None
    """The policy rules the project allows (None: its `[tool.ralph] allow`)."""
    semantic_off: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BaselineFacts:
    """What the baseline's full run established, once: never changed by a candidate."""

    observation: Observation = field(default_factory=Observation)
    protected: tuple[str, ...] = ()  # the settings' globs, and the files the baseline's tests read
    test_files: frozenset[str] = frozenset()  # the files pytest collected tests from
    doctest_files: frozenset[str] = frozenset()  # the modules (and text files) it ran doctests of
    durations: dict[str, float] = field(default_factory=dict)  # each test's time
    suite_s: float = 60.0  # the suite's healthy time (tests that hit the per-test limit not counted)
    healthy_s: float = 0.0  # its slowest test that did not hit the per-test limit
    types_s: float = 0.0  # the type checker's first, full check
    harness_known: frozenset[tuple[str, str]] = frozenset()  # pytest's machinery as the project changes it
    # Stages that could not run at the baseline (the user's own config is broken, say), with why:
    # they are off for the run, said at the start and in the trace, never silently passed.
    disabled: dict[str, str] = field(default_factory=dict)
    ruff_drift: str | None = None  # ruff is not the version the project pins
    unmatched: tuple[str, ...] = ()  # declared check paths that match no file


@dataclass(frozen=True)
class Budgets:
    """The time limits of a candidate's stages, from the baseline's times and the run's budget."""

    suite_s: float = 60.0
    healthy_s: float = 0.0
    types_s: float = 0.0
    run_budget_s: float | None = None

    @classmethod
    def of(cls, facts: BaselineFacts, run_budget_s: float | None) -> Budgets:
        return cls(facts.suite_s, facts.healthy_s, facts.types_s, run_budget_s)

    @property
    def quick_timeout_s(self) -> float:
        """For the targeted stages: a few times what the whole suite took at the baseline. A mutant that
        loops forever should cost seconds, not minutes (docs/measurements.md)."""
        return min(120.0, max(5.0, 3 * self.suite_s + 2))

    @property
    def hang_limit_s(self) -> float:
        """One test's limit in the targeted stage: ten times the slowest test of the baseline that did
        not hang, at least 2 s. A candidate whose loop never ends (one the baseline had, or one the
        edit made) is cut there, not at the project's own limit; one that ends it finishes like a
        healthy test (a fix whose test legitimately runs longer than that is lost: the price of not
        waiting minutes on every hopeless candidate; the gate keeps the project's limit)."""
        return min(self.quick_timeout_s, max(2.0, 10 * self.healthy_s))

    @property
    def hang_timeout_s(self) -> float:
        """The targeted stage's whole limit when every test it runs hung at the baseline: its usual
        one, but no more than a fair share of the run's time (a tenth of --max-seconds, never under
        one test's hang limit), so hanging candidates cannot use up the budget between them."""
        if self.run_budget_s is None:
            return self.quick_timeout_s
        return min(self.quick_timeout_s, max(self.hang_limit_s, self.run_budget_s / 10))

    @property
    def types_timeout_s(self) -> float:
        """The type checker's limit per candidate: its incremental recheck is fast, but after a
        restart it checks everything again, which must not be a timeout (a timeout fails the stage)."""
        return max(self.quick_timeout_s, 3 * self.types_s + 10)

    @property
    def gate_timeout_s(self) -> float:
        return max(30.0, 3 * self.suite_s + 30)
