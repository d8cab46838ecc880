"""The test-impact index of one copy of the accepted state: which tests can see a change (the
baseline's per-test coverage, moved along with every accepted edit, and the sources' import graph),
and which tests failed lately (run first)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ralph.domain.candidate import Candidate, FileChange, undoing
from ralph.domain.score import is_under
from ralph.validators.coverage import remap_coverage
from ralph.validators.failed_first import RecentFailures
from ralph.validators.selection import (
    CoverageIndex,
    CoverageMap,
    ImportGraph,
    Selection,
    named_after,
    project_sources,
    select_tests,
)
from ralph.validators.toolchain import Toolchain

# Tests in the first round of a large fail-fast selection (see `TestImpact.first_round`).
FIRST_ROUND = 16


class TestImpact:
    """Coverage and imports of the accepted state; `adopt`/`reverted` keep them in step with it."""

    __test__ = False  # (not a test class, whatever pytest's name rules say)

    def __init__(
        self, toolchain: Toolchain, is_test_file: Callable[[str], bool], coverage: CoverageMap | None = None
    ) -> None:
        self.toolchain = toolchain
        self.is_test_file = is_test_file
        self.coverage: CoverageMap = coverage or {}
        self.accepted_paths: set[str] = set()  # files accepted edits changed since the coverage was measured
        self.recent_failures = RecentFailures()
        self._graph: ImportGraph | None = None
        self._index: CoverageIndex | None = None

    def copy(self, toolchain: Toolchain, is_test_file: Callable[[str], bool]) -> TestImpact:
        """The same index for another copy of the accepted state (a lane)."""
        other = TestImpact(toolchain, is_test_file, self.coverage)
        other.accepted_paths = set(self.accepted_paths)
        return other

    def measured(self, coverage: CoverageMap) -> None:
        """The baseline's coverage; the sources read now, not inside the first candidate's verification."""
        self.coverage = coverage
        self.graph()
        self.index()

    def select(self, candidate: Candidate) -> Selection:
        selection = select_tests(candidate.changes, self.index(), self.graph(), self.is_test_file)
        if selection.everything:
            selection.tests = []
        return selection

    def first_round(self, selection: Selection, durations: dict[str, float]) -> tuple[str, ...]:
        """For a large selection (more than 2 x FIRST_ROUND tests, or whole modules or folders and
        another module): the recent failures it holds, the tests that ran a changed line (narrowest
        first), and, where the import graph chose whole modules (a change no coverage vouches for),
        the quick tests of one of them named after the change's rarest words (a first round that
        guesses wrong costs a module's collection, and a run of a slow test); FIRST_ROUND at most.
        Else none (one round). A broken candidate is most often caught there, without collecting the
        rest; an accepted one pays for one more test process."""
        # Whole modules (or folders), more than one module in all: a run of one saves nothing.
        wide = [t for t in selection.tests if "::" not in t]
        files = {w for w in wide if w.endswith(".py")}
        folders = [w for w in wide if w not in files]
        if not folders and len({t.partition("::")[0] for t in selection.tests}) < 2:
            wide, files = [], set()
        if selection.everything or (not wide and len(selection.tests) <= 2 * FIRST_ROUND):
            return ()
        chosen = set(selection.tests)

        def selected(test: str) -> bool:  # (asked of every test in the suite: by set first)
            if test in chosen or test.partition("::")[0] in files:
                return True
            return any(w in (".", "") or is_under(test, w) for w in folders)

        recent = [t for t in self.recent_failures.first(durations) if selected(t)]
        near = [t for t in selection.near if selected(t)]
        named: list[str] = []
        if wide and selection.by_imports:  # (a guess: one module, the best-named test's, quick tests)
            quick = (t for t in durations if durations[t] < self.recent_failures.probe_s and selected(t))
            named = [t for t in named_after(selection.words[:12], quick) if "::" not in t.partition("[")[2]]
            named = [t for t in named if t.partition("::")[0] == named[0].partition("::")[0]]
        if not near and not named:
            return ()
        return tuple(dict.fromkeys([*recent, *near, *named]))[:FIRST_ROUND]

    def adopt(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` are part of the state now: the coverage's lines move with them, and the
        sources are read again once the state is put back (`restored`)."""
        self.coverage = remap_coverage(self.coverage, tuple(changes))
        self.accepted_paths.update(c.path for c in changes)
        self._graph = None

    def reverted(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` were taken out again: the coverage's lines map back, and the sources are
        read again. The files stay in `accepted_paths` (coverage measured before them vouches for
        nothing there)."""
        self.coverage = remap_coverage(self.coverage, undoing(changes))
        self._graph = None
        self.graph()

    def restored(self) -> None:
        """The workspace was put back: after an accepted edit, the sources are read now, from the
        state put back, not inside the next candidate's verification."""
        self.graph()

    def graph(self) -> ImportGraph:
        if self._graph is None:
            self._graph = ImportGraph(project_sources(self.toolchain.project))
        return self._graph

    def index(self) -> CoverageIndex:
        if self._index is None or self._index.source is not self.coverage:
            self._index = CoverageIndex(self.coverage)
        return self._index
